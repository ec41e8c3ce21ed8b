import Foundation

/// An HLS playlist (RFC 8216), master or media, read as lines: what the proxy needs to know of
/// it (its segments, its target duration, whether it is live) and the playlist with every URL
/// pointing at the proxy.
///
/// URLs are on URI lines (segments, variant streams) and in `URI="..."` attributes of tags
/// (EXT-X-KEY, EXT-X-SESSION-KEY, EXT-X-MAP, EXT-X-MEDIA, EXT-X-I-FRAME-STREAM-INF,
/// EXT-X-PART, EXT-X-PRELOAD-HINT, EXT-X-RENDITION-REPORT, EXT-X-SESSION-DATA): any tag's
/// `URI` attribute is rewritten, so tags added later are covered too. Everything else is
/// copied byte for byte, line endings included.
struct HLSPlaylist: Sendable {
    /// The playlist's own URL: relative URLs resolve against it.
    let url: URL
    let text: String
    /// Media segments in order, as absolute URLs (empty for a master playlist).
    private(set) var segments: [URL] = []
    /// Each segment's duration in seconds (its `EXTINF`; 0 when it has none).
    private(set) var durations: [Double] = []
    /// Variant streams and renditions a master playlist names.
    private(set) var variants: [URL] = []
    /// Which of them a player switches among, by URL: the variant streams (`EXT-X-STREAM-INF`)
    /// are one group, the renditions of each `EXT-X-MEDIA` `TYPE` and `GROUP-ID` another (a
    /// player plays a variant and an audio rendition at once).
    private(set) var switchGroups: [URL: String] = [:]
    /// `EXT-X-TARGETDURATION`, in seconds.
    private(set) var targetDuration: Int64?
    /// `EXT-X-ENDLIST`: no segment will be added (a VOD or an ended event).
    private(set) var ended = false

    /// Parses `bytes`; nil when they are not an HLS playlist (no `#EXTM3U` first line).
    init?(_ bytes: [UInt8], url: URL) {
        var text = String(decoding: bytes, as: UTF8.self)
        if text.hasPrefix("\u{FEFF}") { text.removeFirst() }
        guard text.hasPrefix("#EXTM3U") else { return nil }
        self.url = url
        self.text = text
        var nextIsVariant = false
        var duration = 0.0
        for line in text.split(omittingEmptySubsequences: true, whereSeparator: \.isNewline) {
            let line = line.trimmingCharacters(in: .whitespaces)
            if line.isEmpty { continue }
            if line.hasPrefix("#") {
                if line.hasPrefix("#EXT-X-TARGETDURATION:") {
                    targetDuration = Int64(line.dropFirst("#EXT-X-TARGETDURATION:".count).trimmingCharacters(in: .whitespaces))
                } else if line.hasPrefix("#EXT-X-ENDLIST") {
                    ended = true
                } else if line.hasPrefix("#EXTINF:") {
                    duration = Double(line.dropFirst("#EXTINF:".count).prefix { $0 != "," }.trimmingCharacters(in: .whitespaces)) ?? 0
                } else if line.hasPrefix("#EXT-X-STREAM-INF") {
                    nextIsVariant = true
                } else if line.hasPrefix("#EXT-X-MEDIA:"), let uri = Self.attribute("URI", in: line),
                    let media = URL(string: uri, relativeTo: url)?.absoluteURL
                {
                    variants.append(media)
                    let type = Self.attribute("TYPE", in: line) ?? ""
                    switchGroups[media] = "media " + type + " " + (Self.attribute("GROUP-ID", in: line) ?? "")
                }
                continue
            }
            guard let resolved = URL(string: line, relativeTo: url)?.absoluteURL else { continue }
            if nextIsVariant {
                variants.append(resolved)
                switchGroups[resolved] = switchGroups[resolved] ?? "variants"
            } else {
                segments.append(resolved)
                durations.append(duration)
            }
            nextIsVariant = false
            duration = 0
        }
    }

    /// A master playlist names variants; a media playlist segments.
    var isMaster: Bool { !variants.isEmpty && segments.isEmpty }

    /// The playlist with every http(s) URL written as `references` says.
    func rewritten(_ references: ProxyReferences) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count + text.utf8.count / 2)
        var rest = Substring(text)
        while !rest.isEmpty {
            let end = rest.firstIndex(where: \.isNewline) ?? rest.endIndex
            let line = rest[..<end]
            var after = end
            while after < rest.endIndex, rest[after].isNewline { after = rest.index(after: after) }
            output += rewrite(line, references)
            output += rest[end..<after]
            rest = rest[after...]
        }
        return output
    }

    private func rewrite(_ line: Substring, _ references: ProxyReferences) -> String {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty { return String(line) }
        if trimmed.hasPrefix("#") {
            guard trimmed.hasPrefix("#EXT"), line.contains("URI=\"") else { return String(line) }
            return rewriteAttributes(line, references)
        }
        return references.reference(for: trimmed, base: url) ?? String(line)
    }

    /// Rewrites every `URI="..."` attribute of a tag line (`SERVER-URI` and other names ending
    /// in `URI` are not segment or playlist URLs and stay).
    private func rewriteAttributes(_ line: Substring, _ references: ProxyReferences) -> String {
        var output = ""
        var rest = line
        while let range = rest.range(of: "URI=\"") {
            let isAttribute = range.lowerBound == rest.startIndex || [":", ","].contains(rest[rest.index(before: range.lowerBound)])
            output += rest[..<range.upperBound]
            rest = rest[range.upperBound...]
            guard let close = rest.firstIndex(of: "\"") else { break }
            let value = String(rest[..<close])
            output += isAttribute ? (references.reference(for: value, base: url) ?? value) : value
            rest = rest[close...]
        }
        return output + rest
    }

    /// The value of a quoted attribute of a tag line.
    static func attribute(_ name: String, in line: String) -> String? {
        guard let range = line.range(of: name + "=\""),
            range.lowerBound == line.startIndex || [":", ","].contains(line[line.index(before: range.lowerBound)])
        else { return nil }
        let rest = line[range.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }
}
