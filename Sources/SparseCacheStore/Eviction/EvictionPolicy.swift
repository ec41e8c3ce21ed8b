import SparseCacheEngine

/// Which resources or segments a ``SparseStore`` gives up when it is over its budget
/// (docs/EVICTION.md has the measurements behind the default).
public enum EvictionPolicy: String, Sendable, CaseIterable, Codable {
    /// Whole resources, least recently used first; a resource larger than the budget keeps
    /// a window of its most recently used segments.
    case lru
    /// Segment runs in two FIFO queues with a ghost list (``SegmentQueues``): bytes fetched
    /// once wait in a small probationary queue and go first unless asked for again, bytes
    /// asked for again move to the main queue and are reinserted while they keep being used.
    /// The cold tail of a video goes while its popular head stays.
    case sfifo

    /// The policy a store uses unless told otherwise.
    public static let defaultPolicy = EvictionPolicy.sfifo

    /// Parses a policy name as the command line and the configuration file give it.
    ///
    /// - Throws: `.invalidArgument` naming the value and the accepted names.
    public init(parsing text: String) throws(SparseCacheError) {
        guard let policy = EvictionPolicy(rawValue: text.lowercased()) else {
            throw SparseCacheError(
                .invalidArgument, operation: "parse eviction policy",
                detail: "unknown eviction policy '\(text)' (expected one of: \(Self.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        self = policy
    }
}
