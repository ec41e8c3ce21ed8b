// Issue 16 (client side) and RFC 9111 4.4: every method forwarded with its body, in both
// framings, the answer streamed back; an unsafe method's success invalidates what is stored;
// the server's body handling (100-continue, 413, keep-alive and pipelining with bodies) seen by
// real clients (curl, raw sockets) against the scripted Python origin, which echoes what it got.
import Foundation
import LoopbackOrigins
import Testing

@testable import SparseHTTP
import TestSupport

@Suite("Request bodies and methods (RFC 9110 9, 10.1.1; RFC 9111 4.4; RFC 9112 6, 7)", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(10)))
struct RequestBodyTests {
    /// Echoes what reached the origin: method, framing, body.
    static let echo = OriginScript(status: 200, headers: [("Content-Type", "application/octet-stream")], echo: true)

    @Test("curl POST and PUT with bodies in both framings (Content-Length, chunked from a pipe) reach the origin whole, with the client's fields and Via; the answer comes back")
    func postAndPut() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("echo", Self.echo)
        let work = try TemporaryDirectory("bodies")
        defer { work.remove() }
        // 3 MiB: larger than any buffer on the way, so the body streams.
        let large = OriginScript.pattern(count: 3 << 20, seed: 7)
        try Data(large).write(to: URL(fileURLWithPath: work.file("large.bin")))
        let cases: [(method: String, arguments: [String], body: [UInt8], chunked: Bool)] = [
            ("POST", ["--data-binary", "name=value&x=1"], Array("name=value&x=1".utf8), false),
            ("PUT", ["-X", "PUT", "--data-binary", "@" + work.file("large.bin")], large, false),
            ("POST", ["-H", "Transfer-Encoding: chunked", "--data-binary", "chunked body"], Array("chunked body".utf8), true),
            ("PUT", ["-X", "PUT", "-H", "Transfer-Encoding: chunked", "--data-binary", "@" + work.file("large.bin")], large, true),
        ]
        for (index, item) in cases.enumerated() {
            // Generous: the full suite runs loaded, and two of these move 3 MiB each way.
            let answer = try await rig.get("echo?case=\(index)", item.arguments + ["-H", "X-Custom: \(index)", "-H", "Expect:"], timeout: 120)
            #expect(answer.status == 200, "\(item.method) #\(index): \(answer)")
            #expect(answer.headers["x-echo-method"] == item.method, "\(item.method) #\(index) reached the origin as: \(answer.headers)")
            #expect(sameBytes(answer.body, item.body[...]), "\(item.method) #\(index): \(answer.body.count) of \(item.body.count) bytes echoed")
            #expect(answer.cacheStatus.contains("fwd=method") && (answer.headers["via"] ?? "").contains("1.1 sparsecache"), "\(answer.headers)")
            let logged = rig.requests("echo").last
            #expect(logged?.method == item.method && logged?.requestBytes == item.body.count, "origin log: \(String(describing: logged))")
            #expect(logged?.header("x-custom") == String(index), "the client's own fields are forwarded: \(String(describing: logged))")
            #expect(logged?.header("via")?.contains("1.1 sparsecache") == true, "Via on the request to the origin")
            // The proxy frames a body of unknown length chunked, a known one with its length.
            #expect(logged?.requestChunked == item.chunked, "framing to the origin: \(String(describing: logged))")
        }
        // From a pipe: curl does not know the length and sends chunked.
        let piped = try await Self.shell(
            "printf 'from a pipe' | curl -s -S --max-time 120 --data-binary @- -H 'Expect:' \(rig.proxy.baseURL)/echo?pipe=1")
        #expect(piped == "from a pipe", "a body from a pipe: \(piped.debugDescription)")
        #expect(rig.requests("echo").last?.requestBody == "from a pipe", "\(String(describing: rig.requests("echo").last))")
        // Nothing of it was stored: the next POST goes to the origin again.
        let before = rig.count("echo")
        _ = try await rig.get("echo?case=0", ["--data-binary", "again"])
        #expect(rig.count("echo") == before + 1)
        await rig.stop()
    }

    @Test("DELETE, PATCH, OPTIONS and an unknown method (FROB) are forwarded; the origin's status and body come back as they are")
    func otherMethods() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("thing", status: 204, [("X-Done", "yes")])
        try rig.script("page", status: 404, [("Content-Type", "text/plain")], body: "no such page\n")
        for method in ["DELETE", "PATCH", "OPTIONS", "FROB"] {
            let answer = try await rig.get("thing", ["-X", method])
            #expect(answer.status == 204 && answer.headers["x-done"] == "yes", "\(method): \(answer)")
            #expect(rig.requests("thing").last?.method == method, "\(method) reached the origin: \(rig.requests("thing").last.map(\.description) ?? "none")")
        }
        let missing = try await rig.get("page", ["--data-binary", "x"])
        #expect(missing.status == 404 && missing.text == "no such page\n", "an origin 404 to a POST passes through: \(missing)")
        await rig.stop()
    }

    @Test("PUT and DELETE invalidate the stored target and its Vary variants; a same-origin Location or Content-Location too; another origin's and an error answer's not (RFC 9111 4.4)")
    func invalidation() async throws {
        let rig = try await ScriptedProxy()
        let fresh: [(String, String)] = [("Cache-Control", "max-age=600"), ("ETag", "\"v1\"")]
        for name in ["item", "other", "elsewhere"] { try rig.script(name, fresh, body: "\(name) v1") }
        try rig.script("varied", fresh + [("Vary", "Accept-Language")], body: "varied v1")

        func stored(_ name: String, _ arguments: [String] = []) async throws -> Bool {
            try await rig.get(name, arguments).isHit
        }
        func warm(_ name: String, _ arguments: [String] = []) async throws {
            _ = try await rig.get(name, arguments)
            #expect(try await stored(name, arguments), "\(name) is stored before the unsafe request")
        }

        // PUT to the target.
        try await warm("item")
        try rig.script("item", status: 200, fresh, body: "item v1") { $0.echo = true }
        let put = try await rig.get("item", ["-X", "PUT", "--data-binary", "new"])
        #expect(put.status == 200 && put.text == "new", "\(put)")
        try rig.script("item", fresh, body: "item v2")
        let afterPut = try await rig.get("item")
        #expect(!afterPut.isHit && afterPut.text == "item v2", "after a PUT the next GET is a miss: \(afterPut)")

        // DELETE drops every Vary variant.
        try await warm("varied", ["-H", "Accept-Language: en"])
        try await warm("varied", ["-H", "Accept-Language: fr"])
        try rig.script("varied", status: 204, [])
        let delete = try await rig.get("varied", ["-X", "DELETE"])
        #expect(delete.status == 204, "\(delete)")
        try rig.script("varied", fresh + [("Vary", "Accept-Language")], body: "varied v2")
        for language in ["en", "fr"] {
            let again = try await rig.get("varied", ["-H", "Accept-Language: \(language)"])
            #expect(!again.isHit && again.text == "varied v2", "variant \(language) after a DELETE: \(again)")
        }

        // A POST answered 201 with a same-origin Location and Content-Location invalidates both;
        // a Location on another origin does not reach this one's entries.
        try await warm("other")
        try await warm("elsewhere")
        try rig.script("form", status: 201, [("Location", "/other"), ("Content-Location", rig.origin.url("elsewhere").absoluteString)])
        let created = try await rig.get("form", ["--data-binary", "a=1"])
        #expect(created.status == 201, "\(created)")
        #expect(!(try await stored("other")), "a same-origin Location is invalidated")
        #expect(!(try await stored("elsewhere")), "a same-origin absolute Content-Location is invalidated")
        try await warm("other")
        try rig.script("form", status: 201, [("Location", "http://192.0.2.1:9/other")])
        _ = try await rig.get("form", ["--data-binary", "a=2"])
        #expect(try await stored("other"), "a Location on another origin invalidates nothing here")

        // An error answer invalidates nothing.
        try rig.script("other", status: 409, [], body: "conflict\n")
        let conflict = try await rig.get("other", ["-X", "PUT", "--data-binary", "x"])
        #expect(conflict.status == 409, "\(conflict)")
        try rig.script("other", fresh, body: "other v1")
        #expect(try await stored("other"), "after a 409 to a PUT the stored answer stays")
        await rig.stop()
    }

    @Test("GETs filling a key and POSTs invalidating it, concurrently and more of them than origin connections: every request is answered (no fill slot is held while invalidating)")
    func concurrentInvalidation() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("busy", [("Cache-Control", "max-age=600"), ("ETag", "\"b\"")], body: String(repeating: "b", count: 100_000))
        let answers = try await withThrowingTaskGroup(of: [CurlResult].self) { group in
            for client in 0..<12 {
                group.addTask {
                    var seen: [CurlResult] = []
                    for _ in 0..<5 {
                        let arguments = client % 3 == 0 ? [] : ["--data-binary", "post from \(client)"]
                        seen.append(try await rig.get("busy", arguments))
                    }
                    return seen
                }
            }
            var all: [CurlResult] = []
            for try await seen in group { all += seen }
            return all
        }
        // A failed one says why (curl's exit status and message, the answer's text).
        let failed = answers.filter { $0.status != 200 }.map {
            "\($0.status): curl exit \($0.exitCode), \($0.stderr) \(String(decoding: $0.body.prefix(300), as: UTF8.self))"
        }
        #expect(answers.count == 60 && failed.isEmpty, "\(failed)")
        await rig.stop()
    }

    @Test("Expect: 100-continue: the interim 100 comes before the body is sent and the final answer after; a body over the limit gets 413 and no 100; an answer without reading the body closes the connection (RFC 9110 10.1.1)")
    func expectContinue() async throws {
        var options = ProxyFixture.defaultOptions
        options.maximumBodySize = 1000
        let rig = try await ScriptedProxy(options: options)
        try rig.script("echo", Self.echo)
        let head = "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        let exchange = await RawHTTP.exchange(
            port: rig.proxy.server.port, [Array(head.utf8), Array("hello".utf8), Array("GET /none HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)],
            pause: .milliseconds(500), timeout: .seconds(20))
        #expect(exchange.text.hasPrefix("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 "), "\(exchange.text.prefix(200).debugDescription)")
        #expect(exchange.text.contains("\r\n\r\nhello"), "the body went through after the 100: \(exchange.text.debugDescription)")
        #expect(exchange.statuses == [100, 200, 404], "the connection carried the next request: \(exchange.statuses)")

        let over = "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n"
        let refused = await RawHTTP.exchange(port: rig.proxy.server.port, over, timeout: .seconds(20))
        #expect(refused.statuses == [413] && refused.closedByServer, "\(refused.text.debugDescription)")
        #expect(refused.text.contains("larger than the limit of 1000 bytes"), "the 413 says why: \(refused.text.debugDescription)")
        // Answered without reading the body (a GET's): no 100, and the connection closes, since
        // the client may still be waiting to send it.
        let unread = await RawHTTP.exchange(
            port: rig.proxy.server.port, "GET /none HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
            timeout: .seconds(20))
        #expect(unread.statuses == [404] && unread.closedByServer, "\(unread.text.debugDescription)")
        // curl sends Expect for a large body and waits for the 100.
        let curl = try await rig.get("echo", ["--data-binary", String(repeating: "a", count: 900), "-H", "Expect: 100-continue"])
        #expect(curl.status == 200 && curl.body.count == 900, "\(curl)")
        await rig.stop()
    }

    @Test("a body beyond the maximum: 413 for a Content-Length at once, for a chunked body when it gets there; the message says the limit")
    func tooLarge() async throws {
        var options = ProxyFixture.defaultOptions
        options.maximumBodySize = 64 << 10
        let rig = try await ScriptedProxy(options: options)
        try rig.script("echo", Self.echo)
        let work = try TemporaryDirectory("bodies")
        defer { work.remove() }
        try Data(repeating: 0x62, count: 200 << 10).write(to: URL(fileURLWithPath: work.file("big")))
        let big = "@" + work.file("big")
        let length = try await rig.get("echo", ["--data-binary", big, "-H", "Expect:"])
        #expect(length.status == 413 && length.text.contains("limit of 65536 bytes"), "\(length.status) \(length.text)")
        #expect(rig.count("echo") == 0, "an announced body too large never reaches the origin")
        let chunked = try await rig.get("echo", ["--data-binary", big, "-H", "Transfer-Encoding: chunked", "-H", "Expect:"])
        #expect(chunked.status == 413 && chunked.text.contains("limit of 65536 bytes"), "\(chunked.status) \(chunked.text)")
        let small = try await rig.get("echo", ["--data-binary", "fits"])
        #expect(small.status == 200 && small.text == "fits", "a body within the limit still goes through: \(small)")
        await rig.stop()
    }

    @Test("keep-alive and pipelining with bodies: two pipelined POSTs (Content-Length, chunked) then a GET on one connection, answered in order; a GET's unread body is drained")
    func pipelinedBodies() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("echo", Self.echo)
        try rig.script("plain", [("Cache-Control", "max-age=60")], body: "plain page")
        let requests =
            "POST /echo?n=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nfirst body!"
            + "POST /echo?n=2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nsecond\r\n5;x=y\r\n body\r\n0\r\nX-Trailer: 1\r\n\r\n"
            + "GET /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\njunk"
            + "GET /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        let exchange = await RawHTTP.exchange(port: rig.proxy.server.port, requests, timeout: .seconds(20))
        #expect(exchange.statuses == [200, 200, 200, 200] && exchange.closedByServer, "\(exchange.text.debugDescription)")
        let text = exchange.text
        let first = text.range(of: "first body!"), second = text.range(of: "second body"), plain = text.range(of: "plain page")
        #expect(first != nil && second != nil && plain != nil, "\(text.debugDescription)")
        if let first, let second, let plain { #expect(first.upperBound <= second.lowerBound && second.upperBound <= plain.lowerBound) }
        #expect(rig.requests("echo").map(\.requestBody) == ["first body!", "second body"], "\(rig.requests("echo"))")
        await rig.stop()
    }

    @Test("an origin that answers before reading the body (a 413) and closes: its answer reaches the client, not a 502")
    func earlyAnswer() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("upload", status: 413, [("Content-Type", "text/plain"), ("Connection", "close")], body: "too big for the origin\n") {
            $0.ignoreBody = true
        }
        let work = try TemporaryDirectory("bodies")
        defer { work.remove() }
        try Data(repeating: 0x61, count: 8 << 20).write(to: URL(fileURLWithPath: work.file("big")))
        let answer = try await rig.get("upload", ["--data-binary", "@" + work.file("big"), "-H", "Expect:"])
        #expect(answer.status == 413 && answer.text == "too big for the origin\n", "\(answer)")
        await rig.stop()
    }

    @Test("CONNECT is refused with 405, Allow and a reason: an https tunnel cannot be cached")
    func connectRefused() async throws {
        let rig = try await ScriptedProxy()
        let exchange = await RawHTTP.exchange(
            port: rig.proxy.server.port, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n",
            timeout: .seconds(20))
        #expect(exchange.statuses == [405], "\(exchange.text.debugDescription)")
        #expect(exchange.text.contains("Allow: GET, HEAD, POST") && exchange.text.contains("tunnel cannot be cached"), "\(exchange.text)")
        await rig.stop()
    }

    @Test("a request body that stops arriving is cut at the body deadline; the slot is freed")
    func slowBody() async throws {
        var options = ProxyFixture.defaultOptions
        options.bodyTimeout = .seconds(1)
        options.bodyMinimumRate = 1 << 20
        let rig = try await ScriptedProxy(options: options)
        try rig.script("echo", Self.echo)
        // Announces 100 bytes, sends 5, then nothing: the body deadline ends it.
        let exchange = await RawHTTP.exchange(
            port: rig.proxy.server.port, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhello", timeout: .seconds(30))
        #expect(exchange.closedByServer, "the connection was closed: \(exchange.text.debugDescription)")
        #expect(rig.proxy.server.connectionCount == 0 || exchange.closedByServer)
        await rig.stop()
    }

    static func shell(_ command: String) async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        let result = try await ChildProcess.run(process)
        return String(decoding: result.stdout, as: UTF8.self)
    }
}
