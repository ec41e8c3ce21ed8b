import Foundation

/// The media segments of each Representation of a DASH manifest, in order, as absolute URLs:
/// what segment prefetch follows (a Representation is to DASH what a media playlist is to HLS).
///
/// Segments come from a `SegmentList` (its `SegmentURL media`) or a `SegmentTemplate` (its
/// `media` with `$RepresentationID$`, `$Number$`, `$Time$` and `$Bandwidth$` filled in, with
/// an optional `%0Nd` width, ISO/IEC 23009-1, 5.3.9.4.4), numbered from `startNumber` over a
/// `SegmentTimeline` (`S` elements: `t`, `d`, `r`; `r="-1"` repeats to the end of the Period)
/// or over `duration` in `timescale` units across the presentation's duration. Templates are
/// inherited Period -> AdaptationSet -> Representation, attribute by attribute. URLs resolve
/// against the manifest's URL and each level's first `BaseURL`.
///
/// Not enumerated (nothing is prefetched for them): a dynamic (live) manifest's
/// duration-only template (its numbers follow the wall clock from `availabilityStartTime`),
/// and a Representation with only `SegmentBase` (one file, fetched by ranges as it is read).
struct DASHSegments: Sendable {
    /// Representation id -> its segments, and each segment's duration in seconds (0 unknown).
    /// `set` names the Representation's AdaptationSet (its `id`, else its place in the
    /// manifest): a player plays one Representation of each set at once (video and audio),
    /// and switches only among the Representations of one set.
    private(set) var representations: [(id: String, set: String, segments: [URL], durations: [Double])] = []

    /// Enumerating stops past this many segments per Representation: a timeline of a few bytes
    /// can name millions (`r="9999999"`), and the prefetcher keeps every URL of the 64 media
    /// playlists it remembers. 4,096 segments of 2 s are over two hours; past them nothing is
    /// prefetched (the player's requests are served as usual).
    static let maximumSegments = 4_096

    init(_ manifest: DASHManifest) {
        let root = XMLElementTree.parse(manifest.text)
        guard let mpd = root.first(named: "MPD") else { return }
        let presentation = mpd.attributes["mediaPresentationDuration"].flatMap(Self.seconds)
        let dynamic = mpd.attributes["type"] == "dynamic"
        let mpdBase = Self.base(of: mpd, over: manifest.url)
        for (periodIndex, period) in mpd.children(named: "Period").enumerated() {
            let periodBase = Self.base(of: period, over: mpdBase)
            let periodDuration = period.attributes["duration"].flatMap(Self.seconds) ?? presentation
            for (adaptationIndex, adaptation) in period.children(named: "AdaptationSet").enumerated() {
                let set = "\(periodIndex)." + (adaptation.attributes["id"] ?? "#\(adaptationIndex)")
                let adaptationBase = Self.base(of: adaptation, over: periodBase)
                for representation in adaptation.children(named: "Representation") {
                    guard let id = representation.attributes["id"] else { continue }
                    let base = Self.base(of: representation, over: adaptationBase)
                    let levels = [period, adaptation, representation]
                    var segments: [(URL, Double)] = []
                    if let list = levels.compactMap({ $0.first(named: "SegmentList") }).last {
                        let timescale = list.attributes["timescale"].flatMap(Double.init).map { max($0, 1) } ?? 1
                        let duration = list.attributes["duration"].flatMap(Double.init).map { $0 / timescale } ?? 0
                        segments = list.children(named: "SegmentURL").compactMap { $0.attributes["media"] }
                            .compactMap { URL(string: $0, relativeTo: base)?.absoluteURL }.map { ($0, duration) }
                    } else {
                        let templates = levels.compactMap { $0.first(named: "SegmentTemplate") }
                        guard !templates.isEmpty else { continue }
                        segments = Self.expand(
                            templates, representation: id, bandwidth: representation.attributes["bandwidth"] ?? "", base: base,
                            periodDuration: periodDuration, dynamic: dynamic)
                    }
                    let kept = segments.prefix(Self.maximumSegments)
                    if !kept.isEmpty { representations.append((id, set, kept.map(\.0), kept.map(\.1))) }
                }
            }
        }
    }

