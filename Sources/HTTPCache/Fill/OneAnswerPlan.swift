/// How a reader gets a range of a resource that one answer alone fills: its source combines
/// parts only under a strong validator and the resource has none (RFC 9111 section 3.4). See
/// ``ProgressiveCache/oneAnswerPlan(for:range:)``.
enum OneAnswerPlan: Sendable, Equatable {
    /// Read it: it is present, or the answer filling the resource brings it soon.
    case read
    /// Ask the origin for it and pass the answer on, storing nothing: the answer filling the
    /// resource is far from these bytes, or others still read the stored part.
    case passOn
    /// Drop the stored part and fetch the resource anew: no answer brings the rest and nobody
    /// else reads it.
    case refetch
}
