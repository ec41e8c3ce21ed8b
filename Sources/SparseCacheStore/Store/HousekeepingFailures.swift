/// Housekeeping that failed while the operation that set it off succeeded: the budget pass
/// after a write, a release that no caller waits for. Each one is counted here and logged
/// through ``StoreOptions/log``; ``SparseStore/housekeepingFailures`` and
/// ``SparseStore/summary()`` show the counts.
public struct HousekeepingFailures: Sendable, Equatable, Codable {
    /// What failed.
    public enum Kind: String, Sendable, Codable {
        /// A budget pass (eviction) after a write. The write succeeded; the store may stay over
        /// its budget until a later pass succeeds.
        case eviction
        /// The release of a handle, where no caller could be told (a release after another
        /// error, or one run in the background): the resource's last commit, its close or the
        /// budget pass after it failed.
        case release
    }

    /// Budget passes that failed after a write.
    public var evictions = 0
    /// Releases that failed with nobody to tell.
    public var releases = 0
    /// The latest failures, oldest first (at most ``recentLimit``), each as the line logged.
    public var recent: [String] = []

    /// How many of the latest failures ``recent`` keeps.
    package static let recentLimit = 8

    /// Every failure counted.
    public var total: Int { evictions + releases }

    public init() {}

    /// Counts one failure and keeps its line.
    mutating func record(_ kind: Kind, line: String) {
        switch kind {
        case .eviction: evictions += 1
        case .release: releases += 1
        }
        recent.append(line)
        if recent.count > Self.recentLimit { recent.removeFirst(recent.count - Self.recentLimit) }
    }
}
