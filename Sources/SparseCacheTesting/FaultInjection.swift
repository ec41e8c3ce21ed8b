import CShim
import SparseCacheEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Fault injection in the syscall shim: every pread, pwrite, fsync, fdatasync, ftruncate,
/// fallocate, punch-hole, open, rename and unlink the engine makes goes through a table of
/// rules that can fail it, shorten it, tear it, delay it, or end the process at that point.
///
/// Rules added here are process-wide: they apply to every resource in the process. In tests
/// that run beside others, add rules through a ``FaultScope`` instead (limited to a task, a
/// directory, or both). With no rule set, no counting and no power-loss recording, each call
/// pays one relaxed atomic load.
///
/// The same rules can be given to any program linking the engine (the `sparsecache` CLI, an
/// app under test) with the `SPARSECACHE_FAULTS` environment variable, read at start-up; the
/// grammar is the one of ``FaultRule/init(parsing:)``.
public enum FaultInjection {
    /// A rule's handle, for ``fired(_:)`` and ``remove(_:)``.
    public struct RuleID: Sendable, Hashable {
        public let rawValue: Int64
    }

    /// The exit status of the `crash` effect unless a rule sets its own.
    public static let crashStatus = Int32(SC_FAULT_CRASH_STATUS)

    /// Adds a rule; it applies from the next call on.
    ///
    /// - Parameter allowingCrash: a rule with ``FaultRule/crashStatus`` ends this process when it
    ///   fires; inside `swift test` that is the test runner. It is refused unless this is true
    ///   or the process is a ``CrashHarness`` child.
    /// - Throws: `.invalidArgument` for an empty operation set, a negative count, or a
    ///   probability outside 0...1, a crash rule not allowed, and when no rule can be added
    ///   (64 are set already).
    @discardableResult
    public static func add(_ rule: FaultRule, allowingCrash: Bool = false) throws -> RuleID {
        try add(rule, scope: 0, prefix: rule.pathPrefix, allowingCrash: allowingCrash)
    }

    static func add(_ rule: FaultRule, scope: Int64, prefix: String?, allowingCrash: Bool) throws -> RuleID {
        if rule.crashStatus != nil && !allowingCrash && !CrashHarness.isChild {
            throw SparseCacheError(
                .invalidArgument, operation: "add fault rule",
                detail: "'\(rule)' would end this process (in a test, the test runner): run the code under CrashHarness, "
                    + "which applies the rule in a child process, or pass allowingCrash: true")
        }
        if case .probability(_, let seed) = rule.trigger, let other = rule.seed, other != seed {
            throw SparseCacheError(.invalidArgument, operation: "add fault rule", detail: "'\(rule)' has two seeds")
        }
        if let snapshot = rule.snapshot {
            try PowerLoss.makeDirectory(snapshot)
        }
        if scope != 0 { FaultScopeBinding.installProvider() }
        var raw = rule.raw(scope: scope)
        let id = sc_faults_add(&raw, rule.pathContains, prefix, rule.snapshot)
        guard id > 0 else {
            let reason = errno
            let detail = reason == EINVAL ? "invalid rule '\(rule)'" : "no room for rule '\(rule)': \(String(cString: strerror(reason)))"
            throw SparseCacheError(.invalidArgument, operation: "add fault rule", detail: detail)
        }
        return RuleID(rawValue: id)
    }

    /// Adds the rules of a `SPARSECACHE_FAULTS`-syntax string, e.g.
    /// `"pwrite:path=movie:nth=3:errno=ENOSPC;fdatasync:after=10:errno=EIO"`. All or none.
    ///
    /// - Throws: `.invalidArgument` naming the rule and the token that do not parse.
    @discardableResult
    public static func add(spec: String, allowingCrash: Bool = false) throws -> [RuleID] {
        let rules = try FaultRule.parseAll(spec)
        var ids: [RuleID] = []
        do {
            for rule in rules { ids.append(try add(rule, allowingCrash: allowingCrash)) }
        } catch {
            ids.forEach(remove)
            throw error
        }
        return ids
    }

    /// Removes one rule. Its fire count stays readable.
    public static func remove(_ id: RuleID) { _ = sc_faults_remove(id.rawValue) }

    /// Removes every rule, scoped ones included (counters stay; see ``resetCounters()``).
    public static func clear() { sc_faults_clear() }

    /// How many times the rule fired.
    public static func fired(_ id: RuleID) -> Int { Int(sc_faults_fired(id.rawValue)) }

    /// Calls the rule matched (its operations, path and scope), fired or not. Tests record it
    /// when a commit returns: a snapshot rule's snapshot `k` is taken before its k-th match.
    package static func matches(_ id: RuleID) -> Int { Int(sc_faults_matches(id.rawValue)) }

    /// Calls sleeping in the rule's ``FaultRule/delay`` right now. A test that must know a call
    /// really waits (its thread taken, not merely slow) watches this.
    package static func delaying(_ id: RuleID) -> Int { Int(sc_faults_delaying(id.rawValue)) }

    /// Calls of `operation` seen while the slow path was armed (a rule set, counting on, or
    /// power-loss recording), in the whole process.
    static func callCount(_ operation: FaultOperation) -> Int { Int(sc_faults_calls(operation.rawValue)) }

    /// All calls seen while armed: the index the next call gets. Tests record it when a
    /// commit returns, to know which crash points must keep that commit.
    static var operationCount: Int { Int(sc_faults_operation_count()) }

    /// Counts calls without any rule set.
    static func setCounting(_ on: Bool) { sc_faults_set_counting(on ? 1 : 0) }

    static func resetCounters() { sc_faults_reset_counters() }

    /// Whether calls currently take the slow path.
    static var isArmed: Bool { sc_faults_is_armed() != 0 }
}
