import CShim

/// A system call the fault table can match. Reads issued by DispatchIO (``SparseFile`` reads)
/// bypass the shim; reads by recovery and `verify` go through it.
public enum FaultOperation: Int32, Sendable, CaseIterable, CustomStringConvertible {
    case open = 0, pread, pwrite, fsync, fdatasync, ftruncate, fallocate, punchHole, rename, unlink

    /// Every operation that can change a file or a directory (all but `pread`).
    public static let mutating: Set<FaultOperation> = Set(allCases).subtracting([.pread])

    public var description: String {
        switch self {
        case .open: "open"
        case .pread: "pread"
        case .pwrite: "pwrite"
        case .fsync: "fsync"
        case .fdatasync: "fdatasync"
        case .ftruncate: "ftruncate"
        case .fallocate: "fallocate"
        case .punchHole: "punch"
        case .rename: "rename"
        case .unlink: "unlink"
        }
    }
}

/// One fault-injection rule: which calls it matches, when it fires, and what it does then.
///
/// Effects combine: `tornBytes` with `crash` writes the first bytes and then exits, `delay`
/// with `error` sleeps and then fails. The same rules can be given to any program through the
/// `SPARSECACHE_FAULTS` environment variable (syntax in docs/DURABILITY.md, "Fault injection
/// for your own tests").
public struct FaultRule: Sendable, Equatable {
    /// When the rule fires, counted over the calls it matches, from 1.
    public enum Trigger: Sendable, Equatable {
        /// Only the n-th matching call.
        case nth(Int)
        /// Every matching call after the n-th (`after(0)`: every call).
        case after(Int)
        /// Each matching call with this probability, from a generator seeded with `seed`.
        case probability(Double, seed: UInt64)
    }

    public var operations: Set<FaultOperation>
    /// Matches only files whose path contains this text (descriptor calls resolve the path of
    /// the descriptor); nil matches every file.
    public var pathContains: String?
    public var trigger: Trigger
    /// Stop firing after this many fires (nil: no limit).
    public var maxFires: Int?
    /// Fail the call with this errno (without making it, unless `tornBytes` is set).
    public var error: Int32?
    /// pread/pwrite transfer at most this many bytes (a short read or write).
    public var shortBytes: Int?
    /// pwrite puts only this many bytes into the file, then reports `error` when set, else
    /// success for the whole buffer (a lying device, or a crash mid-write with `crash`).
    public var tornBytes: Int?
    /// Sleep this long before the call.
    public var delay: Duration?
    /// `_exit` with this status after the other effects (``FaultInjection/crashStatus`` by
    /// default): the process dies at that point, stdio unflushed, no atexit handlers.
    public var crashStatus: Int32?

    public init(
        _ operations: Set<FaultOperation>, pathContains: String? = nil, trigger: Trigger = .after(0),
        maxFires: Int? = nil, error: Int32? = nil, shortBytes: Int? = nil, tornBytes: Int? = nil,
        delay: Duration? = nil, crashStatus: Int32? = nil
    ) {
        self.operations = operations
        self.pathContains = pathContains
        self.trigger = trigger
        self.maxFires = maxFires
        self.error = error
        self.shortBytes = shortBytes
        self.tornBytes = tornBytes
        self.delay = delay
        self.crashStatus = crashStatus
    }

    /// Fail matching calls with `errno`.
    public static func fail(
        _ operations: Set<FaultOperation>, errno: Int32, trigger: Trigger = .after(0), pathContains: String? = nil
    ) -> FaultRule {
        FaultRule(operations, pathContains: pathContains, trigger: trigger, error: errno)
    }

    var raw: sc_fault_rule {
        var rule = sc_fault_rule_default()
        rule.ops = operations.reduce(UInt32(0)) { $0 | (1 << UInt32($1.rawValue)) }
        switch trigger {
        case .nth(let n):
            rule.trigger = Int32(SC_TRIGGER_NTH)
            rule.n = Int64(n)
        case .after(let n):
            rule.trigger = Int32(SC_TRIGGER_AFTER)
            rule.n = Int64(n)
        case .probability(let p, let seed):
            rule.trigger = Int32(SC_TRIGGER_PROBABILITY)
            rule.probability = p
            rule.seed = seed
        }
        rule.max_fires = Int64(maxFires ?? 0)
        rule.error = error ?? 0
        rule.short_bytes = Int64(shortBytes ?? -1)
        rule.torn_bytes = Int64(tornBytes ?? -1)
        if let delay {
            let (seconds, attoseconds) = delay.components
            rule.delay_us = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        }
        if let crashStatus {
            rule.crash = 1
            rule.exit_status = crashStatus
        }
        return rule
    }
}
