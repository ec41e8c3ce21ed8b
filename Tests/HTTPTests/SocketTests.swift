#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Foundation
import Synchronization
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

/// The non-blocking sockets under the origin client and the server: a connection closed from
/// another thread while its own task is in a call.
@Suite("Sockets: closing while a call is in progress", .timeLimit(.minutes(10 * hangGuardScale)))
struct SocketTests {
    /// A connected pair on loopback: (the client's end, the server's end).
    static func pair(_ listener: TCPListener) async throws -> (TCPConnection, TCPConnection) {
        async let accepted = listener.accept()
        let client = try await TCPConnection.connect(host: "127.0.0.1", port: listener.port, resolver: BlockingExecutor(label: "test"))
        return (client, try await accepted)
    }

    @Test("an accepted client is named address:port, an IPv6 one [address]:port, as the access log and the per-address limit read it")
    func peerNames() async throws {
        for host in ["127.0.0.1", "::1"] {
            let listener: TCPListener
            do {
                listener = try TCPListener(host: host, port: 0)
            } catch {
                continue  // No IPv6 on this machine.
            }
            defer { listener.close() }
            async let accepted = listener.accept()
            let client = try await TCPConnection.connect(host: host, port: listener.port, resolver: BlockingExecutor(label: "test"))
            let server = try await accepted
            let bracketed = host.contains(":") ? "[\(host)]" : host
            #expect(server.peer.wholeMatch(of: /(.+):(\d+)/)?.1 == Substring(bracketed), "\(server.peer)")
            let port = Int(server.peer.split(separator: ":").last ?? "") ?? 0
            #expect(port > 0 && port < 65536, "\(server.peer)")
            #expect(ConnectionSlots.address(ofPeer: server.peer) == bracketed)
            client.close()
            server.close()
        }
    }

    @Test("a numeric address needs no resolver: 127.0.0.1 and ::1 resolve while the resolver's queue is stuck; a name still goes to it")
    func numericWithoutResolver() async throws {
        let stuck = BlockingExecutor(label: "stuck resolver")
        let gate = DispatchSemaphore(value: 0)
        let holder = Task { try await stuck.run { gate.wait() } }
        // Bounded: a resolve that waits for the stuck queue fails here instead of hanging.
        let numeric = try await withThrowingTaskGroup(of: [[IPAddress]]?.self) { group in
            group.addTask {
                let v4 = try await TCPConnection.resolve(host: "127.0.0.1", port: 8080, resolver: stuck)
                let v6 = try await TCPConnection.resolve(host: "::1", port: 8080, resolver: stuck)
                return [v4.compactMap(IPAddress.init), v6.compactMap(IPAddress.init)]
            }
            group.addTask {
                try await Task.sleep(for: .seconds(30))  // the bound: a hang guard
                return nil
            }
            let first = try await group.next() ?? nil
            group.cancelAll()
            gate.signal()
            return first
        }
        #expect(numeric == [[.v4(0x7F00_0001)], [IPAddress(numeric: "::1")!]], "numeric addresses waited for the resolver")
        try await holder.value
        let named = try await TCPConnection.resolve(host: "localhost", port: 8080, resolver: stuck)
        #expect(!named.isEmpty)
    }

    @Test("a descriptor number stays open while a call uses it, though the connection was closed meanwhile; then it is given back")
    func numberHeldDuringCall() async throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await Self.pair(listener)
        defer { server.close() }
        let descriptor = client.descriptor
        var sourcesGone = false
        _ = try descriptor.use { fd -> Int32 in
            client.close("cancelled")
            // The reactor's registration has ended: the number must not go back to the kernel
            // now, under the call's feet.
            for _ in 0..<500 where !descriptor.sourcesCancelled { usleep(10_000) }
            sourcesGone = descriptor.sourcesCancelled
            #expect(fcntl(fd, F_GETFD) != -1, "the descriptor was closed while a call used it")
            return fd
        }.unwrapped("the descriptor was given back before the connection was closed")
        #expect(sourcesGone, "the readiness sources were never cancelled")
        #expect(descriptor.use { _ in true } == nil, "a closed connection's descriptor was handed out after its last call")
        await #expect(throws: HTTPError.self) { _ = try await client.receive(maximum: 16) }
        await #expect(throws: HTTPError.self) { try await client.send([1, 2, 3]) }
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
            // A moment for the closes to free the numbers (not observable; nothing is asserted on it).
            try await Task.sleep(for: .milliseconds(20))
            // The next connection (here, the one the yield made room for) likely gets the
            // freed number.
            let (next, nextServer) = try await Self.pair(listener)
            let message = Array("round \(round): bytes for the new connection only".utf8)
            try await nextServer.send(message)
            // A window for the bytes to arrive, where a wrong read would take them.
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

@Suite("Sockets: the reactor's edge-triggered waits", .timeLimit(.minutes(10 * hangGuardScale)))
struct SocketReactorTests {
    /// The identity of the event loop that owns the calling thread, nil off the loops.
    private static var currentLoop: ObjectIdentifier? { SocketReactor.loops.first { $0.ownsCurrentThread }.map(ObjectIdentifier.init) }

