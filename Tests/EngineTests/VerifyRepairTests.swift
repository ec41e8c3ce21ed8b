// verify and repair against injected data damage: for many seeded rounds, damage a random
// set of present segments in a random way (a flipped bit, a garbage 512 B or 4 KiB sector, a
// hole punched under the segment) and check that verify names exactly those segments, that
// repair drops exactly those, that the repaired resource verifies clean, and that every
// remaining segment still reads back its own bytes.
import CShim
import Foundation
import SeededRandom
import SparseCacheTesting
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

@Suite("verify and repair: injected data damage")
struct VerifyRepairTests {
    enum Damage: CaseIterable, CustomStringConvertible {
        case bitFlip, garbageSector512, garbageSector4K, punchedHole

        var description: String {
            switch self {
            case .bitFlip: "bit flip"
            case .garbageSector512: "garbage 512 B sector"
            case .garbageSector4K: "garbage 4 KiB sector"
            case .punchedHole: "hole punched"
            }
        }
    }

    static let segmentSize = 8192

    @Test("verify names exactly the damaged segments; repair drops exactly those; the result verifies clean")
    func damageSweep() async throws {
        try await offPool("damage-sweep") { try await self.damageSweepOnItsThread() }
    }

    /// The body of ``damageSweep()``, on a thread of its own (OffPool.swift).
    private func damageSweepOnItsThread() async throws {
        let seed = testSeed(0xDA3A_6E)
        var random = SplitMix64(seed: seed)
        var counts: [String: Int] = [:]
        var violations = 0
        for round in 0..<40 {
            let label = "seed \(seed) round \(round)"
            try await withTemporaryDirectory("verify-damage") { directory in
                let path = directory.file("r.bin")
                let segments = Int.random(in: 4...24, using: &random)
                // A short last segment in half of the rounds.
                let length = Int64(segments * Self.segmentSize) - (round % 2 == 0 ? 0 : Int64.random(in: 1..<4096, using: &random))
                let salt = seed &+ UInt64(round)
                let file = try await SparseFile.open(path, options: .testing(segmentSize: Self.segmentSize, length: length))
                // Some segments stay missing: damage must only ever be reported on present ones.
                var present = Set<Int>()
                for segment in 0..<segments where Int.random(in: 0..<4, using: &random) > 0 {
                    let range = Int64(segment * Self.segmentSize)..<min(length, Int64((segment + 1) * Self.segmentSize))
                    try await file.write(sourceBytes(range, salt: salt), at: range.lowerBound)
                    present.insert(segment)
                }
                try await file.close()
                guard !present.isEmpty else { return }

                let victims = Set(present.shuffled(using: &random).prefix(Int.random(in: 1...max(1, present.count / 2), using: &random)))
                for victim in victims {
                    let damage = Damage.allCases.randomElement(using: &random)!
                    try Self.inflict(damage, on: victim, path: path, length: length, random: &random)
                    counts[damage.description, default: 0] += 1
                }

                let report = try await Verifier.verify(path: path)
                let named = Set(report.damaged.map(\.segment))
                if named != victims {
                    violations += 1
                    Issue.record("\(label): verify named \(named.sorted()), damaged \(victims.sorted())")
                }
                #expect(report.segmentsChecked == present.count, "\(label)")
                #expect(!report.repaired)

                let repair = try await Verifier.verify(path: path, repair: true)
                #expect(repair.repaired, "\(label)")
                #expect(Set(repair.damaged.map(\.segment)) == victims, "\(label)")
                let after = try await Verifier.verify(path: path)
                if !after.isClean {
                    violations += 1
                    Issue.record("\(label): not clean after repair: \(after.damaged)")
                }

                let reopened = try await SparseFile.open(path, mode: .readOnly)
                let left = Set(await reopened.presentSegments().flatMap { Array($0) })
                if left != present.subtracting(victims) {
                    violations += 1
                    Issue.record("\(label): repair left \(left.sorted()), expected \(present.subtracting(victims).sorted())")
                }
                for segment in left {
                    let range = Int64(segment * Self.segmentSize)..<min(length, Int64((segment + 1) * Self.segmentSize))
                    let bytes = try await reopened.read(offset: range.lowerBound, length: Int(range.count))
                    if bytes != sourceBytes(range, salt: salt) {
                        violations += 1
                        Issue.record("\(label): segment \(segment) reads wrong bytes after repair")
                    }
                }
                try await reopened.close()
            }
        }
        reportCounts(
            "verify/repair damage sweep",
            [
                "rounds": 40, "bit flips": counts["bit flip"] ?? 0, "garbage 512 B sectors": counts["garbage 512 B sector"] ?? 0,
                "garbage 4 KiB sectors": counts["garbage 4 KiB sector"] ?? 0, "holes": counts["hole punched"] ?? 0,
                "violations": violations,
            ])
        #expect(violations == 0, "replay with SPARSECACHE_TEST_SEED=\(seed)")
    }

