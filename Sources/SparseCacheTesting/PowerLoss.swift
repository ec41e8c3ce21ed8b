import CShim
import SparseCacheEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Power-loss simulation over the files of one directory.
///
/// While recording, the shim keeps every change to a file in that directory that no fsync or
/// fdatasync of the file has made durable (with the bytes it overwrote), and every create,
/// rename and unlink that no fsync of the directory has. A *snapshot* writes into another
/// directory what the files could look like after a power cut at that instant: each unsynced
/// write persists (3/8), vanishes (3/8) or turns to garbage over its 512 B or 4 KiB sectors
/// (1/4); unsynced truncations, allocations and punched holes persist or are reverted; a tail
/// that grew since the last sync may be torn; directory changes since the last directory fsync
/// persist as a random prefix. The live files are never touched, so a test can keep running
/// and take a snapshot at every I/O call of a workload.
///
/// One directory per process at a time: tests that record run in a serialized suite.
public enum PowerLoss {
    /// Starts recording changes to the files directly in `directory`; their current contents
    /// count as durable.
    ///
    /// - Throws: `.invalidArgument` when `directory` is not a directory.
    public static func begin(directory: String) throws {
        guard sc_powerloss_begin(directory) == 0 else {
            throw SparseCacheError(.invalidArgument, operation: "power loss begin", path: directory, errno: errno)
        }
    }

    /// Stops recording and forgets every pending change.
    public static func end() { sc_powerloss_end() }

    /// Writes the directory as it could look after a power cut now into `destination`, which
    /// is created (with its parents) when missing. `processCrash` keeps every completed call
    /// instead (what a killed process leaves behind: the page cache survives).
    ///
    /// - Throws: `.invalidArgument` when no recording is on; `.io` when `destination` cannot
    ///   be created or written.
    public static func snapshot(into destination: String, seed: UInt64, processCrash: Bool = false) throws {
        try makeDirectory(destination)
        guard sc_powerloss_snapshot(destination, seed, processCrash ? 1 : 0) == 0 else {
            let reason = errno
            if reason == EINVAL {
                throw SparseCacheError(
                    .invalidArgument, operation: "power loss snapshot", path: destination,
                    detail: "nothing is recorded: call PowerLoss.begin(directory:) first")
            }
            throw SparseCacheError(.io, operation: "power loss snapshot", path: destination, errno: reason)
        }
    }

    /// Takes snapshots before matching calls: `variants` directories named `<directory>/<k>-<v>`
    /// before the rule's k-th match (from 0; see ``FaultInjection/matches(_:)``); variant 0 is
    /// a process crash, the others power cuts seeded from `seed`, `k` and `v`. `directory` is
    /// created when missing. Remove the rule with ``FaultInjection/remove(_:)``.
    @discardableResult
    package static func snapshotBefore(
        _ operations: Set<FaultOperation> = FaultOperation.mutating, pathContains: String? = nil,
        trigger: FaultRule.Trigger = .every, into directory: String, variants: Int, seed: UInt64
    ) throws -> FaultInjection.RuleID {
        try FaultInjection.add(
            FaultRule(operations, pathContains: pathContains, trigger: trigger, snapshot: directory, variants: variants, seed: seed))
    }

    /// Unsynced changes currently remembered.
    static var pendingChanges: Int { Int(sc_powerloss_pending()) }

    /// Creates `path` and its missing parents (mode 0755).
    static func makeDirectory(_ path: String) throws {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o755) != 0 && errno != EEXIST {
                throw SparseCacheError(.io, operation: "create directory", path: prefix, errno: errno)
            }
        }
    }
}