    @Test("a server's handler runs on its connection's event loop; work it starts preferring the loop stays there, and it comes back there after a wait on another thread")
    func handlersRunOnTheirLoop() async throws {
        let problems = Lock<[String]>([])
        var options = HTTPServer.Options()
        options.port = 0
        let server = try HTTPServer.start(options: options, log: { _ in }) { request, _, response in
            let loop = Self.currentLoop
            var found: [String] = []
            if loop == nil { found.append("\(request.target): the handler ran off the loops") }
            if LoopExecutor.current.map({ ObjectIdentifier($0 as AnyObject) }) != loop {
                found.append("\(request.target): the task does not name its thread's loop as the loop of its work")
            }
            let background = await Task(executorPreference: LoopExecutor.current) { Self.currentLoop }.value
            if background != loop { found.append("\(request.target): work it started ran on another thread") }
            // Resumed by a task on the cooperative pool: the loop takes the job (woken from
            // epoll_wait by its eventfd when it slept).
            _ = await Task.detached { Int.random(in: 0..<10) }.value
            if Self.currentLoop != loop { found.append("\(request.target): resumed on another thread") }
            if !found.isEmpty { problems.withLock { $0 += found } }
            try await response.respond(status: 200, message: "ok")
        }
        // Connections from threads of their own, several requests each: they spread over the
        // loops.
        let statuses = await withTaskGroup(of: [Int].self) { group in
            for client in 0..<8 {
                group.addTask {
                    let requests = (0..<4).map { "GET /\(client)-\($0) HTTP/1.1\r\nHost: x\r\n\r\n" }.joined()
                    let last = "GET /\(client)-last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    return await RawHTTP.exchange(port: server.port, requests + last, timeout: .seconds(60)).statuses
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        await server.shutdown(grace: .seconds(1))
        #expect(statuses.count == 40 && statuses.allSatisfy { $0 == 200 }, "\(statuses)")
        #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 })")
    }

    @Test("jobs from other threads reach a sleeping loop and none is lost: 2,000 tasks that prefer the loops each hop off and back")
    func loopsRunEveryJob() async throws {
        let loops = SocketReactor.loops
        let wrong = WrongThreads()
        let finished = await withTaskGroup(of: Int.self) { group in
            for index in 0..<2_000 {
                let loop = loops[index % loops.count]
                group.addTask(executorPreference: loop) {
                    let mine = ObjectIdentifier(loop)
                    if Self.currentLoop != mine { wrong.count.add(1, ordering: .relaxed) }
                    await Task.yield()
                    // Off to the cooperative pool and back: the resume comes from another thread.
                    _ = await Task.detached { index &* 3 }.value
                    if Self.currentLoop != mine { wrong.count.add(1, ordering: .relaxed) }
                    if index % 100 == 0 { try? await Task.sleep(for: .milliseconds(1)) }  // a timer's resume too
                    return 1
                }
            }
            return await group.reduce(0, +)
        }
        #expect(finished == 2_000)
        #expect(wrong.count.load(ordering: .relaxed) == 0, "jobs that ran on another thread than their loop's")
    }

    @Test("a new client stays on the loop that accepted it unless another loop serves fewer clients; then the first serving the fewest")
    func acceptedClientsLoop() {
        #expect(SocketReactor.loopForClient(acceptedBy: 0, clients: [0, 0]) == 0)
        #expect(SocketReactor.loopForClient(acceptedBy: 1, clients: [3, 3]) == 1)
        #expect(SocketReactor.loopForClient(acceptedBy: 0, clients: [1, 0]) == 1)
        #expect(SocketReactor.loopForClient(acceptedBy: 1, clients: [2, 5, 2, 4]) == 0)
        #expect(SocketReactor.loopForClient(acceptedBy: 2, clients: [2, 5, 2, 4]) == 2)
        #expect(SocketReactor.loopForClient(acceptedBy: 0, clients: [7]) == 0)
        // A burst of clients on an idle server spreads evenly although one loop accepts all.
        var clients = [0, 0]
        for _ in 0..<32 { clients[SocketReactor.loopForClient(acceptedBy: 0, clients: clients)] += 1 }
        #expect(clients == [16, 16])
    }

    @Test("every loop accepts: a new client is taken and answered by another loop while one loop's thread is busy")
    func everyLoopAccepts() async throws {
        let loops = SocketReactor.loops
        guard loops.count > 1 else { return }  // One processor: one loop takes every client.
        var options = HTTPServer.Options()
        options.port = 0
        let server = try HTTPServer.start(options: options, log: { _ in }) { _, _, response in
            try await response.respond(status: 200, message: "ok")
        }
        for busy in loops.indices {
            // Holds loop `busy`'s thread (at most 10 s) until the client has its answer.
            let release = Atomic<Bool>(false), holding = Atomic<Bool>(false), heldToTheEnd = Atomic<Bool>(false)
            let blocker = Task(executorPreference: loops[busy]) {
                holding.store(true, ordering: .releasing)
                let deadline = ContinuousClock.now + .seconds(10)
                while !release.load(ordering: .acquiring) {
                    if ContinuousClock.now >= deadline {
                        heldToTheEnd.store(true, ordering: .releasing)
                        return
                    }
                    usleep(200)
                }
            }
            try await waitUntil("loop \(busy)'s thread was never held") { holding.load(ordering: .acquiring) }
            // Clients of other tests must not make the busy loop look the least loaded: the
            // loop that accepts hands a client to the loop serving the fewest.
            loops[busy].clients.add(1_000_000, ordering: .relaxed)
            defer { loops[busy].clients.subtract(1_000_000, ordering: .relaxed) }
            let exchange = await RawHTTP.exchange(port: server.port, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: .seconds(30))
            release.store(true, ordering: .releasing)
            await blocker.value
            #expect(exchange.statuses == [200], "loop \(busy) busy: \(exchange.statuses)")
            let waited = heldToTheEnd.load(ordering: .acquiring)
            #expect(!waited, "loop \(busy) busy: the client waited for that loop")
        }
        await server.shutdown(grace: .seconds(1))
    }

    @Test("each loop's thread carries its name for top -H, perf and /proc (sc-loop-N)")
    func loopThreadsNamed() throws {
        let loops = SocketReactor.loops
        // The loops start with the first use of `loops`; each names itself when its thread runs.
        var names: [String] = []
        for _ in 0..<200 {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            names = tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
                .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            if (0..<loops.count).allSatisfy({ names.contains("sc-loop-\($0)") }) { break }
            Thread.sleep(forTimeInterval: 0.01)
        }
        for number in 0..<loops.count { #expect(names.contains("sc-loop-\(number)"), "thread names: \(names.sorted())") }
    }

    private final class WrongThreads: Sendable {
        let count = Atomic<Int>(0)
    }

    @Test("an edge that came while nobody waited is kept: the next wait returns at once, and only that one")
    func edgeKept() async throws {
        let readiness = Readiness()
        readiness.signal()
        // Without the kept edge this waits for ever (the suite's time limit fails it).
        try await readiness.wait()
        // The edge was used up: a second wait suspends until the next signal.
        let waited = Task { try await readiness.wait() }
        // A chance for it to suspend first (not observable; a kept edge would end it anyway).
        try await Task.sleep(for: .milliseconds(50))
        readiness.signal()
        try await waited.value
        readiness.close(HTTPError(.closed, operation: "test", detail: "closed"))
        await #expect(throws: HTTPError.self) { try await readiness.wait() }
        readiness.signal()
        await #expect(throws: HTTPError.self, "a signal after the close does not reopen it") { try await readiness.wait() }
    }

    @Test("a close wakes the waiter with the reason; cancelling the waiting task wakes it with CancellationError")
    func closeAndCancelWake() async throws {
        let readiness = Readiness()
        let waiting = Task { try await readiness.wait() }
        // A chance for the waits to suspend first (not observable; a close or a cancellation
        // before the wait ends it the same way).
        try await Task.sleep(for: .milliseconds(20))
        readiness.close(HTTPError(.closed, operation: "test", detail: "gone"))
        await #expect(throws: HTTPError.self) { try await waiting.value }
        let other = Readiness()
        let cancelled = Task { try await other.wait() }
        try await Task.sleep(for: .milliseconds(20))
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
    }

    @Test("a head and a body sent together arrive whole and in order through a slow reader (partial sendmsg)")
    func sendTwoBuffers() async throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await SocketTests.pair(listener)
        defer {
            client.close()
            server.close()
        }
        // Bytes that depend on their position, so a lost, repeated or reordered piece shows.
        let head = (0..<333).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let body = (0..<(6 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 11) }
        let sending = Task { try await server.send(head, body) }
        var got: [UInt8] = []
        got.reserveCapacity(head.count + body.count)
        while got.count < head.count + body.count {
            // Slow at first, so the sender's window fills and sendmsg sends part of a buffer.
            if got.count < 1 << 20 { try await Task.sleep(for: .milliseconds(2)) }
            let more = try await client.receive(maximum: 64 << 10)
            if more.isEmpty { break }
            got += more
        }
        try await sending.value
        #expect(got.count == head.count + body.count)
        #expect(got == head + body, "bytes out of order or lost")
    }

    @Test("descriptors go back to the kernel when connections close (the registration ends, so nothing keeps one)")
    func descriptorsReleased() async throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        var kept = 0
        for _ in 0..<200 {
            let (client, server) = try await SocketTests.pair(listener)
            try await client.send([1])
            _ = try await server.receive(maximum: 1)
            client.close()
            server.close()
            // Given back means closed: the registration ended (its cancel ran) and no call used
            // the number. Counting /proc/self/fd would see every other suite's files too.
            for descriptor in [client.descriptor, server.descriptor] where descriptor.use({ _ in true }) != nil || !descriptor.sourcesCancelled {
                kept += 1
            }
        }
        #expect(kept == 0, "\(kept) of 400 descriptors still open after their connections closed")
    }
}

extension Optional {
    fileprivate func unwrapped(_ message: String) throws -> Wrapped {
        guard let self else { throw SparseCacheError(.invalidArgument, operation: "test", detail: message) }
        return self
    }
}
