import Foundation
@_spi(Locking) import SparseCacheEngine
import SparseHTTP

/// Adaptive streaming through the proxy: HLS playlists and DASH manifests are stored as the
/// origin sent them and rewritten on the way out, so every URL in them leads back to the
/// proxy (docs/STREAMING.md).
extension CachingProxy {
    /// The largest stored response read whole to be rewritten as a playlist; a larger one is
    /// sent as it is (real playlists are kilobytes; a long VOD's media playlist a few hundred).
    static let maximumPlaylist: Int64 = 8 << 20

    /// What kind of playlist a stored response is, by its media type or, when the type says
    /// nothing more specific, the URL's extension (nginx and S3 often serve `.m3u8` as
    /// `application/octet-stream` or `text/plain`).
    static func playlistKind(contentType: String?, path: String) -> PlaylistKind? {
        // On the bytes in place: every cached answer asks (twice), and a hit is a few tens of
        // microseconds. No trimmed copy, no set lookup that hashes it, no generic string views.
        var contentType = contentType ?? ""
        var path = path
        return contentType.withUTF8 { value in
            let type = mediaTypeRange(value)
            for candidate in hlsTypes where HTTPSyntax.equalsIgnoringCase(value, type, candidate) { return .hls }
            if HTTPSyntax.equalsIgnoringCase(value, type, "application/dash+xml") { return .dash }
            guard genericTypes.contains(where: { HTTPSyntax.equalsIgnoringCase(value, type, $0) }) else { return nil }
            return path.withUTF8 { name in
                if hasSuffixIgnoringCase(name, ".m3u8") || hasSuffixIgnoringCase(name, ".m3u") { return .hls }
                return hasSuffixIgnoringCase(name, ".mpd") ? .dash : nil
            }
        }
    }

    private static let hlsTypes: [StaticString] = ["application/vnd.apple.mpegurl", "application/x-mpegurl", "audio/mpegurl", "audio/x-mpegurl"]
    /// Types a server gives a playlist it does not know as one: then the name decides.
    private static let genericTypes: [StaticString] = [
        "application/octet-stream", "", "text/plain", "binary/octet-stream", "application/xml", "text/xml",
    ]

    /// Where the media type lies in a `Content-Type` value: before any `;`, without
    /// surrounding spaces and tabs.
    private static func mediaTypeRange(_ value: UnsafeBufferPointer<UInt8>) -> Range<Int> {
        HTTPSyntax.trimmed(value, 0..<(value.firstIndex(of: UInt8(ascii: ";")) ?? value.count))
    }

    private static func hasSuffixIgnoringCase(_ text: UnsafeBufferPointer<UInt8>, _ suffix: StaticString) -> Bool {
        text.count >= suffix.utf8CodeUnitCount && HTTPSyntax.equalsIgnoringCase(text, (text.count - suffix.utf8CodeUnitCount)..<text.count, suffix)
    }

    /// The stored playlist of this exchange, read whole, or nil when the response is not one
    /// the proxy rewrites: not a 200, too large, not a playlist, or asked for by a client that
    /// uses the proxy as its HTTP proxy (absolute-form target: it resolves the playlist's URLs
    /// against the origin's URL and sends them through the proxy anyway).
    func storedPlaylist(_ reader: CacheReader, head: StoredHead, _ exchange: Exchange) async throws -> StoredPlaylist? {
        guard head.status == 200, reader.length <= Self.maximumPlaylist,
            let kind = Self.playlistKind(contentType: head.headers["content-type"], path: exchange.target),
            !HTTPRequestParser.isAbsoluteHTTP(exchange.request.target.utf8),
            case .success(let url) = route(for: exchange.request.target).map(\.url)
        else { return nil }
        if let known = exchange.playlist, known.reader == ObjectIdentifier(reader) { return known }
        let missing = try await reader.missingRanges(in: 0..<reader.length)
        let bytes = Lock<[UInt8]>([])
        try await reader.read(0..<reader.length) { chunk in bytes.withLock { $0 += chunk } }
        let body = bytes.withLock { $0 }
        let playlist: StoredPlaylist
        switch kind {
        case .hls:
            guard let parsed = HLSPlaylist(body, url: url) else { return nil }
            playlist = StoredPlaylist(reader: ObjectIdentifier(reader), url: url, bytes: body, missing: missing.reduce(0) { $0 + Int64($1.count) }, hls: parsed, dash: nil)
        case .dash:
            guard let parsed = DASHManifest(body, url: url) else { return nil }
            playlist = StoredPlaylist(reader: ObjectIdentifier(reader), url: url, bytes: body, missing: missing.reduce(0) { $0 + Int64($1.count) }, hls: nil, dash: parsed)
        }
        exchange.playlist = playlist
        return playlist
    }

