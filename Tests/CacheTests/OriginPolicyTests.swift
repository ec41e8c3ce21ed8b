// Issue 17: a URL-mode proxy refuses local and private origins unless allowed (no server-side
// request forgery); a loopback server refuses foreign Host values (DNS rebinding); serve has a
// default budget.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@testable import SparseHTTP
import TestSupport

@Suite("Origin policy and Host check", .tags(.external), .unlessSkippingExternal)
struct OriginPolicyTests {
    @Test(
        "addresses: local, private, shared, link-local, multicast and embedded IPv4 are not global",
        arguments: [
            ("127.0.0.1", false), ("127.255.0.9", false), ("0.0.0.0", false), ("10.1.2.3", false), ("172.16.0.1", false),
            ("172.31.255.255", false), ("172.32.0.1", true), ("192.168.1.1", false), ("169.254.169.254", false),
            ("100.64.0.1", false), ("100.128.0.1", true), ("224.0.0.1", false), ("255.255.255.255", false), ("8.8.8.8", true),
            ("93.184.216.34", true), ("::", false), ("::1", false), ("fe80::1", false), ("fc00::1", false), ("fd12::1", false),
            ("ff02::1", false), ("::ffff:127.0.0.1", false), ("::ffff:8.8.8.8", true), ("64:ff9b::a9fe:a9fe", false),
            ("2606:4700::1111", true),
        ])
    func classification(address: String, global: Bool) throws {
        let parsed = try #require(IPAddress(numeric: address))
        #expect(parsed.isGlobal == global, "\(address)")
    }

    @Test("allow patterns: host, host:port, [v6]:port, *.domain; malformed ones are refused")
    func patterns() throws {
        let local = try #require(IPAddress(numeric: "127.0.0.1"))
        let exact = try #require(OriginAddressPolicy.Pattern("LocalHost:8080"))
        #expect(exact.host == "localhost" && exact.port == 8080 && !exact.wildcard)
        #expect(exact.matches(name: "localhost.", port: 8080, address: local) && !exact.matches(name: "localhost", port: 8081, address: local))
        let wild = try #require(OriginAddressPolicy.Pattern("*.corp.example"))
        #expect(wild.matches(name: "a.corp.example", port: 1, address: local) && !wild.matches(name: "corp.example", port: 1, address: local))
        let literal = try #require(OriginAddressPolicy.Pattern("127.0.0.1"))
        #expect(literal.matches(name: "2130706433", port: 5, address: local), "an address pattern matches the address, whatever the URL wrote")
        let v6 = try #require(OriginAddressPolicy.Pattern("[::1]:9000"))
        #expect(v6.host == "::1" && v6.port == 9000)
        for bad in ["", "*", "a:b", "a:0", "[::1", "*.a*.b", "a/b"] { #expect(OriginAddressPolicy.Pattern(bad) == nil, "\(bad)") }
        let policy = OriginAddressPolicy(allowing: [literal])
        let private10 = try #require(IPAddress(numeric: "10.0.0.1"))
        #expect(policy.permits(name: "x", port: 80, addresses: [local]) && !policy.permits(name: "x", port: 80, addresses: [local, private10]),
            "every address must pass")
    }

    @Test("URL mode: loopback origins in every numeric form are refused as 'not allowed', open and closed ports alike; --allow-origin admits")
    func urlModeRefusesLocalOrigins() async throws {
        let files = try TemporaryDirectory("ssrf-origin")
        _ = FileManager.default.createFile(atPath: files.path + "/secret.txt", contents: Data("TOP SECRET\n".utf8))
        let origin = try await OriginServer.nginx(root: files.path)
        defer { origin.stop() }
        let closedPort = try Loopback.freePort()
        let strict = try await ProxyFixture(origin: nil, allowedOrigins: [])
        let port = origin.port
        var bodies: Set<String> = []
        for host in ["127.0.0.1", "2130706433", "0x7f.1", "017700000001", "127.1", "localhost", "[::ffff:127.0.0.1]"] {
            for target in ["\(host):\(port)/secret.txt", "\(host):\(closedPort)/secret.txt"] {
                let result = try await Curl.run(strict.baseURL + "/x?url=" + Self.encoded("http://" + target))
                let body = String(decoding: result.body, as: UTF8.self)
                #expect(result.status == 403 && body.contains("not allowed") && !body.contains("SECRET"), "\(target): \(result)")
                bodies.insert(body.replacingOccurrences(of: String(port), with: "P").replacingOccurrences(of: String(closedPort), with: "P"))
            }
        }
        #expect(bodies.count == 7, "one refusal per host, the same for an open and a closed port: \(bodies)")
        #expect(await origin.bytesSent("secret.txt") == 0)
        // A client told to use the proxy as its HTTP proxy is refused the same way.
        let forward = try await Curl.run(origin.url("secret.txt").absoluteString, ["-x", strict.baseURL])
        #expect(forward.status == 403, "\(forward)")
        await strict.stop()

        let allowing = try await ProxyFixture(origin: nil, allowedOrigins: ["127.0.0.1:\(port)"])
        let allowed = try await Curl.run(allowing.baseURL + "/x?url=" + Self.encoded("http://127.0.0.1:\(port)/secret.txt"))
        #expect(allowed.status == 200 && allowed.body == Array("TOP SECRET\n".utf8), "\(allowed)")
        let otherPort = try await Curl.run(allowing.baseURL + "/x?url=" + Self.encoded("http://127.0.0.1:\(closedPort)/x"))
        #expect(otherPort.status == 403, "\(otherPort)")
        await allowing.stop()

        // Allowed but nothing listening: a 502 that does not say why (no port scanner).
        let wide = try await ProxyFixture(origin: nil, allowedOrigins: ["127.0.0.1"])
        let down = try await Curl.run(wide.baseURL + "/x?url=" + Self.encoded("http://127.0.0.1:\(closedPort)/x"))
        let text = String(decoding: down.body, as: UTF8.self).lowercased()
        #expect(down.status == 502 && !text.contains("refused") && !text.contains("errno") && !text.contains("connect"), "\(down)")
        await wide.stop()
    }

