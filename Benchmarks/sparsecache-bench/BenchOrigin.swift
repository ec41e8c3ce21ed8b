import Foundation
import LoopbackOrigins
import SeededRandom

/// The nginx origin of the HTTP scenarios (9 and 10): a directory with one generated resource,
/// served on a free loopback port until ``stop()``, with an hour of freshness (`expires 1h`,
/// as an operator configures static media): the proxy's cached rows measure answers from
/// storage, not revalidations (a file written a moment ago has no heuristic freshness).
struct BenchOrigin {
    let root: String
    let port: Int
    private let process: Process

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Writes `length` bytes of seeded data to `root/name` and starts nginx on it (its
    /// configuration and logs under `work`).
    /// With `accessLog`, nginx logs each request as `METHOD URI STATUS BODY_BYTES "RANGE" CONNECTION`
    /// there (``bodyBytes(in:path:)`` sums it). `locations` goes into the server block.
    static func start(
        root: String, work: String, resource name: String, length: Int64, seed: UInt64, accessLog: String? = nil,
        locations: String = "expires 1h;"
    ) async throws -> BenchOrigin {
        try writeResource(root + "/" + name, length: length, seed: seed)
        let port = try Loopback.freePort()
        let process = try NginxServer.process(root: root, work: work, port: port, accessLog: accessLog, locations: locations)
        try await launch(process, port: port)
        return BenchOrigin(root: root, port: port, process: process)
    }

    /// Runs a server process with no output and waits until it listens on `port` (stopping it
    /// when it does not).
    static func launch(_ process: Process, port: Int) async throws {
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try ProcessLaunch.runBlocking(process)
        do {
            try await Loopback.waitUntilListening(port: port, process: process)
        } catch {
            Loopback.kill(process)
            throw error
        }
    }

    func stop() {
        Loopback.kill(process)
    }

    /// Body bytes the origin sent for `path` (e.g. `/movie.bin`), from its access log.
    static func bodyBytes(in log: String, path: String) -> Int64 {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").reduce(Int64(0)) { total, line in
            let fields = line.split(separator: " ", maxSplits: 4)
            guard fields.count >= 4, fields[1] == path, let bytes = Int64(fields[3]) else { return total }
            return total + bytes
        }
    }

    /// Body bytes the origin sent for every path, from its access log.
    static func totalBodyBytes(in log: String) -> Int64 {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").reduce(Int64(0)) { total, line in
            let fields = line.split(separator: " ", maxSplits: 4)
            guard fields.count >= 4, let bytes = Int64(fields[3]) else { return total }
            return total + bytes
        }
    }

    private static func writeResource(_ path: String, length: Int64, seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let chunk = random.bytes(1 << 20)
        guard FileManager.default.createFile(atPath: path, contents: nil) else { throw BenchError("cannot create '\(path)'") }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var written: Int64 = 0
        while written < length {
            let count = Int(min(Int64(chunk.count), length - written))
            try handle.write(contentsOf: chunk.prefix(count))
            written += Int64(count)
        }
        try handle.close()
    }
}

/// Client programs of the HTTP scenarios.
enum Clients {
    /// The path of an installed tool, or nil.
    static func installed(_ tool: String) -> String? {
        ["/usr/bin/", "/usr/local/bin/", "/bin/"].map { $0 + tool }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Runs a client to its end (without blocking a thread of the cooperative pool, which the
    /// engine under test needs) and returns its stdout.
    static func run(_ path: String, _ arguments: [String]) async throws -> String {
        let result = try await ChildProcess.run(path, arguments)
        guard result.status == 0 else { throw BenchError("\(path) exited with \(result.status): \(result.errorText)\(result.text)") }
        return result.text
    }
}
