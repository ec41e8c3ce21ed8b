// The CLI: partial presence (read, info) and verify. Part of the CLITests suite (CLITests.swift).
import CShim
import Foundation
import LoopbackOrigins
import Testing

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

extension CLITests {
    // MARK: - Partial presence: read and info

    /// 100000 bytes in 16 KiB segments (the last one 1696 bytes), with segments 0-1, 4 and 6
    /// present: [0, 32768), [65536, 81920), [98304, 100000).
    func makeGappyResource(_ scratch: CLIScratch, source: [UInt8]) async throws -> String {
        let resource = scratch.file("gappy.bin")
        for range: Range<Int64> in [65536..<81920, 0..<32768, 98304..<100000] {
            let result = try await CLI.run(
                ["write", resource, "--offset", "\(range.lowerBound)", "--size", "100000", "--segment-size", "16K",
                 "--input", try scratch.write("part", source[Int(range.lowerBound)..<Int(range.upperBound)])])
            try #require(result.status == 0, "\(result)")
        }
        return resource
    }

    @Test("read of a range not fully present: exit 1, nothing on stdout, missing ranges on stderr; --partial gives the prefix")
    func readNotFullyPresent() async throws {
        var random = CLIRandom(defaultSeed: 0xA11CE)
        let (seed, scratch, source, resource) = try await presenceCase("read-missing", &random, count: 100_000, complete: false)

        let missing = try await CLI.run(["read", resource, "--offset", "10000", "--length", "80000"])
        #expect(missing.status == 1, "seed \(seed)\n\(missing)")
        #expect(missing.stdout.isEmpty, "\(missing)")
        // [10000, 90000) lacks [32768, 65536) and [81920, 90000): 32768 + 8080 bytes.
        #expect(missing.err.contains("40848 of 80000 bytes not present"), "\(missing)")
        #expect(missing.err.contains("missing [32768, 65536), [81920, 90000)"), "\(missing)")

        let toEnd = try await CLI.run(["read", resource])
        #expect(toEnd.status == 1 && toEnd.stdout.isEmpty, "\(toEnd)")
        #expect(toEnd.err.contains("missing [32768, 65536), [81920, 98304)"), "\(toEnd)")

        let toFile = try await CLI.run(["read", resource, "--offset", "30000", "--length", "5000", "--output", scratch.file("out")])
        #expect(toFile.status == 1 && toFile.stdout.isEmpty, "\(toFile)")
        #expect(toFile.err.contains("missing [32768, 35000)"), "\(toFile)")
        #expect(!FileManager.default.fileExists(atPath: scratch.file("out")), "a failed read created its output file")

        let partial = try await CLI.run(["read", resource, "--offset", "10000", "--length", "80000", "--partial"])
        #expect(partial.status == 0, "\(partial)")
        #expect(partial.stdout == Array(source[10000..<32768]), "seed \(seed): --partial output \(partial.stdout.count) bytes\n\(partial)")
        #expect(partial.err.contains("output stops at 32768"), "\(partial)")

        let nothing = try await CLI.run(["read", resource, "--offset", "40000", "--length", "1000", "--partial"])
        #expect(nothing.status == 0 && nothing.stdout.isEmpty, "\(nothing)")

        // Fully present ranges, with size suffixes and to the (short) last segment's end.
        let segment4 = try await CLI.run(["read", resource, "--offset", "64K", "--length", "16K"])
        #expect(segment4.status == 0 && segment4.stdout == Array(source[65536..<81920]), "seed \(seed)\n\(segment4)")
        let last = try await CLI.run(["read", resource, "--offset", "98304"])
        #expect(last.status == 0 && last.stdout == Array(source[98304...]), "seed \(seed)\n\(last)")

        let pastEnd = try await CLI.run(["read", resource, "--offset", "99000", "--length", "2000"])
        #expect(pastEnd.status == 64 && pastEnd.stdout.isEmpty, "\(pastEnd)")
        #expect(pastEnd.err.contains("100000"), "\(pastEnd)")
    }