    @Test("Host check: on loopback a foreign Host gets 421, loopback names and --server-name ones are served")
    func hostCheck() throws {
        let check = HostCheck(listenHost: "127.0.0.1", names: ["media.lan"])
        func request(_ target: String, host: String?) -> HTTPRequestHead {
            HTTPRequestHead(method: "GET", target: target, headers: HTTPHeaders(host.map { [("Host", $0)] } ?? []))
        }
        for host in ["127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:8080", "127.9.9.9", "media.lan:8080", "media.lan."] {
            #expect(check.refusal(for: request("/a", host: host)) == nil, "\(host)")
        }
        // Brackets hold an IPv6 address (RFC 3986, section 3.2.2): a port inside them is not
        // taken apart a second time to find a loopback name.
        for host in ["evil.example", "evil.example:8080", "10.0.0.1", "localhost.evil.example", "[127.0.0.1:80]", "[localhost:1]"] {
            #expect(check.refusal(for: request("/a", host: host)) != nil, "\(host)")
        }
        #expect(check.refusal(for: request("http://evil.example/a", host: "evil.example")) == nil, "absolute form: a proxy client")
        #expect(check.refusal(for: request("/a", host: nil)) == nil, "no Host (HTTP/1.0)")
        // The host part of a Host value, as compared (worked out on bytes, Unicode lower-casing
        // only for what is not ASCII).
        let bare: [(String, String)] = [
            ("127.0.0.1:8080", "127.0.0.1"), ("LOCALHOST", "localhost"), ("[::1]:8080", "::1"), ("[::1]", "::1"), ("::1", "::1"),
            ("Media.LAN.:80", "media.lan"), ("media.lan..", "media.lan"), ("a:b:c", "a:b:c"), ("", ""), (":8080", ""),
            ("ÉVIL.example", "évil.example"), ("[fe80::1%eth0]:1", "fe80::1%eth0"),
        ]
        for (host, expected) in bare { #expect(HostCheck.bare(host) == expected, "\(host)") }
        #expect(!HostCheck(listenHost: "0.0.0.0", names: []).enforced)
        #expect(HostCheck(listenHost: "0.0.0.0", names: ["cache.lan"]).refusal(for: request("/a", host: "evil.example")) != nil)
    }

    @Test("serve: a foreign Host is 421 (DNS rebinding); the default budget is printed at start")
    func serveHostCheckAndBudget() async throws {
        let scratch = try CLIScratch("serve-host")
        let (running, base) = try await ServeProcess.start(cacheDir: scratch.file("cache"), origin: nil, extra: ["--server-name", "media.lan"])
        let rebound = try await Curl.run(base + "/x?url=http%3A%2F%2Fexample.invalid%2F", ["-H", "Host: evil.example"])
        #expect(rebound.status == 421 && String(decoding: rebound.body, as: UTF8.self).contains("Host"), "\(rebound)")
        let named = try await Curl.run(base + "/x", ["-H", "Host: media.lan:1234"])
        #expect(named.status == 400, "answered (no url parameter): \(named)")
        running.kill()
        let result = try await running.finish()
        #expect(result.err.contains("budget") && result.err.contains("a quarter of the free space"), "\(result.err)")
        let help = try await CLI.run(["serve", "--help"])
        #expect(help.out.contains("--allow-origin") && help.out.contains("--server-name") && help.out.contains("a quarter of the free space"))
    }

    static func encoded(_ url: String) -> String {
        url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }
}
