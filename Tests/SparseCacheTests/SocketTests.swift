#if canImport(Glibc)
import Glibc
#endif
import Testing

@testable import SparseCacheEngine
@testable import SparseHTTP

/// The non-blocking sockets under the origin client and the server: a connection closed from
/// another thread while its own task is in a call.
@Suite("Sockets: closing while a call is in progress", .timeLimit(.minutes(2)))
struct SocketTests {
    /// A connected pair on loopback: (the client's end, the server's end).
    static func pair(_ listener: TCPListener) async throws -> (TCPConnection, TCPConnection) {
        async let accepted = listener.accept()
        let client = try await TCPConnection.connect(host: "127.0.0.1", port: listener.port, resolver: BlockingExecutor(label: "test"))
        return (client, try await accepted)
    }

    @Test("a descriptor number stays open while a call uses it, though the connection was closed meanwhile; then it is given back")
    func numberHeldDuringCall() async throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await Self.pair(listener)
        defer { server.close() }
        let descriptor = client.descriptor
        var sourcesGone = false
        let number = try descriptor.use { fd -> Int32 in
            client.close("cancelled")
            // Both readiness sources are cancelled (on the sockets queue): before the fix this
            // is when the number went back to the kernel, under the call's feet.
            for _ in 0..<500 where !descriptor.sourcesCancelled { usleep(10_000) }
            sourcesGone = descriptor.sourcesCancelled
            #expect(fcntl(fd, F_GETFD) != -1, "the descriptor was closed while a call used it")
            return fd
        }.unwrapped("the descriptor was given back before the connection was closed")
        #expect(sourcesGone, "the readiness sources were never cancelled")
        #expect(number >= 0)
        #expect(descriptor.use { _ in true } == nil, "a closed connection's descriptor was handed out after its last call")
        await #expect(throws: SparseCacheError.self) { _ = try await client.receive(maximum: 16) }
        await #expect(throws: SparseCacheError.self) { try await client.send([1, 2, 3]) }
        #expect(!client.isIdleUsable)
    }

    @Test("a receive after the connection was closed from another task fails; it never reads the socket that took its number")
    func receiveAfterClose() async throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        var stolen = 0
        for round in 0..<20 {
            let (old, oldServer) = try await Self.pair(listener)
            // Closed from elsewhere, as a fetch that yields its connection is: its reader may
            // still ask for the next chunk.
            old.close("cancelled")
            oldServer.close()
            try await Task.sleep(for: .milliseconds(20))
            // The next connection (here, the one the yield made room for) likely gets the
            // freed number.
            let (next, nextServer) = try await Self.pair(listener)
            let message = Array("round \(round): bytes for the new connection only".utf8)
            try await nextServer.send(message)
            try await Task.sleep(for: .milliseconds(20))
            do {
                let taken = try await old.receive(maximum: 4096)
                stolen += taken.count
                Issue.record("round \(round): a closed connection received \(taken.count) bytes: \(String(decoding: taken, as: UTF8.self))")
                break
            } catch {
                // Closed: as it should be.
            }
            var got: [UInt8] = []
            while got.count < message.count {
                let more = try await next.receive(maximum: 4096)
                if more.isEmpty { break }
                got += more
            }
            #expect(got == message, "round \(round): the new connection lost bytes to the closed one")
            next.close()
            nextServer.close()
        }
        #expect(stolen == 0)
    }
}

extension Optional {
    fileprivate func unwrapped(_ message: String) throws -> Wrapped {
        guard let self else { throw SparseCacheError(.invalidArgument, operation: "test", detail: message) }
        return self
    }
}
