// `serve --eviction`: the policy's name is checked before anything starts.
import Foundation
import Testing
import TestSupport

@Suite("Eviction option")
struct EvictionCLITests {
    @Test("serve --eviction: an unknown policy is a usage error naming it and the accepted ones; --help lists the option")
    func evictionOption() async throws {
        let scratch = try CLIScratch("serve-eviction")
        defer { scratch.remove() }
        let result = try await CLI.run(["serve", "--cache-dir", scratch.file("cache"), "--listen", "127.0.0.1:0", "--eviction", "arc"])
        #expect(result.status == 64, "\(result)")
        #expect(result.err.contains("invalid --eviction 'arc'") && result.err.contains("lru, sfifo"), "\(result)")
        let help = try await CLI.run(["serve", "--help"])
        #expect(help.status == 0 && help.out.contains("--eviction POLICY"), "\(help)")
    }
}
