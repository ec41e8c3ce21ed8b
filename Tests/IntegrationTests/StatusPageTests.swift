// The admin listener's status page (`GET /`): what it shows for a known cache, read over HTTP,
// and its page selection, checked against a full sort. Rendered in a real browser by
// BrowserTests.
import Foundation
import LoopbackOrigins
import Testing

@testable import HTTPCache
@testable import SparseCacheStore
import SeededRandom
import TestSupport

@Suite("serve: the status page", .tags(.external), .unlessSkippingExternal, .serialized, .timeLimit(.minutes(4)))
struct StatusPageTests {
    /// A cache with a whole resource (hit twice), a partial one (two runs), and a small
    /// object, behind serve; returns what a test needs to look at its status page.
    static func knownCache(_ name: String, _ body: (_ admin: String, _ base: String) async throws -> Void) async throws {
        let scratch = try CLIScratch(name)
        let files = try TemporaryDirectory(name + "-origin")
        defer { files.remove() }
        let whole = try originFile(files.path, "whole.bin", count: 300_000, seed: 1)
        _ = try originFile(files.path, "partial.bin", count: 4_000_000, seed: 2)
        _ = try originFile(files.path, "small.bin", count: 10_000, seed: 3)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let cacheDir = scratch.file("cache")
        let (server, base) = try await ServeProcess.start(cacheDir: cacheDir, origin: origin.baseURL)
        defer { server.kill() }
        let admin = try await AdminTests.adminBase(cacheDir)
        for _ in 0..<3 {
            let got = try await Curl.run(base + "/whole.bin")
            #expect(got.body == whole)
        }
        for range in ["0-65535", "2000000-2065535"] {
            let got = try await Curl.run(base + "/partial.bin", ["-r", range])
            #expect(got.status == 206, "\(got)")
        }
        #expect(try await Curl.run(base + "/small.bin").status == 200)
        // Every fill committed and every request counted.
        _ = try await eventually(interval: .milliseconds(50)) {
            let page = String(decoding: try await Curl.run(admin + "/").body, as: UTF8.self)
            return page.contains("<p id=\"fills\">none</p>") && rows(page).count == 3 && page.contains(">2</td><td><svg")
        }
        try await body(admin, base)
    }

    /// The key with the latest last access in the admin listener's /resources listing.
    static func mostRecent(_ admin: String) async throws -> String? {
        let listing = try await Curl.run(admin + "/resources")
        let object = try JSONSerialization.jsonObject(with: Data(listing.body)) as? [String: Any]
        let entries = object?["entries"] as? [[String: Any]] ?? []
        func last(_ entry: [String: Any]) -> Int64 { (entry["lastAccess"] as? NSNumber)?.int64Value ?? 0 }
        return entries.max { last($0) < last($1) }?["key"] as? String
    }

    /// The rows of the resource table: key and segment map of each.
    static func rows(_ html: String) -> [(key: String, cells: String)] {
        html.components(separatedBy: "<tr class=\"resource\">").dropFirst().map { row in
            let key = row.components(separatedBy: "<td class=\"key\">").dropFirst().first?.components(separatedBy: "</td>").first ?? ""
            return (key, row.components(separatedBy: "</tr>").first ?? row)
        }
    }

