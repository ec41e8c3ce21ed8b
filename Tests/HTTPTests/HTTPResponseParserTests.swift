// The client side of HTTP/1.1: an origin's response head and chunked bodies, pure functions of
// bytes checked case by case and then fuzzed (SPARSECACHE_PARSER_FUZZ sets the head parser's
// input count, default 100,000; the chunked decoder runs a tenth of it).
import Foundation
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

@Suite("HTTP response parser and chunked decoding")
struct HTTPResponseParserTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    // MARK: Heads

    @Test(
        "well-formed heads: status, framing, keep-alive, and the body left where it starts",
        arguments: [
            ("HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: 1234\r\n\r\n", 200, HTTPBodyFraming.length(1234), true),
            (
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-199/1000\r\nContent-Length: 100\r\nETag: \"abc\"\r\n\r\n", 206,
                .length(100), true
            ),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 200, .chunked, true),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked \r\n\r\n", 200, .chunked, true),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 200, .chunked, true),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 200, .untilClose, false),
            ("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n", 200, .untilClose, false),
            ("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 5\r\n\r\n", 200, .length(5), true),
            ("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", 200, .length(5), false),
            ("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n", 200, .chunked, false),
            ("HTTP/1.1 200 OK\r\n\r\n", 200, .untilClose, false),
            ("HTTP/1.1 200 OK\r\nConnection: upgrade, Close\r\nContent-Length: 0\r\n\r\n", 200, .length(0), false),
            ("HTTP/1.1 204 No Content\r\n\r\n", 204, .none, true),
            ("HTTP/1.1 304 Not Modified\r\nContent-Length: 5000\r\nETag: \"x\"\r\n\r\n", 304, .none, true),
            ("HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", 204, .none, true),
            ("HTTP/1.1 100 Continue\r\n\r\n", 100, .none, true),
            ("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\ncontent-length: 7\r\n\r\n", 200, .length(7), true),
            ("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 200, .length(0), true),
            ("HTTP/1.1 999 Custom\r\nContent-Length: 1\r\n\r\n", 999, .length(1), true),
            ("HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\n", 200, .length(999_999_999_999_999_999), true),
            ("HTTP/1.1 200 OK\nContent-Length: 2\n\n", 200, .length(2), true),
            ("HTTP/1.0 404 Not Found\nConnection: keep-alive\r\nContent-Length: 9\n\r\n", 404, .length(9), true),
        ])
    func wellFormed(text: String, status: Int, framing: HTTPBodyFraming, keepAlive: Bool) {
        let input = Self.bytes(text) + Self.bytes("BODY")
        guard case .response(let head, let consumed) = HTTPResponseParser.parse(input) else {
            Issue.record("not parsed: \(HTTPResponseParser.parse(input))")
            return
        }
        #expect(consumed == text.utf8.count)
        #expect(head.status == status && head.minorVersion == (text.hasPrefix("HTTP/1.1") ? 1 : 0))
        #expect(head.framing == framing)
        #expect(head.keepAlive == keepAlive)
    }

    @Test("fields keep their order, names as sent, trimmed values, obs-text; lookups ignore case")
    func fields() {
        let text =
            "HTTP/1.1 206 Partial Content\r\nSet-Cookie: a=1\r\nETag:\t\"v1\" \t\r\nset-cookie: b=2, c=3\r\nX-Empty:\r\n"
            + "X-Name: caf\u{E9}\r\nContent-Length: 3\r\n\r\n"
        guard case .response(let head, _) = HTTPResponseParser.parse(Self.bytes(text)) else {
            Issue.record("not parsed")
            return
        }
        #expect(head.reason == "Partial Content")
        #expect(head.headers.map(\.name) == ["Set-Cookie", "ETag", "set-cookie", "X-Empty", "X-Name", "Content-Length"])
        #expect(head.header("etag") == "\"v1\"" && head.header("x-empty") == "" && head.header("missing") == nil)
        #expect(head.values("SET-COOKIE") == ["a=1", "b=2, c=3"])
        #expect(head.header("X-Name") == "café")
        // A byte that is not UTF-8 is obs-text: accepted, not refused.
        let latin1 = Self.bytes("HTTP/1.1 200 OK\r\nX-Name: caf") + [0xE9] + Self.bytes("\r\nContent-Length: 0\r\n\r\n")
        guard case .response(let other, _) = HTTPResponseParser.parse(latin1) else {
            Issue.record("obs-text refused")
            return
        }
        #expect(other.header("x-name")?.hasPrefix("caf") == true)
        // An empty reason phrase after the space, and none at all.
        #expect(HTTPResponseParser.parse(Self.bytes("HTTP/1.1 404 \r\n\r\n")).head?.reason == "")
        #expect(HTTPResponseParser.parse(Self.bytes("HTTP/1.1 404\r\n\r\n")).head?.reason == "")
    }

    @Test("hop-by-hop fields go in any case (the listed names, every proxy- field, what Connection names); near misses stay")
    func hopByHop() {
        var fields: [HTTPHeaderField] = []
        for name in HTTPHeaders.hopByHop.sorted() {
            fields.append(HTTPHeaderField(name: name, value: "x"))
            fields.append(HTTPHeaderField(name: name.uppercased(), value: "x"))
        }
        let gone = ["Proxy-Authenticate", "PROXY-Whatever", "proxy-", "X-Listed", "x-also"]
        let kept = ["Tee", "Trailers", "Connections", "Upgrade-Insecure-Requests", "X-Proxy-Id", "Proxy", "TE2", "Keep-Alives", "Date"]
        fields += (gone + kept).map { HTTPHeaderField(name: $0, value: "y") }
        fields.append(HTTPHeaderField(name: "connection", value: "x-listed, X-Also"))
        let remaining = HTTPHeaders(fields).removingHopByHop()
        #expect(remaining.map(\.name) == kept)
        for name in HTTPHeaders.hopByHop { #expect(HTTPHeaders().isHopByHop(name.uppercased()), "\(name)") }
        #expect(!HTTPHeaders().isHopByHop("x-listed"))
    }

    @Test("an interim 100 Continue and the final response in one buffer: parsed one after the other")
    func interimThenFinal() {
        let input = Self.bytes("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        guard case .response(let interim, let first) = HTTPResponseParser.parse(input) else {
            Issue.record("interim not parsed")
            return
        }
        #expect(interim.status == 100 && interim.framing == HTTPBodyFraming.none && first == 25)
        guard case .response(let final, let second) = HTTPResponseParser.parse(input[first...]) else {
            Issue.record("final response not parsed")
            return
        }
        #expect(final.status == 200 && final.framing == .length(5))
        #expect(Array(input[(first + second)...]) == Self.bytes("hello"))
    }

    @Test(
        "malformed heads are refused with a reason that names the problem",
        arguments: [
            ("HTTP/2 200 OK\r\n\r\n", "\"HTTP/2 200 OK\""), ("HTTP/2.0 200 OK\r\n\r\n", "HTTP/2.0"),
            ("http/1.1 200 OK\r\n\r\n", "http/1.1"),
            ("HTTP/1.2 200 OK\r\n\r\n", "HTTP/1.2"), ("HTTP/0.9 200 OK\r\n\r\n", "HTTP/0.9"), ("HTTP/1.10 200 OK\r\n\r\n", "HTTP/1.10"),
            ("ICY 200 OK\r\n\r\n", "not an HTTP/1.0 or HTTP/1.1 response: \"ICY 200 OK\""),
            ("\r\nHTTP/1.1 200 OK\r\n\r\n", "not an HTTP/1."),
            ("HTTP/1.1 20 OK\r\n\r\n", "status code"), ("HTTP/1.1 2000 OK\r\n\r\n", "status code"),
            ("HTTP/1.1 099 OK\r\n\r\n", "status code"),
            ("HTTP/1.1 -20 OK\r\n\r\n", "status code"), ("HTTP/1.1  200 OK\r\n\r\n", "status code"), ("HTTP/1.1\r\n\r\n", "status code"),
            ("HTTP/1.1 200 O\u{1}K\r\n\r\n", "reason phrase"), ("HTTP/1.1 200 OK\rContent-Length: 1\r\n\r\n", "bare CR"),
            ("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "bare CR"), ("HTTP/1.1 200 OK\r\nX: a\r\r\n\r\n", "bare CR"),
            ("HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n", "whitespace before the colon in header \"Content-Length\""),
            ("HTTP/1.1 200 OK\r\nContent-Length\t: 5\r\n\r\n", "whitespace before the colon"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n folded\r\n\r\n", "folding"), ("HTTP/1.1 200 OK\r\n\tX: y\r\n\r\n", "folding"),
            ("HTTP/1.1 200 OK\r\n: value\r\n\r\n", "empty header name"), ("HTTP/1.1 200 OK\r\nNoColonHere\r\n\r\n", "without a colon"),
            ("HTTP/1.1 200 OK\r\nBad@Name: x\r\n\r\n", "invalid character in header name"),
            ("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "invalid character in header name \"Bad Name\""),
            ("HTTP/1.1 200 OK\r\nX-Value: a\u{0}b\r\n\r\n", "control character in the value of header \"X-Value\""),
            ("HTTP/1.1 200 OK\r\nX-Value: a\u{7F}\r\n\r\n", "control character"),
            ("HTTP/1.1 200 OK\r\nX-Value: \u{1B}[31m\r\n\r\n", "control character"),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", "both Transfer-Encoding and Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nTransfer-Encoding: gzip\r\n\r\n", "both Transfer-Encoding and Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "invalid Content-Length \"abc\""),
            ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5 5\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5,\r\n\r\n", "Content-Length"),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", "conflicting Content-Length values \"5, 6\""),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "conflicting Content-Length"),
            ("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "conflicting Content-Length"),
        ])
    func malformed(text: String, problem: String) {
        guard case .invalid(let reason) = HTTPResponseParser.parse(Self.bytes(text)) else {
            Issue.record("accepted: \(text.debugDescription)")
            return
        }
        #expect(reason.contains(problem), "\(text.debugDescription): \(reason)")
    }

    @Test(
        "what cannot become valid is refused before the head ends",
        arguments: [
            ("HTTP/2", "HTTP/2"), ("<", "\"<\""), ("\u{16}\u{3}\u{1}\u{2}", "\"\\x16\\x03\\x01\\x02\""), ("HTTP/1.1 2x", "status code"),
            ("HTTP/1.1 200 OK\r\nBad Name", "header name"), ("HTTP/1.1 200 OK\r\nX-Long-Name ", "whitespace before the colon"),
            ("HTTP/1.1 200 OK\r\n folded", "folding"), ("HTTP/1.1 200 OK\r\nX: a\u{0}", "control character"),
            ("HTTP/1.1 200 OK\r\nX: a\rb", "bare CR"), ("HTTP/1.1 200 OK\r\n:", "empty header name"),
        ])
    func refusedEarly(text: String, problem: String) {
        guard case .invalid(let reason) = HTTPResponseParser.parse(Self.bytes(text)) else {
            Issue.record("not refused: \(text.debugDescription)")
            return
        }
        #expect(reason.contains(problem), "\(text.debugDescription): \(reason)")
    }

    @Test("every proper prefix of a valid head is incomplete, never invalid")
    func prefixes() {
        let heads = [
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: 10\r\nETag: \"a\"\r\nX-Empty:\r\n\r\n",
            "HTTP/1.0 200 OK\nServer: x\nContent-Length: 3\n\n", "HTTP/1.1 204\r\n\r\n", "HTTP/1.1 100 Continue\n\n",
        ]
        for text in heads {
            let input = Self.bytes(text)
            #expect(HTTPResponseParser.parse(input).head != nil, "\(text.debugDescription)")
            for length in 0..<input.count {
                let result = HTTPResponseParser.parse(input.prefix(length))
                #expect(result == .incomplete, "\(String(decoding: input.prefix(length), as: UTF8.self).debugDescription): \(result)")
            }
        }
    }

    @Test("limits: 200 fields but not 201; a head of 64 KiB but not one byte more, even before it ends")
    func limits() {
        let fields = { (count: Int) in "HTTP/1.1 200 OK\r\n" + (0..<count).map { "X-\($0): v\r\n" }.joined() + "Content-Length: 0\r\n\r\n" }
        #expect(HTTPResponseParser.parse(Self.bytes(fields(199))).head?.headers.count == 200)
        #expect(HTTPResponseParser.parse(Self.bytes(fields(200))).reason?.contains("more than 200 header fields") == true)
        // A head of exactly the limit, then one byte more.
        let frame = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: \r\n\r\n"
        let exact = frame.replacingOccurrences(of: "X-Pad: ", with: "X-Pad: " + String(repeating: "p", count: 64 * 1024 - frame.utf8.count))
        #expect(exact.utf8.count == 64 * 1024)
        guard case .response(_, let consumed) = HTTPResponseParser.parse(Self.bytes(exact) + Self.bytes("body")) else {
            Issue.record("a head of exactly 64 KiB refused")
            return
        }
        #expect(consumed == 64 * 1024)
        let over = exact.replacingOccurrences(of: "X-Pad: ", with: "X-Pad: p")
        #expect(HTTPResponseParser.parse(Self.bytes(over)).reason?.contains("65536") == true)
        // Without an end yet: incomplete below the limit, refused once the limit is reached.
        let open = "HTTP/1.1 200 OK\r\nX-Pad: " + String(repeating: "p", count: 70 * 1024)
        #expect(HTTPResponseParser.parse(Self.bytes(open).prefix(60 * 1024)) == .incomplete)
        #expect(HTTPResponseParser.parse(Self.bytes(open)).reason?.contains("longer than 65536 bytes") == true)
        var small = HTTPResponseParser.Limits()
        small.head = 64
        small.fields = 1
        #expect(
            HTTPResponseParser.parse(Self.bytes("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n"), limits: small).reason?.contains("more than 1")
                == true)
        let long = "HTTP/1.1 200 OK\r\nX-Pad: " + String(repeating: "p", count: 100) + "\r\n\r\n"
        #expect(HTTPResponseParser.parse(Self.bytes(long), limits: small).reason?.contains("longer than 64 bytes") == true)
    }

    @Test("a quoted status line is cut short: an origin's garbage does not flood the error message")
    func quoting() {
        let garbage = "HTTP/2 " + String(repeating: "x", count: 500) + "\r\n\r\n"
        let reason = HTTPResponseParser.parse(Self.bytes(garbage)).reason ?? ""
        #expect(reason.contains("\"HTTP/2 xxx") && reason.hasSuffix("...") && reason.count < 100, "\(reason)")
        #expect(HTTPSyntax.quoted([0x00, 0x0D, 0x0A, 0x09, 0x22, 0x5C, 0xFF, 0x41]) == #""\x00\r\n\t\"\\\xffA""#)
    }

    @Test("framing of a head built by hand is total: Transfer-Encoding wins, a bad Content-Length reads until close")
    func framingFallback() {
        let both = HTTPResponseHead(
            status: 200, minorVersion: 1, reason: "OK",
            headers: [HTTPHeaderField(name: "Content-Length", value: "5"), HTTPHeaderField(name: "Transfer-Encoding", value: "chunked")])
        #expect(both.framing == .chunked && both.checkedFraming().problem != nil)
        let bad = HTTPResponseHead(
            status: 200, minorVersion: 1, reason: "OK", headers: [HTTPHeaderField(name: "Content-Length", value: "x")])
        #expect(bad.framing == .untilClose && !bad.keepAlive)
        let fine = HTTPResponseHead(
            status: 200, minorVersion: 1, reason: "OK", headers: [HTTPHeaderField(name: "content-length", value: "12")])
        #expect(fine.framing == .length(12) && fine.checkedFraming().problem == nil && fine.keepAlive)
    }

    // MARK: Chunked bodies

    static let wikipedia =
        "4\r\nWiki\r\n6;name=value\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nExpires: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n"

    @Test("a known encoding decodes whole, split at every point, and byte by byte, to the same body and length")
    func knownEncoding() throws {
        let encoded = Self.bytes(Self.wikipedia)
        let body = Self.bytes("Wikipedia in \r\n\r\nchunks.")
        let whole = try Self.decode([encoded[...]])
        #expect(whole.body == body && whole.consumed == encoded.count && whole.finished && whole.rangesInBounds)
        for split in 0...encoded.count {
            let result = try Self.decode([encoded[..<split], encoded[split...]])
            #expect(
                result.body == body && result.consumed == encoded.count && result.finished && result.rangesInBounds, "split at \(split)")
        }
        let byByte = try Self.decode(encoded.indices.map { encoded[$0...$0] })
        #expect(byByte.body == body && byByte.consumed == encoded.count && byByte.finished)
    }

    @Test(
        "chunked variants: bare LF, hex case, leading zeros, padding, extensions, empty body, a huge size",
        arguments: [
            ("4\nWiki\n0\n\n", "Wiki"), ("a\r\n0123456789\r\nA\r\n0123456789\r\n0\r\n\r\n", "01234567890123456789"),
            ("000003\r\nabc\r\n00\r\n\r\n", "abc"), ("3  \r\nabc\r\n0\r\n\r\n", "abc"), ("3 ; a=\"b c\";d\r\nabc\r\n0;last\r\n\r\n", "abc"),
            ("0\r\n\r\n", ""), ("0\n\n", ""), ("2\r\nab\n1\nc\r\n0\r\n\n", "abc"),
        ])
    func variants(encoding: String, body: String) throws {
        let result = try Self.decode([Self.bytes(encoding)[...]])
        #expect(result.body == Self.bytes(body) && result.finished && result.consumed == encoding.utf8.count)
    }

    @Test("trailers are read and skipped; bytes after the body are not consumed; a finished decoder takes nothing")
    func trailersAndTheNextResponse() throws {
        let encoded = Self.bytes("3\r\nabc\r\n0\r\nExpires: never\r\nX-Checksum:  abc \r\nX-Empty:\r\n\r\n")
        let next = Self.bytes("HTTP/1.1 200 OK\r\n")
        var decoder = ChunkedDecoder()
        let input = encoded + next
        let (body, consumed) = try Self.feed(&decoder, input)
        #expect(body == [3..<6] && consumed == encoded.count && decoder.isFinished)
        let (after, none) = try Self.feed(&decoder, next)
        #expect(after.isEmpty && none == 0)
        // Split right at the end: the second piece is untouched.
        for split in [encoded.count - 1, encoded.count, encoded.count + 1] {
            let result = try Self.decode([input[..<split], input[split...]])
            #expect(result.consumed == encoded.count && result.body == Self.bytes("abc") && result.finished, "split at \(split)")
        }
        // A size near Int64.max is not a failure: the body just goes on.
        let huge = try Self.decode([Self.bytes("7fffffffffffffff\r\nabc")[...]])
        #expect(huge.body == Self.bytes("abc") && !huge.finished && huge.consumed == 21)
        // An empty feed changes nothing.
        let empty = try Self.decode([[], Self.bytes("0\r\n")[...], [], Self.bytes("\r\n")[...]])
        #expect(empty.finished && empty.consumed == 5)
    }

    @Test(
        "malformed chunked bodies fail with the same reason whole and byte by byte, and keep failing",
        arguments: [
            ("g\r\n", "malformed chunk size line"), ("\r\n", "malformed chunk size line"),
            (" 5\r\nhello\r\n0\r\n\r\n", "malformed chunk size line"),
            ("-1\r\n", "malformed chunk size line"), ("5x\r\nhello\r\n", "malformed chunk size line"),
            ("0x5\r\n", "malformed chunk size line"),
            ("5 5\r\n", "malformed chunk size line"), ("11111111111111111\r\n", "more than 16 hex digits"),
            ("8000000000000000\r\n", "overflows"), ("FFFFFFFFFFFFFFFF\r\n", "overflows"),
            ("3\r\nabcX\r\n0\r\n\r\n", "no line end after a chunk's data"),
            ("3\r\nabc\rX", "no line end after a chunk's data"), ("3\r\nabc\r\r\n", "no line end after a chunk's data"),
            ("5\rX\n", "bare CR in the chunk size line"), ("5;ext=\u{1}\r\n", "control character in a chunk extension"),
            ("0\r\nBad Trailer: x\r\n\r\n", "malformed trailer field"), ("0\r\n folded\r\n\r\n", "malformed trailer field"),
            ("0\r\nNoColon\r\n\r\n", "malformed trailer field"), ("0\r\nX: a\rb\r\n\r\n", "bare CR in the trailer section"),
            ("1;" + String(repeating: "a", count: 5000), "chunk size line longer than 4096 bytes"),
            ("1;" + String(repeating: "a", count: 4093) + "\r\n", "chunk size line longer than 4096 bytes"),
            (
                "0\r\n" + String(repeating: "X-Trailer: 0123456789012345678901234567890123456789\r\n", count: 400),
                "trailer section longer than 16384 bytes"
            ),
        ])
    func malformedChunked(encoding: String, problem: String) {
        let encoded = Self.bytes(encoding)
        var reasons: [String] = []
        for pieces in [[encoded[...]], encoded.indices.map { encoded[$0...$0] }] {
            var decoder = ChunkedDecoder()
            do {
                for piece in pieces { _ = try Self.feed(&decoder, piece) }
                Issue.record("accepted: \(encoding.prefix(80).debugDescription)")
            } catch {
                reasons.append(error.reason)
                #expect(error.reason.contains(problem), "\(encoding.prefix(80).debugDescription): \(error.reason)")
                // The stream position is lost: every later call fails the same way.
                do {
                    _ = try Self.feed(&decoder, Self.bytes("0\r\n\r\n"))
                    Issue.record("a failed decoder went on")
                } catch let again {
                    #expect(again == error)
                }
            }
        }
        #expect(reasons.count == 2 && reasons.first == reasons.last, "\(reasons)")
    }

    @Test("line limits are exact: a chunk-size line of 4096 bytes with its CRLF, trailers of 16 KiB with the last empty line")
    func lineLimits() throws {
        let longest = "1;" + String(repeating: "a", count: 4092) + "\r\n"
        #expect(longest.utf8.count == 4096)
        let line = try Self.decode([Self.bytes(longest + "x\r\n0\r\n\r\n")[...]])
        #expect(line.body == [UInt8(ascii: "x")] && line.finished)
        var limits = ChunkedDecoder.Limits()
        limits.trailers = 20
        // "X: 0123456789abc\r\n" is 18 bytes, and the final CRLF makes 20.
        let fits = try Self.decode([Self.bytes("0\r\nX: 0123456789abc\r\n\r\n")[...]], limits: limits)
        #expect(fits.finished)
        #expect(throws: ChunkedDecoder.Failure.self) {
            try Self.decode([Self.bytes("0\r\nX: 0123456789abcd\r\n\r\n")[...]], limits: limits)
        }
    }

    // MARK: Helpers

    static var fuzzCount: Int { TestDepth.size(25_000, deep: 250_000, override: "SPARSECACHE_PARSER_FUZZ") }

    /// The case name of a framing, for counts.
    static func name(of framing: HTTPBodyFraming) -> String {
        switch framing {
        case .none: "none"
        case .length: "length"
        case .chunked: "chunked"
        case .untilClose: "untilClose"
        }
    }

    /// What is wrong with an accepted head, re-checked from the outside, or nil.
    static func problem(with head: HTTPResponseHead, consumed: Int, in input: [UInt8]) -> String? {
        if !(100...999).contains(head.status) { return "status \(head.status)" }
        if ![0, 1].contains(head.minorVersion) { return "minor version \(head.minorVersion)" }
        let forbidden: Set<UInt8> = [0x00, 0x0A, 0x0D]
        for field in head.headers {
            if field.name.isEmpty || !field.name.utf8.allSatisfy(HTTPSyntax.isTokenByte) {
                return "field name \(field.name.debugDescription)"
            }
            if field.value.utf8.contains(where: forbidden.contains) { return "field value \(field.value.debugDescription)" }
            if field.value.first == " " || field.value.last == " " || field.value.first == "\t" || field.value.last == "\t" {
                return "untrimmed value \(field.value.debugDescription)"
            }
        }
        if head.reason.utf8.contains(where: forbidden.contains) { return "reason \(head.reason.debugDescription)" }
        let used = input.prefix(consumed)
        guard consumed <= input.count, used.suffix(2) == [0x0A, 0x0A] || used.suffix(3) == [0x0A, 0x0D, 0x0A] else {
            return "consumed \(consumed) does not end at an empty line"
        }
        // Framing is total and agrees with the fields it comes from.
        let noBody = (100...199).contains(head.status) || head.status == 204 || head.status == 304
        switch head.framing {
        case .none: if !noBody { return "no body for status \(head.status)" }
        case .length(let length):
            if noBody || length < 0 || head.values("content-length").isEmpty || !head.values("transfer-encoding").isEmpty {
                return "length \(length) without a sole Content-Length"
            }
        case .chunked: if noBody || head.header("transfer-encoding") == nil { return "chunked without Transfer-Encoding" }
        case .untilClose: if noBody || head.keepAlive { return "until close on a kept-alive connection" }
        }
        return nil
    }

    /// A few byte flips, special bytes, insertions, deletions, duplicated spans, spliced lines or
    /// a truncation of one input of `corpus`.
    static func mutate(_ corpus: [[UInt8]], splices: [[UInt8]], _ random: inout SplitMix64) -> [UInt8] {
        var input = corpus[Int(random.next() % UInt64(corpus.count))]
        for _ in 0..<(1 + Int(random.next() % 4)) where !input.isEmpty {
            let at = Int(random.next() % UInt64(input.count))
            switch random.next() % 7 {
            case 0: input[at] ^= 1 << UInt8(random.next() % 8)
            case 1: input[at] = [0, 9, 10, 13, 32, 44, 58, 59, 127, 255][Int(random.next() % 10)]
            case 2: input.remove(at: at)
            case 3: input.insert(UInt8(truncatingIfNeeded: random.next()), at: at)
            case 4:
                let span = input[at..<min(input.count, at + 1 + Int(random.next() % 40))]
                input.insert(contentsOf: span, at: Int(random.next() % UInt64(input.count + 1)))
            case 5:
                let lineStart = (input[..<at].lastIndex(of: 0x0A) ?? -1) + 1
                input.insert(contentsOf: splices[Int(random.next() % UInt64(splices.count))], at: lineStart)
            default: input = Array(input.prefix(at))
            }
        }
        return input
    }

    /// `body` in the chunked coding with random chunk sizes, hex case, leading zeros, extensions,
    /// line ends (CRLF or LF) and trailers.
    static func encodeChunked(_ body: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
        func lineEnd(_ random: inout SplitMix64) -> [UInt8] { random.next() % 4 == 0 ? [0x0A] : [0x0D, 0x0A] }
        func sizeLine(_ size: Int, _ random: inout SplitMix64) -> [UInt8] {
            var digits = String(size, radix: 16, uppercase: random.next() % 2 == 0)
            digits = String(repeating: "0", count: Int(random.next() % UInt64(17 - digits.count))) + digits
            let extensions = ["", "", ";a", ";name=value", " ; q=\"x y\"", ";a=1;b=2", "\t;x"]
            return bytes(digits + extensions[Int(random.next() % UInt64(extensions.count))]) + lineEnd(&random)
        }
        var encoded: [UInt8] = []
        var offset = 0
        let largest = [2, 16, 100, 1000, 4000][Int(random.next() % 5)]
        while offset < body.count {
            let size = min(body.count - offset, 1 + Int(random.next() % UInt64(largest)))
            encoded += sizeLine(size, &random) + body[offset..<(offset + size)] + lineEnd(&random)
            offset += size
        }
        encoded += sizeLine(0, &random)
        for index in 0..<Int(random.next() % 4) { encoded += bytes("X-Trailer-\(index): \(random.next())") + lineEnd(&random) }
        return encoded + lineEnd(&random)
    }

    /// `input` cut at a few random points, or byte by byte for a small one now and then.
    static func split(_ input: [UInt8], _ random: inout SplitMix64) -> [ArraySlice<UInt8>] {
        if input.count < 200, random.next() % 8 == 0 { return input.indices.map { input[$0...$0] } }
        let cuts = (0..<Int(random.next() % 6)).map { _ in Int(random.next() % UInt64(input.count + 1)) }.sorted()
        var pieces: [ArraySlice<UInt8>] = []
        var start = 0
        for cut in cuts + [input.count] {
            pieces.append(input[start..<cut])
            start = cut
        }
        return pieces
    }

    /// Feeds `pieces` to one decoder: the body gathered from the ranges, what was consumed, and
    /// whether every range was non-empty, in order and within the bytes its call consumed.
    static func decode(
        _ pieces: [ArraySlice<UInt8>], limits: ChunkedDecoder.Limits = .init()
    ) throws(ChunkedDecoder.Failure) -> (body: [UInt8], consumed: Int, finished: Bool, rangesInBounds: Bool) {
        var decoder = ChunkedDecoder(limits: limits)
        var body: [UInt8] = []
        var consumed = 0
        var inBounds = true
        for piece in pieces {
            let bytes = Array(piece)
            let (ranges, used) = try feed(&decoder, bytes)
            inBounds = inBounds && used <= bytes.count && rangesAreSane(ranges, within: used)
            for range in ranges where range.lowerBound >= 0 && range.upperBound <= bytes.count { body += bytes[range] }
            consumed += used
        }
        return (body, consumed, decoder.isFinished, inBounds)
    }

    /// One ``ChunkedDecoder/feed(_:)`` of `bytes`. Array's `withUnsafeBytes` rethrows as
    /// `any Error`, so the failure is carried out of the closure to keep the error type.
    static func feed(
        _ decoder: inout ChunkedDecoder, _ bytes: some Sequence<UInt8>
    ) throws(ChunkedDecoder.Failure) -> (body: [Range<Int>], consumed: Int) {
        let outcome = Array(bytes).withUnsafeBytes { buffer -> Result<(body: [Range<Int>], consumed: Int), ChunkedDecoder.Failure> in
            do throws(ChunkedDecoder.Failure) {
                return .success(try decoder.feed(buffer))
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    /// Non-empty, increasing, non-overlapping ranges inside `0..<limit`.
    static func rangesAreSane(_ ranges: [Range<Int>], within limit: Int) -> Bool {
        var floor = 0
        for range in ranges {
            guard range.lowerBound >= floor, !range.isEmpty, range.upperBound <= limit else { return false }
            floor = range.upperBound
        }
        return true
    }
}

extension HTTPResponseParser.Result {
    var head: HTTPResponseHead? {
        if case .response(let head, _) = self { return head }
        return nil
    }

    var reason: String? {
        if case .invalid(let reason) = self { return reason }
        return nil
    }
}
