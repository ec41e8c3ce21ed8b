// Requests made to get past the proxy or its cache: fields a lenient origin reads as framing,
// a page built for one client's Cookie, a Host or a target that is not what it claims, a request
// line from HTTP/0.9. Each goes through the proxy in process to the scripted origin.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@testable import SparseHTTP
import TestSupport

@Suite("Hostile requests", .tags(.external), .unlessSkippingExternal)
struct HostileRequestTests {
    /// A POST whose body is framed by Content-Length for the proxy and by chunked for an origin
    /// that reads `Transfer_Encoding` as `Transfer-Encoding`: for that origin the body ends after
    /// `0\r\n\r\n`, and `GET /smuggled` is the next request on the connection.
    static func smuggling(_ path: String, extra: String = "") -> String {
        let body = "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: H\r\n\r\n"
        return "POST /\(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.utf8.count)\r\nTransfer_Encoding: chunked\r\n"
            + extra + "Connection: close\r\n\r\n" + body
    }

    /// How long an exchange sent with `Connection: close` may wait for the proxy to answer and
    /// close: a hang guard (it ends at the close), not a guess at how long the answer takes. A
    /// request the origin answers goes through the handler, which in a loaded parallel run can
    /// wait seconds for a thread of the cooperative pool.
    static let answered = Duration.seconds(60).asHangGuard

    /// The names of the request fields the origin received for `name`, in order.
    static func fieldNames(_ rig: ScriptedProxy, _ name: String) -> [[String]] {
        rig.requests(name).map { request in request.headers.compactMap(\.first) }
    }

    @Test("fields with '_' do not reach the origin (nginx's underscores_in_headers off): a lenient origin sees no smuggled request")
    func underscoreFieldsDropped() async throws {
        let rig = try await ScriptedProxy()
        let port = rig.proxy.server.port
        try rig.script("x", [("Cache-Control", "no-store")], body: "ok") { $0.lenient = true }
        try rig.script("page", [("Cache-Control", "max-age=60")], body: "page") { $0.lenient = true }
        // A forwarded method, and a GET the cache fills.
        let post = await RawHTTP.exchange(port: port, Self.smuggling("x", extra: "X_Custom: 1\r\n"), timeout: Self.answered)
        let get = await RawHTTP.exchange(
            port: port, "GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\nContent_Length: 5\r\nX_Custom: 1\r\nConnection: close\r\n\r\n",
            timeout: Self.answered)
        #expect(post.statuses == [200] && get.statuses == [200], "\(post.text)\n\(get.text)")
        let names = Self.fieldNames(rig, "x") + Self.fieldNames(rig, "page")
        #expect(names.count == 2, "\(rig.origin.requestLog())")
        for fields in names {
            #expect(!fields.contains { $0.contains("_") }, "the origin received \(fields)")
        }
        // The origin answers what it read as a second request right after the first; give it
        // a moment to log one (this can only hide a failure, never make one).
        try await Task.sleep(for: .milliseconds(500))
        #expect(rig.count("smuggled") == 0, "\(rig.origin.requestLog())")
        await rig.stop()
    }

    @Test("--underscores-in-headers: fields with '_' reach the origin, never ones that read as framing or hop-by-hop fields")
    func underscoreFieldsAllowed() async throws {
        var options = ProxyFixture.defaultOptions
        options.underscoresInFieldNames = true
        let rig = try await ScriptedProxy(options: options)
        try rig.script("x", [("Cache-Control", "no-store")], body: "ok") { $0.lenient = true }
        let post = await RawHTTP.exchange(
            port: rig.proxy.server.port,
            Self.smuggling("x", extra: "X_Custom: 1\r\nContent_length: 5\r\nKeep_Alive: 1\r\nProxy_Authorization: Basic eDp5\r\n"),
            timeout: Self.answered)
        #expect(post.statuses == [200], "\(post.text)")
        let names = Self.fieldNames(rig, "x")
        #expect(names.count == 1 && names.first?.contains("X_Custom") == true, "\(names)")
        let framing = ["transfer_encoding", "content_length", "keep_alive", "proxy_authorization"]
        #expect(!(names.first ?? []).contains { framing.contains($0.lowercased()) }, "\(names)")
        try await Task.sleep(for: .milliseconds(500))  // a window for a smuggled request, as above
        #expect(rig.count("smuggled") == 0, "\(rig.origin.requestLog())")
        // Dropping them is the server's default.
        #expect(!HTTPServer.Options().underscoresInFieldNames)
        await rig.stop()
    }