    @Test("read: absurd offsets are usage errors, not traps; /dev/null, '-' and a FIFO as output; --partial past the end (issue 14, item 8)")
    func readOutputsAndLimits() async throws {
        var random = CLIRandom(defaultSeed: 0x8EAD)
        let (seed, scratch, source, resource) = try await presenceCase("read-outputs", &random, count: 100_000, complete: false)

        // Int64.max + 1 used to trap (SIGILL, exit 132).
        for arguments in [["--offset", "9223372036854775807", "--length", "1"], ["--offset", "9223372036854775000", "--length", "1000"]] {
            let overflow = try await CLI.run(["read", resource] + arguments)
            #expect(overflow.status == 64 && !overflow.signaled && overflow.stdout.isEmpty, "\(overflow)")
            #expect(overflow.err.contains("past the largest offset") || overflow.err.contains("runs past"), "\(overflow)")
        }

        // Not regular files: nothing to fsync, and the bytes all went out (exit 74 before).
        let devNull = try await CLI.run(["read", resource, "--offset", "0", "--length", "32768", "--output", "/dev/null"])
        #expect(devNull.status == 0 && devNull.stdout.isEmpty && devNull.stderr.isEmpty, "\(devNull)")
        let dash = try await CLI.run(["read", resource, "--offset", "64K", "--length", "16K", "--output", "-"])
        #expect(dash.status == 0 && dash.stdout == Array(source[65536..<81920]), "seed \(seed)\n\(dash)")
        let fifo = scratch.file("fifo")
        try #require(mkfifo(fifo, 0o600) == 0)
        let drained = scratch.file("drained")
        let cat = Process()
        cat.executableURL = URL(fileURLWithPath: "/bin/sh")
        cat.arguments = ["-c", "cat \"$0\" > \"$1\"", fifo, drained]
        try await ProcessLaunch.run(cat)
        let throughFIFO = try await CLI.run(["read", resource, "--offset", "0", "--length", "32768", "--output", fifo])
        cat.waitUntilExit()
        #expect(throughFIFO.status == 0, "\(throughFIFO)")
        #expect(FileManager.default.contents(atPath: drained).map { [UInt8]($0) } == Array(source[0..<32768]), "seed \(seed)")

        // --partial past the end writes what exists: the whole present tail, then stops.
        let pastEnd = try await CLI.run(["read", resource, "--offset", "98304", "--length", "5000", "--partial"])
        #expect(pastEnd.status == 0 && pastEnd.stdout == Array(source[98304...]), "seed \(seed)\n\(pastEnd)")
        #expect(pastEnd.err.contains("past the resource length 100000"), "\(pastEnd)")
        let beyond = try await CLI.run(["read", resource, "--offset", "200000", "--length", "10", "--partial"])
        #expect(beyond.status == 0 && beyond.stdout.isEmpty, "\(beyond)")
    }

    @Test("info --json: length, segment size, present bytes and ranges")
    func infoJSON() async throws {
        var random = CLIRandom(defaultSeed: 0x1F0)
        let scratch = try CLIScratch("info")
        let resource = try await makeGappyResource(scratch, source: random.bytes(100_000))

        let result = try await CLI.run(["info", resource, "--json"])
        #expect(result.status == 0, "\(result)")
        let json = try result.json()
        #expect(CLIJSON.int(json["length"]) == 100_000, "\(result)")
        #expect(CLIJSON.int(json["segmentSize"]) == 16384, "\(result)")
        #expect(CLIJSON.int(json["segmentCount"]) == 7, "\(result)")
        let presentBytes: Int64 = 32768 + 16384 + 1696
        #expect(CLIJSON.int(json["presentBytes"]) == presentBytes, "\(result)")
        #expect(try CLIJSON.ranges(json["presentRanges"]) == [0..<32768, 65536..<81920, 98304..<100000], "\(result)")
        #expect(CLIJSON.bool(json["complete"]) == false, "\(result)")
        #expect(json["path"] as? String == resource, "\(result)")

        let text = try await CLI.run(["info", resource])
        #expect(text.status == 0, "\(text)")
        #expect(text.out.contains("ranges:        [0, 32768), [65536, 81920), [98304, 100000)"), "\(text)")
        #expect(text.out.contains("50848 bytes of 100000"), "\(text)")

        // A resource whose length is not known yet: the last segment cannot complete.
        let unknown = scratch.file("unknown.bin")
        let write = try await CLI.run(["write", unknown, "--offset", "0", "--segment-size", "4K", "--input", try scratch.write("src", random.bytes(10_000))])
        #expect(write.status == 0, "\(write)")
        #expect(write.out.contains("not kept (incomplete segments): [8192, 10000)"), "\(write)")
        let unknownInfo = try await CLI.run(["info", unknown, "--json"])
        let unknownJSON = try unknownInfo.json()
        #expect(unknownJSON["length"] == nil || unknownJSON["length"] is NSNull, "\(unknownInfo)")
        #expect(CLIJSON.int(unknownJSON["segmentSize"]) == 4096, "\(unknownInfo)")
        #expect(CLIJSON.int(unknownJSON["presentBytes"]) == 8192, "\(unknownInfo)")
        #expect(try CLIJSON.ranges(unknownJSON["presentRanges"]) == [0..<8192], "\(unknownInfo)")
    }

