import Foundation
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

extension CachingProxy {
    /// Sends a stored response (or the part of it the request asks for): its stored fields with
    /// `Age`, `Via` and `Cache-Status`, after the client's conditionals.
    func send(_ reader: CacheReader, head: StoredHead, age: Int64, _ exchange: Exchange) async throws {
        if try await sendPlaylist(reader, head: head, age: age, exchange) { return }
        let request = exchange.request, response = exchange.response
        let length = reader.length
        exchange.status.fromStorage = true
        let stored = head.replayed
        let etag = stored["etag"], lastModified = stored["last-modified"]
        // Conditionals and ranges select among representations: a stored error page or
        // redirect is sent as it is (RFC 9110, sections 13.2.1 and 14.2).
        let representation = head.status == 200
        switch representation ? Precondition.evaluate(request, etag: etag, lastModified: lastModified, date: stored["date"]) : .proceed {
        case .failed:
            try await response.respond(
                status: 412, message: "precondition failed", headers: proxyFields([], status: exchange.status, via: via.element))
            return
        case .notModified:
            // The fields a 304 carries (RFC 9110, section 15.4.5), and Last-Modified as nginx does.
            let kept = ["cache-control", "content-location", "date", "etag", "expires", "vary", "last-modified"]
            let fields = stored.keeping { field in kept.contains { field.hasName($0) } }
            try await response.writeHead(
                status: 304, headers: proxyFields(fields, status: exchange.status, via: via.element) + [("Age", String(age))],
                contentLength: 0)
            return
        case .proceed:
            break
        }
        var headers = storedFields(stored, status: head.status, age: age, lengthKnown: reader.isLengthKnown, exchange)
        guard reader.isLengthKnown else {
            try await sendArriving(reader, status: head.status, headers: headers, exchange)
            return
        }
        var rangeHeader = representation ? request.header("range") : nil
        if let ifRange = request.header("if-range"),
            !Precondition.ifRangeMatches(ifRange, etag: etag, lastModified: lastModified, date: stored["date"])
        {
            rangeHeader = nil
        }
        let status: Int
        let range: Range<Int64>
        switch RangeRequest.parse(rangeHeader, length: length) {
        case .whole, .multiple:
            status = head.status
            range = 0..<length
        case .single(let single):
            status = 206
            range = single
            // The part's own Content-Range replaces any the stored 200 carried.
            headers.removeAll { HTTPHeaderField(name: $0.0, value: "").hasName("content-range") }
            headers.append(("Content-Range", "bytes \(single.lowerBound)-\(single.upperBound - 1)/\(length)"))
        case .unsatisfiable:
            try await response.respond(
                status: 416, message: "range \(rangeHeader ?? "") not satisfiable: the resource is \(length) bytes",
                headers: [("Content-Range", "bytes */\(length)"), ("Cache-Status", exchange.status.value)])
            return
        }
        if request.method != .head, !exchange.status.stored, try await answeredApart(reader, range: range, exchange) { return }
        // For the log: bytes sent that were cached when the request came, and the rest (all of
        // it for a miss: its first contact brought the first bytes for this very request).
        let missing = request.method == .head ? [] : try await reader.missingRanges(in: range)
        let fromOrigin = exchange.status.stored ? [range] : missing
        // A cached range follows its head at once: both go out in one send.
        try await response.writeHead(status: status, headers: headers, contentLength: Int64(range.count), withFirstBody: missing.isEmpty)
        if request.method == .head { return }
        let start = range.lowerBound
        try await reader.read(range) { bytes in
            let offset = start + response.bodyBytes
            let chunk = offset..<(offset + Int64(bytes.count))
            let fetched = fromOrigin.reduce(Int64(0)) {
                $0 + max(0, min($1.upperBound, chunk.upperBound) - max($1.lowerBound, chunk.lowerBound))
            }
            response.countCacheBytes(hit: Int64(bytes.count) - fetched, miss: fetched)
            try await response.writeBody(bytes)
        }
    }

    /// The fields of an answer from storage: the stored ones (`replayed`) with `Age`, `Via` and
    /// `Cache-Status`, and for a representation (a stored 200) `Accept-Ranges` once its length
    /// is known and `Content-Type` when it has none.
    func storedFields(_ stored: HTTPHeaders, status: Int, age: Int64, lengthKnown: Bool, _ exchange: Exchange) -> [(String, String)] {
        storedFields(stored, status: status, age: age, lengthKnown: lengthKnown, cacheStatus: exchange.status)
    }

    /// ``storedFields(_:status:age:lengthKnown:_:)`` with the answer's `Cache-Status`.
    func storedFields(_ stored: HTTPHeaders, status: Int, age: Int64, lengthKnown: Bool, cacheStatus: CacheStatus) -> [(String, String)] {
        let representation = status == 200
        var headers = proxyFields(stored, status: cacheStatus, via: via.element) + [("Age", String(age))]
        if representation, lengthKnown { headers.append(("Accept-Ranges", "bytes")) }
        if representation, !stored.contains("content-type") { headers.append(("Content-Type", "application/octet-stream")) }
        return headers
    }

    /// A stored part of a response without a strong validator that lacks bytes of `range` no
    /// answer in flight brings: it is never completed from another answer (RFC 9111 section
    /// 3.4). The client's request is passed on unstored, or, when nobody else reads the stored
    /// part, that part is dropped and the request answered as a miss (`fwd=partial`, RFC 9211
    /// section 2.2). Returns whether the client was answered here.
    func answeredApart(_ reader: CacheReader, range: Range<Int64>, _ exchange: Exchange) async throws -> Bool {
        let plan = await cache.oneAnswerPlan(for: reader, range: range)
        if plan == .read { return false }
        let dropped = plan == .refetch ? try await cache.dropOneAnswerPart(of: reader) : false
        await reader.close()
        exchange.status.hit = false
        exchange.status.fromStorage = false
        exchange.status.ttl = nil
        exchange.status.forward = "partial"
        if dropped {
            try await fetchAndAnswer(exchange.source(key: reader.source.key), exchange)
        } else {
            exchange.status.detail = "parts without a strong validator are not combined"
            try await passThrough(exchange)
        }
        return true
    }

    /// A stored response whose body is still arriving without a length: sent whole as it
    /// comes (a `Range` is ignored, as RFC 9110 section 14.2 allows: there is no length to
    /// place it in yet), chunked to an HTTP/1.1 client, until the connection closes to 1.0.
    func sendArriving(_ reader: CacheReader, status: Int, headers: [(String, String)], _ exchange: Exchange) async throws {
        let response = exchange.response
        try await response.writeHead(status: status, headers: headers, contentLength: nil)
        if exchange.request.method == .head { return }
        try await reader.read(0..<Int64.max) { bytes in
            response.countCacheBytes(miss: Int64(bytes.count))
            try await response.writeBody(bytes)
        }
        try await response.finishBody()
    }
}
