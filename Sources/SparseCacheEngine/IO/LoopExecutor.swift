import CShim

/// The task executor that owns the calling thread, when one does: the sockets' event loops
/// (`SparseHTTP`'s `SocketReactor`) each run their jobs on a thread of their own. A task that
/// work on such a thread starts in the background (a write-back, a group commit, a limiter's
/// release) can prefer the same executor, so the work and its wake-ups stay on that thread
/// instead of waking the cooperative pool's; off those threads there is no preference.
package enum LoopExecutor {
    private final class Holder {
        let executor: any TaskExecutor
        init(_ executor: any TaskExecutor) { self.executor = executor }
    }

    /// Names `executor` as the calling thread's own, for the life of the thread.
    package static func adopt(_ executor: any TaskExecutor) {
        sc_thread_context_set(Unmanaged.passRetained(Holder(executor)).toOpaque())
    }

    /// The executor that owns the calling thread, nil when none does.
    package static var current: (any TaskExecutor)? {
        guard let context = sc_thread_context() else { return nil }
        return Unmanaged<Holder>.fromOpaque(context).takeUnretainedValue().executor
    }
}
