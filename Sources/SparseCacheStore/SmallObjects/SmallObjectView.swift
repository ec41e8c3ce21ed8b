@_spi(Locking) import SparseCacheEngine
import Synchronization

/// One small object's record read synchronously from the page cache and checked (header and
/// payload CRC32C, key, sequence): what an event loop answers a small hit with, with no task,
/// no await and no actor. ``SmallObjectStore/view(for:sequence:)`` hands one out.
///
/// A record never changes; what can change is whether it is still the key's object. The store
/// counts every change of a key's record (a new record, a copy by compaction, a drop) in
/// ``SmallObjectChanges``, and a view whose count moved is no longer current: it reads nothing.
/// The log's descriptor is taken only when the store holds it open, and only pages already
/// cached are read: anything else is the store's own read path's.
package final class SmallObjectView: Sendable {
    package let key: String
    /// The record's sequence number (``SmallObject/sequence``).
    package let sequence: UInt64
    /// The body's length.
    package let bodyCount: Int
    /// The record's length: a buffer for ``read(into:)`` holds at least this many bytes.
    package let recordCount: Int
    private let keyBytes: [UInt8]
    private let log: SmallObjectLog
    private let offset: Int64
    private let changes: SmallObjectChanges
    private let bucket: Int
    private let count: UInt64

    /// What ``read(into:)`` did.
    package enum ReadOutcome: Sendable, Equatable {
        /// The body is at this range of the buffer.
        case read(body: Range<Int>)
        /// The log is not open, or a page of the record is not in the page cache.
        case notResident
        /// The bytes are not the record (the store's own read finds and drops it).
        case damaged
        /// The record is no longer the key's object.
        case unavailable
    }

    init(key: String, location: SmallObjectStore.Location, log: SmallObjectLog, changes: SmallObjectChanges) {
        self.key = key
        keyBytes = Array(key.utf8)
        sequence = location.sequence
        bodyCount = Int(location.bodyCount)
        recordCount = Int(location.count)
        self.log = log
        offset = location.offset
        self.changes = changes
        bucket = SmallObjectChanges.bucket(of: key)
        count = changes.count(bucket)
    }

    /// Whether the record is still the key's object.
    package var isCurrent: Bool { changes.count(bucket) == count }

    /// Copies the record from the page cache into `buffer` and checks it. Safe from any thread.
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadOutcome {
        guard isCurrent else { return .unavailable }
        precondition(buffer.count >= recordCount, "the buffer holds \(buffer.count) bytes, the record \(recordCount)")
        guard let file = log.descriptors.cached(log.id), file.descriptor.isCached(offset: offset, length: recordCount) else {
            return .notResident
        }
        let target = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<recordCount])
        guard let copied = try? file.descriptor.readCached(fromAbsoluteOffset: offset, into: target), copied == recordCount else {
            return .notResident
        }
        let bytes = UnsafeRawBufferPointer(target)
        guard case .success(let parts) = SmallObjectFormat.checkRecord(bytes, salt: log.salt), parts.header.kind == .object,
            parts.header.sequence == sequence, parts.body.count == bodyCount,
            UnsafeRawBufferPointer(rebasing: bytes[parts.key]).elementsEqual(keyBytes)
        else { return .damaged }
        // It may have stopped being the key's object while it was read.
        guard isCurrent else { return .unavailable }
        return .read(body: parts.body)
    }
}

/// Counts the changes of small objects' records, by a hash of their key into a fixed number of
/// buckets: a change of any key of a bucket makes that bucket's views stale (a few false
/// alarms, which cost a read through the store; never a missed change), in bounded memory.
final class SmallObjectChanges: Sendable {
    static let buckets = 4096
    private let counts = Lock([UInt64](repeating: 0, count: buckets))

    static func bucket(of key: String) -> Int { key.hashValue & (buckets - 1) }

    func count(_ bucket: Int) -> UInt64 { counts.withLock { $0[bucket] } }

    func note(_ key: String) {
        let bucket = Self.bucket(of: key)
        counts.withLock { $0[bucket] &+= 1 }
    }
}
