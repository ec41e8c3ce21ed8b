import SparseCacheEngine
import SparseHTTP

/// The head of a stored response as a cache keeps it beside the body (RFC 9111, section 3.1):
/// its end-to-end header fields, when it was requested and received, and the request fields its
/// `Vary` names. Committed atomically with the resource's index (in the metadata), so what a
/// client is told about a body always describes the bytes on disk.
///
/// A `206` from the origin is stored as the `200` representation it is part of; other statuses
/// (a 404 page, a 301) are stored with their status and served whole.
///
/// Immutable, and a class: a head goes with every answer and object on its way through the
/// cache (in its ``ContentInfo``), and copying one is then a single reference count, not one
/// for each of its fields and those of its policy.
package final class StoredHead: Sendable, Equatable {
    /// The status of the stored response: 200 for a representation filled by ranges.
    package let status: Int
    /// The response's fields without hop-by-hop ones and without the fields that describe one
    /// message's framing (`Content-Length`, and a `206`'s `Content-Range`): those are written
    /// per answer.
    package let headers: HTTPHeaders
    /// When the request that brought the response was sent, and when its head arrived (seconds
    /// since 1970; RFC 9111, section 4.2.3).
    package let requestTime: Int64
    package let responseTime: Int64
    /// The fields of the request that brought the response which its `Vary` names, as sent.
    package let varyRequest: HTTPHeaders
    /// Whether the response may be given heuristic freshness: false when the request that
    /// brought it carried `Cookie` (``CachePolicy/allowsHeuristicFreshness``). Kept with the
    /// head, since `varyRequest` keeps no `Cookie` unless `Vary` names it.
    package let heuristicFreshness: Bool
    /// The caching rules for this stored response: the `200` answer to a GET with the stored
    /// request fields (its `Age` is the origin's, which the current age starts from). Made
    /// once per head, not per request: its dates are parsed here.
    package let policy: CachePolicy
    /// The fields an answer from storage repeats: all but `Age` and `Accept-Ranges`, which
    /// each answer writes for itself.
    let replayed: HTTPHeaders

    package init(
        status: Int = 200, headers: HTTPHeaders, requestTime: Int64, responseTime: Int64, varyRequest: HTTPHeaders = [],
        heuristicFreshness: Bool = true
    ) {
        self.status = status == 206 ? 200 : status
        // A 206's Content-Range describes that one part; any other status's is an end-to-end
        // field like the rest, stored and replayed (RFC 9111 section 3.1).
        let partial = status == 206
        let kept = headers.removingHopByHop { field in field.hasName("content-length") || (partial && field.hasName("content-range")) }
        self.headers = kept
        self.requestTime = requestTime
        self.responseTime = responseTime
        self.varyRequest = varyRequest
        self.heuristicFreshness = heuristicFreshness
        replayed = kept.keeping { field in !field.hasName("age") && !field.hasName("accept-ranges") }
        // The request target plays no part in the rules; the stored fields do.
        policy = CachePolicy(
            request: HTTPRequestHead(method: .get, target: "/", headers: varyRequest),
            endToEnd: HTTPResponseHead(status: self.status, headers: kept), requestTime: requestTime, responseTime: responseTime,
            heuristic: heuristicFreshness)
    }

    /// Equal when made of the same response and request fields at the same times (the policy
    /// and the replayed fields follow from those).
    package static func == (left: StoredHead, right: StoredHead) -> Bool {
        left === right
            || (left.status == right.status && left.headers == right.headers && left.requestTime == right.requestTime
                && left.responseTime == right.responseTime && left.varyRequest == right.varyRequest
                && left.heuristicFreshness == right.heuristicFreshness)
    }

    /// The validators, for `If-Range` on the fill's range requests.
    package var validator: ContentValidator {
        ContentValidator(etag: headers["etag"], lastModified: headers["last-modified"], date: headers["date"])
    }

    // MARK: In the resource's metadata

    private static let headersKey = "http.headers"
    private static let timesKey = "http.times"
    private static let varyKey = "http.vary-request"
    private static let statusKey = "http.status"
    /// "off" when the head may not be given heuristic freshness; absent otherwise.
    private static let heuristicKey = "http.heuristic"

    /// The head kept in `metadata`, or nil when it holds none or a damaged one. A resource
    /// stored before heads were kept gets one from its content type and validators, with
    /// times of 0: it is stale, and revalidated before it is used.
    package convenience init?(_ metadata: ResourceMetadata) {
        guard let text = metadata.user[Self.headersKey] else {
            var headers = HTTPHeaders()
            if let type = metadata.contentType { headers.append(name: "Content-Type", value: type) }
            if let etag = metadata.etag { headers.append(name: "ETag", value: etag) }
            if let lastModified = metadata.lastModified { headers.append(name: "Last-Modified", value: lastModified) }
            self.init(headers: headers, requestTime: 0, responseTime: 0)
            return
        }
        guard let headers = HTTPHeaders(storageText: text), let vary = HTTPHeaders(storageText: metadata.user[Self.varyKey] ?? ""),
            let times = metadata.user[Self.timesKey]?.split(separator: " ").compactMap({ Int64($0) }), times.count == 2,
            let status = Int(metadata.user[Self.statusKey] ?? "200"), (200...599).contains(status)
        else { return nil }
        self.init(
            status: status, headers: headers, requestTime: times[0], responseTime: times[1], varyRequest: vary,
            heuristicFreshness: metadata.user[Self.heuristicKey] != "off")
    }

    /// `metadata` with this head in it (and its content type and validators in their own
    /// fields, for readers that know only those).
    package func stored(in metadata: ResourceMetadata) -> ResourceMetadata {
        var metadata = metadata
        metadata.contentType = headers["content-type"]
        metadata.etag = headers["etag"]
        metadata.lastModified = headers["last-modified"]
        metadata.user[Self.headersKey] = headers.storageText
        metadata.user[Self.timesKey] = "\(requestTime) \(responseTime)"
        metadata.user[Self.varyKey] = varyRequest.storageText
        metadata.user[Self.statusKey] = status == 200 ? nil : String(status)
        metadata.user[Self.heuristicKey] = heuristicFreshness ? nil : "off"
        return metadata
    }

    /// The largest body of a status other than 200 that is stored: it must arrive whole in the
    /// first answer (ranges are of 200 representations only), and error pages and redirects
    /// are small.
    package static let maximumOtherBody: Int64 = 256 * 1024

    /// The most header bytes stored with one resource; a response with more is not stored
    /// (the index metadata has a hard limit, ``ResourceMetadata/maximumEncodedSize``).
    package static let maximumSize = 32 * 1024

    /// Whether the head is larger than ``maximumSize`` once stored: its bytes are counted only
    /// when their lengths alone could pass it.
    var isTooLarge: Bool {
        headers.storageTextBound + varyRequest.storageTextBound > Self.maximumSize
            && headers.storageTextCount + varyRequest.storageTextCount > Self.maximumSize
    }
}