    /// The URLs a merged template names.
    private static func expand(
        _ templates: [XMLElementTree.Element], representation: String, bandwidth: String, base: URL, periodDuration: Double?, dynamic: Bool
    ) -> [(URL, Double)] {
        var attributes: [String: String] = [:]
        for template in templates { attributes.merge(template.attributes) { $1 } }
        guard let media = attributes["media"] else { return [] }
        let timescale = attributes["timescale"].flatMap(Double.init).map { max($0, 1) } ?? 1
        let startNumber = attributes["startNumber"].flatMap(Int.init) ?? 1
        // (number, time, duration) of each segment, in timescale units.
        var numbered: [(Int, Int64, Int64)] = []
        if let timeline = templates.compactMap({ $0.first(named: "SegmentTimeline") }).last {
            var time: Int64 = 0
            let end = periodDuration.map { Int64($0 * timescale) }
            for entry in timeline.children(named: "S") {
                guard let duration = entry.attributes["d"].flatMap(Int64.init), duration > 0 else { continue }
                if let start = entry.attributes["t"].flatMap(Int64.init) { time = start }
                var repeats = entry.attributes["r"].flatMap(Int.init) ?? 0
                if repeats < 0 {
                    guard let end, end > time else { continue }
                    repeats = Int((end - time + duration - 1) / duration) - 1
                }
                for _ in 0...max(0, min(repeats, maximumSegments)) where numbered.count < maximumSegments {
                    numbered.append((startNumber + numbered.count, time, duration))
                    time += duration
                }
            }
        } else if let duration = attributes["duration"].flatMap(Double.init), duration > 0, let periodDuration, !dynamic {
            let count = min(maximumSegments, Int((periodDuration * timescale / duration).rounded(.up)))
            numbered = (0..<max(0, count)).map { (startNumber + $0, Int64(Double($0) * duration), Int64(duration)) }
        }
        return numbered.compactMap { number, time, duration in
            let path = fill(media, representation: representation, number: number, time: time, bandwidth: bandwidth)
            guard let url = URL(string: path, relativeTo: base)?.absoluteURL else { return nil }
            return (url, Double(duration) / timescale)
        }
    }

    /// A template with its identifiers replaced (`$$` is a dollar sign).
    static func fill(_ template: String, representation: String, number: Int, time: Int64, bandwidth: String) -> String {
        var output = ""
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "$") {
            output += rest[..<open]
            let afterOpen = rest.index(after: open)
            guard let close = rest[afterOpen...].firstIndex(of: "$") else {
                rest = rest[open...]
                break
            }
            let identifier = rest[afterOpen..<close]
            rest = rest[rest.index(after: close)...]
            if identifier.isEmpty {
                output += "$"
                continue
            }
            let name = identifier.prefix { $0 != "%" }
            let format = identifier.dropFirst(name.count)
            let value: String
            switch name {
            case "RepresentationID": value = representation
            case "Number": value = padded(String(number), format)
            case "Time": value = padded(String(time), format)
            case "Bandwidth": value = padded(bandwidth, format)
            default: value = "$" + identifier + "$"
            }
            output += value
        }
        return output + rest
    }

    /// `value` padded with zeros to the width of a `%0Nd` format.
    private static func padded(_ value: String, _ format: Substring) -> String {
        guard format.hasPrefix("%0"), format.hasSuffix("d"), let width = Int(format.dropFirst(2).dropLast()), width <= 32 else { return value }
        return String(repeating: "0", count: max(0, width - value.count)) + value
    }

    /// The element's first `BaseURL`, resolved against `outer`; `outer` when it has none.
    private static func base(of element: XMLElementTree.Element, over outer: URL) -> URL {
        guard let text = element.first(named: "BaseURL")?.text.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty,
            let url = URL(string: DASHManifest.unescape(text), relativeTo: outer)?.absoluteURL
        else { return outer }
        return url
    }

    /// An xs:duration of days, hours, minutes and seconds (`PT4.0S`, `P1DT2H`), in seconds.
    static func seconds(_ text: String) -> Double? {
        var rest = Substring(text.trimmingCharacters(in: .whitespaces))
        guard rest.hasPrefix("P") else { return nil }
        rest = rest.dropFirst()
        var total = 0.0
        var inTime = false
        var number = ""
        for character in rest {
            switch character {
            case "T": inTime = true
            case "0"..."9", ".": number.append(character)
            default:
                guard let value = Double(number) else { return nil }
                number = ""
                switch (character, inTime) {
                case ("D", false): total += value * 86_400
                case ("H", true): total += value * 3_600
                case ("M", true): total += value * 60
                case ("S", true): total += value
                default: return nil
                }
            }
        }
        return number.isEmpty ? total : nil
    }
}