    /// The freshness rule for live HLS: a media playlist without `EXT-X-ENDLIST` whose
    /// response carries no freshness information is fresh for at most half its target
    /// duration (RFC 8216, section 6.3.4: a client that finds it unchanged retries after half
    /// the target duration; a cache that held it longer would hide new segments). Explicit `max-age`, `s-maxage` or
    /// `Expires` decide as sent; the limit applies to the heuristic only.
    func streamingPolicy(_ policy: CachePolicy, _ reader: CacheReader, head: StoredHead, _ exchange: Exchange) async throws -> CachePolicy {
        guard Self.playlistKind(contentType: head.headers["content-type"], path: exchange.target) == .hls,
            let playlist = try await storedPlaylist(reader, head: head, exchange), let hls = playlist.hls, !hls.ended,
            let target = hls.targetDuration
        else { return policy }
        return policy.limitingHeuristicFreshness(to: target / 2)
    }

    /// Sends a stored playlist rewritten; false when the response is not a playlist (the
    /// caller sends it as stored).
    ///
    /// The rewritten body is another representation than the origin's, so, as nginx's
    /// `sub_filter` does: the `ETag` goes out weak, `Last-Modified` and digests are dropped,
    /// the length is the new one, and ranges are not served (the whole playlist, 200; RFC 9110
    /// lets a server ignore Range). Conditionals are evaluated against the weak tag.
    /// Tells the segment prefetcher which URL a client asked for (a player's position in a
    /// media playlist it knows), when it knows any.
    func tellPrefetcher(_ exchange: Exchange) {
        if !streaming.prefetcher.isEmpty, case .success(let url) = route(for: exchange.request.target).map(\.url) {
            streaming.prefetcher.requested(url, proxy: self, exchange: exchange)
        }
    }

    func sendPlaylist(_ reader: CacheReader, head: StoredHead, age: Int64, _ exchange: Exchange) async throws -> Bool {
        tellPrefetcher(exchange)
        guard let playlist = try await storedPlaylist(reader, head: head, exchange) else { return false }
        exchange.status.fromStorage = true
        let references = ProxyReferences(origin: origin)
        let text = playlist.hls?.rewritten(references) ?? playlist.dash?.rewritten(references) ?? ""
        noteReferences(in: playlist)
        // A page on another origin that may not read the playlist never asks for its segments
        // (its browser refused the answer): nothing is prefetched for it.
        if CORSPolicy.pageMayRead(exchange.request, allowOrigin: head.headers["access-control-allow-origin"], policy: cors) {
            if let hls = playlist.hls { streaming.prefetcher.servedPlaylist(hls, proxy: self, exchange: exchange) }
            if let dash = playlist.dash { streaming.prefetcher.servedManifest(dash) }
        }
        var stored = head.headers
        for name in ["age", "accept-ranges", "transfer-encoding", "content-length", "content-range", "last-modified"]
            + ["content-md5", "digest", "content-digest", "repr-digest"]
        {
            stored.remove(name)
        }
        if let etag = stored["etag"] {
            stored.remove("etag")
            stored.append(name: "ETag", value: etag.hasPrefix("W/") ? etag : "W/" + etag)
        }
        let response = exchange.response
        switch Precondition.evaluate(exchange.request, etag: stored["etag"], lastModified: nil) {
        case .failed:
            try await response.respond(status: 412, message: "precondition failed", headers: proxyFields([], status: exchange.status, via: via.element))
            return true
        case .notModified:
            let kept = ["cache-control", "content-location", "date", "etag", "expires", "vary"]
            let fields = stored.keeping { field in kept.contains { field.hasName($0) } }
            try await response.writeHead(
                status: 304, headers: proxyFields(fields, status: exchange.status, via: via.element) + [("Age", String(age))], contentLength: 0)
            return true
        case .proceed:
            break
        }
        let body = Array(text.utf8)
        let headers = proxyFields(stored, status: exchange.status, via: via.element) + [("Age", String(age))]
        try await response.writeHead(status: 200, headers: headers, contentLength: Int64(body.count), withFirstBody: true)
        if exchange.request.method == .head { return true }
        let fetched = min(Int64(body.count), playlist.missing)
        response.countCacheBytes(hit: Int64(body.count) - fetched, miss: fetched)
        try await response.writeBody(body)
        return true
    }

