import Foundation

/// A client or tool run to its end with its output collected, for the tests and the benchmark
/// suite. The wait suspends the task (the termination handler resumes it) instead of blocking
/// a thread of the cooperative pool, which the servers under test need. Output goes through
/// files, so a large output (a decoder's frame hashes) never fills a pipe.
public enum ChildProcess {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: [UInt8]
        public var stderr: [UInt8]
        public var text: String { String(decoding: stdout, as: UTF8.self) }
        public var errorText: String { String(decoding: stderr, as: UTF8.self) }
    }

    public static func run(_ process: Process) async throws -> Result {
        let work = NSTemporaryDirectory() + "sparsecache-child-\(getpid())-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work) }
        let out = work + "/out", err = work + "/err"
        for path in [out, err] where !FileManager.default.createFile(atPath: path, contents: nil) {
            throw LoopbackError("cannot create \(path)")
        }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        let (exited, continuation) = AsyncStream<Void>.makeStream()
        process.terminationHandler = { _ in
            continuation.yield()
            continuation.finish()
        }
        try await ProcessLaunch.run(process)
        // Waited for in a task of its own, whose iteration a cancellation of this one does not
        // end: a cancelled test (a time limit) stops the child and still waits for its exit;
        // reading the status of a running process would crash the whole test run.
        let waiter = Task { for await _ in exited {} }
        let pid = process.processIdentifier
        await withTaskCancellationHandler {
            await waiter.value
        } onCancel: {
            kill(pid, SIGTERM)
        }
        return Result(
            status: process.terminationStatus, stdout: (try? [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))) ?? [],
            stderr: (try? [UInt8](Data(contentsOf: URL(fileURLWithPath: err)))) ?? [])
    }

    /// Runs a program by path, or by name from PATH.
    public static func run(_ program: String, _ arguments: [String]) async throws -> Result {
        let process = Process()
        if program.hasPrefix("/") {
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [program] + arguments
        }
        return try await run(process)
    }
}
