// One test at a time, across suites and test targets, for what is process-wide: power-loss
// recording covers one directory per process, and every test target runs in the same test
// process, so the suites that record take this trait beside `.serialized`.
import Testing

/// A lock that suspends its waiters (never spins), first come first served.
package actor AsyncExclusion {
    private var held = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    package init() {}

    package func acquire() async {
        guard held else {
            held = true
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    package func release() {
        if waiters.isEmpty {
            held = false
        } else {
            waiters.removeFirst().resume()
        }
    }

    /// Runs `body` holding the lock.
    package func run<T: Sendable>(_ body: @Sendable () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }
}

/// Runs a whole suite while no other suite with this trait runs.
package struct PowerLossRecordingTrait: SuiteTrait, TestScoping {
    package static let exclusion = AsyncExclusion()

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await Self.exclusion.run { try await function() }
    }
}

extension Trait where Self == PowerLossRecordingTrait {
    /// The suite records power loss (``PowerLoss``, one directory per process): it runs alone
    /// among the suites that do, whichever test target they are in.
    package static var powerLossRecording: Self { PowerLossRecordingTrait() }
}
