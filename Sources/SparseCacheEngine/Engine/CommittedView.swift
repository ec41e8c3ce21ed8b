import CShim
import Synchronization

/// A resource's committed segments at one moment, read synchronously from the page cache,
/// every read checked against its segments' CRC32C: what an event loop answers a cached hit
/// with, with no task, no await and no actor in between.
///
/// A ``SparseFile`` of known length hands one out (``SparseFile/committedView()``) and
/// withdraws it (``isCurrent`` turns false) before anything the view names can change: a
/// segment dropped as damaged or discarded (eviction inside a resource punches holes that
/// way), a failed sync, the close. Otherwise a present segment stays present and never
/// changes, so until then every segment the view names is committed with the checksum the
/// view holds. Segments committed after the view was taken are not in it: the resource hands
/// out a newer view for them.
///
/// The view reads through a descriptor of its own, closed when the last holder lets go: a read
/// that races a withdrawal or a removal of the files reads the bytes the view names (an
/// unlinked file keeps them) or bytes that fail the check (a punched hole), never the bytes of
/// another file that took the descriptor's number.
package final class CommittedView: Sendable {
    /// The resource's data file, for messages.
    package let path: String
    /// The resource length in bytes.
    package let length: Int64
    /// The bytes present when the view was taken.
    package let presentBytes: Int64
    /// The segment size is `1 << segmentShift` bytes.
    package let segmentShift: Int
    private let descriptor: FileDescriptor
    private let present: SegmentBitmap
    private let checksums: SegmentChecksums
    private let current = Atomic<Bool>(true)

    /// What ``read(_:into:)`` did.
    package enum ReadOutcome: Sendable, Equatable {
        /// The bytes of the range start at this offset of the buffer (the read covers whole
        /// segments, so the range starts inside the first one).
        case read(at: Int)
        /// Some page of the segments is not in the page cache: reading would wait for the disk.
        case notResident
        /// A segment's bytes do not match their CRC32C (or the file is shorter than the view):
        /// nothing may be served; the resource's own read path finds and drops the segment.
        case damaged
        /// The view was withdrawn, a segment of the range was not present when it was taken,
        /// or the range is not inside the resource.
        case unavailable
    }

    init(path: String, state: IndexState, length: Int64, descriptor: FileDescriptor) {
        self.path = path
        self.length = length
        presentBytes = state.presentBytes
        segmentShift = state.segmentShift
        self.descriptor = descriptor
        present = state.present
        checksums = state.checksums
    }

    deinit { descriptor.close() }

    /// False once the resource withdrew the view: its checksums may no longer be the committed
    /// ones. A holder drops it then and asks the resource again.
    package var isCurrent: Bool { current.load(ordering: .acquiring) }

    func withdraw() { current.store(false, ordering: .releasing) }

    /// The bytes a read of `range` covers: its segments, whole (the last one ends with the
    /// resource). A buffer for ``read(_:into:)`` holds at least this many.
    package func span(of range: Range<Int64>) -> Range<Int64> {
        let start = (range.lowerBound >> Int64(segmentShift)) << Int64(segmentShift)
        let lastSegment = (range.upperBound - 1) >> Int64(segmentShift)
        return start..<min((lastSegment + 1) << Int64(segmentShift), length)
    }

    /// Whether every byte of the resource was present when the view was taken.
    package var isComplete: Bool { presentBytes == length }

    /// Whether a read of `range` would find its segments in the view and their pages in the
    /// page cache now (cachestat(2): no copy, no I/O).
    package func isResident(_ range: Range<Int64>) -> Bool {
        guard isCurrent, !range.isEmpty, range.lowerBound >= 0, range.upperBound <= length else { return false }
        let span = span(of: range)
        let first = Int(span.lowerBound >> Int64(segmentShift))
        let last = Int((span.upperBound - 1) >> Int64(segmentShift))
        return present.firstClear(in: first..<(last + 1)) == nil && descriptor.isCached(offset: span.lowerBound, length: Int(span.count))
    }

    /// Copies the segments `range` lies in from the page cache into `buffer` and checks each
    /// against its CRC32C. Never waits for the disk: pages not cached make it
    /// ``ReadOutcome/notResident`` without a read (cachestat(2) first, then preadv2 with
    /// RWF_NOWAIT, so no readahead is started on this thread either).
    ///
    /// Safe from any thread, any number at once. `buffer` must hold ``span(of:)`` bytes.
    ///
    /// - Parameter continuing: the read goes on with an answer whose first bytes were read
    ///   from this view while it was current: it reads even if the view was withdrawn since.
    ///   Its bytes are still checked against the view's checksums, so they are the ones the
    ///   answer promised (the version committed when it started), or the read fails.
    package func read(_ range: Range<Int64>, into buffer: UnsafeMutableRawBufferPointer, continuing: Bool = false) -> ReadOutcome {
        guard isCurrent || continuing, !range.isEmpty, range.lowerBound >= 0, range.upperBound <= length else { return .unavailable }
        let span = span(of: range)
        let count = Int(span.count)
        let first = Int(span.lowerBound >> Int64(segmentShift))
        let last = Int((span.upperBound - 1) >> Int64(segmentShift))
        guard present.firstClear(in: first..<(last + 1)) == nil else { return .unavailable }
        precondition(buffer.count >= count, "the buffer holds \(buffer.count) bytes, the read needs \(count)")
        guard descriptor.isCached(offset: span.lowerBound, length: count) else { return .notResident }
        let target = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
        guard let copied = try? descriptor.readCached(fromAbsoluteOffset: span.lowerBound, into: target) else { return .damaged }
        // Short: evicted from the page cache since the look (or a file shorter than the view,
        // which the resource's own read reports as damage).
        guard copied == count else { return .notResident }
        let size = 1 << segmentShift
        var segment = first
        var lower = 0
        while lower < count {
            let upper = min(lower + size, count)
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[lower..<upper])
            if crc32c(bytes) != checksums[segment] { return .damaged }
            segment += 1
            lower = upper
        }
        return .read(at: Int(range.lowerBound - span.lowerBound))
    }
}

extension SparseFile {
    /// A ``CommittedView`` of what is committed now: the same one while nothing was committed
    /// since and it is not withdrawn. Nil while the length is unknown or nothing is present,
    /// once the resource is closing, and after a failed sync.
    package func committedView() -> CommittedView? {
        if let view = publishedView, view.isCurrent, view.presentBytes == committed.presentBytes { return view }
        guard lifecycle == .open, failure == nil, let length = committed.length, committed.presentBytes > 0 else { return nil }
        let duplicate = sc_dup(dataFile.rawValue)
        guard duplicate >= 0 else { return nil }
        let view = CommittedView(path: path, state: committed, length: length, descriptor: FileDescriptor(rawValue: duplicate, path: path))
        publishedView = view
        return view
    }

    /// Withdraws the published ``CommittedView``: called before any present segment stops
    /// being present and before the resource stops being usable. (A view is not withdrawn when
    /// segments are added: it stays right, only smaller than the next one.)
    func withdrawCommittedView() {
        publishedView?.withdraw()
        publishedView = nil
    }
}
