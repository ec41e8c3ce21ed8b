import CShim

/// The engine's side of scoped fault rules: the scope a task is in, carried to the threads
/// that make its system calls.
///
/// A rule of the fault table can carry a scope; it then matches only calls made while the
/// calling task (or the blocking-work thread running for it) is bound to that scope. The
/// testing product (`SparseCacheTesting.FaultScope`) binds it; ``BlockingExecutor`` carries
/// the binding of the task that submits work to the queue thread that runs it.
package enum FaultScopeBinding {
    /// The scope of the current task, 0 outside every scope.
    @TaskLocal package static var current: Int64 = 0

    /// Makes the fault table ask ``current`` for the caller's scope. Idempotent.
    package static func installProvider() {
        sc_faults_set_scope_provider { FaultScopeBinding.current }
    }

    /// The scope to carry to another thread: read only while the fault table is armed, so a
    /// process without rules pays one relaxed load per blocking call.
    @inline(__always)
    package static var toCarry: Int64 {
        sc_faults_is_armed() != 0 ? current : 0
    }
}
