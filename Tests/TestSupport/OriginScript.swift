// What the scripted origin answers for one path: the test writes it as `<root>/<name>.json`
// and rewrites it to change the answer (a new version, updated headers).
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One path's answer from ``OriginServer/scripted(root:)``.
package struct OriginScript: Encodable, Sendable {
    package var status = 200
    /// Header fields in order. `Date` defaults to now; Content-Length is always the origin's own.
    package var headers: [(String, String)] = []
    /// The body as text; or `bodyFile`, a file under the root; or `bodySize` bytes of
    /// ``pattern(count:seed:)``.
    package var body: String?
    package var bodyFile: String?
    package var bodySize: Int?
    package var bodySeed: Int?
    /// Answer If-None-Match / If-Modified-Since with 304 when they match.
    package var conditional = false
    /// Seconds added to now for the Date field (when `headers` has none).
    package var dateOffset: Int?
    /// Seconds added to the time the script was written, for Last-Modified and Expires (when
    /// `headers` has none): fixed until the script is rewritten, so revalidations see the
    /// same validator.
    package var lastModifiedOffset: Int?
    package var expiresOffset: Int?
    /// Send the body gzip-compressed (Python's gzip, mtime 0, so the bytes are the same
    /// every time) with `Content-Encoding: gzip`.
    package var gzip: Bool?
    /// Answer with the request's body as the body, and `X-Echo-Method` / `X-Echo-Framing`
    /// (`length` or `chunked`) fields: what reached the origin.
    package var echo: Bool?
    /// Answer without reading the request's body, then close the connection.
    package var ignoreBody: Bool?
    /// Other answers chosen by the request's Accept-Encoding: the first key the request lists
    /// as a coding names the whole script to answer with instead (e.g. `["gzip": ...]`).
    package var variants: [String: OriginScript]?
    /// How the body is delimited: "length" (Content-Length, the default), "chunked", or
    /// "close" (until the connection closes). Without a length the origin ignores Range.
    package var framing: String?
    /// Bytes per write, and the pause between writes (a body that trickles in).
    package var chunkSize: Int?
    package var chunkDelayMs: Int?
    /// Close the connection after this many body bytes (a body cut off before its end).
    package var cutAfter: Int?
    /// Interim (1xx) responses sent before the final one: status and header fields of each.
    package var interim: [Interim]?
    /// Read the request's framing fields as a CGI/WSGI-style gateway does: `_` in a name as `-`.
    package var lenient: Bool?

    package init(
        status: Int = 200, headers: [(String, String)] = [], body: String? = nil, bodyFile: String? = nil, bodySize: Int? = nil,
        bodySeed: Int? = nil, conditional: Bool = false, dateOffset: Int? = nil, lastModifiedOffset: Int? = nil,
        expiresOffset: Int? = nil, gzip: Bool? = nil, echo: Bool? = nil, ignoreBody: Bool? = nil, variants: [String: OriginScript]? = nil,
        framing: String? = nil, chunkSize: Int? = nil, chunkDelayMs: Int? = nil, cutAfter: Int? = nil, interim: [Interim]? = nil,
        lenient: Bool? = nil
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.bodyFile = bodyFile
        self.bodySize = bodySize
        self.bodySeed = bodySeed
        self.conditional = conditional
        self.dateOffset = dateOffset
        self.lastModifiedOffset = lastModifiedOffset
        self.expiresOffset = expiresOffset
        self.gzip = gzip
        self.echo = echo
        self.ignoreBody = ignoreBody
        self.variants = variants
        self.framing = framing
        self.chunkSize = chunkSize
        self.chunkDelayMs = chunkDelayMs
        self.cutAfter = cutAfter
        self.interim = interim
        self.lenient = lenient
    }

    package struct Interim: Encodable, Sendable {
        package var status: Int
        package var headers: [[String]]

        package init(status: Int, headers: [[String]]) {
            self.status = status
            self.headers = headers
        }
    }

    package enum CodingKeys: String, CodingKey {
        case status, headers, body, conditional, gzip, variants, echo
        case ignoreBody = "ignore_body"
        case bodyFile = "body_file"
        case bodySize = "body_size"
        case bodySeed = "body_seed"
        case dateOffset = "date_offset"
        case lastModifiedOffset = "last_modified_offset"
        case expiresOffset = "expires_offset"
        case framing
        case chunkSize = "chunk_size"
        case chunkDelayMs = "chunk_delay_ms"
        case cutAfter = "cut_after"
        case interim, lenient
    }

    package func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(status, forKey: .status)
        try container.encode(headers.map { [$0.0, $0.1] }, forKey: .headers)
        try container.encodeIfPresent(body, forKey: .body)
        try container.encodeIfPresent(bodyFile, forKey: .bodyFile)
        try container.encodeIfPresent(bodySize, forKey: .bodySize)
        try container.encodeIfPresent(bodySeed, forKey: .bodySeed)
        try container.encode(conditional, forKey: .conditional)
        try container.encodeIfPresent(dateOffset, forKey: .dateOffset)
        try container.encodeIfPresent(lastModifiedOffset, forKey: .lastModifiedOffset)
        try container.encodeIfPresent(expiresOffset, forKey: .expiresOffset)
        try container.encodeIfPresent(gzip, forKey: .gzip)
        try container.encodeIfPresent(variants, forKey: .variants)
        try container.encodeIfPresent(framing, forKey: .framing)
        try container.encodeIfPresent(chunkSize, forKey: .chunkSize)
        try container.encodeIfPresent(chunkDelayMs, forKey: .chunkDelayMs)
        try container.encodeIfPresent(cutAfter, forKey: .cutAfter)
        try container.encodeIfPresent(echo, forKey: .echo)
        try container.encodeIfPresent(ignoreBody, forKey: .ignoreBody)
        try container.encodeIfPresent(interim, forKey: .interim)
        try container.encodeIfPresent(lenient, forKey: .lenient)
    }

    /// Writes the script as `<root>/<name>.json` by rename, so the origin never reads half of it.
    package func write(root: String, name: String) throws {
        let data = try JSONEncoder().encode(self)
        let path = root + "/" + name + ".json"
        try data.write(to: URL(fileURLWithPath: path + ".tmp"))
        guard rename(path + ".tmp", path) == 0 else { throw OriginFailure("cannot rename '\(path).tmp' into place (errno \(errno))") }
    }

    /// The body `bodySize`/`bodySeed` stand for; the origin computes the same bytes.
    package static func pattern(count: Int, seed: Int = 0) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ seed &* 17 &+ ($0 >> 8)) }
    }
}
