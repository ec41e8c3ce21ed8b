import CShim

/// A system call the fault table can match. Reads issued by DispatchIO (`SparseFile` reads)
/// are matched as `pread` before the channel reads (they can be delayed and failed, not torn).
public enum FaultOperation: Int32, Sendable, CaseIterable, CustomStringConvertible {
    case open = 0, pread, pwrite, fsync, fdatasync, ftruncate, fallocate, punchHole, rename, unlink

    /// Every operation that can change a file or a directory (all but `pread`).
    public static let mutating: Set<FaultOperation> = Set(allCases).subtracting([.pread])

    /// Both syncs (`sync` in rule text).
    public static let syncs: Set<FaultOperation> = [.fsync, .fdatasync]

    /// The name in rule text (`SPARSECACHE_FAULTS`).
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
/// The same rule has one spelling in text, the grammar of the `SPARSECACHE_FAULTS` environment
/// variable (docs/TESTING.md): `FaultRule(parsing: "pwrite:path=.scidx:nth=3:torn=100")`
/// builds it, and `description` writes it back. Each text field has one property here:
///
/// | text | Swift |
/// |---|---|
/// | `OPS` | ``operations`` |
/// | `path=` / `prefix=` | ``pathContains`` / ``pathPrefix`` |
/// | `nth=` / `after=` / `every` / `prob=` | ``trigger`` |
/// | `seed=` | ``seed`` (and the seed of `.probability`) |
/// | `times=` | ``maxFires`` |
/// | `errno=` / `short=` / `torn=` / `delay=` | ``error`` / ``shortBytes`` / ``tornBytes`` / ``delay`` |
/// | `crash[=STATUS]` | ``crashStatus`` |
/// | `snapshot=` / `variants=` | ``snapshot`` / ``variants`` |
///
/// Effects combine: `tornBytes` with `crashStatus` writes the first bytes and then exits,
/// `delay` with `error` sleeps and then fails.
public struct FaultRule: Sendable, Equatable, CustomStringConvertible {
    /// When the rule fires, counted over the calls it matches, from 1.
    public enum Trigger: Sendable, Equatable {
        /// Every matching call (`every`; the same as `after(0)`).
        case every
        /// Only the n-th matching call (`nth=N`).
        case nth(Int)
        /// Every matching call after the n-th (`after=N`).
        case after(Int)
        /// Each matching call with this probability, from a generator seeded with `seed`
        /// (`prob=P:seed=S`).
        case probability(Double, seed: UInt64)

        public static func == (a: Trigger, b: Trigger) -> Bool {
            switch (a.normalized, b.normalized) {
            case (.nth(let x), .nth(let y)), (.after(let x), .after(let y)): x == y
            case (.probability(let p, let s), .probability(let q, let t)): p == q && s == t
            default: false
            }
        }

        private var normalized: Trigger {
            if case .every = self { return .after(0) }
            return self
        }
    }

    package var operations: Set<FaultOperation>
    /// Matches only files whose path contains this text (descriptor calls resolve the path of
    /// the descriptor); nil matches every file.
    package var pathContains: String?
    /// Matches only files whose path starts with this text (a directory: end it with `/`).
    package var pathPrefix: String?
    package var trigger: Trigger
    /// Stop firing after this many fires (nil: no limit).
    package var maxFires: Int?
    /// Fail the call with this errno (without making it, unless `tornBytes` is set).
    package var error: Int32?
    /// pread/pwrite transfer at most this many bytes (a short read or write).
    package var shortBytes: Int?
    /// pwrite puts only this many bytes into the file, then reports `error` when set, else
    /// success for the whole buffer (a lying device, or a crash mid-write with `crash`).
    package var tornBytes: Int?
    /// Sleep this long before the call.
    package var delay: Duration?
    /// `_exit` with this status after the other effects (``FaultInjection/crashStatus`` for
    /// plain `crash`): the process dies at that point, stdio unflushed, no atexit handlers.
    /// Adding such a rule in a test process is refused unless asked for: run it in a child
    /// with ``CrashHarness``.
    package var crashStatus: Int32?
    /// Write power-loss snapshots of the recorded directory (``PowerLoss/begin(directory:)``)
    /// into `<snapshot>/<k>-<v>` before the k-th matching call (from 0).
    package var snapshot: String?
    /// Snapshots per matching call: variant 0 is what a process crash leaves, the others power
    /// cuts seeded from ``seed``, k and v.
    package var variants: Int
    /// The seed of snapshot variants (a probability trigger carries its own).
    package var seed: UInt64?

    public init(
        _ operations: Set<FaultOperation>, pathContains: String? = nil, pathPrefix: String? = nil, trigger: Trigger = .every,
        maxFires: Int? = nil, error: Int32? = nil, shortBytes: Int? = nil, tornBytes: Int? = nil,
        delay: Duration? = nil, crashStatus: Int32? = nil, snapshot: String? = nil, variants: Int = 1, seed: UInt64? = nil
    ) {
        self.operations = operations
        self.pathContains = pathContains
        self.pathPrefix = pathPrefix
        self.trigger = trigger
        self.maxFires = maxFires
        self.error = error
        self.shortBytes = shortBytes
        self.tornBytes = tornBytes
        self.delay = delay
        self.crashStatus = crashStatus
        self.snapshot = snapshot
        self.variants = variants
        self.seed = seed
    }

    /// Fail matching calls with `errno`.
    public static func fail(
        _ operations: Set<FaultOperation>, errno: Int32, trigger: Trigger = .every, pathContains: String? = nil
    ) -> FaultRule {
        FaultRule(operations, pathContains: pathContains, trigger: trigger, error: errno)
    }

    /// The C rule; `scope` is the fault scope it is limited to (0: none).
    func raw(scope: Int64 = 0) -> sc_fault_rule {
        var rule = sc_fault_rule_default()
        rule.ops = operations.reduce(UInt32(0)) { $0 | (1 << UInt32($1.rawValue)) }
        switch trigger {
        case .every:
            rule.trigger = Int32(SC_TRIGGER_AFTER)
            rule.n = 0
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
        if case .probability = trigger {} else { rule.seed = seed ?? 0 }
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
        if snapshot != nil { rule.snapshot_variants = Int32(clamping: variants) }
        rule.scope = scope
        return rule
    }
}
