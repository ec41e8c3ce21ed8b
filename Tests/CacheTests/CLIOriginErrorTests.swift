// The CLI's exit statuses and messages for an origin's errors, which come from OriginError and
// HTTPError (docs/ARCHITECTURE.md, "Errors"), and for a port it cannot listen on.
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

@testable import SparseHTTP

#if canImport(Glibc)
import Glibc
#endif

@Suite("CLI: an origin's errors and a busy port, as exit statuses and messages", .serialized, .timeLimit(.minutes(4)))
struct CLIOriginErrorTests {
    @Test("fetch: a refused connect exits 69 naming it, a malformed answer 76 naming it")
    func fetchErrors() async throws {
        let scratch = try CLIScratch("cli-origin-errors")
        let closedPort = try Loopback.freePort()
        let refused = try await CLI.run([
            "fetch", "http://127.0.0.1:\(closedPort)/x.bin", "--cache-dir", scratch.file("cache"), "--output", scratch.file("out"),
        ])
        #expect(refused.status == 69, "\(refused)")
        #expect(refused.err.contains("connection refused") && refused.err.contains("127.0.0.1:\(closedPort)"), "\(refused)")

        let garbage = try CannedOrigin.text("SSH-2.0-OpenSSH_9.6\r\n")
        defer { garbage.stop() }
        let malformed = try await CLI.run(["fetch", garbage.url.absoluteString, "--cache-dir", scratch.file("cache"), "--output", scratch.file("out")])
        #expect(malformed.status == 76, "\(malformed)")
        #expect(malformed.err.contains("malformed response"), "\(malformed)")
    }

    @Test("serve on a port another socket holds exits 74 naming the address and the errno")
    func busyPort() async throws {
        let scratch = try CLIScratch("cli-busy-port")
        let holder = try CannedOrigin.text("HTTP/1.1 204 No Content\r\n\r\n")
        defer { holder.stop() }
        let port = holder.listener.port
        let busy = try await CLI.run(["serve", "--cache-dir", scratch.file("cache"), "--listen", "127.0.0.1:\(port)", "--admin-listen", "off"])
        #expect(busy.status == 74, "\(busy)")
        #expect(busy.err.contains("listen failed for '127.0.0.1:\(port)'") && busy.err.contains("errno \(EADDRINUSE)"), "\(busy)")
    }
}
