// The two ways HTTPRangeSource reaches an origin: its own HTTP/1.1 client (HTTPExchange, for
// http://) and URLSession. Against nginx both must give the same answers; against a server
// of canned bytes the own client must frame bodies right, refuse malformed responses with a
// clear error, and hold the origin back while its reader does not read.
import Foundation
import LoopbackOrigins
import SeededRandom
import Synchronization
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
@testable import SparseHTTP
import TestSupport

/// A server on 127.0.0.1 that reads each request head and answers with whatever `respond`
/// sends, then closes the connection.
final class CannedOrigin: Sendable {
    let listener: TCPListener
    private let loop: Task<Void, Never>
    private let log = RequestLog()

    private final class RequestLog: Sendable {
        let heads = Lock<[String]>([])
    }

    init(_ respond: @escaping @Sendable (_ request: String, _ connection: TCPConnection) async throws -> Void) throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        self.listener = listener
        let log = self.log
        loop = Task {
            while let connection = try? await listener.accept() {
                Task {
                    var head: [UInt8] = []
                    while !head.suffix(4).elementsEqual("\r\n\r\n".utf8) {
                        guard let more = try? await connection.receive(maximum: 1), !more.isEmpty else { break }
                        head += more
                    }
                    log.heads.withLock { $0.append(String(decoding: head, as: UTF8.self)) }
                    try? await respond(String(decoding: head, as: UTF8.self), connection)
                    connection.close()
                }
            }
        }
    }

    /// Request heads received, in order.
    var received: [String] { log.heads.withLock { $0 } }

    var url: URL { URL(string: "http://127.0.0.1:\(listener.port)/file.bin")! }

    func stop() {
        listener.close()
        loop.cancel()
    }

    /// A response made of `text` (CRLFs spelled out by the caller).
    static func text(_ text: String) throws -> CannedOrigin {
        try CannedOrigin { _, connection in try await connection.send(Array(text.utf8)) }
    }
}

/// A keep-alive origin on 127.0.0.1: answers the first `answered` requests of each connection
/// with a 200 of `body`, then closes the connection when the next request comes.
final class KeepAliveOrigin: Sendable {
    let listener: TCPListener
    private let loop: Task<Void, Never>
    private let tally = Tally()

    private final class Tally: Sendable {
        let counts = Lock((connections: 0, requests: 0))
        /// Connections the client closed.
        let hungUp = Lock(0)
    }

    init(answered: Int, body: String) throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        self.listener = listener
        let tally = self.tally
        let response = Array("HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8)
        loop = Task {
            while let connection = try? await listener.accept() {
                tally.counts.withLock { $0.connections += 1 }
                Task {
                    var buffer: [UInt8] = []
                    var served = 0
                    while let more = try? await connection.receive(maximum: 4096), !more.isEmpty {
                        buffer += more
                        while let end = buffer.firstRange(of: Array("\r\n\r\n".utf8)) {
                            buffer.removeSubrange(..<end.upperBound)
                            tally.counts.withLock { $0.requests += 1 }
                            guard served < answered else {
                                connection.close()
                                return
                            }
                            served += 1
                            try? await connection.send(response)
                        }
                    }
                    tally.hungUp.withLock { $0 += 1 }
                    connection.close()
                }
            }
        }
    }

    var counts: (connections: Int, requests: Int) { tally.counts.withLock { $0 } }
    /// Connections the client has closed so far.
    var hungUp: Int { tally.hungUp.withLock { $0 } }
    var url: URL { URL(string: "http://127.0.0.1:\(listener.port)/file.bin")! }

    func stop() {
        listener.close()
        loop.cancel()
    }
}

