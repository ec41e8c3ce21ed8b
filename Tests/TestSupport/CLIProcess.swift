// Runs the built `sparsecache` binary as a real process for the CLI tests: locating it,
// feeding standard input, capturing standard output and error, and the exit status.
import Foundation
import LoopbackOrigins
import SeededRandom
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What one run of the CLI produced.
package struct CLIResult: Sendable, CustomStringConvertible {
    package var arguments: [String]
    /// The exit status; for a process killed by a signal, 128 + the signal number.
    package var status: Int32
    package var signaled: Bool
    package var stdout: [UInt8]
    package var stderr: [UInt8]

    package var out: String { String(decoding: stdout, as: UTF8.self) }
    package var err: String { String(decoding: stderr, as: UTF8.self) }

    /// A summary for failure messages: the command line, the status and both streams
    /// (standard output shortened when it is large or binary).
    package var description: String {
        let shownOut = stdout.count > 4096 ? "<\(stdout.count) bytes>" : out
        return "$ sparsecache \(arguments.joined(separator: " "))\n-> exit \(status)\(signaled ? " (signal)" : "")\n--- stdout:\n\(shownOut)\n--- stderr:\n\(err)"
    }

    /// Parses standard output as a JSON object.
    package func json() throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: Data(stdout)) as? [String: Any] else {
            throw CLIFailure("stdout is not a JSON object:\n\(self)")
        }
        return object
    }
}

package struct CLIFailure: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

/// Where standard input comes from.
package enum CLIInput: Sendable {
    /// /dev/null.
    case none
    case file(String)
}

/// Runs the `sparsecache` binary.
package enum CLI {
    /// The binary built next to the test bundle, or `SPARSECACHE_BIN` when set.
    package static let binary: String? = locateBinary()

    /// Set once, on first use of a pipe for standard input.
    package static let ignoreBrokenPipe: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    private static func locateBinary() -> String? {
        let manager = FileManager.default
        if let path = ProcessInfo.processInfo.environment["SPARSECACHE_BIN"], manager.isExecutableFile(atPath: path) {
            return path
        }
        var directories: [URL] = []
        // `swift test` on Linux runs .build/<triple>/debug/<package>PackageTests.xctest, an
        // executable next to the products it built.
        if let executable = Bundle.main.executableURL { directories.append(executable.deletingLastPathComponent()) }
        directories.append(Bundle.main.bundleURL)
        directories.append(Bundle.main.bundleURL.deletingLastPathComponent())
        if let first = CommandLine.arguments.first {
            directories.append(URL(fileURLWithPath: first).deletingLastPathComponent())
        }
        // Last resort: the package's default build directory.
        var root = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { root.deleteLastPathComponent() }
        directories.append(root.appendingPathComponent(".build/debug"))
        for directory in directories {
            let candidate = directory.appendingPathComponent("sparsecache").path
            var isDirectory: ObjCBool = false
            if manager.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
                manager.isExecutableFile(atPath: candidate)
            {
                return candidate
            }
        }
        return nil
    }

    /// Runs `sparsecache arguments...` in `directory` and waits for it to exit. Standard
    /// output and error go to files (no pipe can fill up and stall the child).
    package static func run(_ arguments: [String], input: CLIInput = .none, in directory: String? = nil) async throws -> CLIResult {
        let running = try await start(arguments, input: input, in: directory)
        return try await running.finish()
    }

    /// Starts the binary and returns at once; call ``RunningCLI/finish()`` to wait for it.
    package static func start(_ arguments: [String], input: CLIInput = .none, in directory: String? = nil) async throws -> RunningCLI {
        switch input {
        case .none: try await RunningCLI(arguments: arguments, input: .nullDevice, directory: directory)
        case .file(let path): try await RunningCLI(arguments: arguments, input: .file(path), directory: directory)
        }
    }

    /// Runs another binary of the package (e.g. `sparsecache-bench`) the same way.
    package static func run(binary: String, _ arguments: [String]) async throws -> CLIResult {
        try await RunningCLI(arguments: arguments, input: .nullDevice, directory: nil, binary: binary).finish()
    }

    /// Starts the binary with standard input connected to a pipe the caller keeps open.
    package static func startWithOpenInput(_ arguments: [String], in directory: String? = nil) async throws -> RunningCLI {
        try await RunningCLI(arguments: arguments, input: .pipe, directory: directory)
    }
}

