@_spi(Locking) import SparseCacheEngine

/// The open descriptors of a store's log files, at most ``limit`` of them: a log's descriptor
/// is opened when a read, an append or a compaction needs it, and the one used least recently
/// is closed when a new one would pass the limit. A log file is many thousand objects, so a
/// few descriptors serve a whole cache; without the limit every log (one per 16 MiB of the
/// budget) would hold one for the life of the store.
///
/// The bound, exactly: descriptors held here are at most `limit`. A descriptor taken out
/// (``OpenLogFile``) by an operation under way stays open until that operation lets it go, so
/// at any moment the log descriptors open are at most `limit` plus the operations under way
/// that hold one evicted meanwhile: appends and compaction run one at a time on the store's
/// queue (one), a hint is written one at a time (one), and each read holds one for one pread
/// (at most the reads in flight, which `serve` bounds by its connections).
final class SmallObjectLogDescriptors: Sendable {
    let limit: Int
    private let state: Lock<State>

    private struct State {
        var open: [UInt32: (file: OpenLogFile, used: UInt64)] = [:]
        var clock: UInt64 = 0
        var opens = 0
    }

    init(limit: Int) {
        self.limit = max(1, limit)
        state = Lock(State())
    }

    /// The open descriptor of log `id` if it is held, without a system call (the page-cache
    /// read path).
    func cached(_ id: UInt32) -> OpenLogFile? {
        state.withLock { state in
            guard let found = state.open[id] else { return nil }
            state.clock += 1
            state.open[id]?.used = state.clock
            return found.file
        }
    }

    /// The descriptor of log `id` at `path`, opened when not held. Blocking (open(2)): call it
    /// on an executor, never on the cooperative pool.
    func file(id: UInt32, path: String) throws -> OpenLogFile {
        if let found = cached(id) { return found }
        let opened = OpenLogFile(try FileDescriptor.open(path, access: .readWrite))
        // Evicted descriptors close when their last holder lets go, outside the lock.
        var evicted: [OpenLogFile] = []
        let file = state.withLock { state -> OpenLogFile in
            state.clock += 1
            if let raced = state.open[id] {
                state.open[id]?.used = state.clock
                return raced.file
            }
            state.open[id] = (opened, state.clock)
            state.opens += 1
            while state.open.count > limit, let oldest = state.open.min(by: { $0.value.used < $1.value.used }) {
                evicted.append(oldest.value.file)
                state.open[oldest.key] = nil
            }
            return opened
        }
        evicted.removeAll()
        return file
    }

    /// Lets go of log `id`'s descriptor (the log was deleted, or the store closes).
    func forget(_ id: UInt32) {
        _ = state.withLock { $0.open.removeValue(forKey: id) }
    }

    func forgetAll() {
        let all = state.withLock { state -> [UInt32: (file: OpenLogFile, used: UInt64)] in
            defer { state.open = [:] }
            return state.open
        }
        _ = all.count
    }

    /// Descriptors held now (at most ``limit``).
    var count: Int { state.withLock { $0.open.count } }

    /// Descriptors opened since the store opened (reopens after an eviction included).
    var opens: Int { state.withLock { $0.opens } }
}
