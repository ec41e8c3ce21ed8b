import SparseCacheEngine
import SparseHTTP

/// A miss whose first contact the proxy makes itself: the request for the whole resource on
/// this request's task, its answer handed to the cache once, instead of the cache making the
/// request through its fill machinery (a first contact on the cache's actor, with its retries
/// and promotion) and handing a reader back.
///
/// For the common miss: a GET of the whole resource that would be a small-object first
/// contact, from an `http://` origin (the cache claims it for the proxy:
/// ``ProgressiveCache/claimContact(key:)``, so other readers of the key wait for it as for the
/// cache's own). The cache does with the answer what it does with its own first contact's
/// (``ProgressiveCache/keepClaimed(_:with:)``): a small body is kept and read from memory, any
/// other answer becomes the sparse first contact of the key, an answer not to store is passed
/// on. A small body goes to a client that asked for it plainly without a reader in between
/// (``sendKept(_:_:)``). Measured by docs/BENCHMARKS.md's scenario 13.
extension CachingProxy {
    /// Answers `exchange` from the first contact of `claim`, which nothing was stored for.
    func answerClaimed(_ claim: ProgressiveCache.ClaimedContact, source: ProxiedSource, _ exchange: Exchange) async throws {
        let reader: CacheReader
        do {
            if let kept = try await firstContact(claim, source: source) {
                if try await sendKept(kept, exchange) { return }
                reader = CacheReader(cache: cache, source: source, info: kept.info, body: kept.body, fromCache: false)
            } else {
                reader = try await cache.open(source, first: .whole)
            }
        } catch let answer as OriginAnswer {
            try await passOn(answer, exchange)
            return
        }
        try await answerFetched(reader, exchange)
    }

    /// The claimed first contact: the small object it kept, or nil when the answer went to the
    /// sparse first contact of the key (or the request is to be made again there). Throws an
    /// answer not to store as ``OriginAnswer``.
    private func firstContact(_ claim: ProgressiveCache.ClaimedContact, source: ProxiedSource) async throws -> (
        info: ContentInfo, body: [UInt8]
    )? {
        let response: RangeResponse
        do {
            // A client that went away asks nothing (as the cache's own first contact checks).
            try Task.checkCancellation()
            // The request the cache's own first contact makes.
            response = try await source.fetch(nil, validator: nil)
        } catch let error as OriginError where error.kind == .unavailable {
            // A failure the cache's first contact retries (after a pause, a few times): it is
            // left to it, and the readers that waited ask for themselves.
            await cache.dropClaimed(claim, failure: nil)
            return nil
        } catch {
            await cache.dropClaimed(claim, failure: error)
            throw error
        }
        return await cache.keepClaimed(claim, with: response)
    }

    /// Sends the small object a miss kept, as ``send(_:head:age:_:)`` would from a reader, when
    /// the request is the plain case: a GET of the whole, no playlist, and no condition that
    /// stops it. Returns false, having sent nothing, for anything else.
    private func sendKept(_ kept: (info: ContentInfo, body: [UInt8]), _ exchange: Exchange) async throws -> Bool {
        let request = exchange.request
        guard let head = kept.info.stored, request.method == "GET", request.header("range") == nil,
            head.status != 200 || Self.playlistKind(contentType: head.headers["content-type"], path: exchange.target) == nil
        else { return false }
        let stored = head.replayed
        if head.status == 200,
            Precondition.evaluate(request, etag: stored["etag"], lastModified: stored["last-modified"], date: stored["date"]) != .proceed
        {
            return false
        }
        tellPrefetcher(exchange)
        exchange.status.stored = true
        exchange.status.forwardStatus = exchange.status.forwardStatus ?? head.status
        exchange.status.fromStorage = true
        let response = exchange.response
        let length = Int64(kept.body.count)
        let fields = storedFields(stored, status: head.status, age: head.policy.currentAge(now: exchange.now), lengthKnown: true, exchange)
        try await response.writeHead(status: head.status, headers: fields, contentLength: length, withFirstBody: true)
        if length > 0 {
            response.countCacheBytes(miss: length)
            try await response.writeBody(kept.body)
        }
        return true
    }
}
