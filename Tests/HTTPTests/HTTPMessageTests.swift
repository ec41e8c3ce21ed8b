// The message pieces the client and the server share: header fields, head encoding (checked by
// parsing it back with the parser of the other side), and the chunked encoder (checked by the
// decoder).
import SeededRandom
import Testing

@testable import SparseHTTP
import TestSupport

@Suite("HTTP messages: header fields, head encoding, chunked encoding")
struct HTTPMessageTests {
    @Test("header fields: names without regard to case (RFC 9110 5.1), every value in order, list elements (5.6.1)")
    func headerFields() {
        var headers: HTTPHeaders = [
            HTTPHeaderField(name: "Content-Type", value: "video/mp4"), HTTPHeaderField(name: "cache-control", value: "max-age=60, public"),
            HTTPHeaderField(name: "Cache-Control", value: " no-transform ,, "),
        ]
        #expect(headers["content-type"] == "video/mp4" && headers["CONTENT-TYPE"] == "video/mp4")
        #expect(headers["etag"] == nil && !headers.contains("etag") && headers.contains("Cache-control"))
        #expect(headers.values("cache-control") == ["max-age=60, public", " no-transform ,, "])
        #expect(headers.listElements("Cache-Control") == ["max-age=60", "public", "no-transform"])
        // Empty elements, whitespace of both kinds, commas at either end, and values of nothing.
        #expect(HTTPSyntax.listElements([",a, b\t,", " ,c,,\t d\t ,", "", " ", ",", "e", "\tf g ,h"]) == ["a", "b", "c", "d", "e", "f g", "h"])
        #expect(HTTPSyntax.listElements(["caf\u{E9}, \u{1F600} "]) == ["caf\u{E9}", "\u{1F600}"])
        headers.append(name: "ETag", value: "\"v1\"")
        headers.remove("CACHE-CONTROL")
        #expect(headers.map(\.name) == ["Content-Type", "ETag"])
        #expect(
            HTTPHeaders([("A", "1"), ("b", "2")]).fields == [
                HTTPHeaderField(name: "A", value: "1"), HTTPHeaderField(name: "b", value: "2"),
            ])
    }

    @Test("token bytes are exactly RFC 9110's tchar, for every byte value (section 5.6.2)")
    func tokenBytes() {
        let tchar = Set(Array("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8))
        let wrong = (0...255).map(UInt8.init).filter { HTTPSyntax.isTokenByte($0) != tchar.contains($0) }
        #expect(wrong.isEmpty, "bytes classified wrongly: \(wrong)")
    }

    @Test("a response head encoded is the head the response parser reads back; values cannot inject lines (RFC 9112 5)")
    func responseHeadRoundTrip() {
        let head = HTTPResponseHead(
            status: 206, minorVersion: 1, reason: "Partial Content",
            headers: HTTPHeaders([("Content-Range", "bytes 0-9/100"), ("Content-Length", "10"), ("ETag", "\"abc\"")]))
        #expect(HTTPResponseParser.parse(head.encoded() + [1, 2, 3]) == .response(head, consumed: head.encoded().count))
        // The standard reason phrase when none is given.
        #expect(String(decoding: HTTPResponseHead(status: 404).encoded(), as: UTF8.self) == "HTTP/1.1 404 Not Found\r\n\r\n")
        // A value from an origin or an index that holds CR LF stays one field.
        let hostile = HTTPResponseHead(
            status: 200, headers: HTTPHeaders([("Content-Type", "text/plain\r\nSet-Cookie: x=1"), ("Content-Length", "0")]))
        guard case .response(let parsed, _) = HTTPResponseParser.parse(hostile.encoded()) else {
            Issue.record("the sanitized head does not parse")
            return
        }
        #expect(parsed.headers["content-type"] == "text/plainSet-Cookie: x=1" && !parsed.headers.contains("set-cookie"))
    }

    @Test("a request head encoded is the head the request parser reads back")
    func requestHeadRoundTrip() {
        let head = HTTPRequestHead(
            method: "GET", target: "/movie.mp4?x=1",
            headers: HTTPHeaders([("Host", "127.0.0.1:8080"), ("Range", "bytes=0-99"), ("If-Range", "\"v1\"")]))
        let bytes = head.encoded()
        #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("GET /movie.mp4?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"))
        #expect(HTTPRequestParser.parse(bytes) == .request(head, consumed: bytes.count, body: .none))
    }

    @Test("the chunked encoder: any body in any pieces (empty ones too) decodes to the same bytes, with trailers (RFC 9112 7.1)")
    func chunkedRoundTrip() throws {
        let seed = testSeed(0xC4E0)
        var random = SplitMix64(seed: seed)
        for round in 0..<500 {
            let body = random.bytes(Int(random.next() % 5000))
            var encoded: [UInt8] = []
            var start = 0
            while start < body.count {
                let size = random.next() % 5 == 0 ? 0 : Int(random.next() % 1500) + 1
                let end = min(body.count, start + size)
                encoded += ChunkedEncoder.chunk(body[start..<end])
                start = end
            }
            let trailers: HTTPHeaders = round % 3 == 0 ? HTTPHeaders([("X-Checksum", "\(round)")]) : []
            encoded += ChunkedEncoder.end(trailers: trailers)
            let decoded = try HTTPResponseParserTests.decode(HTTPResponseParserTests.split(encoded + Array("next".utf8), &random))
            #expect(
                decoded.body == body && decoded.finished && decoded.consumed == encoded.count,
                "round \(round), seed \(seed): \(decoded.body.count) of \(body.count) bytes")
        }
        #expect(ChunkedEncoder.chunk([UInt8]()).isEmpty, "an empty piece is not the last chunk")
        #expect(String(decoding: ChunkedEncoder.chunk(Array("hello, world".utf8)), as: UTF8.self) == "c\r\nhello, world\r\n")
        #expect(String(decoding: ChunkedEncoder.end(), as: UTF8.self) == "0\r\n\r\n")
    }

    @Test("the request log hides URL credentials, plain and percent-encoded, and leaves other text alone")
    func logRedaction() {
        let cases = [
            ("GET http://user:secret@origin:81/m.mp4 range=-", "GET http://***@origin:81/m.mp4 range=-"),
            ("GET /m.mp4?url=http%3A%2F%2Fuser%3As%40cret%40origin%2Fm.mp4&x=1", "GET /m.mp4?url=http%3A%2F%2F***%40origin%2Fm.mp4&x=1"),
            ("GET /m?url=https%3a%2f%2fu%3ap%40h&x=http://plain/", "GET /m?url=https%3a%2f%2f***%40h&x=http://plain/"),
            ("(fetch failed for 'http://u:p&w@h/x': refused)", "(fetch failed for 'http://***@h/x': refused)"),
            ("GET /m.mp4?url=http%3A%2F%2Forigin%2Fa%40b.mp4", "GET /m.mp4?url=http%3A%2F%2Forigin%2Fa%40b.mp4"),
            ("GET /files/a@b.mp4 range=bytes=0-1 200", "GET /files/a@b.mp4 range=bytes=0-1 200"),
            ("mailto:x@y ://", "mailto:x@y ://"),
        ]
        for (line, expected) in cases {
            #expect(CredentialRedaction.redacting(line) == expected, "\(line)")
        }
        let entry = HTTPLogEntry(
            peer: "127.0.0.1:5000", method: "GET", target: "http://u:pw@o/x", range: nil, status: 200, bytes: 1, cacheHitBytes: 0,
            cacheMissBytes: 1, duration: .milliseconds(1), complete: true, note: "from http://u:pw@o/x")
        #expect(!entry.description.contains("pw") && entry.description.contains("http://***@o/x"))
    }
}
