/// What `verify` checked and found. Codable: `sparsecache verify --json` prints it.
package struct VerifyReport: Sendable, Equatable, Codable {
    /// A present segment whose data does not hold up.
    package struct DamagedSegment: Sendable, Equatable, Codable {
        package var segment: Int
        /// Its bytes, half-open.
        package var start: Int64
        package var end: Int64
        /// "checksum mismatch", "hole under present segment", "past the end of the data file",
        /// "unreadable: Input/output error (errno 5)".
        package var reason: String
    }

    package var path: String
    package var indexPath: String
    package var length: Int64?
    package var segmentSize: Int
    /// Index generation in use and journal records replayed on top of its checkpoint.
    package var generation: UInt64
    package var journalRecords: Int
    /// Superblock slots checked (always 2) and how many were valid.
    package var superblocksValid: Int
    /// Present segments whose CRC32C was checked against the bytes on disk.
    package var segmentsChecked: Int
    package var bytesChecked: Int64
    package var dataFileSize: Int64
    /// Damage in the index itself (authentic records that cannot be applied).
    package var indexDamage: [String]
    /// Things that are not damage but worth knowing: a torn last record after a crash, a
    /// superblock copy that is invalid (the fallback is gone until the next checkpoint).
    package var notes: [String]
    package var damaged: [DamagedSegment]
    /// `--repair` ran: damaged segments were dropped and the index rewritten.
    package var repaired: Bool
    /// Segments, and their bytes, of committed state that the state in use does not hold:
    /// lost to damage of the index beyond what recovery could rebuild. For a damaged newest
    /// checkpoint, a lower bound (what the newest journal added, and how many more present
    /// segments the damaged checkpoint's header lists); for journal records damaged in the
    /// middle, the segments whose data no longer matches the checksum a record gives plus the
    /// segments holding data that no intact record names. They are missing now and get fetched
    /// or written again.
    package var lostSegments: Int
    package var lostBytes: Int64
    /// With `--repair`: disk bytes freed that held segments written but never committed.
    package var reclaimedBytes: Int64 = 0
    /// With `--repair` of a journal damaged in the middle: disk bytes freed that held data no
    /// intact record names (the lost segments' data: committed, but not claimable).
    package var freedLostBytes: Int64 = 0

    /// No damaged segment, no index damage, nothing lost.
    package var isClean: Bool { damaged.isEmpty && indexDamage.isEmpty && lostSegments == 0 }
}
