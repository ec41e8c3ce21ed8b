/// A first contact's answer that a small-object attempt received and found too large (or
/// ranged): left for the sparse first contact of the key, which reads it instead of asking the
/// origin again (``FillPhase/handOver(_:)``).
struct HandedOverAnswer {
    var response: RangeResponse
    /// What it was asked for (nil: the whole).
    var asked: Range<Int64>?
    /// The promotion its connection was taken with.
    var promotion: ConnectionLimiter.Promotion?
}
