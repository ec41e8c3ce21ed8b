import SparseCacheEngine
import SparseCacheStore
import SparseHTTP
import Synchronization

/// Where a resource's bytes come from when the cache does not have them: an origin that
/// answers byte-range requests (``HTTPRangeSource`` for HTTP, or a source of your own).
public protocol RangeSource: Sendable {
    /// A stable name for the resource, used as its key in the store (for HTTP, the URL).
    var key: String { get }

    /// Starts a fetch of `range` (or of the whole resource when nil).
    ///
    /// - Parameter validator: what the cache already holds. A source sends it so the origin
    ///   answers with the range only if the resource is still that version (HTTP `If-Range`);
    ///   otherwise the origin may answer with the whole new version, which the response's
    ///   ``RangeResponse/info`` then shows.
    /// - Throws: ``OriginError`` of kind `.badAnswer` for an answer that is not the resource
    ///   (404, 403, 416 for a range past the end, a malformed response; ``OriginError/status``
    ///   holds the status), `.unavailable` for a failure that may pass (connection refused or
    ///   reset, 5xx) and `.timedOut` for an origin that took too long.
    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse

    /// Whether parts of a resource from different answers may be combined only when they share
    /// a strong validator (RFC 9111 section 3.4). When true, a resource whose validator is not
    /// strong is filled by one answer alone: never resumed or extended by a range request; a
    /// reader that needs what that answer did not bring gets the resource fetched anew.
    /// HTTP sources say true. The default, false, is for a source of your own whose key names
    /// one version for good (a content hash, an immutable object).
    var partsNeedStrongValidator: Bool { get }
}

extension RangeSource {
    public var partsNeedStrongValidator: Bool { false }
}

/// What an origin says about a resource.
public struct ContentInfo: Sendable, Equatable {
    /// The total length, when the origin gave one.
    public var length: Int64?
    public var contentType: String?
    public var validator: ContentValidator
    /// The response head as an HTTP cache stores it, when the source speaks HTTP.
    package var stored: StoredHead?

    public init(length: Int64?, contentType: String? = nil, validator: ContentValidator = ContentValidator()) {
        self.init(length: length, contentType: contentType, validator: validator, stored: nil)
    }

    package init(length: Int64?, contentType: String? = nil, validator: ContentValidator = ContentValidator(), stored: StoredHead?) {
        self.length = length
        self.contentType = contentType
        self.validator = validator
        self.stored = stored
    }
}

/// The version of a resource, as its origin names it (HTTP `ETag` and `Last-Modified`).
public struct ContentValidator: Sendable, Equatable, Hashable {
    public var etag: String?
    public var lastModified: String?
    /// The `Date` of the response the validators came with: it tells whether `lastModified`
    /// is a strong validator (RFC 9110 section 8.8.2.2). Not part of the version: two
    /// answers of one version have different dates.
    public var date: String?

    public init(etag: String? = nil, lastModified: String? = nil, date: String? = nil) {
        self.etag = etag
        self.lastModified = lastModified
        self.date = date
    }

    public static func == (lhs: ContentValidator, rhs: ContentValidator) -> Bool {
        lhs.etag == rhs.etag && lhs.lastModified == rhs.lastModified
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(etag)
        hasher.combine(lastModified)
    }

    /// Whether parts of the representation may be combined into one stored response (RFC 9111
    /// section 3.4): a strong entity tag, or a Last-Modified date that is strong.
    var isStrong: Bool {
        if let etag, !etag.hasPrefix("W/") { return true }
        return lastModifiedIsStrong
    }

    /// Whether `lastModified` is a strong validator: at least a second older than the `Date`
    /// of the response that carried it, so no second change can hide in the same second
    /// (RFC 9110 section 8.8.2.2). Without a `Date` it is weak.
    var lastModifiedIsStrong: Bool {
        guard let modified = lastModified.flatMap(HTTPDate.parse), let sent = date.flatMap(HTTPDate.parse) else { return false }
        return modified + 1 <= sent
    }

    /// Nothing to compare by: the origin sent neither validator.
    public var isEmpty: Bool { etag == nil && lastModified == nil }

    /// Whether `other` may be the same version: every validator both sides have agrees.
    /// A weak ETag (`W/"..."`) is compared by its opaque part.
    package func matches(_ other: ContentValidator) -> Bool {
        if let etag, let theirs = other.etag, Self.opaque(etag) != Self.opaque(theirs) { return false }
        if let lastModified, let theirs = other.lastModified, lastModified != theirs { return false }
        return true
    }

    private static func opaque(_ etag: String) -> Substring {
        etag.hasPrefix("W/") ? etag.dropFirst(2) : Substring(etag)
    }
}

/// An origin's answer to a range request: what it is, where its body starts, and the body.
public struct RangeResponse: Sendable {
    public var info: ContentInfo
    /// The resource offset of the first body byte: the range's start for a partial answer,
    /// 0 when the origin sent the whole resource.
    public var offset: Int64
    /// The body in chunks as they arrive. Ends early with ``OriginError`` `.unavailable` when the
    /// connection is cut.
    public var body: AsyncThrowingStream<[UInt8], Error>
    /// Stops the transfer (the body then ends).
    public var cancel: @Sendable () -> Void
    /// Whether the body is a part of the resource (HTTP `206`) rather than all of it.
    public var isPartial: Bool
    /// The whole body, when it had arrived with the head and the transfer is over: a caller
    /// that wants all of it may take it here instead of from ``body`` (which gives the same
    /// bytes). Nil when the body is still to come, or the source does not say.
    public var arrived: [UInt8]?

    public init(
        info: ContentInfo, offset: Int64, body: AsyncThrowingStream<[UInt8], Error>, cancel: @escaping @Sendable () -> Void,
        isPartial: Bool = false, arrived: [UInt8]? = nil
    ) {
        self.info = info
        self.offset = offset
        self.body = body
        self.cancel = cancel
        self.isPartial = isPartial
        self.arrived = arrived
    }
}

/// An origin's answer that is not a part of a resource to cache: an error page, a redirect, a
/// response a shared cache may not store. A proxy hands it to its client as it came; a
/// ``RangeSource`` throws it only when asked to (``HTTPRangeSource/Forwarding``).
public struct OriginAnswer: Error, Sendable, CustomStringConvertible {
    /// The head as received, framing fields included.
    public var head: HTTPResponseHead
    /// The body, de-chunked; empty for a response that has none.
    public var body: AsyncThrowingStream<[UInt8], Error>
    /// Stops the transfer (the body then ends).
    public var cancel: @Sendable () -> Void
    /// Why it is not cached, for the log and `Cache-Status`.
    public var reason: String
    private let claimed = Claim()

    public init(
        head: HTTPResponseHead, body: AsyncThrowingStream<[UInt8], Error>, cancel: @escaping @Sendable () -> Void, reason: String
    ) {
        self.head = head
        self.body = body
        self.cancel = cancel
        self.reason = reason
    }

    public var description: String { "HTTP \(head.status) from the origin (\(reason))" }

    /// True for the first caller only: readers that shared one first contact all get the same
    /// answer, and its body can be read once. The others ask the origin themselves.
    public func claim() -> Bool { claimed.take() }

    private final class Claim: Sendable {
        private let taken = Atomic<Bool>(false)
        func take() -> Bool { !taken.exchange(true, ordering: .acquiringAndReleasing) }
    }
}
