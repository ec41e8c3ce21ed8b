#if canImport(Glibc)
    import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

// What a reader gets of a range, from disk, from memory, or by fetching it: the walk itself is
// ``ReaderWalk``.
extension ProgressiveCache {
    /// Walks `range` from its start: present bytes are read (and handed to `deliver`) at once;
    /// bytes a fetch has received and not yet made present are handed over from memory
    /// (cut-through); at the first byte nobody has, the reader joins the fetch bringing it, or
    /// starts one, and waits for the next bytes to arrive. Fetches run ahead of the reader by a
    /// window that grows as it reads on (``FillOptions/readAhead``). `deliver` nil only brings
    /// the bytes in (prefetch); the walk goes on only when it returns (a slow reader holds back
    /// its own reads). `generation`, when given, is the version the reader was promised
    /// (``CacheReader``): a resource replaced since then fails with ``OriginError`` `.changed` before any
    /// byte.
    func serve(
        _ source: any RangeSource, range: Range<Int64>?,
        deliver: (@Sendable (_ bytes: [UInt8]) async throws -> Void)?,
        generation expected: Int? = nil, progress: (@Sendable (FillProgress) -> Void)? = nil
    ) async throws {
        if let range, range.lowerBound < 0 {
            throw SparseCacheError(.invalidArgument, operation: "read", path: source.key, detail: "negative offset \(range.lowerBound)")
        }
        // A reader promised a version (``CacheReader``) holds its resource's entry: when that
        // version is gone (replaced, or an answer without a length was cut off and dropped), it
        // fails here, before `attach` could ask the origin for a new one only to refuse it.
        if let expected, resources[source.key]?.generation != expected {
            throw OriginError(
                .changed, operation: "read", key: source.key,
                detail: "the version opened is gone: it changed on the origin, or its answer (without a length) was cut off")
        }
        // A key neither open here nor stored: first contact asks while the files are made. (A
        // reader promised a version holds its resource open.)
        let resource = try await attach(source, first: range.map { .range($0) } ?? .whole, new: await isUnknown(source.key))
        var walk = ReaderWalk(resource, range: range, deliver: deliver, progress: progress, promised: expected != nil)
        // First contact started a fetch with the answer to this very request: it is this
        // reader's (its interest, held for the opener, is released with the others).
        if let opener = resource.update({ $0.takeOpenerFetch() }), resource.fetches[opener] != nil { walk.interests.insert(opener) }
        defer {
            releaseInterest(resource, walk.interests)
            detach(resource)
        }
        // A resource one answer fills is fetched anew before the reader's first byte when that
        // answer did not bring its range (never its old part followed by another answer's rest).
        // A reader promised a version (``CacheReader``) was planned for by its opener.
        if expected == nil, let refetched = try await prepareOneAnswerReader(resource, range: range) { walk.interests.insert(refetched) }
        walk.generation = resource.generation
        if let expected, expected != walk.generation {
            throw OriginError(
                .changed, operation: "read", key: resource.key, detail: "the resource changed on the origin after it was opened")
        }
        while try await walk.step(in: self) {}
    }

    /// Waits until `range` is present, as long as fetches still bring (write back) what is
    /// missing of it; returns at once when nobody does (a fetch that stopped early), when the
    /// resource was replaced, or when the reader's task is cancelled.
    func awaitDurable(_ resource: FillResource, _ range: Range<Int64>, generation: Int) async {
        while !Task.isCancelled, resource.generation == generation, let file = resource.handle?.file {
            let seen = resource.changes
            let missing = await file.missingRanges(in: range)
            guard resource.generation == generation, let first = missing.first else { return }
            let shift = Int64(file.segmentShift)
            let segments = missing.lazy.flatMap { Int($0.lowerBound >> shift)...Int(($0.upperBound - 1) >> shift) }
            let owners = Set(segments.compactMap { resource.owner[$0] }.prefix(64))
            guard !owners.isEmpty else { return }
            // Not at the fetch's next commit (up to commitEvery later): write back and commit
            // what it received now, so the segment a reader waits on is committed early.
            for owner in owners {
                if let arrived = resource.fetches[owner]?.arrived, arrived.writer == nil,
                    arrived.unwrittenCount > 0 || arrived.sinceCommit > 0, let handle = resource.handle
                {
                    startWriteBack(arrived, of: resource, handle: handle, generation: generation, commit: true)
                }
            }
            await waitForChange(resource, segment: Int(first.lowerBound >> shift), since: seen)
        }
    }
}