    @Test("GET / on the admin listener: totals, and every resource with size, percent present, hits and a segment map of its present runs")
    func statusPage() async throws {
        try await Self.knownCache("status-page") { admin, _ in
            let page = try await Curl.run(admin + "/")
            #expect(page.status == 200)
            #expect(page.headers["content-type"]?.hasPrefix("text/html") == true, "\(page)")
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(!html.contains("<script"), "nothing to run")
            #expect(html.contains("http-equiv=\"refresh\""), "it reloads itself")
            #expect(!html.contains("src=\"http") && !html.contains("href=\"http"), "nothing fetched from elsewhere")
            #expect(html.contains("id=\"bytes\""), "totals")
            let rows = Self.rows(html)
            #expect(
                rows.map { URL(string: $0.key)?.lastPathComponent ?? "" }.sorted() == ["partial.bin", "small.bin", "whole.bin"], "\(rows)")
            for (key, cells) in rows {
                #expect(cells.components(separatedBy: "<svg class=\"segment-map\"").count == 2, "one segment map for \(key)")
            }
            let byName = Dictionary(uniqueKeysWithValues: rows.map { (URL(string: $0.key)?.lastPathComponent ?? "", $0.cells) })
            #expect(byName["whole.bin"]?.contains("100.0%") == true && byName["whole.bin"]?.contains("data-runs=\"1\"") == true)
            #expect(byName["whole.bin"]?.contains("<td class=\"n\">2</td>") == true, "two hits: \(byName["whole.bin"] ?? "")")
            #expect(byName["small.bin"]?.contains("100.0%") == true && byName["small.bin"]?.contains("data-runs=\"1\"") == true)
            let partial = byName["partial.bin"] ?? ""
            #expect(partial.contains("data-runs=\"2\"") && !partial.contains("100.0%"), "two present runs: \(partial)")
            #expect(partial.contains("<title>bytes 0-65535</title>"), "\(partial)")
            // Largest first by default; the most recent first on asking.
            #expect(URL(string: rows.first?.key ?? "")?.lastPathComponent == "whole.bin", "the most bytes on disk: \(rows.map(\.key))")
            // The most recent first: the key the store's own listing (/resources) names as the
            // last used, read before and after the page (a resource kept open after its last
            // reader may be let go, and touched, between two looks: then look again).
            let compared = try await eventually(interval: .milliseconds(100)) {
                let before = try await Self.mostRecent(admin)
                let recent = Self.rows(String(decoding: try await Curl.run(admin + "/?order=recent").body, as: UTF8.self))
                guard let before, before == (try await Self.mostRecent(admin)) else { return false }
                #expect(recent.first?.key == before, "\(recent.map(\.key)), the store's most recent \(before)")
                #expect(Set(recent.map(\.key)).count == 3, "\(recent.map(\.key))")
                return true
            }
            #expect(compared, "the store's last uses kept changing")
            // A page past the end shows the last one; other methods are refused.
            #expect(Self.rows(String(decoding: try await Curl.run(admin + "/?page=99").body, as: UTF8.self)).count == 3)
            #expect(try await Curl.run(admin + "/", ["-X", "POST"]).status == 405)
        }
    }

    @Test("A segment map of a million runs is at most about twice its width in rectangles, and says how many runs there are")
    func boundedMap() {
        let length: Int64 = 1 << 40
        let ranges = (0..<1_000_000).map { Int64($0) << 20..<(Int64($0) << 20) + 65536 }
        let entry = StoreEntry(
            key: "k", name: "n", length: length, presentBytes: 0, allocatedBytes: 0, lastAccess: 0, pinnedPrefix: 0, isOpen: false)
        let svg = StatusPage.map(StatusPage.Row(entry: entry, hits: nil, map: (length, ranges)), entry: entry)
        let rectangles = svg.components(separatedBy: "<rect class=\"present\"").count - 1
        #expect(rectangles >= 1 && rectangles <= 2 * Int(StatusPage.mapWidth) + 1, "\(rectangles) rectangles")
        #expect(svg.contains("data-runs=\"1000000\""))
        // Runs far apart stay apart.
        let two = StatusPage.map(StatusPage.Row(entry: entry, hits: nil, map: (length, [0..<1, (length / 2)..<length])), entry: entry)
        #expect(two.components(separatedBy: "<rect class=\"present\"").count - 1 == 2)
    }

    @Test("A page of resources is chosen without sorting everything, and is what a full sort gives, in both orders, on every page")
    func selection() {
        let seed = testSeed(431)
        var random = SplitMix64(seed: seed)
        let entries = (0..<1_234).map { index in
            StoreEntry(
                key: "k\(index)", name: "n\(index)", length: 1000, presentBytes: 10, allocatedBytes: Int64(random.next() % 500),
                lastAccess: Int64(random.next() % 700), pinnedPrefix: 0, isOpen: false)
        }
        let bySize = entries.sorted { ($0.allocatedBytes, $0.lastAccess, $0.key) > ($1.allocatedBytes, $1.lastAccess, $1.key) }
        let byRecent = entries.sorted { ($0.lastAccess, $0.allocatedBytes, $0.key) > ($1.lastAccess, $1.allocatedBytes, $1.key) }
        for page in 0..<26 {
            let range = min(entries.count, page * StatusPage.pageSize)..<min(entries.count, (page + 1) * StatusPage.pageSize)
            #expect(
                StatusPage.select(entries, order: .size, page: page).map(\.key) == bySize[range].map(\.key), "seed \(seed), page \(page)")
            #expect(
                StatusPage.select(entries, order: .recent, page: page).map(\.key) == byRecent[range].map(\.key),
                "seed \(seed), page \(page)")
        }
    }
}
