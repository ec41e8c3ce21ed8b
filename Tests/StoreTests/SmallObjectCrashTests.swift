// Crash coverage of the small-object store (issue 21), as the sparse engine has it: snapshots
// before every mutating I/O call as a process crash and as seeded power cuts would leave the
// logs (unsynced writes persisting, vanishing or turning to garbage), and an I/O error sweep
// failing each call of a workload in turn. Every snapshot is opened and checked against the
// ledger of what the workload was told: an acknowledged object is never lost or rolled back,
// and nothing is served that was not stored.
import CShim
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

// Inside the serialized power-loss suite: the shim's power-loss recorder is one per process.
extension StorePowerLossTests {
    @Suite("Small-object store: crashes, power cuts and I/O errors", .serialized)
    struct SmallObjectCrashTests {
        /// What a key may hold: a version number, or nil for no object.
        typealias State = Int?

        /// One operation of the workload: the key states it may leave, and the match counts of the
        /// snapshot rule when it began and when it was acknowledged.
        struct Operation {
            var began: Int
            var acknowledged: Int
            var effects: [String: State]
            /// An eviction: until it is acknowledged any key may be gone.
            var evicts = false
        }

        /// The ledger: what each key may hold in a snapshot taken before match `k`.
        struct Ledger {
            var operations: [Operation] = []

            func allowed(before k: Int, keys: [String]) -> [String: Set<State>] {
                var allowed: [String: Set<State>] = [:]
                for key in keys { allowed[key] = [nil] }
                for operation in operations {
                    if operation.acknowledged <= k {
                        for (key, state) in operation.effects { allowed[key] = [state] }
                    } else {
                        // Not acknowledged when the snapshot was taken: it may or may not show.
                        for (key, state) in operation.effects { allowed[key, default: [nil]].insert(state) }
                        if operation.evicts { for key in keys { allowed[key, default: [nil]].insert(nil) } }
                    }
                }
                return allowed
            }
        }

        static func body(_ key: String, _ version: Int) -> [UInt8] {
            var random = SplitMix64(seed: key.utf8.reduce(UInt64(version) &* 0x9E37_79B9) { $0 &* 31 &+ UInt64($1) })
            let count = 200 + Int(random.next() % 6000)
            return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        }

        static func metadata(_ key: String, _ version: Int) -> ResourceMetadata {
            ResourceMetadata(key: key, etag: "\"\(version)\"", user: ["http.headers": "x-version: \(version)"])
        }

        /// Opens the logs in `directory` and checks every key against `allowed`; returns the
        /// violations.
        static func check(_ directory: String, allowed: [String: Set<State>], options: SmallObjectOptions) async -> [String] {
            var violations: [String] = []
            let store: SmallObjectStore
            do {
                store = try await SmallObjectStore.open(directory: directory, options: options)
            } catch {
                return ["open failed: \(error)"]
            }
            for (key, states) in allowed.sorted(by: { $0.key < $1.key }) {
                let object: SmallObject?
                do {
                    object = try await store.object(for: key)
                } catch {
                    violations.append("\(key): read failed: \(error)")
                    continue
                }
                guard let object else {
                    if !states.contains(nil) { violations.append("\(key): acknowledged \(states) lost") }
                    continue
                }
                let version = Int(object.metadata.etag?.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) ?? "") ?? -1
                if !states.contains(version) {
                    violations.append("\(key): holds version \(version), allowed \(states)")
                } else if object.body != body(key, version) || object.metadata != metadata(key, version) {
                    violations.append("\(key): version \(version) served with wrong bytes")
                }
            }
            // It must take new objects too.
            do {
                try await store.put(key: "after-recovery", metadata: ResourceMetadata(), body: [1, 2, 3])
            } catch {
                violations.append("put after recovery failed: \(error)")
            }
            await store.close()
            return violations
        }

