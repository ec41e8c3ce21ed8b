import SparseCacheEngine
import Synchronization

/// Stored answers an event loop may answer a hit from without the cache's actor: the stored
/// head and a ``CommittedView`` of the bytes, by key (``CachingProxy/answerQuickly(_:_:)``).
///
/// An entry stands for the resource as the cache holds it open: the cache puts it in (on its
/// actor, for the version a reader just served) and takes it out in the same step as anything
/// that makes it wrong: the resource closed, replaced, invalidated or its head freshened
/// (``FillResource/handle`` and ``FillResource/info`` remove it whenever they change). The view
/// covers what the engine changes under it: a withdrawn view is dropped at its next use.
final class QuickHits: Sendable {
    /// One stored answer.
    final class Hit: Sendable {
        let head: StoredHead
        let view: CommittedView
        /// When a quick answer last used it, in nanoseconds of ``ContinuousClock`` since
        /// ``QuickHits/epoch`` (0: never): the cache keeps the resource open while it is used.
        let lastUse = Atomic<Int64>(0)

        init(head: StoredHead, view: CommittedView) {
            self.head = head
            self.view = view
        }
    }

    static let epoch = ContinuousClock.now
    private let table = Mutex<[String: Hit]>([:])

    subscript(key: String) -> Hit? { table.withLock { $0[key] } }

    func contains(_ key: String) -> Bool { table.withLock { $0[key] != nil } }

    func insert(_ hit: Hit, for key: String) { table.withLock { $0[key] = hit } }

    func remove(_ key: String) { table.withLock { _ = $0.removeValue(forKey: key) } }

    /// Removes `key`'s entry only while it is `hit` (a newer one stays).
    func remove(_ key: String, ifStill hit: Hit) {
        table.withLock { table in
            if table[key] === hit { table[key] = nil }
        }
    }

    var count: Int { table.withLock { $0.count } }

    var keys: [String] { table.withLock { Array($0.keys) } }

    static func now() -> Int64 {
        let elapsed = ContinuousClock.now - epoch
        return elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
    }
}
