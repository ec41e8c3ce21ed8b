@_spi(Locking) import SparseCacheBase

/// An action that runs at most once, whichever of several paths gets there first (the end of a
/// body, a cancel, an error, a dropped response): for releasing an origin connection slot.
package final class FinishAction: Sendable {
    private let action: Lock<(@Sendable () -> Void)?>

    package init(_ action: @escaping @Sendable () -> Void) {
        self.action = Lock(action)
    }

    /// Runs the action if nobody has yet.
    package func run() {
        let pending = action.withLock { action in
            defer { action = nil }
            return action
        }
        pending?()
    }
}