        /// A seeded workload over a few keys: batches of concurrent puts, removals, evictions (so
        /// compaction runs) and reopens, in files small enough to roll often.
        static func workload(
            directory: String, seed: UInt64, steps: Int, options: SmallObjectOptions, ledger box: LedgerBox, ops: () -> Int,
            afterStep: () async throws -> Void
        ) async throws {
            var random = SplitMix64(seed: seed)
            let keys = (0..<10).map { "key\($0)" }
            var versions: [String: Int] = [:]
            var ledger: Ledger {
                get { box.ledger }
                set { box.ledger = newValue }
            }
            var store = try await SmallObjectStore.open(directory: directory, options: options)
            do {
                for _ in 0..<steps {
                    let roll = random.next() % 100
                    let began = ops()
                    var operation = Operation(began: began, acknowledged: .max, effects: [:])
                    if roll < 55 {
                        // A batch of concurrent puts: one group commit (or a few).
                        var batch: [(String, Int)] = []
                        for _ in 0..<(1 + random.next() % 5) {
                            let key = keys[Int(random.next() % UInt64(keys.count))]
                            guard !batch.contains(where: { $0.0 == key }) else { continue }
                            versions[key, default: 0] += 1
                            batch.append((key, versions[key]!))
                            operation.effects[key] = versions[key]!
                        }
                        ledger.operations.append(operation)
                        let target = store
                        if batch.count % 2 == 0 {
                            // One call for the whole batch (as `serve` stores its misses).
                            let writes = batch.map { SmallObjectWrite(key: $0.0, metadata: metadata($0.0, $0.1), body: body($0.0, $0.1)) }
                            for result in await target.put(writes) { _ = try result.get() }
                        } else {
                            try await withThrowingTaskGroup(of: Void.self) { group in
                                for (key, version) in batch {
                                    group.addTask { try await target.put(key: key, metadata: metadata(key, version), body: body(key, version)) }
                                }
                                try await group.waitForAll()
                            }
                        }
                    } else if roll < 75 {
                        let key = keys[Int(random.next() % UInt64(keys.count))]
                        operation.effects[key] = State.none
                        ledger.operations.append(operation)
                        try await store.remove(key: key)
                        // Compaction runs in the background: part of this step.
                        while let compacting = await store.compacting { await compacting.value }
                    } else if roll < 88 {
                        let bytes = Int64(random.next() % 30_000)
                        ledger.operations.append(operation)
                        ledger.operations[ledger.operations.count - 1].evicts = true
                        let dropped = try await store.evict(bytes: bytes)
                        for key in dropped { ledger.operations[ledger.operations.count - 1].effects[key] = State.none }
                    } else {
                        ledger.operations.append(operation)
                        await store.close()
                        store = try await SmallObjectStore.open(directory: directory, options: options)
                    }
                    ledger.operations[ledger.operations.count - 1].acknowledged = ops()
                    try await afterStep()
                }
            } catch {
                await store.close()
                throw error
            }
            await store.close()
        }

        static var options: SmallObjectOptions {
            var options = SmallObjectOptions()
            options.maximumFileSize = 24 * 1024
            options.groupCommitDelay = .milliseconds(1)
            return options
        }

        @Test("crash and power cut before every mutating I/O call: 0 violations", arguments: [UInt64(31), 32])
        func powerLoss(defaultSeed: UInt64) async throws {
            try await offPool("small-power-loss") { try await self.powerLossOnItsThread(defaultSeed: defaultSeed) }
        }

        /// The body of ``powerLoss(defaultSeed:)``, on a thread of its own (OffPool.swift).
        private func powerLossOnItsThread(defaultSeed: UInt64) async throws {
            let seed = testSeed(defaultSeed)
            let steps = Int(ProcessInfo.processInfo.environment["SPARSECACHE_SMALLOBJ_STEPS"] ?? "") ?? 40
            let base = try TemporaryDirectory("smallobj-pl")
            defer { base.remove() }
            let live = base.file("live"), snapshots = base.file("snaps")
            try FileManager.default.createDirectory(atPath: live, withIntermediateDirectories: false)
            try FileManager.default.createDirectory(atPath: snapshots, withIntermediateDirectories: false)
            try PowerLoss.begin(directory: live)
            let rule = try PowerLoss.snapshotBefore(pathContains: live, into: snapshots, variants: 8, seed: seed)
            defer {
                FaultInjection.remove(rule)
                PowerLoss.end()
            }
            var points = 0, cuts = 0, violations = 0
            let keys = (0..<10).map { "key\($0)" }
            func drain(_ ledger: Ledger) async throws {
                for name in try FileManager.default.contentsOfDirectory(atPath: snapshots).sorted() {
                    let parts = name.split(separator: "-")
                    guard parts.count == 2, let k = Int(parts[0]), let variant = Int(parts[1]) else { continue }
                    let found = await Self.check(
                        snapshots + "/" + name, allowed: ledger.allowed(before: k, keys: keys), options: Self.options)
                    if variant == 0 { points += 1 } else { cuts += 1 }
                    if !found.isEmpty {
                        violations += found.count
                        Issue.record("seed \(seed), before call \(k), variant \(variant): \(found.prefix(4))")
                    }
                    try? FileManager.default.removeItem(atPath: snapshots + "/" + name)
                }
            }
            let box = LedgerBox()
            try await Self.workload(
                directory: live, seed: seed, steps: steps, options: Self.options, ledger: box, ops: { FaultInjection.matches(rule) },
                afterStep: { try await drain(box.ledger) })
            try await drain(box.ledger)
            reportCounts("small objects power loss seed \(seed)", ["crash points": points, "power cuts": cuts, "violations": violations])
            #expect(points > 20)
            #expect(violations == 0, "replay with SPARSECACHE_TEST_SEED=\(seed)")
        }

