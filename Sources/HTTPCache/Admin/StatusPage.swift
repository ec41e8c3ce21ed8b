import Foundation
import SparseCacheEngine
import SparseCacheStore

/// The admin listener's page at `/`: one HTML document, made here whole (inline CSS and SVG,
/// nothing fetched from elsewhere, no script), that reloads itself every few seconds.
///
/// It shows the totals (bytes from the cache and from origins, hit ratio), the fills in
/// progress, and one page of resources (``pageSize``), the largest first (`?order=size`, the
/// default) or the most recently used first (`?order=recent`), each with its segment map: an
/// SVG bar of its length, present runs drawn over the missing background, as
/// `sparsecache demo` draws them in a terminal. The work per view is bounded by the page:
/// choosing a page of a million resources keeps only the entries of the pages up to it, and
/// only the resources shown have their index read.
struct StatusPage {
    static let pageSize = 50
    /// Seconds between reloads.
    static let refresh = 5
    static let mapWidth = 400.0

    enum Order: String {
        case size, recent
    }

    struct Row {
        var entry: StoreEntry
        var hits: Int?
        /// Nil: a small object (always whole) or an index that could not be read now.
        var map: (length: Int64?, ranges: [Range<Int64>])?
    }

    /// The entries of page `page` (from 0) in `order`: a bounded selection of the first
    /// `(page + 1) * pageSize`, not a sort of everything.
    static func select(_ entries: some Sequence<StoreEntry>, order: Order, page: Int) -> [StoreEntry] {
        let keep = (page + 1) * pageSize
        func before(_ a: StoreEntry, _ b: StoreEntry) -> Bool {
            switch order {
            case .size: return (a.allocatedBytes, a.lastAccess, a.key) > (b.allocatedBytes, b.lastAccess, b.key)
            case .recent: return (a.lastAccess, a.allocatedBytes, a.key) > (b.lastAccess, b.allocatedBytes, b.key)
            }
        }
        var kept: [StoreEntry] = []
        kept.reserveCapacity(keep + 1)
        for entry in entries {
            if kept.count == keep, let last = kept.last, !before(entry, last) { continue }
            var low = 0
            var high = kept.count
            while low < high {
                let middle = (low + high) / 2
                if before(kept[middle], entry) { low = middle + 1 } else { high = middle }
            }
            kept.insert(entry, at: low)
            if kept.count > keep { kept.removeLast() }
        }
        return Array(kept.dropFirst(page * pageSize))
    }

    static func render(
        status: AdminService.Status, rows: [Row], filling: [ProgressiveCache.Filling], order: Order, page: Int, total: Int
    ) -> String {
        let hitRatio = status.requests == 0 ? 0 : Double(status.hits) / Double(status.requests)
        let served = status.bytesFromCache + status.bytesFromOrigin
        let byteRatio = served == 0 ? 0 : Double(status.bytesFromCache) / Double(served)
        var html = """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8">
            <meta http-equiv="refresh" content="\(refresh)">
            <title>sparsecache status</title>
            <style>
            body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
            table { border-collapse: collapse; } td, th { padding: 2px 8px; text-align: left; vertical-align: middle; }
            th { border-bottom: 1px solid #999; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
            .key { max-width: 36em; overflow-wrap: anywhere; font-family: monospace; }
            svg.segment-map rect.missing { fill: #ddd; } svg.segment-map rect.present { fill: #2a7; }
            .totals td:first-child { color: #555; }
            </style></head><body>
            <h1>sparsecache</h1>
            <table class="totals">
            <tr><td>origin</td><td>\(escape(status.origin ?? "(URL mode)"))</td></tr>
            <tr><td>cache</td><td>\(escape(status.directory)): \(bytes(status.allocatedBytes)) on disk of \(bytes(status.budgetBytes)), \(status.resources) resources</td></tr>
            <tr><td>requests</td><td id="requests">\(status.requests), \(status.hits) hits (hit ratio \(percent(hitRatio)))</td></tr>
            <tr><td>bytes sent</td><td id="bytes">\(bytes(status.bytesFromCache)) from the cache, \(bytes(status.bytesFromOrigin)) from origins (\(percent(byteRatio)) from the cache)</td></tr>
            <tr><td>origin requests</td><td>\(status.originRequests)</td></tr>
            <tr><td>now</td><td>\(status.connections) connections, \(status.readers) readers, \(status.fetchesInFlight) fetches in flight</td></tr>
            </table>
            <h2>Fills in progress</h2>

            """
        if filling.isEmpty {
            html += "<p id=\"fills\">none</p>\n"
        } else {
            html += "<table id=\"fills\"><tr><th>resource</th><th>fetches</th><th>readers</th></tr>\n"
            for fill in filling {
                html +=
                    "<tr><td class=\"key\">\(escape(fill.key))</td><td class=\"n\">\(fill.fetches)</td><td class=\"n\">\(fill.readers)</td></tr>\n"
            }
            html += "</table>\n"
        }
        let pages = max(1, (total + pageSize - 1) / pageSize)
        let other: Order = order == .size ? .recent : .size
        html += """
            <h2>Resources</h2>
            <p>\(order == .size ? "largest first" : "most recently used first"), page \(page + 1) of \(pages) \
            (<a href="/?order=\(other.rawValue)">\(other == .size ? "largest first" : "most recent first")</a>\
            \(page > 0 ? " · <a href=\"/?order=\(order.rawValue)&amp;page=\(page - 1)\">previous</a>" : "")\
            \(page + 1 < pages ? " · <a href=\"/?order=\(order.rawValue)&amp;page=\(page + 1)\">next</a>" : ""))</p>
            <table id="resources">
            <tr><th>key</th><th>size</th><th>present</th><th>last use</th><th>hits</th><th>segment map</th></tr>

            """
        for row in rows {
            var entry = row.entry
            // An open resource's entry is brought up to date when it closes; its index is now.
            if let map = row.map {
                entry.length = map.length ?? entry.length
                entry.presentBytes = map.ranges.reduce(0) { $0 + Int64($1.count) }
            }
            let present = entry.percentPresent.map { String(format: "%.1f%%", $0) } ?? "?"
            let used = lastUse(entry.lastAccess)
            html +=
                "<tr class=\"resource\"><td class=\"key\">\(escape(entry.key))</td><td class=\"n\">\(entry.length.map(bytes) ?? "?")</td>"
            html += "<td class=\"n\">\(present)</td><td>\(used)</td><td class=\"n\">\(row.hits.map(String.init) ?? "")</td>"
            html += "<td>\(map(row, entry: entry))</td></tr>\n"
        }
        html += "</table>\n<p>Reloads every \(refresh) s. JSON: <a href=\"/status\">/status</a>, <a href=\"/resources\">/resources</a>, "
        html += "<a href=\"/metrics\">/metrics</a>.</p>\n</body></html>\n"
        return html
    }