    /// Stops segment prefetch and lets go of the segments it pinned: before the cache shuts
    /// down.
    public func shutdown() async {
        await streaming.prefetcher.stop()
    }

    /// Remembers the origins of the absolute URLs a playlist names: in reverse-proxy mode the
    /// proxy fetches `/<name>?url=...` only from those (it is not an open proxy).
    private func noteReferences(in playlist: StoredPlaylist) {
        guard let origin else { return }
        let own = ProxyReferences.originName(origin)
        var names = Set<String>()
        for url in (playlist.hls.map { $0.segments + $0.variants } ?? []) {
            let name = ProxyReferences.originName(url)
            if name != own { names.insert(name) }
        }
        if let dash = playlist.dash {
            // Absolute URLs anywhere in the manifest.
            for word in dash.text.split(whereSeparator: { "\"'<> \n\t".contains($0) }) where word.hasPrefix("http") {
                if let url = URL(string: String(word)), url.host != nil, ProxyReferences.originName(url) != own { names.insert(ProxyReferences.originName(url)) }
            }
        }
        if let hls = playlist.hls {
            for line in hls.text.split(whereSeparator: \.isNewline) where line.hasPrefix("#") {
                if let value = HLSPlaylist.attribute("URI", in: String(line)), let url = URL(string: value), url.host != nil,
                    ProxyReferences.originName(url) != own
                {
                    names.insert(ProxyReferences.originName(url))
                }
            }
        }
        guard !names.isEmpty else { return }
        streaming.referencedOrigins.withLock { $0.formUnion(names) }
    }

    /// In reverse-proxy mode, `/<name>?url=<URL>` for a URL on the origin, or on another origin
    /// that a playlist served by this proxy named (see ``noteReferences(in:)``); nil for every other target,
    /// which maps onto the origin as before.
    func referencedURL(_ target: String) -> URL? {
        guard ProxyRoutes.mayChange(target), let query = target.split(separator: "?", maxSplits: 1).dropFirst().first,
            let parameter = query.split(separator: "&").first(where: { $0.hasPrefix("url=") }),
            let text = String(parameter.dropFirst(4)).removingPercentEncoding, let url = URL(string: text), url.host != nil,
            let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https"
        else { return nil }
        let name = ProxyReferences.originName(url)
        // The origin itself (a URL outside its path prefix) is no wider than reverse mode.
        if let origin, name == ProxyReferences.originName(origin) { return url }
        return streaming.referencedOrigins.withLock { $0.contains(name) } ? url : nil
    }
}

/// HLS or DASH.
enum PlaylistKind: Sendable, Equatable {
    case hls
    case dash
}

/// A stored playlist read whole for one exchange (its freshness and its rewriting share it).
struct StoredPlaylist: Sendable {
    /// The reader it was read from: a revalidation that found a new version opens another.
    var reader: ObjectIdentifier
    var url: URL
    var bytes: [UInt8]
    /// Bytes that were not in the cache when it was read (fetched for this exchange).
    var missing: Int64
    var hls: HLSPlaylist?
    var dash: DASHManifest?
}
