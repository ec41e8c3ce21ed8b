@_spi(Locking) import SparseCacheEngine
import Synchronization

/// Fault rules limited to one test: to the calls made by a task (and the tasks it starts),
/// to the files under one directory, or both, so tests running in parallel in one process do
/// not see each other's rules.
///
/// ```swift
/// try await withFaultScope { faults in
///     try faults.add(.syncError(EIO, path: "movie.bin"))
///     // only this task's calls (and the engine's work for them) can fail
/// }
/// ```
///
/// Limited to a task: the scope is a task-local value, inherited by child tasks and by
/// unstructured `Task { }`, and carried by the engine to the threads that make a task's system
/// calls. Work started outside the scope (a store opened before it, `Task.detached`, a thread of
/// your own) is not in it: open what the test exercises inside ``run(_:)``. Limited to a
/// directory: the rule's path must start with the directory (as the kernel resolves it, so
/// give the real path, without symbolic links).
public final class FaultScope: Sendable {
    private static let nextID = Atomic<Int64>(1)

    /// The directory rules are limited to, ending in `/` (nil: any path).
    public let directory: String?
    /// Whether rules are limited to the calls of tasks running in ``run(_:)``.
    public let limitedToTask: Bool
    let id: Int64
    private let rules = Lock<[FaultInjection.RuleID]>([])

    /// - Parameters:
    ///   - directory: limit rules to files under this directory.
    ///   - limitedToTask: limit rules to calls made inside ``run(_:)`` (at least one of the
    ///     two limits is required).
    public init(directory: String? = nil, limitedToTask: Bool = true) {
        precondition(directory != nil || limitedToTask, "a FaultScope needs a directory, a task, or both")
        self.directory = directory.map { $0.hasSuffix("/") ? $0 : $0 + "/" }
        self.limitedToTask = limitedToTask
        id = Self.nextID.add(1, ordering: .relaxed).oldValue
    }

    deinit { removeAll() }

    /// Adds a rule limited to this scope.
    ///
    /// - Throws: as ``FaultInjection/add(_:allowingCrash:)``, and `.invalidArgument` when the
    ///   rule's ``FaultRule/pathPrefix`` lies outside the scope's directory.
    @discardableResult
    public func add(_ rule: FaultRule, allowingCrash: Bool = false) throws -> FaultInjection.RuleID {
        var prefix = rule.pathPrefix
        if let directory {
            if let own = rule.pathPrefix, !own.hasPrefix(directory) {
                throw SparseCacheError(
                    .invalidArgument, operation: "add fault rule", path: own,
                    detail: "prefix= lies outside the scope's directory '\(directory)'")
            }
            prefix = prefix ?? directory
        }
        let id = try FaultInjection.add(rule, scope: limitedToTask ? self.id : 0, prefix: prefix, allowingCrash: allowingCrash)
        rules.withLock { $0.append(id) }
        return id
    }

    /// Adds the rules of a `SPARSECACHE_FAULTS`-syntax string, all or none, limited to this scope.
    @discardableResult
    public func add(_ spec: String, allowingCrash: Bool = false) throws -> [FaultInjection.RuleID] {
        let parsed = try FaultRule.parseAll(spec)
        var ids: [FaultInjection.RuleID] = []
        do {
            for rule in parsed { ids.append(try add(rule, allowingCrash: allowingCrash)) }
        } catch {
            ids.forEach(remove)
            throw error
        }
        return ids
    }

    /// Removes one of the scope's rules.
    public func remove(_ id: FaultInjection.RuleID) {
        FaultInjection.remove(id)
        rules.withLock { $0.removeAll { $0 == id } }
    }

    /// Removes every rule of the scope (also done when the scope is released).
    public func removeAll() {
        let removed = rules.withLock { rules in
            defer { rules = [] }
            return rules
        }
        for id in removed { FaultInjection.remove(id) }
    }

    /// Runs `body` inside the scope: its calls, and those of tasks it starts, are the ones the
    /// scope's task-limited rules match.
    public func run<T>(
        isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T
    ) async rethrows -> T {
        try await FaultScopeBinding.$current.withValue(id, operation: body)
    }
}

/// Runs `body` with a new ``FaultScope`` bound to its task, and removes the scope's rules when
/// it returns or throws.
public func withFaultScope<T>(
    directory: String? = nil, limitedToTask: Bool = true, isolation: isolated (any Actor)? = #isolation,
    _ body: (FaultScope) async throws -> T
) async rethrows -> T {
    let scope = FaultScope(directory: directory, limitedToTask: limitedToTask)
    defer { scope.removeAll() }
    return try await scope.run { try await body(scope) }
}
