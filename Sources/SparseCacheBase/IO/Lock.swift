import CShim
import Synchronization

/// A value behind a lock: Synchronization's `Mutex`, with the order the lock makes told to
/// ThreadSanitizer. Every lock of the project is one of these (ArchitectureTests checks it).
///
/// `Mutex` on Linux waits with a futex in code ThreadSanitizer does not instrument: when two
/// threads contend, the one that gets the lock in the slow path is not seen to acquire it, and
/// ThreadSanitizer reports the accesses the lock guards as races (in the socket loops, whose
/// threads share nothing else, at every run). Here the thread holding the lock acquires the
/// lock's address right after taking it and releases it right before giving it back
/// (`sc_tsan_acquire` / `sc_tsan_release`), so a sanitized run reports only real races. In a
/// build without ThreadSanitizer both are calls to empty C functions: measured beside a bare
/// `Mutex`, no slower (docs/TESTING.md).
///
/// Public under an SPI (`@_spi(Locking) import SparseCacheBase`, or of the engine, which
/// re-exports it) rather than `package`: the other modules must get `withLock` specialized for
/// their values, and Swift 6.3 does not specialize a `package` generic across modules even when
/// it is `@inlinable`, so every call looked up generic metadata at run time (about a sixth of a
/// cached hit's user time).
@_spi(Locking) public struct Lock<Value: ~Copyable>: ~Copyable {
    @usableFromInline
    let mutex: Mutex<Value>

    @inlinable
    public init(_ initialValue: consuming sending Value) {
        mutex = Mutex(initialValue)
    }

    /// Runs `body` with the value, holding the lock (as `Mutex.withLock`).
    @inlinable
    public borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        try mutex.withLock { (value: inout sending Value) throws(E) -> sending Result in
            // The lock's own address names it for ThreadSanitizer (a `let` of a class or a
            // global, so the same for every caller); taking it reads nothing the lock guards.
            let address = withUnsafePointer(to: self) { UnsafeMutableRawPointer(mutating: $0) }
            sc_tsan_acquire(address)
            defer { sc_tsan_release(address) }
            return try body(&value)
        }
    }
}

@_spi(Locking) extension Lock: @unchecked Sendable where Value: ~Copyable {}
