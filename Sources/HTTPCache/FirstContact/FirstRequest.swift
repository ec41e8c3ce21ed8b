/// What first contact asks the origin for: the reader's own request, so that its answer
/// teaches the length and validators and brings the reader's first bytes in one round trip.
public enum FirstRequest: Sendable, Equatable {
    /// The whole resource (no `Range`): a `200` read on to its end.
    case whole
    /// The bytes of a range (its upper bound `Int64.max` for "to the end"): asked from its
    /// segment-aligned start, at most ``FillOptions/maximumFetch`` of it, and the first
    /// read-ahead window when open-ended.
    case range(Range<Int64>)
}
