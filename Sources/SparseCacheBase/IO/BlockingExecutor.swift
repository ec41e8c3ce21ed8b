import Dispatch

/// Runs blocking work (pwrite, fdatasync, fallocate, ...) on a dispatch queue and resumes the
/// awaiting task when it finishes, so no blocking syscall ever runs on the cooperative pool.
///
/// Each resource gets two serial queues: one for its writes, one for its commit line (syncs
/// and index records), so a write never waits behind the resource's own fdatasync, and a slow
/// fdatasync of one resource never holds up another's. Public so that code beside the engine
/// (the CLI's own file I/O, the benchmarks' raw baselines) keeps the same rule the same way.
public struct BlockingExecutor: Sendable {
    private let queue: DispatchQueue

    /// A serial queue named `label`: the work given to one executor runs in order.
    public init(label: String) {
        queue = DispatchQueue(label: label)
    }

    /// Runs `work` on the queue and returns its result.
    ///
    /// The closure is `@Sendable` and created here, in a nonisolated function, so it never
    /// inherits an actor's isolation (which libdispatch on Linux would trap on).
    public func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        // A fault scope of the caller's task holds on the queue's thread too.
        let scope = FaultScopeBinding.toCarry
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            queue.async { @Sendable in
                if scope == 0 {
                    continuation.resume(with: Result { try work() })
                } else {
                    FaultScopeBinding.$current.withValue(scope) {
                        continuation.resume(with: Result { try work() })
                    }
                }
            }
        }
    }
}