    // MARK: - verify

    /// 200000 bytes in 13 segments of 16 KiB, all present.
    /// What the tests here start from: `count` bytes of `random` (and its seed) in a scratch
    /// directory labelled `label`, and a resource of them, whole (``makeCompleteResource(_:source:name:)``)
    /// or with gaps (``makeGappyResource(_:source:)``).
    func presenceCase(
        _ label: String, _ random: inout CLIRandom, count: Int, complete: Bool
    ) async throws -> (seed: UInt64, scratch: CLIScratch, source: [UInt8], resource: String) {
        let scratch = try CLIScratch(label)
        let source = random.bytes(count)
        let resource = try await complete ? makeCompleteResource(scratch, source: source) : makeGappyResource(scratch, source: source)
        return (random.seed, scratch, source, resource)
    }

    func makeCompleteResource(_ scratch: CLIScratch, source: [UInt8], name: String = "full.bin") async throws -> String {
        let resource = scratch.file(name)
        let result = try await CLI.run(
            ["write", resource, "--offset", "0", "--size", "\(source.count)", "--segment-size", "16K",
             "--input", try scratch.write(name + ".src", source)])
        try #require(result.status == 0, "\(result)")
        return resource
    }

    @Test("verify: a flipped byte names its segment; --repair drops only that segment")
    func verifyFlippedByte() async throws {
        var random = CLIRandom(defaultSeed: 0xB17F11)
        let (seed, scratch, source, resource) = try await presenceCase("verify-flip", &random, count: 200_000, complete: true)

        let clean = try await CLI.run(["verify", resource])
        #expect(clean.status == 0, "\(clean)")
        #expect(clean.out.contains("13 present segments checked (200000 bytes)") && clean.out.hasSuffix("clean\n"), "\(clean)")

        let segment = 1 + Int(random.next() % 11)
        let offset = Int64(segment) * 16384 + Int64(random.next() % 16384)
        try flipByte(resource, at: offset)
        let context = "seed \(seed): flipped byte \(offset) in segment \(segment)"
        let bytes = Int64(segment) * 16384..<Int64(segment + 1) * 16384

        let damaged = try await CLI.run(["verify", resource])
        #expect(damaged.status == 65, "\(context)\n\(damaged)")
        let damageLines = damaged.out.split(separator: "\n").filter { $0.contains("damaged segment") }
        #expect(damageLines.count == 1, "\(context)\n\(damaged)")
        #expect(damaged.out.contains("damaged segment \(segment) [\(bytes.lowerBound), \(bytes.upperBound)): checksum mismatch"), "\(context)\n\(damaged)")

        let json = try await CLI.run(["verify", resource, "--json"])
        #expect(json.status == 65, "\(context)\n\(json)")
        let report = try json.json()
        #expect(CLIJSON.bool(report["clean"]) == false, "\(context)\n\(json)")
        let segments = try damagedSegments(json)
        #expect(segments == [segment], "\(context)\n\(json)")
        if let entry = (report["damaged"] as? [Any])?.first as? [String: Any] {
            #expect(CLIJSON.int(entry["start"]) == bytes.lowerBound && CLIJSON.int(entry["end"]) == bytes.upperBound, "\(context)\n\(json)")
        }

        // Reads check every segment's checksum: the damaged one is never served.
        let bad = try await CLI.run(["read", resource, "--offset", "\(bytes.lowerBound)", "--length", "16384"])
        #expect(bad.status == 65 && bad.stdout.isEmpty, "\(context)\n\(bad)")

        let repair = try await CLI.run(["verify", resource, "--repair"])
        // fsck's convention: 1, damage repaired.
        #expect(repair.status == 1, "\(context)\n\(repair)")
        #expect(repair.out.contains("repaired"), "\(context)\n\(repair)")
        let after = try await CLI.run(["verify", resource])
        #expect(after.status == 0 && after.out.hasSuffix("clean\n"), "\(context)\n\(after)")

        let info = try await CLI.run(["info", resource, "--json"])
        #expect(try CLIJSON.ranges(info.json()["presentRanges"]) == [0..<bytes.lowerBound, bytes.upperBound..<200_000], "\(context)\n\(info)")
        let presentBytes: Int64 = 200_000 - 16384
        #expect(try CLIJSON.int(info.json()["presentBytes"]) == presentBytes, "\(context)\n\(info)")
        for range in [0..<bytes.lowerBound, bytes.upperBound..<200_000] {
            let read = try await CLI.run(["read", resource, "--offset", "\(range.lowerBound)", "--length", "\(range.count)"])
            #expect(read.status == 0 && read.stdout == Array(source[Int(range.lowerBound)..<Int(range.upperBound)]), "\(context)\n\(read)")
        }

        // The dropped segment is simply missing: writing it again completes the resource.
        let rewrite = try await CLI.run(
            ["write", resource, "--offset", "\(bytes.lowerBound)", "--input",
             try scratch.write("segment", source[Int(bytes.lowerBound)..<Int(bytes.upperBound)])])
        #expect(rewrite.status == 0 && rewrite.out.contains("present now: [\(bytes.lowerBound), \(bytes.upperBound))"), "\(context)\n\(rewrite)")
        let whole = try await CLI.run(["read", resource])
        #expect(whole.status == 0 && whole.stdout == source, "\(context)\n\(whole)")
    }

