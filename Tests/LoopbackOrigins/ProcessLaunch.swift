import Dispatch
import Foundation

/// Starts child processes one at a time, off the cooperative pool.
///
/// One at a time: Foundation's `Process.run()` on Linux is not safe to call from several
/// threads at once (a full parallel test run crashed inside it, SIGSEGV in a memmove under
/// `Process.run`, while curl, nginx and CLI children were started concurrently). A launch is a
/// fork and an exec, so serializing them costs little; the children still run side by side.
///
/// Off the pool: a launch blocks its thread, and under load a queue of them formed. Waiting
/// for a lock there held both threads of the two-core machine's cooperative pool, and every
/// loopback server in the test process stopped answering for as long (servers "did not listen
/// within 90 s", an in-process server answered nothing for 60 s). The async ``run(_:)`` waits on
/// a serial dispatch queue of its own instead; only a caller outside any task uses
/// ``runBlocking(_:)``.
public enum ProcessLaunch {
    private static let queue = DispatchQueue(label: "sparsecache-tests.process-launch")

    /// `process.run()` on the launch queue; the task suspends until it returned.
    public static func run(_ process: Process) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            queue.async { @Sendable in continuation.resume(with: Result { try process.run() }) }
        }
    }

    /// `process.run()` on the launch queue, blocking the calling thread until it returned.
    public static func runBlocking(_ process: Process) throws {
        try queue.sync { try process.run() }
    }
}
