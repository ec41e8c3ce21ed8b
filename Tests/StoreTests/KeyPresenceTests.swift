// The sparse store's key presence (issue 21): a miss is decided without a hop into the store's
// actor, so "absent" must never be said of a key the store holds.
import Foundation
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport
import StoreTestSupport

@Suite("Key presence")
struct KeyPresenceTests {
    @Test("keys sharing a hash are counted: removing one leaves the others present")
    func collisions() {
        // Every key of one length has one hash.
        let presence = KeyPresence(hash: { UInt32($0.count) })
        #expect(!presence.mayContain("aa"))
        presence.insert("aa")
        presence.insert("bb")
        presence.insert(contentsOf: ["cc", "ddd"])
        #expect(presence.mayContain("aa") && presence.mayContain("zz") && presence.mayContain("ddd") && !presence.mayContain("e"))
        #expect(presence.count == 4)
        presence.remove("aa")
        presence.remove("cc")
        #expect(presence.mayContain("bb"), "one key of the shared hash is still held")
        presence.remove("bb")
        #expect(!presence.mayContain("bb") && presence.mayContain("ddd"))
        presence.remove("ddd")
        #expect(presence.count == 0 && !presence.mayContain("ddd"))
    }

    @Test("the sparse store: every key with an entry is present, across creation, removal, eviction and a reopen")
    func sparseStore() async throws {
        let directory = try TemporaryDirectory("presence-sparse")
        defer { directory.remove() }
        var store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 1 << 30))
        let keys = (0..<12).map { "https://example.org/r\($0)" }
        for key in keys { try await fill(store, key: key, length: 40_000) }
        try await store.remove(key: keys[3])
        try await store.remove(key: keys[7])
        // An entry that exists before its first byte (a first contact's files) is present too.
        let opened = try await store.open(key: "https://example.org/opened")
        #expect(store.mayHold("https://example.org/opened"))
        try await opened.release()
        await Self.expectPresenceMatches(store, keys + ["https://example.org/opened", "https://example.org/never"])
        _ = try await store.evict(toSize: 3 * 40_000)
        await Self.expectPresenceMatches(store, keys)
        try await store.close()
        store = try await SparseStore.open(directory: directory.path, options: .testing(budget: 1 << 30))
        await Self.expectPresenceMatches(store, keys + ["https://example.org/opened"])
        try await store.close()
    }

    static func expectPresenceMatches(_ store: SparseStore, _ keys: [String], sourceLocation: SourceLocation = #_sourceLocation) async {
        for key in keys {
            let held = await store.entry(for: key) != nil
            #expect(store.mayHold(key) == held, "\(key): entry \(held), presence \(store.mayHold(key))", sourceLocation: sourceLocation)
        }
    }
}
