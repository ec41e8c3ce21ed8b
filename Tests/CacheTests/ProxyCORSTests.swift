// `serve --cors`: cross-origin access for web players (CORSPolicy), on every answer of the
// handler and of the event loop, preflights answered by the proxy with the origin down; and
// nothing of it without the option. A real origin, the proxy on 127.0.0.1, curl as the page's
// browser (the `Origin` field is what a browser adds to a cross-origin request).
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

@Suite("proxy CORS", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(6)))
struct ProxyCORSTests {
    @Test(
        "Whether a page may read an answer: no Origin or the proxy's own, the origin's Access-Control-Allow-Origin, or the policy's instead"
    )
    func pageMayRead() {
        func request(_ fields: [(String, String)]) -> HTTPRequestHead {
            HTTPRequestHead(method: "GET", target: "/a.m3u8", headers: HTTPHeaders(fields))
        }
        let page = ("Origin", "https://player.example")
        let host = ("Host", "cdn.example:8080")
        #expect(CORSPolicy.pageMayRead(request([host]), allowOrigin: nil, policy: nil), "no Origin: not a cross-origin read")
        #expect(
            CORSPolicy.pageMayRead(request([host, ("Origin", "http://cdn.example:8080")]), allowOrigin: nil, policy: nil),
            "the proxy's own origin")
        #expect(!CORSPolicy.pageMayRead(request([host, page]), allowOrigin: nil, policy: nil))
        #expect(CORSPolicy.pageMayRead(request([host, page]), allowOrigin: "*", policy: nil))
        #expect(CORSPolicy.pageMayRead(request([host, page]), allowOrigin: "https://player.example", policy: nil))
        #expect(!CORSPolicy.pageMayRead(request([host, page]), allowOrigin: "https://other.example", policy: nil))
        // The policy replaces the origin's fields.
        #expect(!CORSPolicy.pageMayRead(request([host, page]), allowOrigin: "*", policy: CORSPolicy(origins: ["https://other.example"])))
        #expect(CORSPolicy.pageMayRead(request([host, page]), allowOrigin: nil, policy: CORSPolicy(origins: ["https://player.example"])))
        #expect(CORSPolicy.pageMayRead(request([host, page]), allowOrigin: nil, policy: CORSPolicy(origins: ["*"])))
    }

    static let page = ["-H", "Origin: https://player.example"]
    static let exposed = "Content-Range, Content-Length, Accept-Ranges, Age, Cache-Status, ETag"

    /// A proxy with `cors` that keeps resources open (and so answers hits on the event loop)
    /// for the whole test.
    static func rig(_ origins: [String]) async throws -> ScriptedProxy {
        var options = FillOptions.testing
        options.keepOpen = .seconds(300)
        return try await ScriptedProxy(fill: options, cors: CORSPolicy(origins: origins))
    }

    /// `/<name>`: 100,000 bytes, fresh for ten minutes, with an ETag; no CORS fields.
    static func script(_ rig: ScriptedProxy, _ name: String, _ extra: [(String, String)] = []) throws {
        try rig.script(name, [("Cache-Control", "max-age=600"), ("ETag", "\"v1\""), ("Content-Type", "video/mp4")] + extra) {
            $0.bodySize = 100_000
            $0.bodySeed = 3
        }
    }

    /// Asks for `name` with `arguments` until the event loop answers; that answer.
    static func quickAnswer(_ rig: ScriptedProxy, _ name: String, _ arguments: [String]) async throws -> CurlResult? {
        var quick: CurlResult?
        _ = try await eventually(interval: .milliseconds(50)) {
            let before = try await rig.quickAnswers
            let answer = try await rig.get(name, arguments)
            if try await rig.quickAnswers > before { quick = answer }
            return quick != nil
        }
        if let quick { return quick }
        Issue.record("\(name) \(arguments) was never answered on the event loop")
        return nil
    }

    /// The fields of an answer every page may read: `*`, the exposed list, once each, and no
    /// `Vary: Origin` (the answer is the same for every page).
    static func expectAnyOrigin(_ answer: CurlResult, _ what: String, status: Int, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(answer.status == status, "\(what): \(answer)", sourceLocation: sourceLocation)
        #expect(answer.values("access-control-allow-origin") == ["*"], "\(what): \(answer.fields)", sourceLocation: sourceLocation)
        #expect(answer.values("access-control-expose-headers") == [exposed], "\(what): \(answer.fields)", sourceLocation: sourceLocation)
        #expect(answer.values("access-control-allow-credentials").isEmpty, "\(what): \(answer.fields)", sourceLocation: sourceLocation)
        #expect(
            !answer.values("vary").contains { $0.lowercased().contains("origin") }, "\(what): \(answer.fields)",
            sourceLocation: sourceLocation)
    }

    @Test(
        "--cors '*' before an origin without CORS fields: hits (loop and handler), misses, 206, 304, 416, the origin's 404, the proxy's 502 all carry Access-Control-Allow-Origin: * and the exposed fields; the origin's own are replaced"
    )
    func anyOrigin() async throws {
        let rig = try await Self.rig(["*"])
        try Self.script(rig, "clip.bin")
        let miss = try await rig.get("clip.bin", Self.page + ["-r", "0-99"])
        Self.expectAnyOrigin(miss, "a miss's 206", status: 206)
        #expect(miss.cacheStatus.contains("fwd=uri-miss"), "\(miss)")
        let whole = try await rig.get("clip.bin", Self.page)
        Self.expectAnyOrigin(whole, "a 200", status: 200)
        let quick = try #require(try await Self.quickAnswer(rig, "clip.bin", Self.page + ["-r", "100-199"]))
        Self.expectAnyOrigin(quick, "a hit answered on the event loop", status: 206)
        #expect(quick.isHit, "\(quick)")
        let notModified = try await rig.get("clip.bin", Self.page + ["-H", "If-None-Match: \"v1\""])
        Self.expectAnyOrigin(notModified, "a 304", status: 304)
        let unsatisfiable = try await rig.get("clip.bin", Self.page + ["-r", "200000-"])
        Self.expectAnyOrigin(unsatisfiable, "a 416", status: 416)
        let revalidated = try await rig.get("clip.bin", Self.page + ["-H", "Cache-Control: max-age=0"])
        Self.expectAnyOrigin(revalidated, "a revalidated hit (the handler's)", status: 200)
        // `*` is static: a request without Origin gets it too (the Fetch standard's advice, so
        // a browser's cached copy of a plain request serves a page's later request).
        Self.expectAnyOrigin(try await rig.get("clip.bin"), "a request without Origin", status: 200)
        Self.expectAnyOrigin(try await rig.get("nothing-here.bin", Self.page), "the origin's 404, passed on", status: 404)

        // An origin that sends CORS fields of its own: the proxy's replace them.
        try Self.script(
            rig, "theirs.bin",
            [
                ("Access-Control-Allow-Origin", "https://origin-choice.example"), ("Access-Control-Allow-Credentials", "true"),
                ("Access-Control-Expose-Headers", "X-Secret"),
            ])
        Self.expectAnyOrigin(try await rig.get("theirs.bin", Self.page), "a miss of an origin with CORS fields", status: 200)
        let theirsHit = try #require(try await Self.quickAnswer(rig, "theirs.bin", Self.page))
        Self.expectAnyOrigin(theirsHit, "a hit of it on the loop", status: 200)
        Self.expectAnyOrigin(try await rig.get("theirs.bin", Self.page + ["-H", "If-None-Match: \"v1\""]), "a 304 of it", status: 304)

        // The origin down: the proxy's own error, a hit, and a preflight answered here.
        let requestsBefore = rig.origin.requestLog().count
        rig.origin.stop()
        Self.expectAnyOrigin(try await rig.get("gone.bin", Self.page), "the proxy's 502", status: 502)
        Self.expectAnyOrigin(try await rig.get("clip.bin", Self.page + ["-r", "5-9"]), "a hit with the origin down", status: 206)
        let preflight = try await rig.get(
            "clip.bin",
            Self.page + [
                "-X", "OPTIONS", "-H", "Access-Control-Request-Method: GET", "-H", "Access-Control-Request-Headers: X-Token, Range",
            ])
        #expect(preflight.status == 204 && preflight.body.isEmpty, "\(preflight)")
        #expect(preflight.values("access-control-allow-origin") == ["*"], "\(preflight.fields)")
        #expect(preflight.values("access-control-allow-methods") == ["GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"], "\(preflight.fields)")
        #expect(preflight.values("access-control-allow-headers") == ["X-Token, Range"], "the asked fields allowed: \(preflight.fields)")
        #expect(preflight.values("access-control-max-age") == ["86400"], "\(preflight.fields)")
        #expect(preflight.values("vary") == ["Access-Control-Request-Headers"], "\(preflight.fields)")
        #expect(rig.origin.requestLog().count == requestsBefore, "nothing reached the origin: \(rig.origin.requestLog().suffix(3))")
        #expect(!rig.origin.requestLog().contains { $0.method == "OPTIONS" })
        await rig.stop()
    }

    @Test(
        "--cors with listed origins: a listed Origin is echoed with Vary: Origin, others get no Access-Control-Allow-Origin; the event loop's answers carry the handler's fields; the stored answer does not vary by Origin; preflights per origin"
    )
    func listedOrigins() async throws {
        let origins = ["https://player.example", "HTTP://127.0.0.1:3000"]
        let rig = try await Self.rig(origins)
        var handlerOnly = FillOptions.testing
        handlerOnly.quickHits = false
        let slow = try await ProxyFixture(origin: rig.origin.baseURL, fill: handlerOnly, cors: CORSPolicy(origins: origins))
        try Self.script(rig, "clip.bin", [("Vary", "Accept-Encoding")])
        let first = try await rig.get("clip.bin", Self.page)
        #expect(first.status == 200 && first.cacheStatus.contains("stored"), "\(first)")
        _ = try await Curl.run(slow.baseURL + "/clip.bin", Self.page)
        #expect(rig.count("clip.bin") == 2, "one fetch for each proxy")
        _ = try #require(try await Self.quickAnswer(rig, "clip.bin", Self.page))

        let other = ["-H", "Origin: http://127.0.0.1:3000"]
        let unlisted = ["-H", "Origin: https://evil.example"]
        for (page, allowed) in [(Self.page, "https://player.example"), (other, "http://127.0.0.1:3000"), (unlisted, nil), ([], nil)] {
            for arguments in [[], ["-r", "100-199"], ["-I"], ["-H", "If-None-Match: \"v1\""]] {
                let what = "\(page) \(arguments)"
                let before = try await rig.quickAnswers
                let answer = try await rig.get("clip.bin", page + arguments)
                let onLoop = try await rig.quickAnswers > before
                let handled = try await Curl.run(slow.baseURL + "/clip.bin", page + arguments)
                #expect(answer.isHit && handled.isHit, "\(what): served from storage: \(answer) \(handled)")
                #expect(onLoop == !arguments.contains("If-None-Match: \"v1\""), "\(what): answered on the loop \(onLoop)")
                for result in [answer, handled] {
                    #expect(result.values("access-control-allow-origin") == (allowed.map { [$0] } ?? []), "\(what): \(result.fields)")
                    #expect(
                        result.values("access-control-expose-headers") == (allowed == nil ? [] : [Self.exposed]),
                        "\(what): \(result.fields)")
                    // The origin's Vary stays; Origin is added, for every request (a page's
                    // browser must not reuse an answer made for another page).
                    #expect(result.values("vary") == ["Accept-Encoding", "Origin"], "\(what): \(result.fields)")
                }
                #expect(answer.status == handled.status, "\(what)")
                #expect(
                    QuickHitTests.comparable(answer.headers) == QuickHitTests.comparable(handled.headers),
                    "\(what): the loop's \(answer.fields) against the handler's \(handled.fields)")
                #expect(
                    answer.fields.map(\.name).filter { !["date", "age"].contains($0.lowercased()) }
                        == handled.fields.map(\.name).filter { !["date", "age"].contains($0.lowercased()) },
                    "\(what): the same fields in the same order")
            }
        }
        #expect(rig.count("clip.bin") == 2, "every page was answered from the one stored answer: \(rig.requests("clip.bin"))")

        rig.origin.stop()
        let preflight = ["-X", "OPTIONS", "-H", "Access-Control-Request-Method: PUT"]
        let listed = try await rig.get("clip.bin", Self.page + preflight)
        #expect(listed.status == 204, "\(listed)")
        #expect(listed.values("access-control-allow-origin") == ["https://player.example"], "\(listed.fields)")
        #expect(listed.values("access-control-allow-methods").first?.contains("PUT") == true, "\(listed.fields)")
        #expect(listed.values("access-control-allow-headers").isEmpty, "none asked, none allowed: \(listed.fields)")
        #expect(listed.values("vary") == ["Origin, Access-Control-Request-Headers"], "\(listed.fields)")
        let refused = try await rig.get("clip.bin", unlisted + preflight)
        #expect(refused.status == 204 && refused.values("access-control-allow-origin").isEmpty, "\(refused.fields)")
        #expect(refused.values("access-control-allow-methods").isEmpty, "\(refused.fields)")
        #expect(!rig.origin.requestLog().contains { $0.method == "OPTIONS" }, "preflights never reach the origin")
        await slow.stop()
        await rig.stop()
    }

    @Test("without --cors: nothing is added, the origin's CORS fields pass as sent, and OPTIONS (a preflight too) goes to the origin")
    func withoutCORS() async throws {
        var options = FillOptions.testing
        options.keepOpen = .seconds(300)
        let rig = try await ScriptedProxy(fill: options)
        try Self.script(rig, "plain.bin")
        try Self.script(rig, "theirs.bin", [("Access-Control-Allow-Origin", "https://origin-choice.example"), ("Vary", "Origin")])
        for arguments in [[], ["-r", "0-99"]] {
            let plain = try await rig.get("plain.bin", Self.page + arguments)
            #expect(plain.status == 200 || plain.status == 206, "\(plain)")
            #expect(!plain.fields.contains { $0.name.lowercased().hasPrefix("access-control-") }, "\(plain.fields)")
            #expect(plain.values("vary").isEmpty, "\(plain.fields)")
        }
        let quick = try #require(try await Self.quickAnswer(rig, "plain.bin", Self.page))
        #expect(
            !quick.fields.contains { $0.name.lowercased().hasPrefix("access-control-") } && quick.values("vary").isEmpty, "\(quick.fields)")
        let theirs = try await rig.get("theirs.bin", Self.page)
        #expect(theirs.values("access-control-allow-origin") == ["https://origin-choice.example"], "\(theirs.fields)")
        #expect(theirs.values("access-control-expose-headers").isEmpty && theirs.values("vary") == ["Origin"], "\(theirs.fields)")
        let preflight = try await rig.get("theirs.bin", Self.page + ["-X", "OPTIONS", "-H", "Access-Control-Request-Method: GET"])
        #expect(
            preflight.status == 200 && preflight.values("access-control-allow-origin") == ["https://origin-choice.example"], "\(preflight)")
        let forwarded = rig.requests("theirs.bin").filter { $0.method == "OPTIONS" }
        #expect(forwarded.count == 1 && forwarded.first?.header("access-control-request-method") == "GET", "\(rig.requests("theirs.bin"))")
        await rig.stop()
    }

    @Test("origins as a browser sends them: case and default ports folded; paths, credentials and junk refused")
    func originSyntax() {
        #expect(CORSPolicy.normalizedOrigin("HTTPS://Player.Example:443") == "https://player.example")
        #expect(CORSPolicy.normalizedOrigin("http://127.0.0.1:3000") == "http://127.0.0.1:3000")
        #expect(CORSPolicy.normalizedOrigin("http://[::1]:8080") == "http://[::1]:8080")
        #expect(CORSPolicy.normalizedOrigin("app://local") == "app://local")
        for bad in [
            "player.example", "https://player.example/", "https://a.example/path", "https://u@a.example", "https://", "https://a:b",
            "http://[]", "https://a.example?x", "*.example.com", "1http://a",
        ] {
            #expect(CORSPolicy.normalizedOrigin(bad) == nil, "\(bad)")
        }
    }
}

