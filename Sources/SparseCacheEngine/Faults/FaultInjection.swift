import CShim

#if canImport(Glibc)
import Glibc
#endif

/// Fault injection in the syscall shim: every pread, pwrite, fsync, fdatasync, ftruncate,
/// fallocate, punch-hole, open, rename and unlink the engine makes goes through a table of
/// rules that can fail it, shorten it, tear it, delay it, or end the process at that point.
///
/// Process-wide: rules apply to every resource in the process, so tests that add rules must
/// not run beside other tests doing I/O (use a serialized suite). With no rule set, no
/// counting and no power-loss recording, each call pays one relaxed atomic load.
///
/// The same rules can be given to any program linking the engine (the `sparsecache` CLI, an
/// app under test) with the `SPARSECACHE_FAULTS` environment variable, read at start-up.
public enum FaultInjection {
    /// A rule's handle, for ``fired(_:)`` and ``remove(_:)``.
    public struct RuleID: Sendable, Hashable {
        public let rawValue: Int64
    }

    /// The exit status of the `crash` effect unless a rule sets its own.
    public static let crashStatus = Int32(SC_FAULT_CRASH_STATUS)

    /// Adds a rule; it applies from the next call on.
    ///
    /// - Throws: `.invalidArgument` for an empty operation set, a negative count, or a
    ///   probability outside 0...1, and when no rule can be added (64 are set already).
    @discardableResult
    public static func add(_ rule: FaultRule) throws -> RuleID {
        var raw = rule.raw
        let id = sc_faults_add(&raw, rule.pathContains, nil)
        guard id > 0 else {
            let reason = errno
            let detail = reason == EINVAL ? "invalid rule \(rule)" : "no room for rule \(rule): \(String(cString: strerror(reason)))"
            throw SparseCacheError(.invalidArgument, operation: "add fault rule", detail: detail)
        }
        return RuleID(rawValue: id)
    }

    /// Adds the rules of a `SPARSECACHE_FAULTS`-syntax string, e.g.
    /// `"pwrite:path=movie:nth=3:errno=ENOSPC;fdatasync:after=10:crash"`. All or none.
    ///
    /// - Throws: `.invalidArgument` naming the rule and field that do not parse.
    @discardableResult
    public static func add(spec: String) throws -> [RuleID] {
        var ids = [Int64](repeating: 0, count: 64)
        var message = [CChar](repeating: 0, count: 512)
        let count = sc_faults_parse(spec, &ids, Int32(ids.count), &message, message.count)
        guard count >= 0 else {
            let text = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw SparseCacheError(.invalidArgument, operation: "parse SPARSECACHE_FAULTS", detail: text)
        }
        return ids.prefix(Int(count)).map(RuleID.init(rawValue:))
    }

    /// Removes one rule. Its fire count stays readable.
    public static func remove(_ id: RuleID) { _ = sc_faults_remove(id.rawValue) }

    /// Removes every rule (counters stay; see ``resetCounters()``).
    public static func clear() { sc_faults_clear() }

    /// How many times the rule fired.
    public static func fired(_ id: RuleID) -> Int { Int(sc_faults_fired(id.rawValue)) }

    /// Calls the rule matched (its operations and path), fired or not. Tests record it when a
    /// commit returns: a snapshot rule's snapshot `k` is taken before its k-th match.
    public static func matches(_ id: RuleID) -> Int { Int(sc_faults_matches(id.rawValue)) }

    /// Calls sleeping in the rule's ``FaultRule/delay`` right now. A test that must know a call
    /// really waits (its thread taken, not merely slow) watches this.
    public static func delaying(_ id: RuleID) -> Int { Int(sc_faults_delaying(id.rawValue)) }

    /// Calls of `operation` seen while the slow path was armed (a rule set, ``counting`` on,
    /// or power loss recording).
    public static func callCount(_ operation: FaultOperation) -> Int { Int(sc_faults_calls(operation.rawValue)) }

    /// All calls seen while armed: the index the next call gets. Tests record it when a
    /// commit returns, to know which crash points must keep that commit.
    public static var operationCount: Int { Int(sc_faults_operation_count()) }

    /// Counts calls without any rule set.
    public static func setCounting(_ on: Bool) { sc_faults_set_counting(on ? 1 : 0) }

    public static func resetCounters() { sc_faults_reset_counters() }

    /// Whether calls currently take the slow path.
    public static var isArmed: Bool { sc_faults_is_armed() != 0 }
}
