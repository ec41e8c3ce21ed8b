// Issue 16, the origin's side: answers without a length (chunked, close-delimited) streamed and
// stored, errors and redirects passed on as the origin sent them, loops refused. Black-box: the
// proxy in process in front of the scripted origin (OriginServer.scripted), curl as the client;
// every test checks what the client got and the origin's request log.
import Foundation
import HTTPCache
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP
import SparseCacheTesting
import Testing
import TestSupport

@Suite("Origin answers (issue 16)", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(8)))
struct OriginAnswersTests {
    /// An answer without a length (chunked) of `size` pattern bytes (``OriginScript/pattern(count:seed:)``
    /// with `seed`) in chunks of `chunkSize`, fresh for ten minutes, with `etag` when given.
    static func chunked(size: Int, seed: Int, chunkSize: Int, etag: String? = nil) -> OriginScript {
        var script = OriginScript(headers: [("Cache-Control", "max-age=600")] + (etag.map { [("ETag", $0)] } ?? []))
        script.bodySize = size
        script.bodySeed = seed
        script.framing = "chunked"
        script.chunkSize = chunkSize
        return script
    }

    /// Asks `rig` for `name` with `arguments` until `done` holds for the answer (at most 30 s):
    /// a stream's last commit comes just after the client's last byte.
    static func poll(
        _ rig: ScriptedProxy, _ name: String, _ arguments: [String], until done: (CurlResult) -> Bool
    ) async throws -> CurlResult {
        var answer = try await rig.get(name, arguments)
        _ = try await eventually(interval: .milliseconds(100)) {
            if done(answer) { return true }
            answer = try await rig.get(name, arguments)
            return done(answer)
        }
        return answer
    }