@Suite("sparsecache serve --cors", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(4)))
struct ProxyCORSCLITests {
    @Test(
        "serve --cors: bad values are usage errors naming the option (exit 64), repeated origins are each echoed, the config keys cors and cors-max-age work, --help names it"
    )
    func options() async throws {
        let scratch = try CLIScratch("serve-cors")
        let cacheDir = scratch.file("cache")
        let config = scratch.file("serve.conf")
        try "cors https://c.example\n".write(toFile: config, atomically: true, encoding: .utf8)
        let badConfig = scratch.file("bad.conf")
        try "cors c.example\n".write(toFile: badConfig, atomically: true, encoding: .utf8)
        for (arguments, words) in [
            (["--cors", "https://a.example/player"], "invalid --cors 'https://a.example/player'"),
            (["--cors", "a.example"], "invalid --cors"),
            (["--cors", "https://a.example", "--cors", ""], "invalid --cors ''"), (["--cors"], "--cors needs a value"),
            (["--cors", "*", "--cors-max-age", "-5"], "invalid --cors-max-age '-5'"),
            (["--cors-max-age", "60"], "--cors-max-age needs --cors"),
            (["--config", badConfig], "invalid --cors 'c.example'"),
        ] {
            let result = try await CLI.run(["serve", "--cache-dir", cacheDir, "--listen", "127.0.0.1:0"] + arguments)
            #expect(result.status == 64 && result.err.contains(words), "\(arguments): \(result)")
        }
        let help = try await CLI.run(["serve", "--help"])
        #expect(help.status == 0 && help.out.contains("--cors ORIGIN") && help.out.contains("--cors-max-age"), "\(help)")

        let files = try TemporaryDirectory("serve-cors-origin")
        defer { files.remove() }
        _ = try originFile(files.path, "a.bin", count: 5_000, seed: 7)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let (server, base) = try await ServeProcess.start(
            cacheDir: cacheDir, origin: origin.baseURL,
            extra: ["--cors", "https://a.example", "--cors", "http://b.example:8080", "--quiet"])
        for (page, echoed) in [
            ("https://a.example", "https://a.example"), ("http://b.example:8080", "http://b.example:8080"), ("https://c.example", nil),
        ] {
            let answer = try await Curl.run(base + "/a.bin", ["-H", "Origin: \(page)"])
            #expect(
                answer.status == 200 && answer.values("access-control-allow-origin") == (echoed.map { [$0] } ?? []),
                "\(page): \(answer.fields)")
        }
        server.kill()
        _ = try await server.finish()

        // From the config file; the command line's --cors-max-age with it.
        let (configured, configuredBase) = try await ServeProcess.start(
            cacheDir: cacheDir, origin: origin.baseURL, extra: ["--config", config, "--cors-max-age", "600", "--quiet"])
        let answer = try await Curl.run(configuredBase + "/a.bin", ["-H", "Origin: https://c.example"])
        #expect(answer.values("access-control-allow-origin") == ["https://c.example"], "\(answer.fields)")
        let preflight = try await Curl.run(
            configuredBase + "/a.bin", ["-X", "OPTIONS", "-H", "Origin: https://c.example", "-H", "Access-Control-Request-Method: GET"])
        #expect(preflight.status == 204 && preflight.values("access-control-max-age") == ["600"], "\(preflight)")
        configured.kill()
        _ = try await configured.finish()
    }
}