/// A started `sparsecache` process.
package final class RunningCLI: @unchecked Sendable {
    package enum Source {
        case nullDevice
        case file(String)
        case pipe
    }

    package let arguments: [String]
    package let process = Process()
    private let scratch: String
    private let stdoutPath: String
    private let stderrPath: String
    /// The write end of standard input when it is a pipe.
    private(set) var inputPipe: Pipe?
    private let exited: Task<Void, Never>

    fileprivate init(arguments: [String], input: Source, directory: String?, binary: String? = CLI.binary) async throws {
        guard let binary else {
            throw CLIFailure("cannot find the sparsecache binary next to the test bundle; run 'swift build' first or set SPARSECACHE_BIN")
        }
        self.arguments = arguments
        scratch = NSTemporaryDirectory() + "sparsecache-cli-io-\(getpid())-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        stdoutPath = scratch + "/stdout"
        stderrPath = scratch + "/stderr"
        for path in [stdoutPath, stderrPath] where !FileManager.default.createFile(atPath: path, contents: nil) {
            throw CLIFailure("cannot create '\(path)'")
        }

        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: stdoutPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        switch input {
        case .nullDevice:
            process.standardInput = FileHandle.nullDevice
        case .file(let path):
            guard let handle = FileHandle(forReadingAtPath: path) else { throw CLIFailure("cannot open input '\(path)'") }
            process.standardInput = handle
        case .pipe:
            // A child that exits early must make our write fail with EPIPE, not kill the
            // test runner with SIGPIPE.
            _ = CLI.ignoreBrokenPipe
            let pipe = Pipe()
            inputPipe = pipe
            process.standardInput = pipe
        }
        // Resumed by the termination handler; set before run() so no exit is missed.
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        process.terminationHandler = { _ in
            continuation.yield()
            continuation.finish()
        }
        exited = Task {
            for await _ in stream {}
        }
        try await ProcessLaunch.run(process)
        // The child has its own copies now; keep only the pipe's write end.
        try? (process.standardOutput as? FileHandle)?.close()
        try? (process.standardError as? FileHandle)?.close()
        if case .pipe = input { try? inputPipe?.fileHandleForReading.close() }
        if case .file = input { try? (process.standardInput as? FileHandle)?.close() }
    }

    /// Writes to standard input (pipe mode).
    package func send(_ bytes: [UInt8]) throws {
        guard let pipe = inputPipe else { throw CLIFailure("standard input is not a pipe") }
        try pipe.fileHandleForWriting.write(contentsOf: Data(bytes))
    }

    /// Closes standard input (pipe mode): the child sees end of input.
    package func closeInput() {
        try? inputPipe?.fileHandleForWriting.close()
    }

    package var isRunning: Bool { process.isRunning }
    package var pid: Int32 { process.processIdentifier }

    /// Closes standard input, waits for the exit and collects what the process wrote.
    package func finish() async throws -> CLIResult {
        closeInput()
        await exited.value
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let signaled = process.terminationReason == .uncaughtSignal
        let status = signaled ? 128 + process.terminationStatus : process.terminationStatus
        let stdout = FileManager.default.contents(atPath: stdoutPath).map { [UInt8]($0) } ?? []
        let stderr = FileManager.default.contents(atPath: stderrPath).map { [UInt8]($0) } ?? []
        return CLIResult(arguments: arguments, status: status, signaled: signaled, stdout: stdout, stderr: stderr)
    }

    /// Kills the process if it is still running (cleanup after a failed test).
    package func kill() {
        if process.isRunning { process.terminate() }
    }
}

// MARK: - Scratch directories and randomness for the CLI tests

/// A unique temporary directory for one test.
package final class CLIScratch: ScratchDirectory, Sendable {
    package let path: String

    package init(_ label: String) throws {
        path = NSTemporaryDirectory() + "sparsecache-cli-\(label)-\(getpid())-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// Writes `bytes` to a new file in the directory and returns its path.
    @discardableResult
    package func write(_ name: String, _ bytes: some Collection<UInt8>) throws -> String {
        let target = file(name)
        guard FileManager.default.createFile(atPath: target, contents: Data(bytes)) else {
            throw CLIFailure("cannot create '\(target)'")
        }
        return target
    }

    package func read(_ name: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: file(name)) else { throw CLIFailure("cannot read '\(file(name))'") }
        return [UInt8](data)
    }

    package func remove() { try? FileManager.default.removeItem(atPath: path) }

    deinit { remove() }
}

/// The seeded generator for the CLI tests, remembering its seed so every failure can print
/// it. `SPARSECACHE_TEST_SEED=<seed>` replays one.
package struct CLIRandom: RandomNumberGenerator {
    package let seed: UInt64
    private var generator: SplitMix64

    package init(defaultSeed: UInt64) {
        seed = testSeed(defaultSeed)
        generator = SplitMix64(seed: seed)
    }

    package mutating func next() -> UInt64 { generator.next() }

    package mutating func bytes(_ count: Int) -> [UInt8] { generator.bytes(count) }
}
