// Waiting for a state instead of sleeping a guessed time: poll a condition until it holds or a
// deadline (a hang guard, never a timing assertion) passes.

/// Polls `condition` every `interval` until it is true or `timeout` (scaled as a hang guard,
/// ``hangGuardScale``) has passed; returns whether it became true. Use with `#expect` or
/// `#require`: `#expect(try await eventually { await cache.activity.fetchesInFlight == 0 })`.
/// The condition runs on the caller's actor (an actor's state can be the condition).
package func eventually(
    timeout: Duration = .seconds(30), interval: Duration = .milliseconds(10), isolation: isolated (any Actor)? = #isolation,
    _ condition: () async throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + timeout.asHangGuard
    while true {
        if try await condition() { return true }
        guard ContinuousClock.now < deadline else { return false }
        try await Task.sleep(for: interval)
    }
}

/// Like ``eventually(timeout:interval:_:)``, but throws `failure` when the deadline passes,
/// for setup that must reach a state before the test goes on.
package func waitUntil(
    timeout: Duration = .seconds(30), interval: Duration = .milliseconds(10), isolation: isolated (any Actor)? = #isolation,
    _ failure: @autoclosure () -> String, _ condition: () async throws -> Bool
) async throws {
    guard try await eventually(timeout: timeout, interval: interval, isolation: isolation, condition) else { throw WaitFailure(failure()) }
}

/// A state a test waited for never came.
package struct WaitFailure: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}
