// Long CPU-bound tests (damage sweeps, fuzzing, crash and power-loss sweeps) run on a thread
// of their own instead of the cooperative pool. The pool has one thread per core (two on the
// CI machine); a sweep on it holds a pool thread for seconds at a time, and the loopback
// servers and clients of the tests running beside it wait behind it until their timeouts
// fire. On a thread of its own a sweep competes for the cores through the kernel's scheduler,
// which slices in milliseconds, and the pool stays free for the network tests.
//
// How deep the sweeps go is one knob, `SPARSECACHE_TEST_DEPTH`: unset (standard) sizes keep
// the whole suite well inside CI's 20 minutes on two cores; `deep` runs the exhaustive sizes
// (every bit of an index, the long fuzz runs) for a release or a change to the formats.
import Foundation
@_spi(Locking) import SparseCacheEngine

/// How far the sweeps go: `SPARSECACHE_TEST_DEPTH=deep` for the exhaustive sizes.
package enum TestDepth {
    package static let isDeep = ProcessInfo.processInfo.environment["SPARSECACHE_TEST_DEPTH"] == "deep"

    /// `standard` normally, `deep` under `SPARSECACHE_TEST_DEPTH=deep`; a specific variable
    /// (`SPARSECACHE_FUZZ_ITERATIONS` and the like) wins over both when set.
    package static func size(_ standard: Int, deep: Int, override variable: String? = nil) -> Int {
        if let variable, let text = ProcessInfo.processInfo.environment[variable], let value = Int(text) { return value }
        return isDeep ? deep : standard
    }
}

/// A task executor with one thread of its own: jobs run in the order they were enqueued. Default
/// actors a task calls while it prefers this executor run there too (SE-0417), so a whole
/// sweep, actors included, stays off the cooperative pool.
package final class DedicatedThreadExecutor: TaskExecutor, Sendable {
    private struct Queue: ~Copyable {
        var jobs: [UnownedJob] = []
        var stopped = false
    }

    private let queue = Lock(Queue())
    private let wakeup = DispatchSemaphore(value: 0)

    package init(name: String) {
        let thread = Thread { [self] in loop() }
        thread.name = name
        thread.start()
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let taken = queue.withLock { queue in
            guard !queue.stopped else { return false }
            queue.jobs.append(job)
            return true
        }
        // A preference is only a preference: a job that comes after the end runs on the pool.
        guard taken else { return globalConcurrentExecutor.enqueue(ExecutorJob(job)) }
        wakeup.signal()
    }

    /// Ends the thread once the jobs queued so far have run; later jobs go to the pool.
    package func stop() {
        queue.withLock { $0.stopped = true }
        wakeup.signal()
    }

    private func loop() {
        while true {
            wakeup.wait()
            while let job = next() { job.runSynchronously(on: asUnownedTaskExecutor()) }
            if queue.withLock({ $0.stopped && $0.jobs.isEmpty }) { return }
        }
    }

    private func next() -> UnownedJob? {
        queue.withLock { $0.jobs.isEmpty ? nil : $0.jobs.removeFirst() }
    }
}

/// Runs `body` on a thread of its own (see the top of this file) and returns its result.
package func offPool<T: Sendable>(_ name: String, _ body: @Sendable () async throws -> T) async throws -> T {
    let executor = DedicatedThreadExecutor(name: "sparsecache-test-\(name)")
    defer { executor.stop() }
    return try await withTaskExecutorPreference(executor) { try await body() }
}
