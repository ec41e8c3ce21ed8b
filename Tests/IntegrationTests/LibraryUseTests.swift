// The library as a user of `import SparseCache` meets it: only the public API, as in
// docs/LIBRARY.md's examples.
import Foundation
import SparseCache
import Testing
import TestSupport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("The library as its users call it")
struct LibraryUseTests {
    /// Deterministic content.
    static func bytes(_ count: Int, seed: UInt8 = 3) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) }
    }

    @Test("docs/LIBRARY.md's store example: write, commit, read back what was written; summary shows the percentage and the last access")
    func storeExample() async throws {
        let directory = try TemporaryDirectory("library-store-example")
        let chunk = Self.bytes(200_000)
        let contentLength = Int64(chunk.count)
        let url = URL(string: "https://cdn.example/movie.mp4")!
        let offset: Int64 = 0, playhead: Int64 = 65_536

        // The example, as docs/LIBRARY.md shows it.
        var storeOptions = StoreOptions(budget: 20 << 30)
        storeOptions.minimumFreeSpace = 0
        storeOptions.pinnedPrefix = 4 << 20
        let cache = try await SparseStore.open(directory: directory.path, options: storeOptions)
        let before = Date()
        let video = try await cache.open(key: url.absoluteString, length: contentLength)
        try await video.write(chunk, at: offset)
        try await video.commit()
        let bytes = try await video.readAvailable(from: playhead, maxLength: 1 << 20)
        try await video.release()
        var lines: [String] = []
        for entry in await cache.summary().entries {
            lines.append("\(entry.key) \(entry.percentPresent ?? 0) \(entry.lastAccessTime)")
            #expect(entry.percentPresent == 100, "\(entry)")
            #expect(entry.lastAccessTime.date.timeIntervalSince(before) > -1, "\(entry.lastAccessTime)")
        }
        try await cache.close()

        #expect(bytes == Array(chunk[Int(playhead)...]), "read back \(bytes.count) bytes")
        #expect(lines.count == 1 && lines[0].hasPrefix("https://cdn.example/movie.mp4 100.0 20"), "\(lines)")
    }

    @Test("write takes Data, raw buffers and slices as well as [UInt8], on a SparseFile and through a store's handle")
    func writeContiguousBytes() async throws {
        let directory = try TemporaryDirectory("library-contiguous")
        let source = Self.bytes(3 * 65_536)
        var options = SparseFileOptions()
        options.length = Int64(source.count)
        let file = try await SparseFile.open(directory.file("r.bin"), options: options)
        try await file.write(Data(source[0..<65_536]), at: 0)
        // A buffer of the app's own (a decoder's output, a network library's), valid for the call.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 16)
        defer { buffer.deallocate() }
        buffer.copyBytes(from: source[65_536..<131_072])
        try await file.write(UnsafeRawBufferPointer(buffer), at: 65_536)
        try await file.write(source[131_072...], at: 131_072)
        try await file.commit()
        #expect(try await file.read(offset: 0, length: source.count) == source)
        try await file.close()

        let store = try await SparseStore.open(directory: directory.file("store"), options: StoreOptions(budget: 1 << 30))
        let handle = try await store.open(key: "k", length: Int64(source.count))
        try await handle.write(Data(source), at: 0)
        try await handle.commit()
        #expect(try await handle.read(offset: 0, length: source.count) == source)
        try await handle.release()
        try await store.close()
    }

    @Test("summary knows the length of a resource read whole through ProgressiveCache while the cache keeps it open")
    func summaryLengthOfOpenResource() async throws {
        let directory = try TemporaryDirectory("library-summary-length")
        let store = try await SparseStore.open(directory: directory.path, options: StoreOptions(budget: 1 << 30))
        let cache = ProgressiveCache(store: store)
        let source = InMemorySource(key: "memory://summary", bytes: Self.bytes(300_000))
        var received = 0
        for try await chunk in cache.read(source) { received += chunk.count }
        #expect(received == 300_000)
        #expect(try await cache.progress(key: source.key).length == 300_000)
        let entry = try #require(await store.summary().entries.first { $0.key == source.key })
        #expect(entry.length == 300_000, "\(entry)")
        #expect(entry.percentPresent == 100, "\(entry)")
        await cache.shutdown()
        try await store.close()
    }

    @Test("docs/LIBRARY.md's proxy example: a handler that turns some methods away and passes the rest to CachingProxy; GET is cached")
    func proxyExample() async throws {
        let directory = try TemporaryDirectory("library-proxy-example")
        let content = Self.bytes(100_000)
        var originOptions = HTTPServer.Options()
        originOptions.port = 0
        let origin = try HTTPServer.start(options: originOptions) { request, _, response in
            // Any other method is answered too: only the proxy's handler turns POST away.
            guard request.method == .get else { return try await response.respond(status: 200, message: "done") }
            try await response.writeHead(status: 200, headers: [("Cache-Control", "max-age=60")], contentLength: Int64(content.count))
            try await response.writeBody(content)
            try await response.finishBody()
        }
        let store = try await SparseStore.open(directory: directory.path, options: StoreOptions(budget: 1 << 30))
        let cache = ProgressiveCache(store: store)

        var options = HTTPServer.Options()
        options.port = 0
        let proxy = CachingProxy(cache: cache, origin: URL(string: "http://127.0.0.1:\(origin.port)")!)
        let server = try HTTPServer.start(options: options, log: { _ in }) { request, body, response in
            if request.method == .post || request.method == HTTPMethod(rawValue: "PROPFIND") {
                return try await response.respond(status: 405, message: "not here")
            }
            try await proxy.handle(request, body, response)
        }
        let url = URL(string: "http://127.0.0.1:\(server.port)/movie.bin")!
        for _ in 0..<2 {
            let (data, answer) = try await URLSession.shared.data(from: url)
            #expect((answer as? HTTPURLResponse)?.statusCode == 200)
            #expect(Array(data) == content)
        }
        var post = URLRequest(url: url)
        post.httpMethod = "POST"
        let (_, refused) = try await URLSession.shared.data(for: post)
        #expect((refused as? HTTPURLResponse)?.statusCode == 405)
        #expect(await store.summary().entries.first?.presentBytes == Int64(content.count))

        await server.shutdown()
        await proxy.shutdown()
        await cache.shutdown()
        try await store.close()
        await origin.shutdown()
    }

    @Test("prefetch of a range already cached calls its progress closure once, with what is present")
    func prefetchProgressWhenCached() async throws {
        let directory = try TemporaryDirectory("library-prefetch")
        let store = try await SparseStore.open(directory: directory.path, options: StoreOptions(budget: 1 << 30))
        let cache = ProgressiveCache(store: store)
        let source = InMemorySource(key: "memory://prefetch", bytes: Self.bytes(300_000))
        try await cache.prefetch(source, range: 0..<200_000)
        // Each update goes into a stream, synchronously, as the closure is called.
        let (updates, continuation) = AsyncStream<FillProgress>.makeStream()
        try await cache.prefetch(source, range: 0..<200_000) { progress in continuation.yield(progress) }
        continuation.finish()
        var seen: [FillProgress] = []
        for await update in updates { seen.append(update) }
        #expect(seen.count == 1, "\(seen)")
        #expect(seen.first.map { $0.contiguousBytes >= 200_000 && $0.length == 300_000 } == true, "\(seen)")
        await cache.shutdown()
        try await store.close()
    }

    @Test("a second open for writing in the same process says so, not 'another process'; the store's directory too")
    func secondOpenInProcess() async throws {
        let directory = try TemporaryDirectory("library-second-open")
        let path = directory.file("r.bin")
        let first = try await SparseFile.open(path)
        let error = await #expect(throws: SparseCacheError.self) { _ = try await SparseFile.open(path) }
        #expect(error?.code == .locked, "\(String(describing: error))")
        #expect("\(error.map { "\($0)" } ?? "")".contains("already open for writing in this process"), "\(String(describing: error))")
        // Read-only opens still work beside the writer.
        let reader = try await SparseFile.open(path, mode: .readOnly)
        try await reader.close()
        try await first.close()
        let again = try await SparseFile.open(path)
        try await again.close()

        let store = try await SparseStore.open(directory: directory.file("store"), options: StoreOptions(budget: 1 << 30))
        let storeError = await #expect(throws: SparseCacheError.self) {
            _ = try await SparseStore.open(directory: directory.file("store"), options: StoreOptions(budget: 1 << 30))
        }
        #expect(storeError?.code == .locked && "\(storeError.map { "\($0)" } ?? "")".contains("already open in this process"))
        try await store.close()
    }

    @Test(
        "WallClockTime prints ISO 8601 in UTC and converts to Date",
        arguments: [
            (Int64(0), "1970-01-01T00:00:00.000Z"), (1_795_694_400_123_000_000, "2026-11-26T12:00:00.123Z"),
            (-1_500_000_000, "1969-12-31T23:59:58.500Z"), (951_782_400_000_000_000, "2000-02-29T00:00:00.000Z"),
        ])
    func wallClockTime(nanoseconds: Int64, text: String) {
        let time = WallClockTime(nanosecondsSince1970: nanoseconds)
        #expect(time.description == text)
        #expect(time.date.timeIntervalSince1970 == Double(nanoseconds) / 1e9)
        #expect(WallClockTime(nanosecondsSince1970: nanoseconds + 1) > time)
    }
}

/// A range source of the user's own: a resource in memory, answered at once.
private struct InMemorySource: RangeSource {
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
