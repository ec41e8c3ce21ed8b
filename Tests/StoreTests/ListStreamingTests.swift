// `sparsecache ls` streams (issue 21, "the catalog scales"): entries are printed as they are
// read, the JSON form is one document with one entry per line and the totals last, small
// objects come from their logs' hint files, and a key with quotes or control characters stays
// valid JSON.
import Foundation
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport
import StoreTestSupport

@Suite("ls streams its listing")
struct ListStreamingTests {
    /// A cache directory with two sparse resources and `small` small objects over several
    /// sealed logs (so their hints are read).
    static func makeStore(_ directory: String, small: Int) async throws -> Set<String> {
        var options = StoreOptions.testing(budget: 1 << 30)
        options.smallObjects.maximumFileSize = 16 * 1024
        options.smallObjects.groupCommitDelay = .zero
        let store = try await SparseStore.open(directory: directory, options: options)
        var keys = Set<String>()
        for key in ["movie-a", "movie-b"] {
            try await fill(store, key: key, length: 20_000)
            keys.insert(key)
        }
        for index in 0..<small {
            let key = "http://origin.example/o/\(index)?q=\"x\"\n\u{1}é"
            try await store.smallObjects.put(key: key, metadata: ResourceMetadata(key: key), body: [UInt8](repeating: 1, count: 1000))
            keys.insert(key)
        }
        try await store.close()
        return keys
    }

    @Test("ls --json: the header line, one entry per line, the totals last; the whole is one JSON document")
    func jsonLines() async throws {
        let scratch = try CLIScratch("ls-stream")
        defer { scratch.remove() }
        let directory = scratch.file("cache")
        let keys = try await Self.makeStore(directory, small: 60)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/objects").contains { $0.hasSuffix(".sch") })
        let list = try await CLI.run(["ls", "--cache-dir", directory, "--json"])
        #expect(list.status == 0, "\(list)")
        let lines = list.out.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(
            lines.first?.hasPrefix("{\"directory\":") == true && lines.first?.hasSuffix("\"entries\":[") == true, "\(lines.first ?? "")")
        #expect(lines.last?.hasPrefix("],\"allocatedBytes\":") == true, "\(lines.last ?? "")")
        let entryLines = lines.dropFirst().dropLast()
        #expect(entryLines.count == keys.count)
        for (index, line) in entryLines.enumerated() {
            let object = String(index == 0 ? line : line.dropFirst())
            #expect(index == 0 || line.hasPrefix(","), "entry line \(index): \(line)")
            let entry = try JSONDecoder().decode(StoreEntry.self, from: Data(object.utf8))
            #expect(keys.contains(entry.key), "\(entry.key)")
        }
        let document = try #require(try JSONSerialization.jsonObject(with: Data(list.out.utf8)) as? [String: Any])
        let listed = (document["entries"] as? [[String: Any]] ?? []).compactMap { $0["key"] as? String }
        #expect(Set(listed) == keys && listed.count == keys.count)
        let summary = try JSONDecoder().decode(StoreSummary.self, from: Data(list.out.utf8))
        #expect(summary.presentBytes == 2 * 20_000 + 60 * 1000, "\(summary.presentBytes)")
    }

    @Test("ls text: a row per resource and the totals, small objects named by log and offset")
    func textRows() async throws {
        let scratch = try CLIScratch("ls-text")
        defer { scratch.remove() }
        let directory = scratch.file("cache")
        let keys = try await Self.makeStore(directory, small: 30)
        let list = try await CLI.run(["ls", "--cache-dir", directory])
        #expect(list.status == 0, "\(list)")
        let rows = list.out.split(separator: "\n").filter { $0.contains("objects/log-") }
        #expect(rows.count == 30, "\(list.out)")
        #expect(list.out.contains("\(keys.count) resources, "), "\(list.out)")
        #expect(list.out.hasPrefix("cache directory: \(directory)\n"), "\(list.out)")
    }

    @Test("a listing line escapes what JSON needs escaped and parses back to the same entry")
    func escaping() throws {
        let entry = StoreEntry(
            key: "a\"b\\c\nd\re\tf\u{0}g\u{1F}h é 🎬", name: "objects/log-00000001.sco@64", length: nil, presentBytes: 5,
            allocatedBytes: 77, lastAccess: 1_795_694_400_000_000_000, pinnedPrefix: 3, isOpen: true)
        let line = StoreListing.json(entry)
        #expect(!line.contains("\n"))
        #expect(try JSONDecoder().decode(StoreEntry.self, from: Data(line.utf8)) == entry)
    }
}

@Suite("Store totals and key lookups without a summary of every resource")
struct StoreTotalsTests {
    @Test("totals() gives summary()'s counts and bytes without entries; keys(withPrefix:) finds both kinds")
    func totalsMatchSummary() async throws {
        let directory = try TemporaryDirectory("store-totals")
        defer { directory.remove() }
        let store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 1 << 30))
        try await fill(store, key: "http://a/big", length: 50_000)
        for index in 0..<20 {
            try await store.smallObjects.put(
                key: "http://a/small/\(index)", metadata: ResourceMetadata(), body: [UInt8](repeating: 2, count: 100 + index))
        }
        try await store.smallObjects.put(key: "http://a/small/3", metadata: ResourceMetadata(), body: [1])
        try await store.smallObjects.remove(key: "http://a/small/4")
        let summary = await store.summary()
        let totals = await store.totals()
        #expect(totals.entries.isEmpty && totals.resourceCount == summary.entries.count && totals.resourceCount == 20)
        #expect(totals.presentBytes == summary.presentBytes && totals.allocatedBytes == summary.allocatedBytes)
        #expect(
            Set(await store.keys(withPrefix: "http://a/small/1")) == Set(["http://a/small/1"] + (10..<20).map { "http://a/small/\($0)" }))
        #expect(await store.keys(withPrefix: "http://a/b") == ["http://a/big"])
        try await store.close()
    }
}
