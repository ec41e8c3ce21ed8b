import Synchronization

/// What a background fetch does when its connection is wanted for a waited-on request: stop
/// its transfer. Asked for possibly before the transfer exists, in which case the transfer is
/// stopped as soon as it is set.
final class YieldAction: Sendable {
    private let state = Mutex<(fired: Bool, action: (@Sendable () -> Void)?)>((false, nil))

    func fire() {
        let action = state.withLock { state in
            state.fired = true
            return state.action
        }
        action?()
    }

    func set(_ action: @escaping @Sendable () -> Void) {
        let fired = state.withLock { state in
            state.action = action
            return state.fired
        }
        if fired { action() }
    }
}
