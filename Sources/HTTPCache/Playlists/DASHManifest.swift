import Foundation

/// A DASH manifest (MPD, ISO/IEC 23009-1) rewritten so every URL points at the proxy.
///
/// URLs are in `BaseURL` and `Location` elements, in `SegmentTemplate` (`media`,
/// `initialization`, `index`, `bitstreamSwitching`, with `$Identifier$` parts the player fills
/// in), in `SegmentURL` (`media`, `index`) and in `Initialization`, `RepresentationIndex` and
/// `BitstreamSwitching` (`sourceURL`). Each is resolved against its effective base: the MPD's
/// URL, then the first `BaseURL` of each enclosing element in turn (MPD, Period,
/// AdaptationSet, Representation), and written as a root-relative proxy reference. Since every
/// rewritten reference is root-relative, the rewritten `BaseURL`s no longer change what the
/// others resolve to, and a `BaseURL` that is itself the media (a Representation with
/// `SegmentBase`) still names it.
///
/// The scan is textual, tag by tag: everything but the URLs it rewrites is copied as it came
/// (comments, processing instructions, CDATA, formatting, namespaces).
struct DASHManifest: Sendable {
    let url: URL
    let text: String

    /// Nil when `bytes` do not look like an MPD.
    init?(_ bytes: [UInt8], url: URL) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.contains("<MPD") || text.contains(":MPD") else { return nil }
        self.url = url
        self.text = text
    }

    private static let urlAttributes: [String: Set<String>] = [
        "SegmentTemplate": ["media", "initialization", "index", "bitstreamSwitching"],
        "SegmentURL": ["media", "index"],
        "Initialization": ["sourceURL"],
        "RepresentationIndex": ["sourceURL"],
        "BitstreamSwitching": ["sourceURL"],
    ]
    private static let templates: Set<String> = ["SegmentTemplate"]
    private static let urlElements: Set<String> = ["BaseURL", "Location"]

    /// The manifest with every http(s) URL written as `references` says.
    func rewritten(_ references: ProxyReferences) -> String {
        let characters = Array(text.unicodeScalars)
        var output = String.UnicodeScalarView()
        output.reserveCapacity(characters.count + characters.count / 2)
        // One entry per open element: its effective base, and whether a BaseURL set it yet.
        var bases: [(name: String, base: URL, set: Bool)] = [("", url, false)]
        var index = 0
        let scanner = MarkupScanner(characters)
        while index < characters.count {
            guard characters[index] == "<" else {
                output.append(characters[index])
                index += 1
                continue
            }
            // Comments, processing instructions, CDATA and declarations are copied whole.
            if let skipTo = scanner.nonElementEnd(at: index) {
                let end = scanner.end(of: skipTo, from: index + 2)
                output.append(contentsOf: characters[index..<end])
                index = end
                continue
            }
            let tagEnd = Self.tagEnd(characters, from: index)
            let tag = String(String.UnicodeScalarView(characters[index..<tagEnd]))
            index = tagEnd
            if tag.hasPrefix("</") {
                if bases.count > 1 { bases.removeLast() }
                output.append(contentsOf: tag.unicodeScalars)
                continue
            }
            let name = Self.localName(of: tag)
            let base = bases.last?.base ?? url
            output.append(contentsOf: rewriteAttributes(tag, element: name, base: base, references).unicodeScalars)
            if tag.hasSuffix("/>") { continue }
            bases.append((name, base, false))
            guard Self.urlElements.contains(name) else { continue }
            // The element's text is a URL: up to the next tag.
            var textEnd = index
            while textEnd < characters.count, characters[textEnd] != "<" { textEnd += 1 }
            let raw = String(String.UnicodeScalarView(characters[index..<textEnd]))
            let value = Self.unescape(raw.trimmingCharacters(in: .whitespacesAndNewlines))
            index = textEnd
            guard let resolved = URL(string: value, relativeTo: base)?.absoluteURL,
                let rewritten = references.reference(for: value, base: base)
            else {
                output.append(contentsOf: raw.unicodeScalars)
                continue
            }
            output.append(contentsOf: Self.escape(rewritten).unicodeScalars)
            // The first BaseURL of an element is the base of everything after it inside that
            // element (the element is the entry below the BaseURL's own).
            if name == "BaseURL", bases.count >= 2, !bases[bases.count - 2].set {
                bases[bases.count - 2].base = resolved
                bases[bases.count - 2].set = true
            }
        }
        return String(output)
    }

    /// Where the tag that starts at `start` ends (after its `>`), quotes respected.
    static func tagEnd(_ characters: [Unicode.Scalar], from start: Int) -> Int {
        var quote: Unicode.Scalar?
        var index = start + 1
        while index < characters.count {
            let character = characters[index]
            if let open = quote {
                if character == open { quote = nil }
            } else if character == "\"" || character == "'" {
                quote = character
            } else if character == ">" {
                return index + 1
            }
            index += 1
        }
        return characters.count
    }

    /// `Name` of `<ns:Name attr="...">`.
    static func localName(of tag: String) -> String {
        let name = tag.dropFirst().prefix { !$0.isWhitespace && $0 != "/" && $0 != ">" }
        return String(name.split(separator: ":").last ?? "")
    }

    private func rewriteAttributes(_ tag: String, element: String, base: URL, _ references: ProxyReferences) -> String {
        guard let names = Self.urlAttributes[element] else { return tag }
        var output = ""
        var rest = Substring(tag)
        // attribute = name, optional spaces, `=`, optional spaces, a quoted value.
        while let equals = rest.firstIndex(of: "=") {
            let before = rest[..<equals]
            let name = before.reversed().drop { $0.isWhitespace }.prefix { !$0.isWhitespace && $0 != "<" }
            var valueStart = rest.index(after: equals)
            while valueStart < rest.endIndex, rest[valueStart].isWhitespace { valueStart = rest.index(after: valueStart) }
            guard valueStart < rest.endIndex, rest[valueStart] == "\"" || rest[valueStart] == "'" else {
                output += rest[...equals]
                rest = rest[rest.index(after: equals)...]
                continue
            }
            let quote = rest[valueStart]
            let open = rest.index(after: valueStart)
            guard let close = rest[open...].firstIndex(of: quote) else { break }
            output += rest[..<open]
            let value = String(rest[open..<close])
            let attribute = String(name.reversed())
            if names.contains(attribute) {
                let plain = Self.unescape(value)
                let rewritten =
                    Self.templates.contains(element)
                    ? references.reference(forTemplate: plain, base: base) : references.reference(for: plain, base: base)
                output += rewritten.map(Self.escape) ?? value
            } else {
                output += value
            }
            rest = rest[close...]
        }
        return output + rest
    }

    static func unescape(_ text: String) -> String {
        guard text.contains("&") else { return text }
        return text.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }

    /// References are percent-encoded, so only `&` (between query parameters) needs escaping.
    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}

/// Position tests over the scalars of a markup text.
struct MarkupScanner {
    let scalars: [Unicode.Scalar]

    init(_ scalars: [Unicode.Scalar]) {
        self.scalars = scalars
    }

    func starts(_ prefix: String, at position: Int) -> Bool {
        var offset = position
        for scalar in prefix.unicodeScalars {
            guard offset < scalars.count, scalars[offset] == scalar else { return false }
            offset += 1
        }
        return true
    }

    /// Just past the first `terminator` at or after `position` (the end of the text if none).
    func end(of terminator: String, from position: Int) -> Int {
        var offset = position
        while offset < scalars.count, !starts(terminator, at: offset) { offset += 1 }
        return min(scalars.count, offset + terminator.unicodeScalars.count)
    }

    /// For a comment, CDATA section, processing instruction or declaration starting at
    /// `position`, what ends it; nil for an element's tag.
    func nonElementEnd(at position: Int) -> String? {
        if starts("<!--", at: position) { return "-->" }
        if starts("<![CDATA[", at: position) { return "]]>" }
        if starts("<?", at: position) { return "?>" }
        if starts("<!", at: position) { return ">" }
        return nil
    }
}
