/// One-line rules for the faults tests ask for most.
extension FaultRule {
    /// What a torn write reports to its caller.
    public enum TornWriteOutcome: Sendable, Equatable {
        /// Success for the whole buffer: a lying device; the tear shows at the next read.
        case success
        /// This errno, after the first bytes landed.
        case error(Int32)
        /// The process ends right after the first bytes landed (run it under ``CrashHarness``).
        case crash
    }

    /// The `n`-th pwrite (from 1) to files whose path contains `path` puts only its first
    /// `keeping` bytes into the file; fires once.
    ///
    /// `FaultRule.tornWrite(path: ".scidx", atWrite: 2, keeping: 100)` is
    /// `pwrite:path=.scidx:nth=2:times=1:torn=100`.
    public static func tornWrite(
        path: String, atWrite n: Int, keeping bytes: Int, then outcome: TornWriteOutcome = .success
    ) -> FaultRule {
        var rule = FaultRule([.pwrite], pathContains: path, trigger: .nth(n), maxFires: 1, tornBytes: bytes)
        switch outcome {
        case .success: break
        case .error(let errno): rule.error = errno
        case .crash: rule.crashStatus = FaultInjection.crashStatus
        }
        return rule
    }

    /// The `n`-th fdatasync (from 1) of files whose path contains `path` (any file when nil)
    /// fails with `errno` (EIO, ENOSPC, ...), once: `fdatasync:path=P:nth=N:times=1:errno=E`.
    public static func syncError(_ errno: Int32, path: String? = nil, atSync n: Int = 1) -> FaultRule {
        FaultRule([.fdatasync], pathContains: path, trigger: .nth(n), maxFires: 1, error: errno)
    }

    /// The process ends just before the sync (fsync or fdatasync) that follows the `n`-th of
    /// files whose path contains `path`: what a kill leaves (every write the kernel took
    /// survives). For a power cut, where unsynced writes may vanish or tear, use
    /// ``PowerLoss/cut(afterSync:directory:into:seed:variants:)``. Run it under ``CrashHarness``.
    public static func crash(afterSync n: Int, path: String? = nil) -> FaultRule {
        FaultRule(FaultOperation.syncs, pathContains: path, trigger: .nth(n + 1), crashStatus: FaultInjection.crashStatus)
    }
}

/// A power cut planned by ``PowerLoss/cut(afterSync:directory:into:seed:variants:)``.
public struct PowerCut: Sendable {
    /// The rule taking the snapshots.
    public let rule: FaultInjection.RuleID
    /// Where the snapshots go.
    public let snapshots: String
    let index: Int
    let variants: Int

    /// Whether the workload reached the cut (the sync after the `n`-th began).
    public var happened: Bool { FaultInjection.fired(rule) > 0 }

    /// The directories holding what a power cut at that moment could leave, one per variant
    /// (unsynced writes persisted, vanished or torn, each from its own seed).
    public var powerCutDirectories: [String] { (1..<variants).map { "\(snapshots)/\(index)-\($0)" } }

    /// The directory holding what a process crash at that moment leaves (every write kept).
    public var processCrashDirectory: String { "\(snapshots)/\(index)-0" }

    /// Removes the rule and stops the recording.
    public func end() {
        FaultInjection.remove(rule)
        PowerLoss.end()
    }
}

extension PowerLoss {
    /// A power cut after the `n`-th sync of the files in `directory`: starts recording the
    /// directory and, just before the next sync of one of its files, writes what a power cut
    /// there could leave into `snapshots` (created when missing). The workload goes on
    /// untouched; the test then opens ``PowerCut/powerCutDirectories`` and checks that what was
    /// acknowledged before the `n`-th sync returned is there. Call ``PowerCut/end()`` after.
    ///
    /// - Parameter variants: snapshots taken (at least 2): one process crash, the others power
    ///   cuts seeded from `seed`.
    public static func cut(afterSync n: Int, directory: String, into snapshots: String, seed: UInt64, variants: Int = 4) throws
        -> PowerCut
    {
        precondition(variants >= 2, "a power cut needs at least 2 variants (variant 0 is a process crash)")
        try begin(directory: directory)
        do {
            let prefix = directory.hasSuffix("/") ? directory : directory + "/"
            let rule = try FaultInjection.add(
                FaultRule(
                    FaultOperation.syncs, pathPrefix: prefix, trigger: .nth(n + 1), snapshot: snapshots, variants: variants, seed: seed))
            return PowerCut(rule: rule, snapshots: snapshots, index: n, variants: variants)
        } catch {
            end()
            throw error
        }
    }
}