@Suite("HTTP transports: own client and URLSession", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(10)))
struct HTTPTransportTests {
    /// The body of a response, all of it.
    static func body(_ response: RangeResponse) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        for try await chunk in response.body { bytes += chunk }
        return bytes
    }

    /// What one fetch gave: info, offset and body, or the error's code and text.
    struct Outcome: Equatable, CustomStringConvertible {
        var info: ContentInfo?
        var offset: Int64?
        var body: [UInt8]?
        var error: OriginError.Kind?

        var description: String {
            "Outcome(info: \(String(describing: info)), offset: \(String(describing: offset)), "
                + "body: \(body.map { "\($0.count) bytes, hash \($0.hashValue)" } ?? "none"), error: \(String(describing: error)))"
        }
    }

    static func outcome(_ source: HTTPRangeSource, _ range: Range<Int64>?, validator: ContentValidator? = nil) async -> (Outcome, String) {
        do {
            let response = try await source.fetch(range, validator: validator)
            // The stored head compared as a set of fields: URLSession reorders them and changes
            // the case of names, and the two requests may be seconds apart (Date, times).
            var info = response.info
            info.stored = info.stored.map { head in
                let fields = head.headers.filter { !$0.hasName("date") }.map { ($0.name.lowercased(), $0.value) }.sorted { $0.0 < $1.0 }
                return StoredHead(headers: HTTPHeaders(fields), requestTime: 0, responseTime: 0)
            }
            return (Outcome(info: info, offset: response.offset, body: try await body(response)), "")
        } catch let error as OriginError {
            return (Outcome(error: error.kind), error.description)
        } catch {
            return (Outcome(), "\(error)")
        }
    }

    @Test("against nginx, the own client and URLSession give the same info, offsets, bytes and errors")
    func sameAnswers() async throws {
        let files = try TemporaryDirectory("transport-origin")
        let bytes = try originFile(files.path, "movie.bin", count: 3_000_000, seed: 21)
        let origin = try await OriginServer.nginx(root: files.path, locations: "location = /moved.bin { return 302 /movie.bin; }")
        defer { origin.stop() }
        let stale = ContentValidator(etag: "\"not-this-one\"")
        let cases: [(String, Range<Int64>?, ContentValidator?, Outcome?)] = [
            ("movie.bin", 0..<1000, nil, Outcome(offset: 0, body: Array(bytes[0..<1000]))),
            ("movie.bin", 2_999_000..<3_000_000, nil, Outcome(offset: 2_999_000, body: Array(bytes[2_999_000...]))),
            ("movie.bin", nil, nil, Outcome(offset: 0, body: bytes)),
            ("movie.bin", 500..<600, stale, Outcome(offset: 0, body: bytes)),
            ("moved.bin", 10..<20, nil, Outcome(offset: 10, body: Array(bytes[10..<20]))),
            ("nope.bin", 0..<10, nil, Outcome(error: .badAnswer)),
            ("movie.bin", 5_000_000..<5_000_010, nil, Outcome(error: .badAnswer)),
        ]
        for (name, range, validator, expected) in cases {
            let own = try HTTPRangeSource(url: origin.url(name))
            let session = try HTTPRangeSource(url: origin.url(name), transport: .urlSession)
            let (mine, myText) = await Self.outcome(own, range, validator: validator)
            let (theirs, theirText) = await Self.outcome(session, range, validator: validator)
            #expect(mine == theirs, "\(name) \(String(describing: range)): own \(mine) \(myText) vs URLSession \(theirs) \(theirText)")
            if let expected {
                #expect(
                    mine.offset == expected.offset && mine.body == expected.body && mine.error == expected.error,
                    "\(name): \(mine) \(myText)")
            }
            if let info = mine.info {
                #expect(info.length == 3_000_000 && info.validator.etag != nil && info.validator.lastModified != nil, "\(info)")
            }
        }
        // A name, not a number: resolved, and every address tried in turn (localhost may be
        // ::1 first, where nginx does not listen).
        let named = try HTTPRangeSource(url: URL(string: "http://localhost:\(origin.port)/movie.bin")!)
        #expect(try await Self.body(try await named.fetch(100..<200, validator: nil)) == Array(bytes[100..<200]))
    }

    @Test("through URLSession (https) no cookie is kept: an answer's Set-Cookie never goes out with a later request, of the same URL or another on the origin; a client's own Cookie is forwarded")
    func sessionKeepsNoCookies() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("login", [("Set-Cookie", "session=alice; Path=/"), ("Cache-Control", "no-store")], body: "hello\n")
        try rig.script("other", [("Cache-Control", "max-age=60")], body: "other\n")
        let origin = try HTTPRangeSource(url: rig.origin.baseURL, transport: .urlSession)
        let login = HTTPRangeSource(endpoint: origin.endpoint.appending("/login"), on: origin, key: rig.origin.url("login").absoluteString)
        let other = HTTPRangeSource(endpoint: origin.endpoint.appending("/other"), on: origin, key: rig.origin.url("other").absoluteString)
        for source in [login, login, other] {
            do {
                let response = try await source.fetch(nil, validator: nil, forwarding: HTTPRangeSource.Forwarding(headers: []))
                for try await _ in response.body {}
            } catch let answer as OriginAnswer {
                for try await _ in answer.body {}
            }
        }
        let mine = try await other.fetch(nil, validator: nil, forwarding: HTTPRangeSource.Forwarding(headers: HTTPHeaders([("Cookie", "mine=1")])))
        for try await _ in mine.body {}
        let sent = rig.origin.requestLog().map { request in (request.path, request.headers.filter { $0.first?.lowercased() == "cookie" }.map { $0.last ?? "" }) }
        #expect(sent.count == 4, "\(sent)")
        #expect(sent.prefix(3).allSatisfy { $0.1.isEmpty }, "a cookie went out that no client sent: \(sent)")
        #expect(sent.last?.1 == ["mine=1"], "\(sent)")
        await rig.stop()
    }

    @Test("chunked bodies, interim 1xx responses and bodies that run until the close are framed right")
    func framing() async throws {
        let cases: [(String, [UInt8])] = [
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n",
                Array("hello, world".utf8)
            ),
            ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", Array("abc".utf8)),
            ("HTTP/1.0 200 OK\r\n\r\nuntil the close", Array("until the close".utf8)),
            ("HTTP/1.1 200 OK\nContent-Length: 2\n\nok", Array("ok".utf8)),
            ("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-3/10\r\nContent-Length: 4\r\n\r\nabcdEXTRA", Array("abcd".utf8)),
        ]
        for (text, expected) in cases {
            let origin = try CannedOrigin.text(text)
            defer { origin.stop() }
            let response = try await HTTPRangeSource(url: origin.url).fetch(nil, validator: nil)
            #expect(try await Self.body(response) == expected, "\(text.debugDescription)")
        }
    }

    @Test("malformed or cut responses are clear errors: 'origin' for nonsense, 'unavailable' for a cut")
    func badResponses() async throws {
        let cases: [(String, OriginError.Kind, String)] = [
            ("SSH-2.0-OpenSSH_9.6\r\n", .badAnswer, "malformed"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", .badAnswer, "Transfer-Encoding"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", .badAnswer, "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", .unavailable, "cut"),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", .unavailable, "cut"),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n", .badAnswer, "chunked"),
            ("HTTP/1.1 200 OK\r\nContent-Le", .unavailable, "closed"),
            ("", .unavailable, "without answering"),
            ("HTTP/1.1 302 Found\r\nLocation: /file.bin\r\nContent-Length: 0\r\n\r\n", .badAnswer, "redirects"),
            ("HTTP/1.1 302 Found\r\nLocation: ftp://127.0.0.1/x\r\nContent-Length: 0\r\n\r\n", .badAnswer, "location"),
        ]
        for (text, code, words) in cases {
            let origin = try CannedOrigin.text(text)
            defer { origin.stop() }
            let source = try HTTPRangeSource(url: origin.url)
            let error = await expectOriginError(code, text.debugDescription) {
                let response = try await source.fetch(0..<100, validator: nil)
                return try await Self.body(response)
            }
            #expect(error?.description.contains(words) == true, "\(text.debugDescription): \(String(describing: error))")
        }
        // The redirect loop was followed the documented number of times, then given up.
        let loop = try CannedOrigin.text("HTTP/1.1 302 Found\r\nLocation: /file.bin\r\nContent-Length: 0\r\n\r\n")
        defer { loop.stop() }
        _ = try? await HTTPRangeSource(url: loop.url).fetch(nil, validator: nil)
        #expect(loop.received.count == HTTPRangeSource.maximumRedirects + 1)
    }

    @Test("the request carries Range, If-Range, Host and identity encoding; user info becomes Basic authorization")
    func requestHead() async throws {
        let origin = try CannedOrigin.text("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 5-9/10\r\nContent-Length: 5\r\n\r\n56789")
        defer { origin.stop() }
        let url = URL(string: "http://me:s%20cret@127.0.0.1:\(origin.listener.port)/dir/a%20b.bin?x=1&y=%2F")!
        let response = try await HTTPRangeSource(url: url).fetch(5..<10, validator: ContentValidator(etag: "\"v7\""))
        #expect(try await Self.body(response) == Array("56789".utf8))
        let head = try #require(origin.received.first)
        #expect(head.hasPrefix("GET /dir/a%20b.bin?x=1&y=%2F HTTP/1.1\r\n"), "\(head)")
        for line in [
            "Host: 127.0.0.1:\(origin.listener.port)", "Range: bytes=5-9", "If-Range: \"v7\"", "Accept-Encoding: identity",
            "Authorization: Basic \(Data("me:s cret".utf8).base64EncodedString())",
        ] {
            #expect(head.contains("\r\n" + line + "\r\n"), "missing '\(line)' in \(head.debugDescription)")
        }
        #expect(!head.contains("Connection:"), "HTTP/1.1 keeps the connection by default: \(head.debugDescription)")
    }

    @Test("If-Range carries a Last-Modified date only when it is strong and there is no entity tag (RFC 9110 13.1.5, 8.8.2.2)")
    func ifRangeDate() async throws {
        let modified = "Sun, 22 Nov 2026 10:00:00 GMT"
        let cases: [(ContentValidator, String?)] = [
            (ContentValidator(lastModified: modified, date: "Sun, 22 Nov 2026 10:00:05 GMT"), modified),
            (ContentValidator(lastModified: modified, date: modified), nil),
            (ContentValidator(etag: "W/\"w\"", lastModified: modified, date: "Sun, 22 Nov 2026 10:00:05 GMT"), nil),
        ]
        for (validator, expected) in cases {
            let origin = try CannedOrigin.text(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 5-9/10\r\nContent-Length: 5\r\n\r\n56789")
            defer { origin.stop() }
            let url = URL(string: "http://127.0.0.1:\(origin.listener.port)/f.bin")!
            _ = try await Self.body(try await HTTPRangeSource(url: url).fetch(5..<10, validator: validator))
            let head = try #require(origin.received.first)
            let sent = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("if-range:") }
            #expect(sent.map { String($0.dropFirst("If-Range: ".count)) } == expected, "\(validator): \(head.debugDescription)")
        }
    }

    @Test("requests to one origin reuse a kept-alive connection; one whose body was not read to the end is not reused")
    func keepAlive() async throws {
        let files = try TemporaryDirectory("transport-origin")
        let bytes = try originFile(files.path, "movie.bin", count: 3_000_000, seed: 22)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let pool = OriginConnectionPool()
        let source = try HTTPRangeSource(
            url: origin.url("movie.bin"), timeout: .seconds(30), limiter: nil, transport: .automatic, pool: pool)
        for start in stride(from: 0, to: 2_500_000, by: 500_000) {
            let range = Int64(start)..<Int64(start + 100_000)
            #expect(try await Self.body(try await source.fetch(range, validator: nil)) == Array(bytes[start..<(start + 100_000)]))
        }
        #expect(pool.count("127.0.0.1:\(origin.port)") == 1)
        // Left before its end: that connection may still carry the rest of a body, so it closes.
        let partial = try await source.fetch(0..<3_000_000, validator: nil)
        var iterator = partial.body.makeAsyncIterator()
        _ = try await iterator.next()
        partial.cancel()
        #expect(try await Self.body(try await source.fetch(7..<9, validator: nil)) == Array(bytes[7..<9]))
        // nginx writes a request's log line after its answer: the client can be done first.
        try await waitUntil("nginx logged \(origin.requests().count) of the 7 requests") { origin.requests().count >= 7 }
        let connections = origin.requests().map(\.connection)
        try #require(connections.count == 7, "\(connections)")
        #expect(Set(connections.prefix(5)).count == 1, "five sequential ranges, one connection: \(connections)")
        // The left one's line may come after the last one's: the two differ either way.
        #expect(connections[6] != connections[5], "a body left unread must not be reused: \(connections)")
    }

    @Test(
        "a body that came with its head: the exchange is over at once (its connection pooled before the body is taken), the body is handed out once; bytes past the body, or a body still to come, are read as before"
    )
    func arrivedBody() async throws {
        let body = Array("0123456789".utf8)
        let head = Array("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n".utf8)
        // Every request on a connection is answered with one send: head and body together.
        let whole = try CannedOrigin { _, connection in
            try await connection.send(head + body)
            while let next = try? await connection.receive(maximum: 4096), !next.isEmpty { try await connection.send(head + body) }
        }
        defer { whole.stop() }
        let pool = OriginConnectionPool()
        let port = whole.listener.port
        let request = Array("GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        func start(_ port: Int) async throws -> HTTPExchange {
            try await HTTPExchange.start(
                host: "127.0.0.1", port: port, request: request, name: "/a", timeout: .seconds(10),
                resolver: { BlockingExecutor(label: "test.resolve") }, pool: pool)
        }
        let first = try await start(port)
        #expect(first.arrivedBody == body)
        #expect(pool.count("127.0.0.1:\(port)") == 1, "the connection is not back in the pool before the body was taken")
        #expect(try await first.nextChunk() == body)
        #expect(try await first.nextChunk() == nil)
        let second = try await start(port)
        #expect(second.arrivedBody == body)
        #expect(whole.received.count == 1, "the second request did not reuse the pooled connection")

        // Bytes past the body answer no request of ours: handed out the slow way, not pooled.
        let extra = try CannedOrigin { _, connection in
            try await connection.send(head + body + Array("EXTRA".utf8))
            _ = try? await connection.receive(maximum: 1)
        }
        defer { extra.stop() }
        let past = try await start(extra.listener.port)
        #expect(past.arrivedBody == nil)
        #expect(try await past.nextChunk() == body)
        #expect(try await past.nextChunk() == nil)
        #expect(pool.count("127.0.0.1:\(extra.listener.port)") == 0, "a connection with bytes past the body was pooled")

        // A body still to come: streamed as it arrives, and `arrived` stays nil for the cache.
        let later = try CannedOrigin { _, connection in
            try await connection.send(head)
            try await Task.sleep(for: .milliseconds(50))  // pacing: the body comes later
            try await connection.send(body)
            _ = try? await connection.receive(maximum: 1)
        }
        defer { later.stop() }
        let source = try HTTPRangeSource(
            url: URL(string: "http://127.0.0.1:\(later.listener.port)/a")!, timeout: .seconds(10), limiter: nil, transport: .automatic,
            pool: OriginConnectionPool())
        let response = try await source.fetch(nil, validator: nil)
        #expect(response.arrived == nil)
        #expect(try await Self.body(response) == body)
        let arrived = try await HTTPRangeSource(
            url: URL(string: "http://127.0.0.1:\(port)/a")!, timeout: .seconds(10), limiter: nil, transport: .automatic,
            pool: OriginConnectionPool()
        ).fetch(nil, validator: nil)
        #expect(arrived.arrived == body)
        #expect(try await Self.body(arrived) == body, "the stream does not give the body that arrived with the head")
    }

    @Test("200 concurrent range fetches share at most 6 kept-alive connections, and every byte is right")
    func keepAliveUnderLoad() async throws {
        let files = try TemporaryDirectory("transport-origin")
        let bytes = try originFile(files.path, "movie.bin", count: 4_000_000, seed: 23)
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let pool = OriginConnectionPool()
        let source = try HTTPRangeSource(
            url: origin.url("movie.bin"), timeout: .seconds(30), limiter: ConnectionLimiter(limit: 6), transport: .automatic, pool: pool)
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<200 {
                group.addTask {
                    var random = SplitMix64(seed: UInt64(index))
                    let start = Int.random(in: 0..<3_900_000, using: &random)
                    let count = Int.random(in: 1...100_000, using: &random)
                    let response = try await source.fetch(Int64(start)..<Int64(start + count), validator: nil)
                    // Some readers leave early: their connections must close, not go back.
                    if index % 7 == 0 {
                        var iterator = response.body.makeAsyncIterator()
                        _ = try await iterator.next()
                        response.cancel()
                        return 0
                    }
                    return try await Self.body(response) == Array(bytes[start..<(start + count)]) ? 0 : 1
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0, "\(wrong) of 200 bodies were wrong")
        // nginx logs a request when it ends; those cut short end a moment later.
        _ = try await eventually(interval: .milliseconds(20)) { origin.requests().count >= 200 }
        let requests = origin.requests()
        let connections = Set(requests.map(\.connection))
        reportCounts("keep-alive under load", ["requests": requests.count, "connections": connections.count])
        #expect(requests.count == 200)
        // 6 at a time; the 29 readers that left early each cost a new connection at most.
        #expect(connections.count <= 6 + 29, "\(connections.count) connections for 200 requests")
        #expect(pool.count("127.0.0.1:\(origin.port)") <= 6)
    }

    @Test("an idle connection the origin closes as the request goes out: once more on a new one; too old or unusable ones are not reused")
    func staleConnections() async throws {
        // Answers the first request of each connection, then closes the connection when the
        // next request comes, without answering (an origin whose keep-alive ran out).
        let origin = try KeepAliveOrigin(answered: 1, body: "fresh")
        defer { origin.stop() }
        let pool = OriginConnectionPool(perOrigin: 6, idleLimit: .seconds(30))
        let source = try HTTPRangeSource(url: origin.url, timeout: .seconds(10), limiter: nil, transport: .automatic, pool: pool)
        #expect(try await Self.body(try await source.fetch(nil, validator: nil)) == Array("fresh".utf8))
        #expect(try await Self.body(try await source.fetch(nil, validator: nil)) == Array("fresh".utf8))
        #expect(origin.counts == (connections: 2, requests: 3), "\(origin.counts)")

        // An idle connection older than the limit is closed, not tried.
        let impatient = OriginConnectionPool(perOrigin: 6, idleLimit: .milliseconds(50))
        let second = try KeepAliveOrigin(answered: 10, body: "ok")
        defer { second.stop() }
        let short = try HTTPRangeSource(url: second.url, timeout: .seconds(10), limiter: nil, transport: .automatic, pool: impatient)
        _ = try await Self.body(try await short.fetch(nil, validator: nil))
        #expect(impatient.count("127.0.0.1:\(second.listener.port)") == 1)
        try await Task.sleep(for: .milliseconds(120))  // pacing: past the idle limit
        // A request to another origin closes it too: idle connections of origins never asked
        // again must not stay open.
        let third = try KeepAliveOrigin(answered: 10, body: "ok")
        defer { third.stop() }
        let other = try HTTPRangeSource(url: third.url, timeout: .seconds(10), limiter: nil, transport: .automatic, pool: impatient)
        _ = try await Self.body(try await other.fetch(nil, validator: nil))
        #expect(impatient.count("127.0.0.1:\(second.listener.port)") == 0)
        _ = try await Self.body(try await short.fetch(nil, validator: nil))
        #expect(second.counts == (connections: 2, requests: 2), "\(second.counts)")

        // Bytes after the body: the connection is not kept.
        let extra = try CannedOrigin.text("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcdEXTRA")
        defer { extra.stop() }
        let extraPool = OriginConnectionPool()
        _ = try await Self.body(
            try await HTTPRangeSource(url: extra.url, timeout: .seconds(10), limiter: nil, transport: .automatic, pool: extraPool).fetch(
                nil, validator: nil))
        #expect(extraPool.count("127.0.0.1:\(extra.listener.port)") == 0)
    }

    @Test("an idle connection is closed once it has been idle too long, with no further requests to any origin")
    func idleConnectionsSwept() async throws {
        let origin = try KeepAliveOrigin(answered: 10, body: "ok")
        defer { origin.stop() }
        let pool = OriginConnectionPool(perOrigin: 6, idleLimit: .milliseconds(100))
        let source = try HTTPRangeSource(url: origin.url, timeout: .seconds(10), limiter: nil, transport: .automatic, pool: pool)
        _ = try await Self.body(try await source.fetch(nil, validator: nil))
        let key = "127.0.0.1:\(origin.listener.port)"
        #expect(pool.count(key) == 1, "kept for the next request")
        // No request follows: the sweep alone must close it (and the origin see it closed).
        _ = try await eventually(timeout: .seconds(10), interval: .milliseconds(20)) { pool.count(key) == 0 && origin.hungUp > 0 }
        #expect(pool.count(key) == 0 && origin.hungUp == 1, "kept \(pool.count(key)), closed \(origin.hungUp)")
        // A later request opens a new connection, and that one is kept again.
        _ = try await Self.body(try await source.fetch(nil, validator: nil))
        #expect(origin.counts == (connections: 2, requests: 2), "\(origin.counts)")
        #expect(pool.count(key) == 1)
    }

    @Test("an idle connection on the taking task's event loop is taken first, whichever was used last")
    func takesTheLoopsOwn() async throws {
        let loops = SocketReactor.loops
        guard loops.count >= 2 else { return }  // one processor: every connection is on the one loop
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        // A connection opened by a task that serves a connection of each of two loops is
        // registered with that loop.
        var pairs: [(TCPConnection, TCPConnection)] = []
        for loop in loops.prefix(2) {
            pairs.append(
                try await Task(executorPreference: loop) { try await LoopExecutor.$current.withValue(loop) { try await connectedPair(listener) } }
                    .value)
        }
        defer { for (client, server) in pairs { client.close(); server.close() } }
        #expect(pairs[0].0.loop === loops[0] && pairs[1].0.loop === loops[1])
        let pool = OriginConnectionPool(perOrigin: 6, idleLimit: .seconds(30))
        for round in 0..<4 {
            // The other loop's connection was put back last, so it is the most recent.
            let mine = round % 2
            pool.put(pairs[mine].0, origin: "o")
            pool.put(pairs[1 - mine].0, origin: "o")
            let loop = loops[mine]
            let taken = await Task(executorPreference: loop) { LoopExecutor.$current.withValue(loop) { pool.take("o") } }.value
            #expect(taken === pairs[mine].0, "round \(round): the connection of the taking task's loop")
            _ = pool.take("o")
        }
    }

    @Test("a reader that stops reading holds the origin back (no buffering of the whole body); cancel frees the connection slot")
    func backPressure() async throws {
        let total = 256 << 20
        let sent = Atomic<Int>(0)
        let origin = try CannedOrigin { _, connection in
            try await connection.send(Array("HTTP/1.1 200 OK\r\nContent-Length: \(total)\r\n\r\n".utf8))
            let block = [UInt8](repeating: 0x5A, count: 64 << 10)
            while sent.load(ordering: .relaxed) < total {
                try await connection.send(block)
                sent.add(block.count, ordering: .relaxed)
            }
        }
        defer { origin.stop() }
        let limiter = ConnectionLimiter(limit: 1)
        let source = try HTTPRangeSource(url: origin.url, limiter: limiter)
        let response = try await source.fetch(nil, validator: nil)
        var iterator = response.body.makeAsyncIterator()
        let first = try await iterator.next()
        #expect((first?.count ?? 0) > 0)
        // Socket buffers hold a few MiB at most; a client that buffers would take all 256 MiB
        // (a window for it to do so).
        try await Task.sleep(for: .milliseconds(500))
        let whileIdle = sent.load(ordering: .relaxed)
        #expect(whileIdle < 32 << 20, "the origin sent \(whileIdle) bytes to a reader that took one chunk")
        // Reading on takes the rest at full speed.
        var received = first?.count ?? 0
        while received < 64 << 20, let chunk = try await iterator.next() { received += chunk.count }
        #expect(received >= 64 << 20, "the body ended after \(received) bytes")
        response.cancel()
        // The only slot is free again: the next fetch does not wait for it.
        let again = try await source.fetch(0..<10, validator: nil)
        again.cancel()
    }
}
