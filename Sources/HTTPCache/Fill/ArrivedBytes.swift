/// Bytes an origin sent that are not yet present in the cache file: received, in memory,
/// handed to readers waiting for them (cut-through: delivery, not a claim; docs/DURABILITY.md),
/// and written back to the file behind them (``ProgressiveCache`` write-back: write, then
/// fdatasync and commit beside the next writes), after which they are dropped from here.
///
/// One mechanism for both kinds of fill: a range fetch (``FillResource/Fetch/arrived``) and an
/// answer of unknown length (``StreamFill``). Nothing held here is ever claimed present; a crash
/// loses it, and the index names only what the write-back committed.
///
/// Bounded: the receiver stops taking bytes from the origin once ``count`` reaches the fill's
/// limit (``FillOptions/arrivedLimit``) until the write-back has made some of them present.
/// Only the owning ``ProgressiveCache`` touches it, on its actor.
final class ArrivedBytes {
    /// The offset of the first byte held: bytes before it are present in the file (or were
    /// never received by this fill).
    private(set) var start: Int64
    /// The offset past the last byte received.
    private(set) var end: Int64
    /// Bytes before this offset went to the data file (write-back), not necessarily committed.
    private(set) var written: Int64
    /// Written bytes no commit has begun to cover.
    var sinceCommit: Int64 = 0
    /// The write-back running now, if any (one at a time per fill).
    var writer: Task<Void, Never>?
    /// The commits running beside the write-back's writes, if any (one line per fill).
    var committer: Task<Void, Never>?
    /// Why the write-back failed: the receiver stops with it.
    var failure: Error?
    /// The received chunks from ``start`` on, in order, with the offset of each first byte.
    private var chunks: [(offset: Int64, bytes: [UInt8])] = []
    /// Index into ``chunks`` of the first chunk not yet written in full.
    private var writeChunk = 0

    init(at offset: Int64) {
        start = offset
        end = offset
        written = offset
    }

    /// Bytes held: received and not yet present.
    var count: Int64 { end - start }

    /// Received bytes not yet written to the data file.
    var unwrittenCount: Int64 { end - written }

    /// Adds the next bytes received (at ``end``).
    func append(_ bytes: ArraySlice<UInt8>) {
        guard !bytes.isEmpty else { return }
        chunks.append((end, Array(bytes)))
        end += Int64(bytes.count)
    }

    /// The received bytes at `offset` not yet present, at most `limit` of them; empty when
    /// `offset` is outside ``start``..<``end``.
    ///
    /// A reader at the start of a chunk it wants whole gets the chunk's own array (no copy: a
    /// cold 1 MiB range spent a tenth of its CPU copying into fresh buffers and faulting their
    /// pages in). From inside a chunk a reader gets the rest of it, so its next call starts at
    /// the next chunk's first byte; only small pieces are gathered, into one send.
    func bytes(at offset: Int64, limit: Int64) -> [UInt8] {
        guard offset >= start, offset < end, limit > 0 else { return [] }
        let index = chunkIndex(containing: offset)
        let chunk = chunks[index]
        let from = Int(offset - chunk.offset)
        let rest = chunk.bytes.count - from
        if rest >= Self.smallestPiece || index == chunks.count - 1 || Int64(rest) >= limit {
            if from == 0, Int64(rest) <= limit { return chunk.bytes }
            return Array(chunk.bytes[from..<(from + Int(min(Int64(rest), limit)))])
        }
        // A small remainder: gathered with the small chunks after it (never a large one, which
        // the next read then takes whole), so a run of small pieces goes out in one send.
        var upTo = chunk.offset + Int64(chunk.bytes.count)
        var next = index + 1
        while upTo - offset < Int64(Self.smallestPiece), next < chunks.count, chunks[next].bytes.count < Self.smallestPiece {
            upTo = chunks[next].offset + Int64(chunks[next].bytes.count)
            next += 1
        }
        return gather(from: offset, chunk: index, count: Int(min(limit, upTo - offset)))
    }

    /// Below this, what is left of a chunk is gathered with the small chunks after it.
    static let smallestPiece = 16 << 10

    /// The unwritten bytes from ``written``, at most `limit` of them, gathered for one write.
    func unwritten(limit: Int) -> (offset: Int64, bytes: [UInt8]) {
        let wanted = Int(min(Int64(limit), end - written))
        guard wanted > 0 else { return (written, []) }
        return (written, gather(from: written, chunk: writeChunk, count: wanted))
    }

    /// `count` received bytes from `offset`, which lies in chunk number `index`, in one array.
    private func gather(from offset: Int64, chunk index: Int, count wanted: Int) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(wanted)
        var position = offset
        var index = index
        while result.count < wanted, index < chunks.count {
            let chunk = chunks[index]
            let from = Int(position - chunk.offset)
            let take = min(chunk.bytes.count - from, wanted - result.count)
            result.append(contentsOf: chunk.bytes[from..<(from + take)])
            position += Int64(take)
            index += 1
        }
        return result
    }

    /// `count` bytes from ``written`` are in the data file now.
    func markWritten(_ count: Int) {
        written = min(end, written + Int64(count))
        sinceCommit += Int64(count)
        while writeChunk < chunks.count, chunks[writeChunk].offset + Int64(chunks[writeChunk].bytes.count) <= written {
            writeChunk += 1
        }
    }

    /// Drops the bytes before `offset` (present in the file now). Never drops unwritten bytes.
    func trim(upTo offset: Int64) {
        let cut = min(offset, written)
        guard cut > start else { return }
        var drop = 0
        while drop < chunks.count, chunks[drop].offset + Int64(chunks[drop].bytes.count) <= cut { drop += 1 }
        if drop > 0 {
            chunks.removeFirst(drop)
            writeChunk = max(0, writeChunk - drop)
        }
        // A chunk that straddles the cut stays whole; `start` says where the held bytes begin.
        start = cut
    }

    /// The chunk holding `offset` (which is in ``start``..<``end``).
    private func chunkIndex(containing offset: Int64) -> Int {
        var low = 0, high = chunks.count - 1
        while low < high {
            let middle = (low + high + 1) / 2
            if chunks[middle].offset <= offset { low = middle } else { high = middle - 1 }
        }
        return low
    }
}
