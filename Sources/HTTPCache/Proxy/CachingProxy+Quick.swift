import Foundation
import SparseCacheEngine
import SparseHTTP

extension CachingProxy {
    /// The largest body answered on the event loop; a longer one is streamed by the handler.
    static let quickBodyLimit = 2 << 20

    /// The ``HTTPServer`` quick handler: answers a GET or HEAD on the event loop's thread when
    /// its answer is a fresh stored 200 whose bytes are committed and in the page cache. The bytes are read from the page cache into the loop's buffer and checked
    /// against their segments' CRC32C before a byte goes out (docs/DURABILITY.md); head and
    /// body leave in one `sendmsg`. No task, no await, no actor.
    ///
    /// Anything else returns false before sending, and the request takes ``handle(_:_:_:)``: a
    /// miss, a stale or revalidated answer, a conditional that fails, a playlist, several
    /// ranges, a byte not committed (yet), a page not in memory, a segment that fails its check (the handler's read
    /// drops it), a body over ``quickBodyLimit``. The answer is the one the handler would give,
    /// field for field (`Cache-Status: sparsecache; hit; ttl=N`).
    package func answerQuickly(_ request: HTTPRequestHead, _ reply: inout QuickReply) -> Bool {
        guard cache.options.quickHits, origin != nil, request.method.isGetOrHead, !via.isLoop(request.headers),
            case .success(let route) = route(for: request.target), let hit = cache.quickHits[route.key]
        else { return false }
        let head = hit.head
        guard hit.isCurrent else {
            cache.quickHits.remove(route.key, ifStill: hit)
            return false
        }
        // What the handler checks before it sends from storage (CachingProxy.answer, send).
        guard head.status == 200, !head.headers.contains("vary") || head.policy.varyMatches(request),
            Self.playlistKind(contentType: head.headers["content-type"], path: route.path) == nil,
            streaming.prefetcher.isEmpty || !streaming.prefetcher.knows(route.url),
            case .fresh(let age) = head.policy.use(for: request, now: Int64(time(nil)))
        else { return false }
        let stored = head.replayed
        let etag = stored["etag"], lastModified = stored["last-modified"]
        guard Precondition.evaluate(request, etag: etag, lastModified: lastModified, date: stored["date"]) == .proceed else { return false }
        var rangeHeader = request.header("range")
        if let ifRange = request.header("if-range"),
            !Precondition.ifRangeMatches(ifRange, etag: etag, lastModified: lastModified, date: stored["date"])
        {
            rangeHeader = nil
        }
        let ttl = head.policy.freshnessLifetime - age
        let length: Int64
        switch hit.bytes {
        case .resource(let view): length = view.length
        case .small(let view): length = Int64(view.bodyCount)
        }
        let range: Range<Int64>, partial: Bool
        switch RangeRequest.parse(rangeHeader, length: length) {
        case .whole, .multiple:
            range = 0..<length
            partial = false
        case .single(let single):
            range = single
            partial = true
        case .unsatisfiable:
            return false
        }
        guard range.count <= Self.quickBodyLimit else { return false }
        let code = partial ? 206 : 200
        let replyHead: QuickReplyHead
        if cors == nil, let encoder = hit.encodedHead(via: via) {
            // The handler's head, written into the loop's buffer (QuickHead).
            let buffer = reply.headScratch(encoder.capacity)
            let count = encoder.write(into: buffer, ttl: ttl, age: age, range: partial ? range : nil, of: length, closes: reply.closes)
            replyHead = .encoded(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        } else {
            var status = CacheStatus()
            status.hit = true
            status.fromStorage = true
            status.ttl = ttl
            var headers = storedFields(stored, status: 200, age: age, lengthKnown: true, cacheStatus: status)
            if partial {
                headers.removeAll { HTTPHeaderField(name: $0.0, value: "").hasName("content-range") }
                headers.append(("Content-Range", "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(length)"))
            }
            // As the handler's writer rewrites its heads (CachingProxy.handle).
            if let cors { headers = cors.apply(headers, for: request) }
            replyHead = .fields(headers)
        }
        if range.isEmpty || request.method == .head {
            replyHead.send(status: code, contentLength: Int64(range.count), body: UnsafeRawBufferPointer(start: nil, count: 0), &reply)
        } else {
            switch hit.bytes {
            case .resource(let view):
                switch Self.send(range, of: view, status: code, head: replyHead, &reply) {
                case .notSent: return false
                case .sent: break
                case .cut: cache.quickHits.remove(route.key, ifStill: hit)
                }
            case .small(let view):
                let buffer = reply.scratch(view.recordCount)
                guard case .read(let body) = view.read(into: buffer) else { return false }
                let part = (body.lowerBound + Int(range.lowerBound))..<(body.lowerBound + Int(range.upperBound))
                replyHead.send(status: code, contentLength: Int64(range.count), body: UnsafeRawBufferPointer(rebasing: buffer[part]), &reply)
            }
        }
        let bytes = request.method == .head ? 0 : Int64(range.count)
        if bytes > 0 { hit.noteSent(range) }
        reply.noteCache(outcome: "hit", hitBytes: bytes)
        cache.count {
            $0.bytesFromCache += bytes
            $0.quickAnswers += 1
        }
        if cache.quickHits.noteUse(of: hit, key: route.key) { cache.tellSmallUses() }
        return true
    }

    /// What ``send(_:of:status:headers:_:)`` did.
    private enum Sent {
        /// Nothing: the handler answers.
        case notSent
        case sent
        /// The head went out, then the rest could not be read: the answer was cut short.
        case cut
    }

    /// Sends `range` of a resource: the head with the range's first segment, checked, then the
    /// rest, checked, so the first byte does not wait for the whole range to be read. Every
    /// page is looked for first: a range partly in memory is the handler's, and so is one
    /// whose segments span more than twice ``quickBodyLimit``.
    private static func send(_ range: Range<Int64>, of view: CommittedView, status: Int, head: QuickReplyHead, _ reply: inout QuickReply) -> Sent {
        let span = view.span(of: range)
        guard span.count <= 2 * quickBodyLimit else { return .notSent }
        let firstEnd = min(range.upperBound, view.span(of: range.lowerBound..<(range.lowerBound + 1)).upperBound)
        guard firstEnd == range.upperBound || view.isResident(range) else { return .notSent }
        let buffer = reply.scratch(Int(span.count))
        guard case .read(let at) = view.read(range.lowerBound..<firstEnd, into: buffer, continuing: false) else { return .notSent }
        let first = Int(firstEnd - range.lowerBound)
        head.send(status: status, contentLength: Int64(range.count), body: UnsafeRawBufferPointer(rebasing: buffer[at..<(at + first)]), &reply)
        guard firstEnd < range.upperBound else { return .sent }
        // Found in memory a moment ago (and read on even if the view was withdrawn meanwhile:
        // the answer started from it, and every byte is still checked against it), the rest
        // fails only if the page cache dropped a page since or a segment is damaged: the answer
        // is cut (its head is out), and the caller drops the key's entry so its next request
        // takes the handler, which drops a damaged segment.
        guard case .read(let restAt) = view.read(firstEnd..<range.upperBound, into: buffer, continuing: true) else {
            reply.abandon()
            return .cut
        }
        reply.sendBody(UnsafeRawBufferPointer(rebasing: buffer[restAt..<(restAt + Int(range.upperBound - firstEnd))]))
        return .sent
    }
}

/// The head of a quick answer: fields for ``QuickReply`` to encode, or bytes encoded already.
private enum QuickReplyHead {
    case fields([(String, String)])
    case encoded(UnsafeRawBufferPointer)

    /// Sends the head with the first body bytes (see ``QuickReply/send(status:headers:contentLength:body:)``).
    func send(status: Int, contentLength: Int64, body: UnsafeRawBufferPointer, _ reply: inout QuickReply) {
        switch self {
        case .fields(let headers): reply.send(status: status, headers: headers, contentLength: contentLength, body: body)
        case .encoded(let head): reply.send(status: status, encodedHead: head, contentLength: contentLength, body: body)
        }
    }
}
