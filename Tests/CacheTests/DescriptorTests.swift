// Open files under a descriptor limit (issue 21): `sparsecache serve` under `ulimit -n 256`
// (soft and hard, so it cannot raise it) answers hundreds of distinct resources in a row; before,
// every resource stayed open for a while and requests failed with 500 once descriptors ran out.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport

@Suite("serve: a bounded number of open files", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(8)))
struct DescriptorTests {
    /// With `--small-object-size 0` every answer is a sparse resource (the bounded cache of
    /// open resources is what keeps descriptors in check); with the default, small objects
    /// (records in a few log files).
    @Test(
        "300 distinct resources in a row under ulimit -n 256: every answer right, descriptors held stay bounded",
        arguments: ["0", "64K"])
    func manyResourcesUnderLowLimit(smallObjectSize: String) async throws {
        guard let binary = CLI.binary else { throw CLIFailure("no sparsecache binary") }
        let files = try TemporaryDirectory("descriptors-origin")
        defer { files.remove() }
        var contents: [[UInt8]] = []
        for index in 0..<300 { contents.append(try originFile(files.path, "o\(index).bin", count: 4_096, seed: UInt64(index + 1))) }
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let scratch = try CLIScratch("descriptors")
        let port = try Loopback.freePort()
        let serve = Process()
        serve.executableURL = URL(fileURLWithPath: "/bin/sh")
        serve.arguments = [
            "-c", "ulimit -n 256 && exec \"$0\" \"$@\"", binary, "serve", "--cache-dir", scratch.file("cache"), "--listen",
            "127.0.0.1:\(port)", "--origin", origin.baseURL.absoluteString, "--max-connections", "16", "--quiet",
            "--small-object-size", smallObjectSize,
        ]
        serve.standardInput = FileHandle.nullDevice
        serve.standardOutput = FileHandle.nullDevice
        serve.standardError = FileHandle.nullDevice
        try await ProcessLaunch.run(serve)
        defer { Loopback.kill(serve) }
        try await Loopback.waitUntilListening(port: port, process: serve)

        // One curl, one keep-alive connection, 300 URLs: status and size of each.
        let urls = (0..<300).map { "http://127.0.0.1:\(port)/o\($0).bin" }
        let result = try await ChildProcess.run("curl", ["-s", "-w", "%{http_code} %{size_download}\\n"] + urls.flatMap { ["-o", "/dev/null", $0] })
        let answers = result.text.split(separator: "\n")
        #expect(answers.count == 300, "\(result.errorText)")
        let failed = answers.enumerated().filter { $0.element != "200 4096" }
        #expect(failed.isEmpty, "answers other than 200 with 4096 bytes: \(failed.prefix(5).map { "#\($0.offset): \($0.element)" })")
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(serve.processIdentifier)/fd").count) ?? -1
        #expect(open > 0 && open < 200, "descriptors held after the run: \(open)")
        // And the bytes are the origin's.
        for index in [0, 149, 299] {
            let body = try await Curl.run(urls[index])
            #expect(body.body == contents[index])
        }
    }

    @Test("resources kept open after their readers left are bounded: beyond the limit the one idle the longest closes at once")
    func keptOpenBound() async throws {
        var options = FillOptions()
        options.keepOpen = .seconds(600)
        options.maximumKeptOpen = 4
        let fixture = try await FillFixture("kept-open", options: options)
        for index in 0..<30 {
            let source = MemorySource(key: "memory://\(index)", bytes: Array(repeating: UInt8(index), count: 1000))
            let reader = try await fixture.cache.open(source)
            let bytes = Lock<[UInt8]>([])
            try await reader.read(0..<1000) { chunk in bytes.withLock { $0 += chunk } }
            #expect(bytes.withLock { $0 } == source.bytes)
            await reader.close()
        }
        // A fill may still be ending (its own detach closes the oldest kept beyond the bound):
        // look until it has.
        var activity = await fixture.cache.activity
        _ = try await eventually {
            activity = await fixture.cache.activity
            return activity.openResources == 4 && activity.readers == 0
        }
        #expect(activity.openResources == 4 && activity.readers == 0, "\(activity)")
        // A closed one opens again on demand, from the store.
        let again = try await fixture.cache.open(MemorySource(key: "memory://0", bytes: []))
        #expect(again.length == 1000)
        await again.close()
        try await fixture.close()
    }
}

/// A resource in memory, answered at once.
struct MemorySource: RangeSource {
    let key: String
    let bytes: [UInt8]

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        let range = range ?? 0..<Int64(bytes.count)
        let body = Array(bytes[Int(range.lowerBound)..<Int(min(range.upperBound, Int64(bytes.count)))])
        let stream = AsyncThrowingStream<[UInt8], Error> { continuation in
            continuation.yield(body)
            continuation.finish()
        }
        return RangeResponse(info: ContentInfo(length: Int64(bytes.count)), offset: range.lowerBound, body: stream, cancel: {})
    }
}
