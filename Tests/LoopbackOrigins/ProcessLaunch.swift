import Foundation
import Synchronization

/// Starts child processes one at a time. Foundation's `Process.run()` on Linux is not safe to
/// call from several threads at once: a full parallel test run crashed inside it (SIGSEGV in a
/// memmove under `Process.run`, taking the whole run down) while curl, nginx and CLI children
/// were started concurrently. A launch is a fork and an exec, so serializing them costs little;
/// the children still run side by side.
public enum ProcessLaunch {
    private static let lock = Mutex(())

    /// `process.run()`, with no other launch through here at the same time.
    public static func run(_ process: Process) throws {
        try lock.withLock { _ in try process.run() }
    }
}
