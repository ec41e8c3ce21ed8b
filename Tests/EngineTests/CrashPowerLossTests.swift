// Crash at every I/O call of scripted workloads: before each mutating call the shim writes
// snapshots of the resource as a process crash (variant 0) and as seeded power cuts (the
// others) would leave it, and each one is recovered and checked against the ledger of what
// the workload was told was durable.
import CShim
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

@Suite("Crash and power-loss simulation", .tags(.slow), .unlessSkippingSlow, .serialized, .powerLossRecording)
struct CrashPowerLossTests {
    struct Shape: Sendable, CustomStringConvertible {
        var name: String
        var segmentSize: Int
        var segments: Int
        var steps: Int
        var variants: Int
        var seed: UInt64
        var lengthKnown = true
        /// Made as the store makes its resources: the index takes its name at the first commit.
        var namesIndexAtFirstCommit = false
        /// Percentages of write / commit / discard / checkpoint / metadata; the rest reopens.
        var mix = (write: 50, commit: 25, discard: 8, checkpoint: 8, metadata: 5)

        var description: String { "\(name) seed \(seed)" }
    }

    /// Power cuts tried at each crash point (each loses a different subset of the unsynced
    /// writes): 12 at standard depth, 28 under `SPARSECACHE_TEST_DEPTH=deep`.
    static let powerCutVariants = TestDepth.size(12, deep: 28)

    static let shapes: [Shape] = [
        Shape(name: "aligned fill and commits", segmentSize: 4096, segments: 24, steps: 40, variants: powerCutVariants, seed: 11),
        Shape(name: "unaligned fill, 8 KiB segments", segmentSize: 8192, segments: 16, steps: 40, variants: powerCutVariants, seed: 12),
        Shape(
            name: "discard, rewrite and checkpoints", segmentSize: 4096, segments: 16, steps: 50, variants: powerCutVariants, seed: 13,
            mix: (write: 35, commit: 20, discard: 20, checkpoint: 17, metadata: 5)),
        Shape(name: "unknown length, then set", segmentSize: 4096, segments: 20, steps: 40, variants: powerCutVariants, seed: 14, lengthKnown: false),
        Shape(
            name: "checkpoint-heavy", segmentSize: 4096, segments: 12, steps: 50, variants: powerCutVariants, seed: 15,
            mix: (write: 30, commit: 25, discard: 10, checkpoint: 30, metadata: 2)),
        Shape(
            name: "a store's resource: index named at the first commit", segmentSize: 4096, segments: 16, steps: 30,
            variants: powerCutVariants, seed: 16, namesIndexAtFirstCommit: true),
    ]

    @Test("crash and power cut before every mutating I/O call", arguments: shapes)
    func everyCrashPoint(shape: Shape) async throws {
        try await offPool("power-loss") { try await self.everyCrashPointOnItsThread(shape: shape) }
    }

    /// The body of ``everyCrashPoint(shape:)``, on a thread of its own (OffPool.swift).
    private func everyCrashPointOnItsThread(shape: Shape) async throws {
        let seed = testSeed(shape.seed)
        let counts = try await Self.run(shape, seed: seed)
        reportCounts(
            "power loss [\(shape.name)] seed \(seed)",
            ["crash points": counts.points, "process crashes": counts.crashes, "power cuts": counts.cuts,
             "violations": counts.violations])
        #expect(counts.points > 0)
        #expect(counts.violations == 0, "seed \(seed): replay with SPARSECACHE_TEST_SEED=\(seed)")
    }

    struct Counts {
        var points = 0
        var crashes = 0
        var cuts = 0
        var violations = 0
    }

