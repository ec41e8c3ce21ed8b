// Each layer's error, and how one layer's error becomes the next one's: SparseHTTP's
// `HTTPError` of an origin request becomes the cache's `OriginError`, which the proxy answers
// with a status of its own (docs/ARCHITECTURE.md, "Errors").
import Foundation
import LoopbackOrigins
import Testing
import TestSupport
@testable import HTTPCache
@testable import SparseCacheEngine
@testable import SparseHTTP

#if canImport(Glibc)
import Glibc
#endif

@Suite("errors per layer: HTTPError, OriginError, and the proxy's answers")
struct ErrorLayerTests {
    @Test("an HTTPError of an origin request becomes an OriginError of the matching kind, its context kept")
    func transportToOrigin() {
        let cases: [(HTTPError.Kind, OriginError.Kind)] = [
            (.timedOut, .timedOut), (.connectFailed, .unavailable), (.unresolved, .unavailable), (.connectionLost, .unavailable),
            (.closed, .unavailable), (.io, .unavailable), (.malformed, .badAnswer), (.notAllowed, .notAllowed),
        ]
        for (transport, origin) in cases {
            let error = OriginError(HTTPError(transport, operation: "fetch", peer: "http://origin/a.bin", errno: 104, detail: "why"))
            #expect(error.kind == origin, "\(transport) -> \(error.kind)")
            #expect(error.transport?.kind == transport && error.errno == 104 && error.key == "http://origin/a.bin")
            #expect(error.mayPass == (origin == .unavailable || origin == .timedOut), "\(error)")
        }
        // The description reads as the transport's did: the operation, the peer, the errno's text.
        let refused = OriginError(
            HTTPError(.connectFailed, operation: "connect", peer: "127.0.0.1:9", errno: ECONNREFUSED, detail: "connection refused"))
        #expect(refused.description == "connect failed for '127.0.0.1:9': connection refused; Connection refused (errno \(ECONNREFUSED))")
    }

    @Test("the proxy answers an origin timeout 504, a refused connect or a 5xx 502, a changed resource 503 (RFC 9110 15.6.3, 15.6.5)")
    func originToProxyStatus() {
        let timedOut = HTTPError(.timedOut, operation: "fetch", peer: "10.0.0.1:80", detail: "timed out: no answer from the origin within 30 seconds")
        let refused = HTTPError(.connectFailed, operation: "connect", peer: "10.0.0.1:80", errno: ECONNREFUSED, detail: "connection refused")
        let cases: [(any Error, Int)] = [
            (OriginError(timedOut), 504),
            // The transport's error itself, should one come this far, is answered the same.
            (timedOut, 504),
            (OriginError(refused), 502),
            (refused, 502),
            (OriginError(HTTPError(.malformed, operation: "fetch", detail: "malformed response: not HTTP/1.x")), 502),
            (OriginError(.unavailable, operation: "fetch", key: "k", detail: "HTTP 503 from the origin", status: 503), 502),
            (OriginError(.changed, operation: "read", key: "k", detail: "the resource changed on the origin after it was opened"), 503),
            (HTTPError(.invalidArgument, operation: "respond", detail: "the response head was already sent"), 400),
            (SparseCacheError(.io, operation: "pwrite", path: "/var/cache/a.data", errno: ENOSPC), 500),
        ]
        for (error, status) in cases {
            let (answered, message) = CachingProxy.status(for: error)
            #expect(answered == status, "\(error) -> \(answered) \(message)")
        }
        #expect(CachingProxy.status(for: OriginError(refused)).1.contains("Connection refused"), "the errno's text names the problem")
    }

    @Test("an origin's status is carried: a 404 is a bad answer with status 404, a 503 may pass with status 503, a 416 says the length")
    func statusCarried() throws {
        func interpret(_ status: Int, _ fields: [(String, String)] = []) -> OriginError? {
            do {
                _ = try HTTPRangeSource.interpret(status: status, headers: HTTPHeaders(fields), contentLength: nil, requested: 0..<10, key: "k")
                return nil
            } catch {
                return error as? OriginError
            }
        }
        let notFound = try #require(interpret(404))
        #expect(notFound.kind == .badAnswer && notFound.status == 404 && !notFound.mayPass, "\(notFound)")
        let busy = try #require(interpret(503))
        #expect(busy.kind == .unavailable && busy.status == 503 && busy.mayPass, "\(busy)")
        let past = try #require(interpret(416, [("Content-Range", "bytes */1000")]))
        #expect(past.kind == .badAnswer && past.status == 416 && past.description.contains("1000"), "\(past)")
    }

    @Test("over real sockets: a refused connect is .unavailable with ECONNREFUSED, a silent origin .timedOut, a malformed answer .badAnswer")
    func overSockets() async throws {
        let closedPort = try Loopback.freePort()
        let nobody = try HTTPRangeSource(
            url: URL(string: "http://127.0.0.1:\(closedPort)/x.bin")!, timeout: .seconds(30), limiter: nil, transport: .automatic,
            pool: OriginConnectionPool())
        let refused = await expectOriginError(.unavailable) { _ = try await nobody.fetch(0..<10, validator: nil) }
        #expect(refused?.transport?.kind == .connectFailed && refused?.errno == ECONNREFUSED, "\(String(describing: refused))")

        let silent = try CannedOrigin { _, connection in _ = try? await connection.receive(maximum: 1) }
        defer { silent.stop() }
        let waiting = try HTTPRangeSource(url: silent.url, timeout: .seconds(1), limiter: nil, transport: .automatic, pool: OriginConnectionPool())
        let timedOut = await expectOriginError(.timedOut) { _ = try await waiting.fetch(0..<10, validator: nil) }
        #expect(timedOut?.transport?.kind == .timedOut, "\(String(describing: timedOut))")
        #expect(timedOut.map { CachingProxy.status(for: $0).0 } == 504)

        let garbage = try CannedOrigin.text("SSH-2.0-OpenSSH_9.6\r\n")
        defer { garbage.stop() }
        let malformed = await expectOriginError(.badAnswer) { _ = try await HTTPRangeSource(url: garbage.url).fetch(0..<10, validator: nil) }
        #expect(malformed?.transport?.kind == .malformed, "\(String(describing: malformed))")
    }
}
