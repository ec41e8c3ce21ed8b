// The time limits of origin exchanges: one timer for the process (OriginDeadlines) instead of a
// sleeping task per request. A wait past its limit fails with the reason; one that ended in time
// leaves its connection alone; an origin that never answers, or stops in the middle of a body,
// is a timeout.
import Foundation
import Testing

@testable import HTTPCache
@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

@Suite("Origin deadlines: one timer for every exchange's time limits", .timeLimit(.minutes(5)))
struct OriginDeadlineTests {
    @Test("a wait past its deadline fails with the reason; one that ended in time is left alone; the timer stops when nothing is armed")
    func deadlines() async throws {
        let listener = try TCPListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let deadlines = OriginDeadlines(tick: .milliseconds(10))
        #expect(!deadlines.isTicking, "the timer runs with nothing armed")
        let (late, lateServer) = try await connectedPair(listener)
        let (onTime, onTimeServer) = try await connectedPair(listener)
        defer {
            for connection in [late, lateServer, onTime, onTimeServer] { connection.close() }
        }

        let armedAt = ContinuousClock.now
        let failure = await #expect(throws: HTTPError.self) {
            try await deadlines.within(late, until: armedAt + .milliseconds(100), reason: "no answer in time") {
                _ = try await late.receive(maximum: 16)
            }
        }
        #expect(failure?.kind == .timedOut && failure?.detail == "no answer in time", "\(String(describing: failure))")
        #expect(ContinuousClock.now - armedAt >= .milliseconds(100), "closed before its deadline")

        let answered = try await deadlines.within(onTime, until: .now + .milliseconds(100), reason: "no answer in time") {
            try await onTimeServer.send([1, 2, 3])
            return try await onTime.receive(maximum: 16)
        }
        #expect(answered == [1, 2, 3])
        // Well past that deadline, the connection that answered in time still works.
        try await Task.sleep(for: .milliseconds(300))  // pacing: time must pass the deadline
        try await onTimeServer.send([4])
        #expect(try await onTime.receive(maximum: 16) == [4])
        #expect(deadlines.armedCount == 0)
        #expect(!deadlines.isTicking, "the timer still runs with nothing armed")
    }

    @Test("an origin that sends no head, or stops in the middle of a body, fails as a timeout")
    func originStalls() async throws {
        // Each answer waits until the client gives up and closes (EOF), then ends.
        let silent = try CannedOrigin { _, connection in _ = try? await connection.receive(maximum: 1) }
        defer { silent.stop() }
        let stopping = try CannedOrigin { _, connection in
            try await connection.send(Array("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789".utf8))
            _ = try? await connection.receive(maximum: 1)
        }
        defer { stopping.stop() }

        let noHead = try HTTPRangeSource(
            url: silent.url, timeout: .seconds(1), limiter: nil, transport: .automatic, pool: OriginConnectionPool())
        let headError = await #expect(throws: OriginError.self) { _ = try await noHead.fetch(nil, validator: nil) }
        #expect(headError?.kind == .timedOut, "\(String(describing: headError))")
        #expect(headError?.detail?.contains("no answer from the origin within") == true, "\(String(describing: headError))")

        // A limit the head meets even while the whole suite loads the machine (5 s did not, in
        // a full run: the canned origin reads the head a byte at a time on the busy pool).
        let cutShort = try HTTPRangeSource(
            url: stopping.url, timeout: .seconds(30), limiter: nil, transport: .automatic, pool: OriginConnectionPool())
        let response = try await cutShort.fetch(nil, validator: nil)
        var received = 0
        let bodyError = await #expect(throws: OriginError.self) {
            for try await chunk in response.body { received += chunk.count }
        }
        #expect(received == 10)
        #expect(bodyError?.kind == .timedOut, "\(String(describing: bodyError))")
        #expect(bodyError?.detail?.contains("timed out") == true, "\(String(describing: bodyError))")
    }
}
