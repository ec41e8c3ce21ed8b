// The fill tests' fixtures: a store and a progressive cache in a temporary directory, and
// range sources that cut an answer or hold it until released.
import Foundation
import LoopbackOrigins
import SeededRandom
import SparseCacheTesting
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP
import TestSupport

/// A store plus a progressive cache over it in a temporary directory.
struct FillFixture {
    let directory: TemporaryDirectory
    let store: SparseStore
    let cache: ProgressiveCache

    init(_ label: String, options: FillOptions = FillOptions(), segmentSize: Int = 64 << 10) async throws {
        directory = try TemporaryDirectory(label)
        var storeOptions = StoreOptions(budget: 1 << 40)
        storeOptions.segmentSize = segmentSize
        store = try await SparseStore.open(directory: directory.file("cache"), options: storeOptions)
        cache = ProgressiveCache(store: store, options: options)
    }

    /// A new store and cache on the directory of a closed fixture (a restart).
    init(reopening earlier: FillFixture, options: FillOptions) async throws {
        directory = earlier.directory
        store = try await SparseStore.open(directory: directory.file("cache"), options: StoreOptions(budget: 1 << 40))
        cache = ProgressiveCache(store: store, options: options)
    }

    /// Stops the fills (each writes back and commits what it received: a reader may have had
    /// its bytes from memory before they were durable) and closes the store.
    func close() async throws {
        await cache.shutdown()
        try await store.close()
    }

    /// Waits until no fetch runs (every byte received is written back and committed).
    func settled() async throws {
        try await waitUntil(timeout: .seconds(60), interval: .milliseconds(5), "fetches still running after 60 s") { await cache.activity.fetchesInFlight == 0 }
    }
}

/// Drains a read stream into one array.
func collect(_ stream: CacheReadStream) async throws -> [UInt8] {
    var bytes: [UInt8] = []
    for try await chunk in stream { bytes += chunk }
    return bytes
}

extension FillOptions {
    static var testing: FillOptions {
        var options = FillOptions()
        options.initialBackoff = .milliseconds(20)
        options.maximumBackoff = .milliseconds(200)
        return options
    }
}

/// A resource answered without a length (as a chunked body): the first `sent` bytes at once,
/// then nothing until ``cut()`` ends the body with an error (a connection cut inside it).
final class CutUnknownLengthSource: RangeSource, Sendable {
    let key = "cut://unknown-length"
    private let sent: Int
    private let state = Lock((requests: 0, continuations: [AsyncThrowingStream<[UInt8], Error>.Continuation]()))

    init(sent: Int) {
        self.sent = sent
    }

    var requests: Int { state.withLock { $0.requests } }

    func cut() {
        for continuation in state.withLock({ $0.continuations }) {
            continuation.finish(throwing: OriginError(.unavailable, operation: "fetch", key: key, detail: "cut inside the body"))
        }
    }

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        let (stream, continuation) = AsyncThrowingStream<[UInt8], Error>.makeStream()
        state.withLock {
            $0.requests += 1
            $0.continuations.append(continuation)
        }
        continuation.yield([UInt8](repeating: 7, count: sent))
        let info = ContentInfo(length: nil, validator: ContentValidator(etag: "\"cut\""))
        return RangeResponse(info: info, offset: 0, body: stream, cancel: { continuation.finish() })
    }
}

/// A resource whose first request (first contact) is answered at once and whose later ones
/// send nothing until ``release()``: a reader can be held waiting on a fetch.
final class GatedSource: RangeSource, Sendable {
    let key = "gated://resource"
    private let bytes: [UInt8]
    private let state = Lock((requests: [Range<Int64>](), released: false))

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    var requests: [Range<Int64>] { state.withLock { $0.requests } }

    func release() {
        state.withLock { $0.released = true }
    }

    private var isReleased: Bool { state.withLock { $0.released } }

    /// Waits (up to 10 s) until `count` requests have come.
    func waitForRequests(_ count: Int) async throws {
        try await waitUntil(timeout: .seconds(10), interval: .milliseconds(5), "only \(requests) came") { requests.count >= count }
    }

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        let range = range ?? 0..<Int64(bytes.count)
        let first = state.withLock { state in
            state.requests.append(range)
            return state.requests.count == 1
        }
        let body = Array(bytes[Int(range.lowerBound)..<Int(min(range.upperBound, Int64(bytes.count)))])
        let (stream, continuation) = AsyncThrowingStream<[UInt8], Error>.makeStream()
        let producer = Task {
            do {
                // A cancel ends the wait (it throws).
                if !first { try await waitUntil(timeout: .seconds(600), interval: .milliseconds(5), "never released") { self.isReleased } }
            } catch {
                return continuation.finish(throwing: error)
            }
            for start in stride(from: 0, to: body.count, by: 64 << 10) {
                continuation.yield(Array(body[start..<min(body.count, start + (64 << 10))]))
            }
            continuation.finish()
        }
        let info = ContentInfo(length: Int64(bytes.count), validator: ContentValidator(etag: "\"v1\""))
        return RangeResponse(info: info, offset: range.lowerBound, body: stream, cancel: { producer.cancel() })
    }
}

/// The origins a fill test runs against (``OriginServer``).
enum FillOrigin {
    case nginx, faulty, scripted, pythonStatic
}

extension FillFixture {
    /// The usual setup of a fill test: a directory for the origin's files, `origin` serving it,
    /// and a fixture labelled `label`. The caller stops the origin (`defer { origin.stop() }`)
    /// and closes the fixture.
    static func withOrigin(
        _ origin: FillOrigin, _ label: String, options: FillOptions = .testing, segmentSize: Int = 64 << 10
    ) async throws -> (files: TemporaryDirectory, origin: OriginServer, fixture: FillFixture) {
        let files = try TemporaryDirectory("origin-files")
        let server: OriginServer
        switch origin {
        case .nginx: server = try await OriginServer.nginx(root: files.path)
        case .faulty: server = try await OriginServer.faulty(root: files.path)
        case .scripted: server = try await OriginServer.scripted(root: files.path)
        case .pythonStatic: server = try await OriginServer.pythonStatic(root: files.path)
        }
        do {
            return (files, server, try await FillFixture(label, options: options, segmentSize: segmentSize))
        } catch {
            server.stop()
            throw error
        }
    }
}

extension ProgressiveCache {
    /// How many readers of `key` wait for the others to leave before its one answer is fetched anew.
    func refetchWaiting(key: String) -> Int { resources[key]?.refetchWaiting ?? 0 }

    /// Whether `key` is open with what first contact learned (its length and validators) kept.
    func isOpen(key: String) -> Bool { resources[key]?.phase.isOpen ?? false }

    /// The most readers (a prefetch counts as one) that wait on one fetch of `key`.
    func mostInterest(key: String) -> Int { resources[key]?.fetches.values.map(\.interest).max() ?? 0 }
}