    @Test("a hole under a present segment of zeros is not damage: the checksum decides (issue 14, item 10)")
    func holeUnderZeroSegment() async throws {
        let scratch = try CLIScratch("verify-zero-hole")
        defer { scratch.remove() }
        let path = scratch.file("r.bin")
        let length = Int64(4 * Self.segmentSize)
        let file = try await SparseFile.open(path, options: .testing(segmentSize: Self.segmentSize, length: length))
        var bytes = sourceBytes(0..<length)
        for index in (2 * Self.segmentSize)..<(3 * Self.segmentSize) { bytes[index] = 0 }
        try await file.write(bytes, at: 0)
        try await file.close()
        var random = SplitMix64(seed: 5)
        // Segment 2 is all zeros: a hole there reads the same bytes. Segment 1 is not.
        try Self.inflict(.punchedHole, on: 2, path: path, length: length, random: &random)
        try Self.inflict(.punchedHole, on: 1, path: path, length: length, random: &random)
        let report = try await Verifier.verify(path: path)
        #expect(report.damaged.map(\.segment) == [1], "\(report.damaged)")
        #expect(report.damaged.first?.reason.hasPrefix("hole under present segment") == true, "\(report.damaged)")
        let reopened = try await SparseFile.open(path, mode: .readOnly)
        #expect(
            try await reopened.read(offset: Int64(2 * Self.segmentSize), length: Self.segmentSize)
                == [UInt8](repeating: 0, count: Self.segmentSize))
        try await reopened.close()
    }

    @Test(
        "one flipped bit in the live superblock, or a damaged newest checkpoint: nothing lost, verify says so, --repair rewrites both copies (issue 14, item 3)"
    )
    func indexDamageLosesNothing() async throws {
        let scratch = try CLIScratch("verify-superblock")
        defer { scratch.remove() }
        let path = scratch.file("r.bin")
        let segments = 64
        let length = Int64(segments * Self.segmentSize)
        var options = SparseFileOptions.testing(segmentSize: Self.segmentSize, length: length)
        options.commitPolicy = .manual
        // Commits with checkpoints between them: the older slot holds an older state.
        let file = try await SparseFile.open(path, options: options)
        for segment in 0..<segments {
            try await file.write(
                sourceBytes(Int64(segment * Self.segmentSize)..<Int64((segment + 1) * Self.segmentSize)),
                at: Int64(segment * Self.segmentSize))
            try await file.commit()
            if segment % 20 == 19 { try await file.forceCheckpoint() }
        }
        try await file.close()
        let indexPath = SparseFile.indexPath(for: path)
        let (index, _, report) = try IndexFile.open(path: indexPath, access: .readOnly)
        let live = index.superblock
        index.close()
        #expect(report.usedSlot == live.slot)

        // One bit in the live superblock copy: before, the resource opened at the older state.
        try RawFile.flip(indexPath, at: Int64(live.slot * 4096 + 44), mask: 0x04)  // the journal salt
        let flipped = try await CLI.run(["verify", path])
        #expect(flipped.status == 0 && flipped.out.contains("one flipped bit at byte 44, corrected; nothing lost"), "\(flipped)")
        let info = try await CLI.run(["info", path, "--json"])
        #expect(try info.json()["presentBytes"] as? Int == Int(length), "\(info)")
        let repaired = try await CLI.run(["verify", path, "--repair"])
        #expect(repaired.status == 0, "\(repaired)")
        let after = try await CLI.run(["verify", path])
        #expect(after.status == 0 && after.out.contains("2 of 2 superblock copies valid") && !after.out.contains("note:"), "\(after)")

        // A flipped bit in the live checkpoint's checksums: rebuilt from the older checkpoint and
        // the journals.
        let (reopened, _, _) = try IndexFile.open(path: indexPath, access: .readOnly)
        let checkpoint = reopened.superblock
        reopened.close()
        try RawFile.flip(indexPath, at: checkpoint.checkpointOffset + 200)  // inside its CRC32C array
        let rebuilt = try await CLI.run(["verify", path])
        #expect(
            rebuilt.status == 0 && rebuilt.out.contains("rebuilt from generation") && rebuilt.out.contains("nothing lost"), "\(rebuilt)")
        let writable = try await SparseFile.open(path, options: .testing(segmentSize: Self.segmentSize))
        #expect(await writable.presentBytes == length && writable.recovery.corrected.count == 1)
        try await writable.close()
        // The writable open folded the damage away.
        let healed = try await CLI.run(["verify", path])
        #expect(healed.status == 0 && !healed.out.contains("note:"), "\(healed)")
    }

    @Test(
        "verify goes on past a read error: the unreadable segment is named, every other one checked; --repair drops exactly it (issue 14, item 4)"
    )
    func readErrorsAreNamed() async throws {
        let scratch = try CLIScratch("verify-eio")
        defer { scratch.remove() }
        let directory = try scratch.directory("d")
        let path = directory + "/r.bin"
        let length = Int64(8 * Self.segmentSize)
        let file = try await SparseFile.open(path, options: .testing(segmentSize: Self.segmentSize, length: length))
        try await file.write(sourceBytes(0..<length), at: 0)
        try await file.close()
        // How many preads a verify makes: the index's, then one for the data (a single batch).
        let counter = try FaultInjection.add(FaultRule([.pread], pathContains: directory, trigger: .nth(Int.max)))
        _ = try await Verifier.verify(path: path)
        let calls = FaultInjection.matches(counter)
        FaultInjection.remove(counter)
        // The batch read fails (before: verify stopped there with one line), then the third of
        // the segment-by-segment reads: segment 2 sits on a bad sector.
        let rules = [
            try FaultInjection.add(.fail([.pread], errno: EIO, trigger: .nth(calls), pathContains: directory)),
            try FaultInjection.add(.fail([.pread], errno: EIO, trigger: .nth(calls + 3), pathContains: directory)),
        ]
        let report = try await Verifier.verify(path: path)
        #expect(
            report.damaged.map(\.segment) == [2] && report.damaged.first?.reason == "unreadable: Input/output error (errno 5)",
            "\(report.damaged)")
        #expect(report.segmentsChecked == 8 && !report.isClean)
        for rule in rules { FaultInjection.remove(rule) }
        let again = [
            try FaultInjection.add(.fail([.pread], errno: EIO, trigger: .nth(calls), pathContains: directory)),
            try FaultInjection.add(.fail([.pread], errno: EIO, trigger: .nth(calls + 3), pathContains: directory)),
        ]
        let repaired = try await Verifier.verify(path: path, repair: true)
        for rule in again { FaultInjection.remove(rule) }
        #expect(repaired.repaired && repaired.damaged.map(\.segment) == [2])
        let after = try await Verifier.verify(path: path)
        #expect(after.isClean && after.segmentsChecked == 7, "\(after)")
    }

    @Test("verify --json reports what it checked and found")
    func jsonReport() async throws {
        let scratch = try CLIScratch("verify-json")
        defer { scratch.remove() }
        let path = scratch.file("r.bin")
        let length = Int64(6 * Self.segmentSize)
        let file = try await SparseFile.open(path, options: .testing(segmentSize: Self.segmentSize, length: length))
        try await file.write(sourceBytes(0..<length), at: 0)
        try await file.close()
        var random = SplitMix64(seed: 3)
        try Self.inflict(.bitFlip, on: 4, path: path, length: length, random: &random)

        let result = try await CLI.run(["verify", path, "--json"])
        #expect(result.status == 65, "\(result)")
        let json = try result.json()
        #expect(json["segmentsChecked"] as? Int == 6)
        #expect(json["bytesChecked"] as? Int == Int(length))
        #expect(json["superblocksValid"] as? Int == 2)
        let damaged = try #require(json["damaged"] as? [[String: Any]])
        #expect(damaged.count == 1)
        #expect(damaged.first?["segment"] as? Int == 4)
        #expect((damaged.first?["reason"] as? String)?.hasPrefix("checksum mismatch") == true)
        #expect(json["repaired"] as? Bool == false)
    }

    /// Damages one segment of the data file behind the engine's back.
    static func inflict(_ damage: Damage, on segment: Int, path: String, length: Int64, random: inout SplitMix64) throws {
        let start = Int64(segment * segmentSize)
        let end = min(length, start + Int64(segmentSize))
        switch damage {
        case .bitFlip:
            let offset = Int64.random(in: start..<end, using: &random)
            var byte = try RawFile.read(path, offset: offset, count: 1)
            byte[0] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &random)
            try RawFile.write(path, offset: offset, byte)
        case .garbageSector512, .garbageSector4K:
            let sector = damage == .garbageSector512 ? 512 : 4096
            let sectors = Int((end - start + Int64(sector) - 1) / Int64(sector))
            let offset = start + Int64(Int.random(in: 0..<sectors, using: &random) * sector)
            let count = Int(min(Int64(sector), end - offset))
            var garbage = random.bytes(count)
            // Garbage that happens to equal the old bytes would not be damage.
            let old = try RawFile.read(path, offset: offset, count: count)
            if garbage == old { garbage[0] ^= 0xFF }
            try RawFile.write(path, offset: offset, garbage)
        case .punchedHole:
            try RawFile.withDescriptor(path, writable: true) { fd in
                guard sc_punch_hole(fd, start, Int64(segmentSize)) == 0 else {
                    throw RawFile.Failure(description: "punch hole in '\(path)': errno \(errno)")
                }
            }
        }
    }

    /// Eight commits of 1 MiB each (one journal record each, 16 segments of 64 KiB), and one
    /// flipped bit inside the third record: records 4 to 8 are intact and later in sequence, so
    /// the third is media damage, not a torn tail. Everything they name stays; what only the
    /// third named (its 16 segments) is counted as lost, never called "never committed", and
    /// repair punches no hole under the others.
    @Test("a damaged middle journal record: every later intact record is replayed, the loss is counted, repair keeps the rest")
    func damagedMiddleRecord() async throws {
        let directory = try TemporaryDirectory("journal-middle")
        defer { directory.remove() }
        let path = directory.file("r.bin")
        let mib = 1 << 20
        let model = ContentModel(segmentSize: 64 << 10, length: 16 << 20, salt: 40)
        let versions = [Int](repeating: 0, count: model.segments)
        for commit in 0..<8 {
            let file = try await SparseFile.open(path, options: .testing(segmentSize: 64 << 10, length: 16 << 20))
            let start = Int64(2 * commit * mib)
            try await file.write(model.bytes(start..<(start + Int64(mib)), versions: versions), at: start)
            try await file.commit()
            try await file.close()
        }
        let indexPath = SparseFile.indexPath(for: path)
        let records = RawFile.journalRecordOffsets(try RawFile.read(indexPath))
        try #require(records.count == 8, "\(records)")
        try RawFile.flip(indexPath, at: Int64(records[2] + 100))

        // Engine: the resource opens with the seven intact commits, and says what is lost.
        let opened = try await SparseFile.open(path, mode: .readOnly, options: .testing(segmentSize: 64 << 10, create: false))
        let expected = (0..<8).filter { $0 != 2 }.map { (2 * $0 * 16)..<(2 * $0 * 16 + 16) }
        #expect(await opened.presentSegments() == expected)
        #expect(opened.recovery.lostSegments == 16 && opened.recovery.lostBytes == Int64(mib), "\(opened.recovery)")
        #expect(opened.recovery.journalTail == nil && opened.recovery.metDamage, "\(opened.recovery)")
        try await opened.close()

        let report = try await Verifier.verify(path: path)
        #expect(!report.isClean && report.journalRecords == 7 && report.segmentsChecked == 112, "\(report)")
        #expect(report.lostSegments == 16 && report.lostBytes == Int64(mib), "\(report)")
        #expect(report.indexDamage.contains { $0.contains("record 2 does not validate while 5 intact later record(s) follow") }, "\(report)")

        let repaired = try await Verifier.verify(path: path, repair: true)
        #expect(repaired.repaired && repaired.reclaimedBytes == 0 && repaired.freedLostBytes == Int64(mib), "\(repaired)")
        let after = try await Verifier.verify(path: path)
        #expect(after.isClean && after.segmentsChecked == 112, "\(after)")
        let reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing(segmentSize: 64 << 10, create: false))
        #expect(await reopened.presentSegments() == expected)
        for commit in 0..<8 where commit != 2 {
            let start = Int64(2 * commit * mib)
            let bytes = try await reopened.read(offset: start, length: mib)
            #expect(bytes == model.bytes(start..<(start + Int64(mib)), versions: versions), "commit \(commit)")
        }
        try await reopened.close()
    }
}
