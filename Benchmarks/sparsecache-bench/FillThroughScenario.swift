import Foundation
import SparseCache

#if canImport(Glibc)
import Glibc
#endif

/// Scenario 9: fill-through from an nginx origin on 127.0.0.1.
///
/// - throughput: the whole resource through a ``ProgressiveCache`` into a fresh cache
///   directory (read back by the reader, or only fetched by `prefetch`), against curl
///   downloading the same file to a file in the same directory (no fsync: curl's durability is
///   the page cache's);
/// - time to first byte: the first chunk of an uncached read through the cache (first contact,
///   range request, write, commit, read back) against the first body chunk of a direct request.
///
/// Skipped with a note when nginx or curl is not installed (`apt-get install nginx-light curl`).
enum FillThroughScenario {
    static let number = 9
    static let name = "fill-through from nginx"

    static func run(_ context: BenchContext) async throws -> ScenarioResult {
        var result = ScenarioResult()
        guard let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }),
            let curl = ["/usr/bin/curl", "/bin/curl"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            result.notes.append("scenario 9 skipped: nginx or curl is not installed (apt-get install nginx-light curl)")
            return result
        }
        let root = try context.scratch.directory("fill-origin")
        let work = try context.scratch.directory("fill-work")
        defer {
            context.scratch.remove(root)
            context.scratch.remove(work)
        }
        let length = context.sizes.fillThrough
        var random = SplitMix(seed: 9)
        let chunk = random.bytes(1 << 20)
        let file = root + "/movie.bin"
        guard FileManager.default.createFile(atPath: file, contents: nil) else { throw BenchError("cannot create '\(file)'") }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        var written: Int64 = 0
        while written < length {
            let count = Int(min(Int64(chunk.count), length - written))
            try handle.write(contentsOf: chunk.prefix(count))
            written += Int64(count)
        }
        try handle.close()

        let server = try await Nginx.start(binary: nginx, root: root, work: work)
        defer { server.stop() }
        let url = URL(string: "http://127.0.0.1:\(server.port)/movie.bin")!
        let contenders = [
            "curl -o file", "HTTPRangeSource alone (URLSession, bytes dropped)", "ProgressiveCache.read (fill + read back)",
            "ProgressiveCache.prefetch (fill only)",
        ]
        let samples = try await interleaved(contenders: contenders.count, repetitions: context.repetitions) { contender, repetition in
            let target = work + "/run-\(repetition)-\(contender)"
            defer { context.scratch.remove(target) }
            let start = Monotonic.now()
            switch contender {
            case 0:
                try runCurl(curl, ["-s", "-f", "-o", target, url.absoluteString])
                guard Raw.fileSize(target) == length else { throw BenchError("curl wrote \(Raw.fileSize(target)) of \(length) bytes") }
            case 1:
                let response = try await HTTPRangeSource(url: url).fetch(0..<length, validator: nil)
                var received: Int64 = 0
                for try await bytes in response.body { received += Int64(bytes.count) }
                guard received == length else { throw BenchError("received \(received) of \(length) bytes") }
            default:
                let store = try await SparseStore.open(directory: target, options: StoreOptions(budget: .max))
                let cache = ProgressiveCache(store: store)
                let source = try HTTPRangeSource(url: url)
                if contender == 2 {
                    var received: Int64 = 0
                    for try await bytes in cache.read(source) { received += Int64(bytes.count) }
                    guard received == length else { throw BenchError("read \(received) of \(length) bytes") }
                } else {
                    try await cache.prefetch(source)
                }
                try await store.close()
            }
            return Sample(value: Double(length) / Monotonic.seconds(since: start) / 1e6)
        }
        let workload = "\(describeBytes(length)) over loopback, fresh cache each time"
        var throughput = contenders.enumerated().map { index, contender in
            Measurement(scenario: number, scenarioName: name, workload: workload, contender: contender, unit: "MB/s", samples: samples[index])
        }
        for index in throughput.indices { throughput[index].compare(to: throughput[0]) }
        result.measurements += throughput

        // Time to first byte, uncached.
        let firstByte = try await interleaved(contenders: 2, repetitions: context.repetitions) { contender, repetition in
            let source = try HTTPRangeSource(url: url)
            if contender == 0 {
                let start = Monotonic.now()
                let response = try await source.fetch(0..<length, validator: nil)
                var iterator = response.body.makeAsyncIterator()
                _ = try await iterator.next()
                let elapsed = Monotonic.now() - start
                response.cancel()
                return Sample(value: Double(elapsed) / 1e6)
            }
            let target = work + "/ttfb-\(repetition)"
            defer { context.scratch.remove(target) }
            let store = try await SparseStore.open(directory: target, options: StoreOptions(budget: .max))
            let cache = ProgressiveCache(store: store)
            let start = Monotonic.now()
            var iterator = cache.read(source).makeAsyncIterator()
            _ = try await iterator.next()
            let elapsed = Monotonic.now() - start
            try await store.close()
            return Sample(value: Double(elapsed) / 1e6)
        }
        var latency = [
            Measurement(
                scenario: number, scenarioName: name, workload: "time to first byte, uncached", contender: "direct request (HTTPRangeSource)",
                unit: "ms", higherIsBetter: false, samples: firstByte[0]),
            Measurement(
                scenario: number, scenarioName: name, workload: "time to first byte, uncached", contender: "ProgressiveCache.read",
                unit: "ms", higherIsBetter: false, samples: firstByte[1]),
        ]
        latency[1].compare(to: latency[0])
        result.measurements += latency
        return result
    }

    private static func runCurl(_ curl: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: curl)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw BenchError("curl exited with \(process.terminationStatus)") }
    }
}

/// An nginx serving one directory on a loopback port, one process (master_process off).
struct Nginx {
    let port: Int
    let process: Process

    static func start(binary: String, root: String, work: String) async throws -> Nginx {
        for folder in ["tmp", "logs"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        let port = try freePort()
        let config = """
            worker_processes 1;
            daemon off;
            master_process off;
            pid \(work)/nginx.pid;
            error_log \(work)/logs/error.log warn;
            events { worker_connections 512; }
            http {
                access_log off;
                client_body_temp_path \(work)/tmp/body;
                proxy_temp_path \(work)/tmp/proxy;
                fastcgi_temp_path \(work)/tmp/fastcgi;
                uwsgi_temp_path \(work)/tmp/uwsgi;
                scgi_temp_path \(work)/tmp/scgi;
                default_type application/octet-stream;
                sendfile on;
                keepalive_requests 100000;
                server { listen 127.0.0.1:\(port); root \(root); }
            }
            """
        try config.write(toFile: work + "/nginx.conf", atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["-c", work + "/nginx.conf", "-p", work, "-e", work + "/logs/error.log"]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let server = Nginx(port: port, process: process)
        for _ in 0..<400 {
            if canConnect(port: port) { return server }
            try await Task.sleep(for: .milliseconds(25))
        }
        server.stop()
        throw BenchError("nginx did not start on port \(port)")
    }

    /// SIGKILL: a child spawned from a dispatch thread may have SIGTERM blocked.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw BenchError("bind: errno \(errno)") }
        var size = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}
