// Helpers for the proxy tests: an in-process proxy in front of a real origin, and the request
// log it writes. Helpers, not tests: no assertions here.
import Foundation
import LoopbackOrigins

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

/// A store, a cache, the proxy handler and an HTTPServer on a free loopback port.
final class ProxyFixture: Sendable {
    let directory: TemporaryDirectory
    let store: SparseStore
    let cache: ProgressiveCache
    let server: HTTPServer
    let proxy: CachingProxy
    let log = LogCollector()

    /// - Parameter allowedOrigins: in URL mode, the local origins the proxy may fetch from (the
    ///   test origins listen on 127.0.0.1, which the proxy refuses by default, issue 17).
    init(
        origin: URL?, options: HTTPServer.Options = ProxyFixture.defaultOptions, budget: Int64 = .max,
        allowedOrigins: [String] = ["127.0.0.1"], streaming: StreamingOptions = StreamingOptions(), fill: FillOptions = .testing,
        cors: CORSPolicy? = nil) async throws {
        directory = try TemporaryDirectory("proxy")
        store = try await SparseStore.open(directory: directory.file("cache"), options: StoreOptions(budget: budget))
        cache = ProgressiveCache(store: store, options: fill)
        let proxy = CachingProxy(cache: cache, origin: origin, allowedOrigins: allowedOrigins, streaming: streaming, cors: cors)
        self.proxy = proxy
        let log = self.log
        // As `serve` wires it: hits the event loop can answer are answered there.
        server = try HTTPServer.start(options: options, log: { log.append($0) }, quick: { proxy.answerQuickly($0, &$1) }) {
            request, body, response in
            try await proxy.handle(request, body, response)
        }
    }

    static var defaultOptions: HTTPServer.Options {
        var options = HTTPServer.Options()
        options.port = 0
        return options
    }

    var baseURL: String { "http://127.0.0.1:\(server.port)" }

    func stop() async {
        await server.shutdown(grace: .seconds(1))
        await proxy.shutdown()
        await cache.shutdown()
        try? await store.close()
        directory.remove()
    }
}

/// The request log entries an HTTPServer wrote.
final class LogCollector: Sendable {
    private let entries = Lock<[HTTPLogEntry]>([])

    func append(_ entry: HTTPLogEntry) {
        entries.withLock { $0.append(entry) }
    }

    var all: [HTTPLogEntry] { entries.withLock { $0 } }
}

/// A connected pair on loopback: (the client's end, the server's end).
func connectedPair(_ listener: TCPListener) async throws -> (TCPConnection, TCPConnection) {
    async let accepted = listener.accept()
    let client = try await TCPConnection.connect(host: "127.0.0.1", port: listener.port, resolver: BlockingExecutor(label: "test"))
    return (client, try await accepted)
}