/// A minimal XML element tree: names without their namespace prefix, attributes (entities
/// decoded), text, children. Comments, processing instructions, CDATA and doctype are skipped.
/// Enough for DASH manifests; not a validating parser.
enum XMLElementTree {
    final class Element: @unchecked Sendable {
        // @unchecked: built once by `parse`, then only read.
        let name: String
        let attributes: [String: String]
        fileprivate(set) var children: [Element] = []
        fileprivate(set) var text = ""

        init(name: String, attributes: [String: String]) {
            self.name = name
            self.attributes = attributes
        }

        func children(named name: String) -> [Element] { children.filter { $0.name == name } }
        func first(named name: String) -> Element? { children.first { $0.name == name } }
    }

    /// The document as a root element (named "") holding the top-level elements.
    static func parse(_ text: String) -> Element {
        let root = Element(name: "", attributes: [:])
        var stack = [root]
        let scalars = Array(text.unicodeScalars)
        let scanner = MarkupScanner(scalars)
        var index = 0
        while index < scalars.count {
            guard scalars[index] == "<" else {
                var end = index
                while end < scalars.count, scalars[end] != "<" { end += 1 }
                stack.last?.text += String(String.UnicodeScalarView(scalars[index..<end]))
                index = end
                continue
            }
            if let terminator = scanner.nonElementEnd(at: index) {
                let end = scanner.end(of: terminator, from: index + 2)
                if terminator == "]]>" {
                    let start = min(index + 9, end)
                    let stop = max(start, scanner.starts(terminator, at: end - 3) ? end - 3 : end)
                    stack.last?.text += String(String.UnicodeScalarView(scalars[start..<stop]))
                }
                index = end
                continue
            }
            let end = DASHManifest.tagEnd(scalars, from: index)
            // Without its `<` and `>`.
            let closed = end > index + 1 && scalars[end - 1] == ">"
            let tag = String(String.UnicodeScalarView(scalars[(index + 1)..<(closed ? end - 1 : end)]))
            index = end
            if tag.hasPrefix("/") {
                let name = localName(tag.dropFirst())
                if let open = stack.lastIndex(where: { $0.name == name }), open > 0 { stack.removeSubrange(open...) }
                continue
            }
            let selfClosing = tag.hasSuffix("/")
            let body = selfClosing ? tag.dropLast() : Substring(tag)
            let element = Element(name: localName(body), attributes: attributes(body))
            stack.last?.children.append(element)
            if !selfClosing { stack.append(element) }
        }
        return root
    }

    private static func localName(_ tag: Substring) -> String {
        let name = tag.prefix { !$0.isWhitespace && $0 != "/" && $0 != ">" }
        return String(name.split(separator: ":").last ?? name)
    }

    private static func attributes(_ tag: Substring) -> [String: String] {
        var result: [String: String] = [:]
        var rest = tag.drop { !$0.isWhitespace }
        while let equals = rest.firstIndex(of: "=") {
            let name = rest[..<equals].trimmingCharacters(in: .whitespacesAndNewlines)
            var valueStart = rest.index(after: equals)
            while valueStart < rest.endIndex, rest[valueStart].isWhitespace { valueStart = rest.index(after: valueStart) }
            guard valueStart < rest.endIndex, rest[valueStart] == "\"" || rest[valueStart] == "'" else { break }
            let quote = rest[valueStart]
            let open = rest.index(after: valueStart)
            guard let close = rest[open...].firstIndex(of: quote) else { break }
            let local = name.split(separator: ":").last.map(String.init) ?? name
            result[local] = DASHManifest.unescape(String(rest[open..<close]))
            rest = rest[rest.index(after: close)...]
        }
        return result
    }
}
