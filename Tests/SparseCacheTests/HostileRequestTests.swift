// Requests made to get past the proxy or its cache: fields a lenient origin reads as framing,
// a page built for one client's Cookie, a Host or a target that is not what it claims, a request
// line from HTTP/0.9. Each goes through the proxy in process to the scripted origin.
import Foundation
import Testing

@testable import HTTPCache
@testable import SparseHTTP

@Suite("Hostile requests")
struct HostileRequestTests {
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
        let fine = await RawHTTP.exchange(port: port, "GET /x HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n")
        #expect(fine.statuses == [200], "\(fine.text)")
        await rig.stop()
    }
}
