import Synchronization

/// An action that runs at most once, whichever of several paths gets there first (the end of a
/// body, a cancel, an error, a dropped response): for releasing an origin connection slot.
final class FinishAction: Sendable {
    private let action: Mutex<(@Sendable () -> Void)?>

    init(_ action: @escaping @Sendable () -> Void) {
        self.action = Mutex(action)
    }

    /// Runs the action if nobody has yet.
    func run() {
        let pending = action.withLock { action in
            defer { action = nil }
            return action
        }
        pending?()
    }
}
