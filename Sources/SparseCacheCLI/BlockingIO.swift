import Dispatch

/// The CLI's own file and pipe I/O (`--input`, `--output`, standard input and output) runs on
/// this queue, never on the cooperative pool: a full pipe or a slow disk must not hold one of
/// the pool's threads (two on a two-core machine) while the engine needs them.
enum BlockingIO {
    private static let queue = DispatchQueue(label: "sparsecache.cli.io")

    /// Runs `work` on the queue and returns its result. The closure is `@Sendable` and the
    /// dispatch block is made here, in a nonisolated function.
    static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            queue.async(execute: { @Sendable in continuation.resume(with: Result { try work() }) })
        }
    }
}