    @Test("sparsecache serve: '_' fields dropped by default, passed with the config key underscores-in-headers and the flag; --help names it")
    func underscoreOptionInServe() async throws {
        let scratch = try CLIScratch("serve-underscores")
        let files = try TemporaryDirectory("serve-underscores-origin")
        defer { files.remove() }
        let origin = try await OriginServer.scripted(root: files.path)
        defer { origin.stop() }
        var script = OriginScript(status: 200, headers: [("Cache-Control", "no-store")], body: "ok")
        script.lenient = true
        try script.write(root: files.path, name: "x")
        let config = scratch.file("serve.conf")
        try "# an origin that needs X_ fields\nunderscores-in-headers\n".write(toFile: config, atomically: true, encoding: .utf8)
        for (index, extra) in [[], ["--config", config], ["--underscores-in-headers"]].enumerated() {
            let (server, base) = try await ServeProcess.start(
                cacheDir: scratch.file("cache\(index)"), origin: origin.baseURL, extra: extra + ["--admin-listen", "off"])
            let port = Int(base.split(separator: ":").last ?? "") ?? 0
            let answer = await RawHTTP.exchange(
                port: port, "GET /x?\(index) HTTP/1.1\r\nHost: 127.0.0.1\r\nX_Custom: 1\r\nTransfer_Encoding: chunked\r\nConnection: close\r\n\r\n",
                timeout: Self.answered)
            server.kill()
            _ = try await server.finish()
            #expect(answer.statuses == [200], "\(extra): \(answer.text)")
            let seen = origin.requestLog().filter { $0.path == "/x?\(index)" }.map { $0.headers.compactMap(\.first) }
            #expect(seen.count == 1, "\(extra): \(origin.requestLog())")
            #expect(seen.first?.contains("X_Custom") == !extra.isEmpty, "\(extra): \(seen)")
            #expect(seen.first?.contains("Transfer_Encoding") == false, "\(extra): \(seen)")
        }
        let help = try await CLI.run(["serve", "--help"])
        #expect(help.status == 0 && help.out.contains("--underscores-in-headers"), "\(help)")
    }

    @Test("web cache deception: an answer to a request with Cookie and only an old Last-Modified is not served to the next client")
    func cookiePageNotShared() async throws {
        let rig = try await ScriptedProxy()
        try FileManager.default.createDirectory(atPath: rig.files.path + "/acct", withIntermediateDirectories: true)
        let yearOld = ScriptedProxy.httpDate(-365 * 86_400)
        // The origin's page depends on the session: the script is rewritten between the clients.
        func page(_ session: String) throws {
            try rig.script("acct/x.css", [("Content-Type", "text/html"), ("Last-Modified", yearOld)], body: "account page of \(session)")
        }
        try page("victim")
        let victim = try await rig.get("acct/x.css", ["-H", "Cookie: session=victim"])
        #expect(victim.status == 200 && victim.text == "account page of victim", "\(victim)")
        try page("attacker")
        let attacker = try await rig.get("acct/x.css", ["-H", "Cookie: session=attacker"])
        #expect(attacker.status == 200 && attacker.text == "account page of attacker", "\(attacker) \(attacker.text)")
        #expect(!attacker.isHit && rig.count("acct/x.css") == 2)

        // With explicit freshness the origin says it may be shared: stored, and reused.
        try rig.script("acct/shared.css", [("Cache-Control", "max-age=600"), ("Last-Modified", yearOld)], body: "shared")
        _ = try await rig.get("acct/shared.css", ["-H", "Cookie: session=victim"])
        let reused = try await rig.get("acct/shared.css", ["-H", "Cookie: session=attacker"])
        #expect(reused.text == "shared" && reused.isHit && rig.count("acct/shared.css") == 1, "\(reused)")
        // `public` alone: stored, but never heuristically fresh: every use asks the origin.
        try rig.script("acct/public.css", [("Cache-Control", "public"), ("Last-Modified", yearOld)], body: "public")
        _ = try await rig.get("acct/public.css", ["-H", "Cookie: session=victim"])
        let revalidated = try await rig.get("acct/public.css", ["-H", "Cookie: session=attacker"])
        #expect(revalidated.text == "public" && !revalidated.isHit && rig.count("acct/public.css") == 2, "\(revalidated)")
        // Without Cookie the heuristic applies (RFC 9111 4.2.2).
        try rig.script("acct/plain.css", [("Last-Modified", yearOld)], body: "plain")
        _ = try await rig.get("acct/plain.css")
        let heuristic = try await rig.get("acct/plain.css")
        #expect(heuristic.isHit && rig.count("acct/plain.css") == 1, "\(heuristic)")
        await rig.stop()
    }

    @Test("400 at once for an HTTP/0.9 request line; 400 for a Host with a path and a path with %00, which reach no origin (RFC 9112 3.2)")
    func requestLineAndHost() async throws {
        var options = ProxyFixture.defaultOptions
        // Far longer than the exchange waits: an answer can only come from the request line.
        options.headTimeout = .seconds(120)
        let rig = try await ScriptedProxy(options: options)
        let port = rig.proxy.server.port
        try rig.script("x", [("Cache-Control", "max-age=60")], body: "ok")
        let old = await RawHTTP.exchange(port: port, "GET /x\r\n", timeout: .seconds(30))
        #expect(old.statuses == [400] && old.closedByServer, "\(old.text)")
        let pathInHost = await RawHTTP.exchange(port: port, "GET /x HTTP/1.1\r\nHost: 127.0.0.1:\(port)/x\r\nConnection: close\r\n\r\n")
        #expect(pathInHost.statuses == [400], "\(pathInHost.text)")
        let nul = await RawHTTP.exchange(port: port, "GET /x%00.css HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        #expect(nul.statuses == [400], "\(nul.text)")
        #expect(rig.origin.requestLog().isEmpty, "\(rig.origin.requestLog())")
        let fine = await RawHTTP.exchange(port: port, "GET /x HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n", timeout: Self.answered)
        #expect(fine.statuses == [200], "\(fine.text)")
        await rig.stop()
    }
}
