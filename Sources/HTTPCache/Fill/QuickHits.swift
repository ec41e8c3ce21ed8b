@_spi(Locking) import SparseCacheEngine
import SparseCacheStore
import Synchronization

/// Stored answers an event loop may answer a hit from without the cache's actor, by key: the
/// stored head and a view of the bytes (``CachingProxy/answerQuickly(_:_:)``).
///
/// - A resource's entry stands for it as the cache holds it open: the cache puts it in (on its
///   actor, for the version it holds) and takes it out in the same step as anything that makes
///   it wrong: the resource closed, replaced, invalidated or its head freshened
///   (``FillResource/handle`` and ``FillResource/info`` remove it whenever they change). The
///   engine withdraws a ``CommittedView`` itself before any segment it names stops being
///   present; a withdrawn view is dropped at its next use.
/// - A small object's entry names one record, which never changes; its view stops being
///   current when the key's record changes in the store (``SmallObjectView``). It is made at
///   the object's second hit through the handler (``isRepeat(_:)``). At most ``smallCapacity``
///   of them: a full table forgets them all (the next hits of each put it back).
final class QuickHits: Sendable {
    /// Where a hit's bytes are.
    enum Bytes: Sendable {
        case resource(CommittedView)
        case small(SmallObjectView)
    }

    /// One stored answer.
    final class Hit: Sendable {
        let head: StoredHead
        let bytes: Bytes
        /// When a quick answer last used it, in nanoseconds of ``ContinuousClock`` since
        /// ``QuickHits/epoch`` (0: never): the cache keeps the resource open while it is used,
        /// and tells the store of the use.
        let lastUse = Atomic<Int64>(0)
        /// The byte ranges of a resource quick answers sent since the cache last took them
        /// (``takeSentRanges()``), for the store's eviction policy, which counts uses of
        /// segments: at most ``sentRangesLimit``, consecutive ones joined.
        private let sentRanges = Lock<[Range<Int64>]>([])
        static let sentRangesLimit = 16

        /// The stored head encoded for quick answers, made at the first (``encodedHead(via:)``).
        private let encoded = Lock<EncodedHead>(.notYet)

        private enum EncodedHead {
            case notYet
            /// Made for the proxy named `pseudonym`.
            case made(QuickHead?, pseudonym: String)
        }

        init(head: StoredHead, bytes: Bytes) {
            self.head = head
            self.bytes = bytes
        }

        /// The head quick answers send, as proxy `via` replays it; nil when it must be built
        /// field by field (``QuickHead/init(_:via:)``).
        func encodedHead(via: ProxyVia) -> QuickHead? {
            if case .made(let head, let pseudonym) = encoded.withLock({ $0 }), pseudonym == via.pseudonym { return head }
            let made = QuickHead(head.replayed, via: via.element)
            encoded.withLock { $0 = .made(made, pseudonym: via.pseudonym) }
            return made
        }

        /// Notes that a quick answer sent `range` of the resource.
        func noteSent(_ range: Range<Int64>) {
            guard !range.isEmpty, view != nil else { return }
            sentRanges.withLock { ranges in
                if let last = ranges.last, last.upperBound == range.lowerBound {
                    ranges[ranges.count - 1] = last.lowerBound..<range.upperBound
                } else if ranges.count < Self.sentRangesLimit {
                    ranges.append(range)
                }
            }
        }

        /// The ranges noted since the last call.
        func takeSentRanges() -> [Range<Int64>] {
            sentRanges.withLock { ranges in
                defer { ranges = [] }
                return ranges
            }
        }

        /// The resource's view; nil for a small object.
        var view: CommittedView? {
            if case .resource(let view) = bytes { return view }
            return nil
        }

        /// Whether every byte of the answer is in it (a small object, or a complete resource):
        /// nothing committed later can make it larger.
        var isWhole: Bool {
            switch bytes {
            case .resource(let view): view.isComplete
            case .small: true
            }
        }

        var isCurrent: Bool {
            switch bytes {
            case .resource(let view): view.isCurrent
            case .small(let view): view.isCurrent
            }
        }
    }

    private struct State {
        var hits: [String: Hit] = [:]
        var small = 0
        /// Small objects the handler answered once since the table was last cleared.
        var seenOnce: Set<String> = []
        /// Small objects used by quick answers since the store was last told.
        var used: [String] = []
    }

    static let epoch = ContinuousClock.now
    static let smallCapacity = 8192
    private let state = Lock(State())

    subscript(key: String) -> Hit? { state.withLock { $0.hits[key] } }

    func contains(_ key: String) -> Bool { state.withLock { $0.hits[key] != nil } }

    func insert(_ hit: Hit, for key: String) {
        state.withLock { state in
            if case .small = hit.bytes {
                if state.small >= Self.smallCapacity {
                    state.hits = state.hits.filter { if case .small = $0.value.bytes { false } else { true } }
                    state.small = 0
                }
                state.small += 1
            }
            if let old = state.hits.updateValue(hit, forKey: key), case .small = old.bytes { state.small -= 1 }
        }
    }

    func remove(_ key: String) {
        state.withLock { state in
            if let old = state.hits.removeValue(forKey: key), case .small = old.bytes { state.small -= 1 }
        }
    }

    /// Removes `key`'s entry only while it is `hit` (a newer one stays).
    func remove(_ key: String, ifStill hit: Hit) {
        state.withLock { state in
            guard state.hits[key] === hit else { return }
            state.hits[key] = nil
            if case .small = hit.bytes { state.small -= 1 }
        }
    }

    /// Whether the handler answered the small object `key` before (since the set was last
    /// cleared, at ``smallCapacity`` keys); notes it when not. A small object gets an entry at
    /// its second hit: most objects of a cache are asked once, and an entry costs a call into
    /// the store.
    func isRepeat(_ key: String) -> Bool {
        state.withLock { state in
            if state.seenOnce.contains(key) { return true }
            if state.seenOnce.count >= Self.smallCapacity { state.seenOnce.removeAll(keepingCapacity: true) }
            state.seenOnce.insert(key)
            return false
        }
    }

    /// Notes a quick answer from `hit`. For a small object not noted in the last second, `key`
    /// joins the uses to tell the store; true when it is the first of them (the caller starts
    /// the task that tells the store, ``takeSmallUses()``).
    func noteUse(of hit: Hit, key: String) -> Bool {
        let now = Self.now()
        let before = hit.lastUse.exchange(now, ordering: .relaxed)
        guard case .small = hit.bytes, now - before >= 1_000_000_000 else { return false }
        return state.withLock { state in
            state.used.append(key)
            return state.used.count == 1
        }
    }

    /// The small objects used since the last call.
    func takeSmallUses() -> [String] {
        state.withLock { state in
            defer { state.used = [] }
            return state.used
        }
    }

    var count: Int { state.withLock { $0.hits.count } }

    var keys: [String] { state.withLock { Array($0.hits.keys) } }

    static func now() -> Int64 {
        let elapsed = ContinuousClock.now - epoch
        return elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
    }
}