        final class LedgerBox: @unchecked Sendable {
            var ledger = Ledger()
        }

        @Test("fail the N-th I/O call for every N (EIO, ENOSPC, once and persistently): acknowledged objects survive the reopen")
        func faultSweep() async throws {
            try await offPool("small-fault-sweep") { try await self.faultSweepOnItsThread() }
        }

        /// The body of ``faultSweep()``, on a thread of its own (OffPool.swift).
        private func faultSweepOnItsThread() async throws {
            let seed = testSeed(33)
            let steps = 24
            let calls: Int = try await {
                let directory = try faultScopedDirectory("smallobj-count")
                defer { directory.remove() }
                let counter = try FaultInjection.add(
                    FaultRule(Set(FaultOperation.allCases), pathContains: directory.path, trigger: .nth(Int.max)))
                defer { FaultInjection.remove(counter) }
                try await Self.workload(
                    directory: directory.path, seed: seed, steps: steps, options: Self.options, ledger: LedgerBox(), ops: { 0 },
                    afterStep: {})
                return FaultInjection.matches(counter)
            }()
            #expect(calls > 30)
            let keys = (0..<10).map { "key\($0)" }
            var runs = 0, failedRuns = 0, violations = 0
            for n in 0..<calls {
                for (errno, persistent) in [(EIO, false), (ENOSPC, true)] {
                    let directory = try faultScopedDirectory("smallobj-sweep")
                    defer { directory.remove() }
                    let rule = try FaultInjection.add(
                        FaultRule(
                            Set(FaultOperation.allCases), pathContains: directory.path, trigger: persistent ? .after(n) : .nth(n),
                            maxFires: persistent ? nil : 1, error: errno))
                    let box = LedgerBox()
                    var step = 0
                    do {
                        try await Self.workload(
                            directory: directory.path, seed: seed, steps: steps, options: Self.options, ledger: box,
                            ops: { step }, afterStep: { step += 1 })
                    } catch {
                        failedRuns += 1
                    }
                    FaultInjection.remove(rule)
                    runs += 1
                    // Everything acknowledged (operations that returned) must be there after a reopen.
                    let ledger = box.ledger
                    let acknowledged = Ledger(operations: ledger.operations.filter { $0.acknowledged != .max })
                    var allowed = acknowledged.allowed(before: .max - 1, keys: keys)
                    // The operation that failed may have taken effect or not.
                    if let failed = ledger.operations.last, failed.acknowledged == .max {
                        for (key, state) in failed.effects { allowed[key, default: [nil]].insert(state) }
                        if failed.evicts { for key in keys { allowed[key, default: [nil]].insert(nil) } }
                    }
                    let found = await Self.check(directory.path, allowed: allowed, options: Self.options)
                    if !found.isEmpty {
                        violations += found.count
                        Issue.record(
                            "seed \(seed), call \(n) failing with errno \(errno)\(persistent ? " from then on" : ""): \(found.prefix(4))")
                    }
                }
            }
            reportCounts(
                "small objects fault sweep seed \(seed)",
                ["calls": calls, "runs": runs, "failed runs": failedRuns, "violations": violations])
            #expect(failedRuns > 0)
            #expect(violations == 0)
        }
    }
}