    /// The segment map: the whole length in the missing colour, each present run over it
    /// (at least half a pixel wide, so a run of one segment of a huge resource still shows).
    static func map(_ row: Row, entry: StoreEntry) -> String {
        let width = mapWidth
        var svg = "<svg class=\"segment-map\" width=\"\(Int(width))\" height=\"12\" viewBox=\"0 0 \(Int(width)) 12\" role=\"img\""
        let ranges: [Range<Int64>]
        let length: Int64
        if let map = row.map, let known = map.length ?? entry.length {
            ranges = map.ranges
            length = known
        } else if let known = entry.length, entry.presentBytes >= known {
            // A small object: whole.
            ranges = known > 0 ? [0..<known] : []
            length = known
        } else {
            return svg + " aria-label=\"unknown\"><rect class=\"missing\" width=\"\(Int(width))\" height=\"12\"/></svg>"
        }
        svg += " aria-label=\"\(ranges.count) present runs\" data-runs=\"\(ranges.count)\">"
        svg += "<rect class=\"missing\" width=\"\(Int(width))\" height=\"12\"/>"
        guard length > 0 else { return svg + "</svg>" }
        for range in drawn(ranges, length: length) {
            let x = Double(range.lowerBound) / Double(length) * width
            let w = max(0.5, Double(range.count) / Double(length) * width)
            svg += "<rect class=\"present\" x=\"\(format(x))\" width=\"\(format(w))\" height=\"12\">"
            svg += "<title>bytes \(range.lowerBound)-\(range.upperBound - 1)</title></rect>"
        }
        return svg + "</svg>"
    }

    /// The runs as drawn: runs closer than half a pixel apart are one (a resource of millions
    /// of runs is at most about twice ``mapWidth`` rectangles).
    static func drawn(_ ranges: [Range<Int64>], length: Int64) -> [Range<Int64>] {
        let gap = max(1, Int64(Double(length) / (2 * mapWidth)))
        var merged: [Range<Int64>] = []
        for range in ranges {
            if let last = merged.last, range.lowerBound - last.upperBound < gap {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    private static func format(_ value: Double) -> String { String(format: "%.2f", value) }

    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }

    static func bytes(_ count: Int64) -> String { ByteCountText.describe(count) }

    private static func percent(_ ratio: Double) -> String { String(format: "%.1f%%", ratio * 100) }

    /// How long ago, from nanoseconds since 1970.
    private static func lastUse(_ nanoseconds: Int64) -> String {
        let seconds = Int(Date().timeIntervalSince1970) - Int(nanoseconds / 1_000_000_000)
        if seconds < 60 { return "\(max(0, seconds)) s ago" }
        if seconds < 3600 { return "\(seconds / 60) min ago" }
        if seconds < 86400 { return "\(seconds / 3600) h ago" }
        return "\(seconds / 86400) d ago"
    }
}
