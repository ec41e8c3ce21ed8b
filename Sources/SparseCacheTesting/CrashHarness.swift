import SparseCacheEngine

#if canImport(Glibc)
    import Glibc
#endif

/// Runs code that is meant to crash in a child process, so the crash ends the child and not
/// the test runner, and returns what the child acknowledged before it ended.
///
/// The child is an executable: one of your own (it acknowledges by printing lines that start
/// with ``acknowledgementPrefix``), or a small one built from ``CrashWorker`` that runs a closure
/// registered under a name. Fault rules reach the child through `SPARSECACHE_FAULTS`; a
/// `crash` rule fires there. The test then opens the files the child left and checks that
/// everything acknowledged is present:
///
/// ```swift
/// let outcome = try await CrashHarness.run(
///     closure: "fill", in: CrashHarness.builtProduct("my-crash-worker")!, arguments: [directory],
///     faults: [.crash(afterSync: 3)])
/// #expect(outcome.crashed)
/// // open the files under `directory` and check outcome.acknowledged
/// ```
public enum CrashHarness {
    /// The environment variable naming the ``CrashWorker`` closure a child runs.
    static let closureVariable = "SPARSECACHE_CRASH_CLOSURE"
    /// Set in every child the harness starts (crash rules are allowed there).
    static let childVariable = "SPARSECACHE_CRASH_CHILD"
    /// Lines of the child's standard output that start with this are acknowledgements.
    public static let acknowledgementPrefix = "sparsecache-ack "

    /// Whether this process is a child started by the harness.
    static var isChild: Bool { getenv(childVariable) != nil }

    /// How a child ended and what it said.
    public struct Outcome: Sendable, CustomStringConvertible {
        /// The exit status, or 128 + the signal number when a signal ended it.
        public var status: Int32
        /// The signal that ended the child, if one did.
        public var signal: Int32?
        /// Whether the child ended by a crash rule (status ``FaultInjection/crashStatus``, or the
        /// status given as `crashStatus`), or by a signal.
        public var crashed: Bool
        /// Whether the harness killed it when `timeout` passed.
        public var timedOut: Bool
        /// The acknowledgement lines, in order, without their prefix.
        public var acknowledged: [String]
        /// Everything it wrote to standard output and standard error.
        public var output: String
        public var errorOutput: String

        public var description: String {
            "status \(status)\(signal.map { " (signal \($0))" } ?? "")\(timedOut ? ", timed out" : ""), "
                + "\(acknowledged.count) acknowledged; stderr: \(errorOutput.suffix(500))"
        }
    }

    /// Runs `executable` with `faults` in its environment and waits for it to end.
    ///
    /// - Parameters:
    ///   - faults: rules for the child (as `SPARSECACHE_FAULTS`), crash rules included.
    ///   - crashStatus: the exit status that counts as a crash (the default one of rules).
    ///   - timeout: the child is killed (SIGKILL) when it runs longer.
    /// - Throws: `.io` when the child cannot be started.
    public static func run(
        executable: String, arguments: [String] = [], faults: [FaultRule] = [], environment: [String: String] = [:],
        acknowledgementPrefix: String = acknowledgementPrefix, crashStatus: Int32 = FaultInjection.crashStatus,
        timeout: Duration = .seconds(600)
    ) async throws -> Outcome {
        var variables = environment
        variables[childVariable] = "1"
        if !faults.isEmpty { variables["SPARSECACHE_FAULTS"] = faults.map(\.description).joined(separator: ";") }
        let child = try ChildSpawn(executable: executable, arguments: arguments, environment: variables)
        defer { child.removeFiles() }
        let killer = Task {
            try await Task.sleep(for: timeout)
            child.kill()
        }
        let waited = try await BlockingExecutor(label: "sparsecache-testing.crash-harness").run { child.wait() }
        let timedOut = child.wasKilled
        killer.cancel()
        let output = child.readOutput()
        let acknowledged = output.split(separator: "\n", omittingEmptySubsequences: false).compactMap { line in
            line.hasPrefix(acknowledgementPrefix) ? String(line.dropFirst(acknowledgementPrefix.count)) : nil
        }
        return Outcome(
            status: waited.status, signal: waited.signal, crashed: waited.signal != nil || waited.status == crashStatus,
            timedOut: timedOut, acknowledged: acknowledged, output: output, errorOutput: child.readErrors())
    }

    /// Runs the ``CrashWorker`` closure registered as `name` in `executable` (a program whose
    /// main calls ``CrashWorker/main()``), with `faults` applied in the child.
    public static func run(
        closure name: String, in executable: String, arguments: [String] = [], faults: [FaultRule] = [],
        environment: [String: String] = [:], timeout: Duration = .seconds(600)
    ) async throws -> Outcome {
        var variables = environment
        variables[closureVariable] = name
        return try await run(executable: executable, arguments: arguments, faults: faults, environment: variables, timeout: timeout)
    }

    /// The path of an executable product built beside the running test bundle (`swift build`
    /// puts products and the test bundle in one directory), or nil when there is none.
    public static func builtProduct(_ name: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        var path = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // The bundle is `<dir>/<name>.xctest` (a file on Linux) or a binary inside one.
        while let slash = path.lastIndex(of: "/") {
            path = String(path[..<slash])
            if !path.hasSuffix(".xctest") { break }
        }
        let candidate = path + "/" + name
        return access(candidate, X_OK) == 0 ? candidate : nil
    }
}