    static func run(_ shape: Shape, seed: UInt64) async throws -> Counts {
        let base = try TemporaryDirectory("crash-pl")
        defer { base.remove() }
        let live = base.file("live")
        let snapshots = base.file("snaps")
        try FileManager.default.createDirectory(atPath: live, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: snapshots, withIntermediateDirectories: false)
        let path = live + "/r.bin"
        let length = Int64(shape.segments * shape.segmentSize) - (shape.lengthKnown ? 0 : 1000)
        let model = ContentModel(segmentSize: shape.segmentSize, length: length, salt: seed)
        var options = SparseFileOptions.testing(segmentSize: shape.segmentSize, length: shape.lengthKnown ? length : nil)
        options.commitPolicy = .manual
        options.namesIndexAtFirstCommit = shape.namesIndexAtFirstCommit
        var reopenOptions = options
        reopenOptions.length = nil

        try PowerLoss.begin(directory: live)
        let rule = try PowerLoss.snapshotBefore(pathContains: live, into: snapshots, variants: shape.variants, seed: seed)
        var counts = Counts()
        var ledger = DurabilityLedger()
        var random = SplitMix64(seed: seed)
        var versions = [Int](repeating: 0, count: model.segments)

        func ops() -> Int { FaultInjection.matches(rule) }

        /// Checks and removes every snapshot taken so far.
        func drain() async throws {
            let names = try FileManager.default.contentsOfDirectory(atPath: snapshots)
            for name in names.sorted() {
                let parts = name.split(separator: "-")
                guard parts.count == 2, let k = Int(parts[0]), let variant = Int(parts[1]) else { continue }
                let directory = snapshots + "/" + name
                let violations = await CrashInvariants.check(
                    path: directory + "/r.bin", model: model, ledger: ledger, before: k, options: reopenOptions,
                    verify: true, resume: k % 7 == 0 && variant == 1)
                counts.points += variant == 0 ? 1 : 0
                if variant == 0 { counts.crashes += 1 } else { counts.cuts += 1 }
                if !violations.isEmpty {
                    counts.violations += violations.count
                    Issue.record("\(shape) crash before op \(k), variant \(variant): \(violations)")
                }
                try? FileManager.default.removeItem(atPath: directory)
            }
        }

        func acknowledge(_ file: SparseFile) async {
            var present: [Int: Int] = [:]
            for run in await file.presentSegments() { for segment in run { present[segment] = versions[segment] } }
            ledger.acks.append(.init(operation: ops(), present: present, metadata: await file.metadata))
        }

        var file = try await SparseFile.open(path, options: options)
        // Creation promises no durable name (DURABILITY.md rule 6): the first commit does.
        ledger.createdAt = ops()
        try await drain()
        var lengthSet = shape.lengthKnown
        for step in 0..<shape.steps {
            let roll = Int(random.next() % 100)
            let mix = shape.mix
            if roll < mix.write {
                // An unaligned chunk of one to three segments' worth, anywhere.
                let size = Int64(1 + random.next() % UInt64(3 * shape.segmentSize))
                let start = Int64(random.next() % UInt64(length))
                let end = min(length, start + size)
                let limit = lengthSet ? length : Int64(model.segments * shape.segmentSize)
                let range = start..<min(end, limit)
                for segment in Int(range.lowerBound) / shape.segmentSize...Int(range.upperBound - 1) / shape.segmentSize {
                    ledger.written[segment, default: []].insert(versions[segment])
                }
                _ = try await file.write(model.bytes(range, versions: versions), at: range.lowerBound)
            } else if roll < mix.write + mix.commit {
                try await file.commit()
                await acknowledge(file)
            } else if roll < mix.write + mix.commit + mix.discard {
                let present = await file.presentSegments().flatMap { Array($0) }
                if !present.isEmpty {
                    let first = present[Int(random.next() % UInt64(present.count))]
                    let targets = present.filter { $0 >= first && $0 < first + 3 }
                    ledger.drops.append((operation: ops(), segments: targets))
                    try await file.discard(segments: targets)
                    for segment in targets { versions[segment] += 1 }
                    await acknowledge(file)
                }
            } else if roll < mix.write + mix.commit + mix.discard + mix.checkpoint {
                try await file.forceCheckpoint()
                await acknowledge(file)
            } else if roll < mix.write + mix.commit + mix.discard + mix.checkpoint + mix.metadata {
                if !lengthSet, random.next() % 2 == 0 {
                    try await file.setLength(length)
                    lengthSet = true
                } else {
                    let metadata = ResourceMetadata(key: "step \(step)", user: ["n": "\(step)"])
                    ledger.metadataSets.append((operation: ops(), metadata: metadata))
                    try await file.setMetadata(metadata)
                }
            } else {
                try await file.close()
                await acknowledge(file)
                file = try await SparseFile.open(path, options: reopenOptions)
            }
            try await drain()
        }
        try await file.close()
        await acknowledge(file)
        FaultInjection.remove(rule)
        PowerLoss.end()
        try await drain()
        return counts
    }
}
