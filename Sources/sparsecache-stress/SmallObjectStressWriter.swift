import SeededRandom
import SparseCache

/// `sparsecache-stress --small-objects <directory> --seed S [--keys N]`
///
/// Stores, replaces and removes small objects forever, several at once (so group commit puts
/// them in shared batches), and prints one line per event straight to standard output with
/// write(2), unbuffered:
///
///     open <objects>
///     put-begin <key> <version>     before a put starts
///     put-ack <key> <version>       after it returned (the object is durable)
///     remove-begin <key>            before a removal starts
///     remove-ack <key>              after it returned (the tombstone is durable)
///
/// The crash tests kill it with SIGKILL at random moments and check every acknowledged object
/// against `smallObjectBody(key:version:salt:)` (SeededRandom).
enum SmallObjectStressWriter {
    static func run(directory: String, seed: UInt64, keys: Int, salt: UInt64) async throws {
        var options = SmallObjectOptions()
        // Small files: sealing, new logs and compaction happen within a run.
        options.maximumFileSize = 256 << 10
        let store = try await SmallObjectStore.open(directory: directory, options: options)
        StressWriter.emit("open \(await store.entries().count)")
        var random = SplitMix64(seed: seed)
        var version = Int(random.next() % 1_000_000) * 1000
        while true {
            // Four operations at once, on four different keys, share batches; each prints its own
            // lines. (One key's operations never overlap: the checker knows its order.)
            var chosen = Set<UInt64>()
            while chosen.count < min(4, keys) { chosen.insert(random.next() % UInt64(keys)) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for number in chosen.sorted() {
                    let key = "k\(number)"
                    version += 1
                    let removing = random.next() % 8 == 0
                    let current = version
                    group.addTask {
                        if removing {
                            StressWriter.emit("remove-begin \(key)")
                            try await store.remove(key: key)
                            StressWriter.emit("remove-ack \(key)")
                        } else {
                            StressWriter.emit("put-begin \(key) \(current)")
                            try await store.put(key: key, metadata: ResourceMetadata(key: key), body: smallObjectBody(key: key, version: current, salt: salt))
                            StressWriter.emit("put-ack \(key) \(current)")
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
    }
}