    @Test(
        "an answer without a length (chunked, close-delimited) streams to the client, is stored when complete, then a Range is a hit from disk with no second origin request"
    )
    func unknownLengthStored() async throws {
        let rig = try await ScriptedProxy()
        let size = 300_000
        let body = OriginScript.pattern(count: size, seed: 5)
        for framing in ["chunked", "close"] {
            var script = OriginScript(headers: [
                ("Cache-Control", "max-age=600"), ("Content-Type", "text/html"), ("ETag", "\"\(framing)\""),
            ])
            script.bodySize = size
            script.bodySeed = 5
            script.framing = framing
            script.chunkSize = 16_384
            try rig.script(framing, script)

            let first = try await rig.get(framing)
            #expect(first.status == 200 && first.body == body, "\(framing): the whole body through the proxy: \(first)")
            #expect(first.cacheStatus.contains("fwd=uri-miss"), "\(framing): a miss: \(first.headers["cache-status"] ?? "none")")

            let ranged = try await Self.poll(rig, framing, ["-H", "Range: bytes=1000-1999"]) { $0.status == 206 }
            #expect(
                ranged.status == 206 && ranged.body == Array(body[1000..<2000]), "\(framing): a Range from the stored answer: \(ranged)")
            #expect(ranged.headers["content-range"] == "bytes 1000-1999/\(size)", "\(framing): \(ranged.headers)")
            #expect(ranged.isHit, "\(framing): served from storage: \(ranged.headers["cache-status"] ?? "none")")
            let whole = try await rig.get(framing)
            #expect(
                whole.status == 200 && whole.body == body && whole.headers["content-length"] == String(size) && whole.isHit,
                "\(framing): stored with its length now: \(whole)")
            #expect(rig.count(framing) == 1, "\(framing): one origin request in all: \(rig.requests(framing))")
            // What the origin itself sends: no length.
            let direct = try await rig.direct(framing, ["-H", "Range: bytes=1000-1999"])
            #expect(direct.status == 200 && direct.body == body && direct.headers["content-length"] == nil, "\(framing): \(direct)")
            #expect(
                framing == "chunked" ? direct.headers["transfer-encoding"] == "chunked" : direct.headers["connection"] == "close",
                "\(framing): \(direct.headers)")
        }
        await rig.stop()
    }

    @Test("an answer without a length is stored whole when its first commit is held while its length is being set")
    func unknownLengthStoredWhileCommitting() async throws {
        // At the body's end the fill writes everything back (the short tail buffered by the
        // engine, no length yet), then sets the length. Setting it used to suspend in its
        // ftruncate, past the store's one-second interval commit (armed by that write-back),
        // which then took the length with it: the tail was left buffered for ever and the next
        // client's hit fetched it from the origin again. setLength no longer does I/O; here the
        // resource's first commit is held in its data sync for 2 s, so the length is set, and
        // clients come, while a commit is in flight.
        let rig = try await ScriptedProxy()
        let size = 300_000
        let body = OriginScript.pattern(count: size, seed: 6)
        let script = Self.chunked(size: size, seed: 6, chunkSize: 16_384, etag: "\"slow-length\"")
        try rig.script("slow-length", script)
        let rule = try FaultInjection.add(
            FaultRule([.fdatasync], pathContains: rig.proxy.directory.path + "/cache/resources/", maxFires: 1, delay: .seconds(2)))
        defer { FaultInjection.remove(rule) }

        let first = try await rig.get("slow-length")
        #expect(first.status == 200 && first.body == body, "the whole body through the proxy: \(first)")
        #expect(FaultInjection.fired(rule) == 1, "the first commit was held")
        let whole = try await Self.poll(rig, "slow-length", []) { $0.headers["content-length"] != nil }
        #expect(
            whole.status == 200 && whole.body == body && whole.headers["content-length"] == String(size) && whole.isHit,
            "stored with its length: \(whole)")
        #expect(rig.count("slow-length") == 1, "one origin request in all: \(rig.requests("slow-length"))")
        await rig.stop()
    }

    @Test("two clients of one answer without a length cause one origin request: the second joins it in flight (Cache-Status collapsed)")
    func concurrentClientsJoin() async throws {
        let rig = try await ScriptedProxy()
        let size = 96_000
        var script = Self.chunked(size: size, seed: 9, chunkSize: 8_000)
        // 12 chunks 400 ms apart: the second client (a new curl process, which a loaded full
        // run once started more than the 1.8 s of 150 ms gaps late) comes while it arrives.
        script.chunkDelayMs = 400
        try rig.script("live", script)

        async let first = rig.get("live")
        // The origin logs a request before it answers: the second client comes while the
        // first answer is still arriving.
        try await waitUntil(interval: .milliseconds(20), "the origin never had the first request") { rig.count("live") > 0 }
        let second = try await rig.get("live")
        let one = try await first
        let body = OriginScript.pattern(count: size, seed: 9)
        #expect(one.status == 200 && one.body == body, "first client: \(one)")
        #expect(second.status == 200 && second.body == body, "second client: \(second)")
        #expect(rig.count("live") == 1, "one origin request for both: \(rig.requests("live"))")
        #expect(second.cacheStatus.contains("collapsed"), "the second joined the first: \(second.headers["cache-status"] ?? "none")")
        await rig.stop()
    }

    @Test(
        "a chunked body cut off before its end is not stored: the next request goes to the origin and gets the whole body; a Range is never served from the cut one"
    )
    func cutOffNotStored() async throws {
        let rig = try await ScriptedProxy()
        let size = 200_000
        var script = Self.chunked(size: size, seed: 3, chunkSize: 10_000, etag: "\"cut\"")
        script.cutAfter = 130_000
        try rig.script("cut", script)

        let cut = try await rig.get("cut")
        // The client sees the cut, never a whole answer: a 200 cut short (curl fails) when it
        // followed the answer as it came, or a 502 when the cut came before the client's head
        // was sent (no byte of it had gone out yet, as nginx answers then).
        #expect(
            (cut.status == 200 && cut.exitCode != 0 && cut.body.count < size) || cut.status == 502,
            "the client sees a cut body (curl fails) or a 502, not a whole one: \(cut)")
        #expect(rig.count("cut") == 1, "\(rig.requests("cut"))")

        // Still cut: every request goes to the origin; none is answered from the partial body.
        let ranged = try await rig.get("cut", ["-H", "Range: bytes=0-99"])
        #expect(!ranged.isHit && ranged.status != 206, "a Range after a cut body is not served from it: \(ranged)")
        // At least one more origin request (two when the Range arrives while the cut body's
        // files are still being removed: its first contact finds them going, and asks again).
        let afterRange = rig.count("cut")
        #expect(afterRange >= 2, "the cut body was not stored: \(rig.requests("cut"))")

        script.cutAfter = nil
        try rig.script("cut", script)
        let whole = try await rig.get("cut")
        let body = OriginScript.pattern(count: size, seed: 3)
        #expect(whole.status == 200 && whole.body == body && whole.exitCode == 0, "whole after the origin recovers: \(whole)")
        #expect(rig.count("cut") == afterRange + 1, "\(rig.requests("cut"))")
        let hit = try await Self.poll(rig, "cut", ["-H", "Range: bytes=0-99"]) { $0.status == 206 }
        #expect(hit.status == 206 && hit.body == Array(body[0..<100]) && hit.isHit, "stored once whole: \(hit)")
        await rig.stop()
    }

    @Test("a chunked answer cut off at once, before its reader follows it: one origin request per client request, never a second first contact")
    func cutBeforeReaderFollows() async throws {
        let rig = try await ScriptedProxy()
        var script = Self.chunked(size: 200_000, seed: 5, chunkSize: 10_000, etag: "\"early-cut\"")
        // Cut within the first chunk: the answer's stream fails as soon as it starts, often
        // before the client's own reader has attached to it.
        script.cutAfter = 100
        try rig.script("early", script)
        for round in 1...5 {
            let answer = try await rig.get("early")
            #expect(
                (answer.status == 200 && answer.exitCode != 0 && answer.body.count < 200_000) || answer.status == 502,
                "round \(round): the cut, never a whole answer: \(answer)")
            #expect(rig.count("early") == round, "round \(round): one origin request per client request: \(rig.requests("early"))")
        }
        await rig.stop()
    }

    @Test(
        "a PURGE while an answer without a length arrives stops it: its client is cut, nothing is stored, the next request asks the origin again"
    )
    func purgeDuringStream() async throws {
        let rig = try await ScriptedProxy()
        let size = 200_000
        var script = Self.chunked(size: size, seed: 17, chunkSize: 10_000)
        script.chunkDelayMs = 300
        try rig.script("purged", script)

        async let first = rig.get("purged")
        // The answer is arriving once the store holds its resource and first contact is over
        // (the resource open); a PURGE before that, while first contact is still under way, is
        // another case.
        let key = rig.origin.url("purged").absoluteString
        try await waitUntil(interval: .milliseconds(20), "the answer never arrived") {
            guard await rig.proxy.store.entry(for: key) != nil else { return false }
            return await rig.proxy.cache.isOpen(key: key)
        }
        let purge = try await Curl.run(rig.proxy.baseURL + "/purged", ["-X", "PURGE"], timeout: 30)
        #expect(purge.status == 200, "PURGE of the answer in flight: \(purge)")
        let cut = try await first
        #expect(cut.exitCode != 0 && cut.body.count < size, "the client of the purged answer is cut: \(cut)")

        script.chunkDelayMs = nil
        try rig.script("purged", script)
        let again = try await rig.get("purged")
        #expect(again.status == 200 && again.body == OriginScript.pattern(count: size, seed: 17), "\(again)")
        // Asked again after the purge (twice when the cut client's read raced the purge's
        // removal of the files and started a fetch of its own, which the purge then dropped).
        #expect((2...3).contains(rig.count("purged")), "asked again after the purge: \(rig.requests("purged"))")
        await rig.stop()
    }

    @Test(
        "bytes without a length left by a process that stopped while an answer arrived are not served: the next request fetches the whole answer again"
    )
    func leftoverWithoutLengthDropped() async throws {
        let rig = try await ScriptedProxy()
        let size = 150_000
        var script = OriginScript(headers: [("Cache-Control", "max-age=600")])
        script.bodySize = size
        script.bodySeed = 21
        script.framing = "chunked"
        try rig.script("left", script)
        // What a crash mid-answer leaves: committed segments, no length.
        let handle = try await rig.proxy.store.open(key: rig.origin.url("left").absoluteString)
        try await handle.write([UInt8](repeating: 0xEE, count: 2 * 65_536), at: 0)
        try await handle.file.commit()
        try await handle.release()

        let answer = try await rig.get("left")
        let body = OriginScript.pattern(count: size, seed: 21)
        #expect(answer.status == 200 && answer.body == body, "the origin's body, not the leftover bytes: \(answer)")
        #expect(rig.count("left") == 1, "\(rig.requests("left"))")
        let ranged = try await Self.poll(rig, "left", ["-H", "Range: bytes=0-9"]) { $0.status == 206 }
        #expect(ranged.status == 206 && ranged.body == Array(body[0..<10]) && ranged.isHit, "\(ranged)")
        await rig.stop()
    }

    @Test(
        "500 and 401 pages pass through byte for byte with their fields (WWW-Authenticate); a 500 is asked once; proxy errors name no origin address"
    )
    func errorPagesPassThrough() async throws {
        let rig = try await ScriptedProxy()
        let page500 = "<html><body>Internal trouble \u{00e9}t\u{00e9}\n</body></html>\n"
        try rig.script("broken", status: 500, [("Content-Type", "text/html; charset=utf-8"), ("X-Trace", "abc123")], body: page500)
        let page401 = "{\"error\": \"login required\"}"
        try rig.script(
            "secret", status: 401,
            [("WWW-Authenticate", "Basic realm=\"staff\", charset=\"UTF-8\""), ("Content-Type", "application/json")],
            body: page401)

        let broken = try await rig.get("broken")
        let direct500 = try await rig.direct("broken")
        #expect(
            broken.status == 500 && broken.body == Array(page500.utf8) && broken.body == direct500.body, "the origin's 500 page: \(broken)")
        #expect(broken.headers["x-trace"] == "abc123" && broken.headers["content-type"] == "text/html; charset=utf-8", "\(broken.headers)")
        #expect(rig.count("broken") == 2, "asked once by the proxy (and once directly), never retried: \(rig.requests("broken"))")

        let secret = try await rig.get("secret")
        #expect(secret.status == 401 && secret.body == Array(page401.utf8), "the origin's 401 page: \(secret)")
        #expect(secret.headers["www-authenticate"] == "Basic realm=\"staff\", charset=\"UTF-8\"", "\(secret.headers)")
        #expect(rig.count("secret") == 1, "\(rig.requests("secret"))")

        // The proxy's own errors: an origin that is gone is 502, and the page does not name it.
        let originPort = rig.origin.port
        rig.origin.stop()
        let gone = try await rig.get("elsewhere")
        #expect(gone.status == 502, "no origin: 502: \(gone)")
        #expect(
            !gone.text.contains("127.0.0.1") && !gone.text.contains(String(originPort)), "the page names no origin address: \(gone.text)")
        await rig.stop()
    }

    @Test(
        "a redirect is an answer: passed on with its Location, not followed (the target on another port is never asked); a 301 with freshness is stored, a 302 without is not"
    )
    func redirectsPassedOn() async throws {
        let rig = try await ScriptedProxy()
        let target = try ScriptedProxy.TargetOrigin()
        defer { target.stop() }
        try await target.start()
        let location = target.origin.url("target").absoluteString
        try target.script("target", OriginScript(headers: [("Cache-Control", "max-age=600")], body: "the target\n"))
        try rig.script("moved", status: 302, [("Location", location), ("Content-Type", "text/plain")], body: "see other port\n")
        try rig.script("gone", status: 301, [("Location", location), ("Cache-Control", "max-age=600")], body: "moved for good\n")

        let moved = try await rig.get("moved")
        #expect(moved.status == 302 && moved.headers["location"] == location && moved.text == "see other port\n", "\(moved)")
        let again = try await rig.get("moved")
        #expect(again.status == 302 && rig.count("moved") == 2, "a 302 without freshness is not stored: \(rig.requests("moved"))")

        let gone = try await rig.get("gone")
        let goneAgain = try await rig.get("gone")
        #expect(gone.status == 301 && gone.headers["location"] == location && gone.text == "moved for good\n", "\(gone)")
        #expect(goneAgain.status == 301 && goneAgain.isHit && rig.count("gone") == 1, "a 301 with max-age is stored: \(goneAgain)")
        #expect(target.count("target") == 0, "the proxy followed no redirect: \(target.origin.requestLog())")
        // A redirect back to the proxy itself is an answer like any other: passed on at once.
        let selfLocation = rig.proxy.baseURL + "/home"
        try rig.script("home", status: 302, [("Location", selfLocation)], body: "")
        let home = try await rig.get("home")
        #expect(home.status == 302 && home.headers["location"] == selfLocation && rig.count("home") == 1, "\(home)")

        // URLSession (https, or transport .urlSession) refuses redirects when forwarding too.
        let session = try HTTPRangeSource(url: rig.origin.url("moved"), transport: .urlSession)
        do {
            let response = try await session.fetch(nil, validator: nil, forwarding: HTTPRangeSource.Forwarding(headers: []))
            response.cancel()
            Issue.record("a 302 through URLSession came back as a resource: \(response.info)")
        } catch let answer as OriginAnswer {
            #expect(answer.head.status == 302 && answer.head.headers["location"] == location, "\(answer.head)")
            answer.cancel()
        }
        #expect(target.count("target") == 0, "URLSession followed the redirect: \(target.origin.requestLog())")
        await rig.stop()
    }

    @Test(
        "through URLSession (https) an encoded answer arrives decoded by libcurl: it is labelled as the identity bytes it is (no Content-Encoding, no Content-Length, weak ETag), never stored under the origin's coding"
    )
    func sessionDecodedAnswerRelabelled() async throws {
        let rig = try await ScriptedProxy()
        let text = String(repeating: "compressible text, ", count: 2_000)
        try rig.script("packed", [("Cache-Control", "max-age=600"), ("ETag", "\"gz1\""), ("Content-Type", "text/plain")], body: text) {
            $0.gzip = true
        }
        let session = try HTTPRangeSource(url: rig.origin.url("packed"), transport: .urlSession)
        let response = try await session.fetch(
            nil, validator: nil, forwarding: HTTPRangeSource.Forwarding(headers: HTTPHeaders([("Accept-Encoding", "gzip")])))
        var body: [UInt8] = []
        for try await chunk in response.body { body += chunk }
        let fields = response.info.stored?.headers ?? []
        #expect(body == Array(text.utf8), "libcurl decoded the gzip body: \(body.count) bytes")
        #expect(fields["content-encoding"] == nil && response.info.length == nil, "labelled as identity bytes of unknown length: \(fields)")
        #expect(fields["etag"] == "W/\"gz1\"", "the encoded bytes' strong ETag made weak: \(fields)")
        #expect(rig.requests("packed").first?.header("Accept-Encoding") == "identity", "identity asked for: \(rig.requests("packed"))")
        await rig.stop()
    }

    @Test("a request that comes back to the proxy is refused at once (400, Via loop detection); two tiers of sparsecache still work")
    func loopsRefused() async throws {
        let rig = try await ScriptedProxy()
        try rig.script("page", [("Cache-Control", "max-age=600")], body: "through two tiers\n")
        // URL mode, asked for a URL on itself.
        let urlMode = try await ProxyFixture(origin: nil)
        let selfURL = "\(urlMode.baseURL)/again.bin"
        let encoded = selfURL.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        let started = ContinuousClock.now
        let loop = try await Curl.run("\(urlMode.baseURL)/loop.bin?url=\(encoded)", timeout: 30)
        let took = ContinuousClock.now - started
        #expect(loop.status == 400 && loop.text.contains("loop detected"), "\(loop)")
        #expect(took < .seconds(25), "answered, not waited out: \(took)")

        // An edge in front of a parent (both sparsecache, each with its own Via name).
        let edge = try await ProxyFixture(origin: URL(string: rig.proxy.baseURL)!)
        let tiered = try await Curl.run("\(edge.baseURL)/page", timeout: 30)
        #expect(tiered.status == 200 && tiered.text == "through two tiers\n", "edge -> parent -> origin: \(tiered)")
        let via = tiered.headers["via"] ?? ""
        #expect(via.components(separatedBy: "sparsecache-").count == 3, "both tiers in Via: \(via)")
        #expect(rig.requests("page").first?.header("Via")?.contains("sparsecache-") == true, "\(rig.requests("page"))")
        await edge.stop()
        await urlMode.stop()
        await rig.stop()
    }
}

extension ScriptedProxy {
    /// A second scripted origin (another port), for redirect targets.
    final class TargetOrigin: @unchecked Sendable {
        // @unchecked: set once in start, read after.
        let files: TemporaryDirectory
        private(set) var origin: OriginServer!

        init() throws { files = try TemporaryDirectory("redirect-target") }

        func start() async throws { origin = try await OriginServer.scripted(root: files.path) }

        func script(_ name: String, _ script: OriginScript) throws { try script.write(root: files.path, name: name) }

        func count(_ name: String) -> Int { origin.requestLog().filter { $0.path.hasPrefix("/" + name) }.count }

        func stop() {
            origin?.stop()
            files.remove()
        }
    }
}