    @Test("verify: a hole or a short data file under present segments names them")
    func verifyHoleAndTruncation() async throws {
        var random = CLIRandom(defaultSeed: 0x401E)
        let (seed, scratch, source, resource) = try await presenceCase("verify-hole", &random, count: 200_000, complete: true)

        let fd = open(resource, O_RDWR)
        try #require(fd >= 0)
        let punched = sc_punch_hole(fd, 7 * 16384, 16384)
        close(fd)
        try #require(punched == 0, "punch hole failed: errno \(errno)")
        let hole = try await CLI.run(["verify", resource, "--json"])
        #expect(hole.status == 65, "seed \(seed)\n\(hole)")
        #expect(try damagedSegments(hole) == [7], "seed \(seed)\n\(hole)")
        let holeText = try await CLI.run(["verify", resource])
        #expect(holeText.status == 65 && holeText.out.contains("damaged segment 7 [114688, 131072)"), "\(holeText)")

        // Cut the data file inside segment 10: segments 10, 11 and 12 lose their bytes.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: resource))
        try handle.truncate(atOffset: 10 * 16384 + 100)
        try handle.close()
        let short = try await CLI.run(["verify", resource, "--json"])
        #expect(short.status == 65, "seed \(seed)\n\(short)")
        #expect(try damagedSegments(short) == [7, 10, 11, 12], "seed \(seed)\n\(short)")
        let shortText = try await CLI.run(["verify", resource])
        for segment in [10, 11, 12] {
            #expect(shortText.out.contains("damaged segment \(segment) "), "\(shortText)")
        }

        // A writer refuses a data file shorter than the index says and points at the repair.
        let refused = try await CLI.run(["write", resource, "--offset", "0", "--input", try scratch.write("empty", [UInt8]())])
        #expect(refused.status == 65 && refused.stdout.isEmpty, "\(refused)")
        #expect(refused.err.contains("verify --repair"), "\(refused)")

        let repair = try await CLI.run(["verify", resource, "--repair"])
        #expect(repair.status == 1 && repair.out.contains("repaired"), "\(repair)")
        let after = try await CLI.run(["verify", resource])
        #expect(after.status == 0, "\(after)")
        let info = try await CLI.run(["info", resource, "--json"])
        #expect(try CLIJSON.ranges(info.json()["presentRanges"]) == [0..<114688, 131072..<163840], "\(info)")

        for missing: Range<Int64> in [114688..<131072, 163840..<200_000] {
            let write = try await CLI.run(
                ["write", resource, "--offset", "\(missing.lowerBound)", "--input",
                 try scratch.write("part", source[Int(missing.lowerBound)..<Int(missing.upperBound)])])
            #expect(write.status == 0, "\(write)")
        }
        let whole = try await CLI.run(["read", resource])
        #expect(whole.status == 0 && whole.stdout == source, "seed \(seed)\n\(whole)")
    }

