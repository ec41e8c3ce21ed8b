/// The event loop the current task serves a connection for (`SparseHTTP`'s `SocketReactor`:
/// each runs the jobs of the tasks that prefer it on a thread of its own). Work a request
/// starts in the background (a fetch, a write-back, a group commit, a limiter's release)
/// prefers the same executor, so it and its wake-ups stay on that loop instead of waking the
/// cooperative pool's threads; nil (no preference) for everything else.
///
/// A task-local rather than the thread's loop: a default actor that tasks of two loops call
/// runs the queued calls on the thread that holds it, so the thread says where the actor ran,
/// not which connection the work is for. Unstructured tasks copy it, as every task-local.
package enum LoopExecutor {
    @TaskLocal package static var current: (any TaskExecutor)?
}
