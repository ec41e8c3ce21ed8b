/// An origin's answer already received, that a fetch reads first instead of asking.
struct FirstAnswer {
    var response: RangeResponse
    /// The answer to a request without a range: read on to the resource's end.
    var readsOn: Bool
    /// The promotion its connection was taken with, for a background request (prefetch): a
    /// reader that comes to wait on the fetch promotes it, and its connection is then no longer
    /// asked to yield (``ConnectionLimiter/Promotion``).
    var promotion: ConnectionLimiter.Promotion? = nil
}