    @Test("verify: one flipped bit in a middle journal record loses only that record's segments, says so, exits 65; --repair keeps the rest")
    func verifyDamagedMiddleRecord() async throws {
        var random = CLIRandom(defaultSeed: 0x5B_4A40)
        let seed = random.seed
        let scratch = try CLIScratch("verify-journal")
        let resource = scratch.file("r.bin")
        let mib = 1 << 20
        var chunks: [[UInt8]] = []
        // Eight separate writes of 1 MiB at 0, 2, 4, ... 14 MiB: eight journal records.
        for commit in 0..<8 {
            chunks.append(random.bytes(mib))
            let write = try await CLI.run(
                ["write", resource, "--offset", "\(2 * commit * mib)", "--size", "16M",
                 "--input", try scratch.write("chunk\(commit)", chunks[commit])])
            try #require(write.status == 0, "seed \(seed)\n\(write)")
        }
        let indexPath = resource + ".scidx"
        let records = RawFile.journalRecordOffsets(try RawFile.read(indexPath))
        try #require(records.count == 8, "\(records)")
        try RawFile.flip(indexPath, at: Int64(records[2] + 100))

        let damaged = try await CLI.run(["verify", resource])
        #expect(damaged.status == 65, "seed \(seed)\n\(damaged)")
        #expect(damaged.out.contains("7 journal records") && damaged.out.contains("112 present segments checked"), "\(damaged)")
        #expect(damaged.out.contains("record 2 does not validate while 5 intact later record(s) follow"), "\(damaged)")
        #expect(damaged.out.contains("lost: 16 segment(s) (1048576 bytes)"), "\(damaged)")
        #expect(!damaged.out.contains("\nclean"), "\(damaged)")

        let repair = try await CLI.run(["verify", resource, "--repair"])
        #expect(repair.status == 1 && repair.out.contains("repaired"), "\(repair)")
        // Committed bytes are never called "written but never committed".
        #expect(!repair.out.contains("reclaimed:") && !repair.out.contains("the rest is intact"), "\(repair)")
        #expect(repair.out.contains("freed: 1048576 bytes"), "\(repair)")
        let after = try await CLI.run(["verify", resource])
        #expect(after.status == 0 && after.out.contains("112 present segments checked") && after.out.hasSuffix("clean\n"), "\(after)")
        for commit in 0..<8 where commit != 2 {
            let read = try await CLI.run(["read", resource, "--offset", "\(2 * commit * mib)", "--length", "\(mib)"])
            #expect(read.status == 0 && read.stdout == chunks[commit], "seed \(seed): commit \(commit)\n\(read.err)")
        }
        let lost = try await CLI.run(["read", resource, "--offset", "\(4 * mib)", "--length", "\(mib)"])
        #expect(lost.status != 0 && lost.stdout.isEmpty, "\(lost)")
    }
}
