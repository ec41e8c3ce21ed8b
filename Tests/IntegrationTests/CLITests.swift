// Tests of the `sparsecache` command-line tool: each runs the built binary as a real process
// and checks its standard output, standard error and exit status.
import CShim
import Foundation
import LoopbackOrigins
import Testing

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

@Suite("CLITests")
struct CLITests {
    static let commands = ["write", "read", "verify", "info", "demo"]

    // MARK: - Help and usage errors

    @Test("top-level help on stdout, exit 0", arguments: ["-h", "--help", "help"])
    func topLevelHelp(flag: String) async throws {
        let result = try await CLI.run([flag])
        #expect(result.status == 0, "\(result)")
        for section in ["OVERVIEW:", "USAGE:", "COMMANDS:", "OPTIONS:"] {
            #expect(result.out.contains(section), "missing \(section)\n\(result)")
        }
        for command in Self.commands {
            #expect(result.out.contains("  \(command) "), "help does not list '\(command)'\n\(result)")
        }
        #expect(result.stderr.isEmpty, "\(result)")
    }

    @Test("subcommand help on stdout, exit 0", arguments: commands, ["-h", "--help"])
    func subcommandHelp(command: String, flag: String) async throws {
        for arguments in [[command, flag], [command, "some-file", flag]] {
            let result = try await CLI.run(arguments)
            #expect(result.status == 0, "\(result)")
            for section in ["OVERVIEW:", "USAGE: sparsecache \(command)", "OPTIONS:", "-h, --help"] {
                #expect(result.out.contains(section), "missing '\(section)'\n\(result)")
            }
            if command != "demo" {
                #expect(result.out.contains("ARGUMENTS:") && result.out.contains("<file>"), "\(result)")
            }
            #expect(result.stderr.isEmpty, "\(result)")
        }
    }

    @Test("every command the top-level help lists has its own help")
    func everyListedCommandHasHelp() async throws {
        let top = try await CLI.run(["--help"])
        let lines = top.out.split(separator: "\n", omittingEmptySubsequences: false)
        let section = lines.drop { !$0.hasPrefix("COMMANDS:") }.dropFirst().prefix { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        let listed = section.compactMap { $0.split(separator: " ").first.map(String.init) }
        #expect(Set(Self.commands).isSubset(of: listed), "COMMANDS lists \(listed)\n\(top)")
        for command in listed {
            let result = try await CLI.run([command, "--help"])
            #expect(result.status == 0 && result.stderr.isEmpty, "\(result)")
            for part in ["OVERVIEW:", "USAGE: sparsecache \(command)", "OPTIONS:"] {
                #expect(result.out.contains(part), "missing '\(part)'\n\(result)")
            }
        }
    }

    @Test("no arguments: usage on stderr, exit 64")
    func noArguments() async throws {
        let result = try await CLI.run([])
        #expect(result.status == 64, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
        #expect(result.err.contains("USAGE:"), "\(result)")
    }

    @Test("unknown command: exit 64, message on stderr, nothing on stdout", arguments: ["frobnicate", "--bogus", "Write"])
    func unknownCommand(name: String) async throws {
        let result = try await CLI.run([name, "file"])
        #expect(result.status == 64, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
        #expect(result.err.contains("unknown command '\(name)'"), "\(result)")
    }

    @Test("unknown option: exit 64, message on stderr, nothing on stdout, no file created", arguments: commands)
    func unknownOption(command: String) async throws {
        let scratch = try CLIScratch("unknown-option")
        let file = scratch.file("r.bin")
        var arguments = command == "demo" ? [command] : [command, file]
        if command == "write" { arguments += ["--offset", "0"] }
        for bogus in ["--bogus", "--bogus=1", "-x"] {
            let result = try await CLI.run(arguments + [bogus], in: scratch.path)
            #expect(result.status == 64, "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
            let name = bogus.split(separator: "=")[0]
            #expect(result.err.contains("unknown option '\(name)'"), "\(result)")
            #expect(result.err.contains("sparsecache \(command) --help"), "\(result)")
        }
        #expect(!FileManager.default.fileExists(atPath: file), "a usage error created the resource")
        #expect(!FileManager.default.fileExists(atPath: file + ".scidx"), "a usage error created the index")
    }

    struct UsageCase: Sendable, CustomTestStringConvertible {
        var arguments: [String]
        var message: String
        var testDescription: String { arguments.joined(separator: " ") }
    }

    @Test(
        "missing or malformed arguments: exit 64",
        arguments: [
            UsageCase(arguments: ["write"], message: "missing <file>"),
            UsageCase(arguments: ["write", "r.bin"], message: "--offset is required"),
            UsageCase(arguments: ["write", "r.bin", "--offset"], message: "--offset needs a value"),
            UsageCase(arguments: ["read"], message: "missing <file>"),
            UsageCase(arguments: ["read", "r.bin", "--length"], message: "--length needs a value"),
            UsageCase(arguments: ["verify"], message: "missing <file>"),
            UsageCase(arguments: ["verify", "r.bin", "--json=yes"], message: "--json takes no value"),
            UsageCase(arguments: ["info"], message: "missing <file>"),
            UsageCase(arguments: ["info", "a.bin", "b.bin"], message: "unexpected argument 'b.bin'"),
            UsageCase(arguments: ["demo", "extra"], message: "unexpected argument 'extra'"),
        ])
    func usageErrors(_ usage: UsageCase) async throws {
        let scratch = try CLIScratch("usage")
        let result = try await CLI.run(usage.arguments, in: scratch.path)
        #expect(result.status == 64, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
        #expect(result.err.contains(usage.message), "expected '\(usage.message)'\n\(result)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty, "a usage error created files")
    }

    // MARK: - Round trip

    @Test("random unaligned writes in random order read back byte for byte")
    func roundTripOfRandomUnalignedWrites() async throws {
        var random = CLIRandom(defaultSeed: 0x5EED_C11)
        let seed = random.seed
        let scratch = try CLIScratch("roundtrip")
        let total = Int64(1_000_000 + Int(random.next() % 2_000_000))
        let layout = CLILayout(length: total, segmentSize: 16384)
        let source = random.bytes(Int(total))
        let resource = scratch.file("movie.bin")

        // Unaligned chunks, some tiny, written in random order: one process each.
        var chunks: [Range<Int64>] = []
        var position: Int64 = 0
        while position < total {
            let size = random.next() % 4 == 0 ? Int64(1 + random.next() % 20_000) : Int64(20_000 + random.next() % 230_000)
            chunks.append(position..<min(total, position + size))
            position = chunks[chunks.count - 1].upperBound
        }
        chunks.shuffle(using: &random)
        let stdinChunk = Int(random.next() % UInt64(chunks.count))
        let context = "seed \(seed) (replay with SPARSECACHE_TEST_SEED=\(seed)), length \(total), \(chunks.count) chunks"

        // Bytes of a segment a chunk does not complete are not kept across invocations, so
        // exactly the segments some single chunk covers become present.
        var present = Set<Int>()
        for (index, chunk) in chunks.enumerated() {
            let bytes = Array(source[Int(chunk.lowerBound)..<Int(chunk.upperBound)])
            let arguments = ["write", resource, "--offset", "\(chunk.lowerBound)", "--size", "\(total)", "--segment-size", "16K"]
            let result: CLIResult
            if index == stdinChunk {
                let running = try await CLI.startWithOpenInput(arguments)
                do { try running.send(bytes) } catch { Issue.record("writing standard input: \(error); \(context)") }
                result = try await running.finish()
            } else {
                result = try await CLI.run(arguments + ["--input", try scratch.write("chunk", bytes)])
            }
            let expected = layout.predictWrite(chunk, present: &present)
            #expect(result.status == 0, "\(context)\n\(result)")
            checkWriteReport(result, resource: resource, chunk: chunk, expected: expected, layout: layout, present: present, context: context)
        }

        var info = try await CLI.run(["info", resource, "--json"])
        #expect(info.status == 0, "\(context)\n\(info)")
        var reported = try CLIJSON.ranges(info.json()["presentRanges"])
        #expect(reported == layout.ranges(of: present), "\(context): info after the first pass\n\(info)")

        // Rewrite what is missing (segment-aligned) until the resource is complete.
        var rounds = 0
        while try !(CLIJSON.bool(info.json()["complete"]) ?? false) {
            rounds += 1
            try #require(rounds <= 3, "\(context): still incomplete after \(rounds - 1) rounds of rewrites\n\(info)")
            for missing in CLIRanges.complement(of: reported, in: 0..<total) {
                #expect(missing.lowerBound % 16384 == 0, "\(context): missing range \(missing) is not segment-aligned")
                let bytes = source[Int(missing.lowerBound)..<Int(missing.upperBound)]
                let result = try await CLI.run(
                    ["write", resource, "--offset", "\(missing.lowerBound)", "--size", "\(total)", "--segment-size", "16K",
                     "--input", try scratch.write("chunk", bytes)])
                #expect(result.status == 0, "\(context)\n\(result)")
                #expect(result.out.contains("present now: [\(missing.lowerBound), \(missing.upperBound))\n"), "\(context)\n\(result)")
                #expect(result.out.contains("not kept (incomplete segments): none\n"), "\(context)\n\(result)")
            }
            info = try await CLI.run(["info", resource, "--json"])
            #expect(info.status == 0, "\(context)\n\(info)")
            reported = try CLIJSON.ranges(info.json()["presentRanges"])
        }
        let json = try info.json()
        #expect(CLIJSON.int(json["presentBytes"]) == total, "\(context)\n\(info)")
        #expect(reported == [0..<total], "\(context)\n\(info)")

        let whole = try await CLI.run(["read", resource, "--output", scratch.file("out")])
        #expect(whole.status == 0 && whole.stdout.isEmpty, "\(context)\n\(whole)")
        let readBack = try scratch.read("out")
        #expect(readBack.count == source.count, "\(context): read back \(readBack.count) bytes")
        if let first = readBack.indices.first(where: { $0 >= source.count || readBack[$0] != source[$0] }) {
            Issue.record("\(context): first difference at byte \(first)")
        }

        // Random sub-ranges to standard output, plus the edges.
        var ranges: [Range<Int64>] = [0..<1, (total - 1)..<total, 16383..<16385, 0..<0]
        for _ in 0..<6 {
            let start = Int64(random.next() % UInt64(total))
            ranges.append(start..<(start + Int64(random.next() % UInt64(min(300_000, total - start) + 1))))
        }
        for range in ranges {
            let result = try await CLI.run(["read", resource, "--offset", "\(range.lowerBound)", "--length", "\(range.count)"])
            #expect(result.status == 0, "\(context)\n\(result)")
            #expect(result.stdout == Array(source[Int(range.lowerBound)..<Int(range.upperBound)]), "\(context): read \(range)\n\(result)")
        }
        let tail = try await CLI.run(["read", resource, "--offset", "\(total - 20_000)"])
        #expect(tail.status == 0 && tail.stdout == Array(source.suffix(20_000)), "\(context)\n\(tail)")

        let verify = try await CLI.run(["verify", resource, "--json"])
        #expect(verify.status == 0, "\(context)\n\(verify)")
        let report = try verify.json()
        #expect(CLIJSON.int(report["segmentsChecked"]) == Int64(layout.segmentCount), "\(context)\n\(verify)")
        #expect(CLIJSON.int(report["bytesChecked"]) == total, "\(context)\n\(verify)")
    }

    /// Checks the lines `write` prints against what the chunk should have done.
    private func checkWriteReport(
        _ result: CLIResult, resource: String, chunk: Range<Int64>, expected: CLILayout.WritePrediction, layout: CLILayout,
        present: Set<Int>, context: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let lines = result.out.split(separator: "\n").map(String.init)
        var wanted = [
            "wrote \(chunk.count) bytes at offset \(chunk.lowerBound) to '\(resource)'",
            "present now: " + (expected.completed.isEmpty ? "nothing new" : CLIRanges.describe(expected.completed)),
            "not kept (incomplete segments): " + (expected.notKept.isEmpty ? "none" : CLIRanges.describe(expected.notKept)),
        ]
        if expected.skipped > 0 { wanted.append("already present (skipped): \(expected.skipped) bytes") }
        for line in wanted {
            #expect(lines.contains(line), "\(context): expected line '\(line)'\n\(result)", sourceLocation: sourceLocation)
        }
        if expected.skipped == 0 {
            #expect(!lines.contains { $0.hasPrefix("already present") }, "\(context)\n\(result)", sourceLocation: sourceLocation)
        }
        let bytes = present.reduce(Int64(0)) { $0 + Int64(layout.bytes(of: $1).count) }
        let summary = "resource: \(present.count) of \(layout.segmentCount) segments present, \(bytes) bytes of \(layout.length)"
        #expect(lines.contains { $0.hasPrefix(summary) }, "\(context): expected '\(summary)'\n\(result)", sourceLocation: sourceLocation)
    }

    // MARK: - Partial presence: read and info

    /// 100000 bytes in 16 KiB segments (the last one 1696 bytes), with segments 0-1, 4 and 6
    /// present: [0, 32768), [65536, 81920), [98304, 100000).
    private func makeGappyResource(_ scratch: CLIScratch, source: [UInt8]) async throws -> String {
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
        let seed = random.seed
        let scratch = try CLIScratch("read-missing")
        let source = random.bytes(100_000)
        let resource = try await makeGappyResource(scratch, source: source)

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
        let seed = random.seed
        let scratch = try CLIScratch("read-outputs")
        let source = random.bytes(100_000)
        let resource = try await makeGappyResource(scratch, source: source)

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
    private func makeCompleteResource(_ scratch: CLIScratch, source: [UInt8], name: String = "full.bin") async throws -> String {
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
        let seed = random.seed
        let scratch = try CLIScratch("verify-flip")
        let source = random.bytes(200_000)
        let resource = try await makeCompleteResource(scratch, source: source)

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
        let seed = random.seed
        let scratch = try CLIScratch("verify-hole")
        let source = random.bytes(200_000)
        let resource = try await makeCompleteResource(scratch, source: source)

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

    // MARK: - Bad input

    @Test("a missing file or input: exit 66 naming the path (issue 14, item 9)")
    func missingFile() async throws {
        let scratch = try CLIScratch("missing")
        let nothing = scratch.file("nothing.bin")
        for arguments in [["info", nothing], ["read", nothing], ["verify", nothing], ["info", nothing, "--json"]] {
            let result = try await CLI.run(arguments)
            #expect(result.status == 66, "\(result)")
            if arguments.contains("--json") {
                #expect(try result.json()["code"] as? String == "notFound", "\(result)")
            } else {
                #expect(result.stdout.isEmpty, "\(result)")
            }
            #expect(result.err.contains(nothing), "\(result)")
        }
        #expect(!FileManager.default.fileExists(atPath: nothing) && !FileManager.default.fileExists(atPath: nothing + ".scidx"))

        let noInput = scratch.file("no-such-input")
        let write = try await CLI.run(["write", nothing, "--offset", "0", "--input", noInput])
        #expect(write.status == 66 && write.stdout.isEmpty, "\(write)")
        #expect(write.err.contains(noInput), "\(write)")
        #expect(!FileManager.default.fileExists(atPath: nothing), "a write with a missing input created the resource")

        // A data file without its index is not a resource.
        try scratch.write("plain.bin", [1, 2, 3])
        let plain = try await CLI.run(["read", scratch.file("plain.bin")])
        #expect(plain.status == 66 && plain.err.contains("plain.bin.scidx"), "\(plain)")
    }

    @Test("a directory given as the file: a usage error")
    func directoryAsFile() async throws {
        let scratch = try CLIScratch("directory")
        let directory = scratch.file("dir")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        // Without an index beside it, it is no resource: a missing file (66), as for any path.
        for arguments in [["info", directory], ["read", directory], ["verify", directory]] {
            let result = try await CLI.run(arguments)
            #expect(result.status == 66 && result.stdout.isEmpty, "\(result)")
            #expect(result.err.contains(directory), "\(result)")
        }

        // With a real index beside it, the open itself must refuse the directory.
        var random = CLIRandom(defaultSeed: 0xD1)
        let resource = try await makeCompleteResource(scratch, source: random.bytes(20_000))
        try FileManager.default.copyItem(atPath: resource + ".scidx", toPath: directory + ".scidx")
        for arguments in [["info", directory], ["read", directory], ["verify", directory]] {
            let result = try await CLI.run(arguments)
            #expect(result.status == 64 && result.stdout.isEmpty, "\(result)")
            #expect(result.err.contains("is a directory"), "\(result)")
        }
        try FileManager.default.removeItem(atPath: directory + ".scidx")

        // Opening a directory for writing fails with EISDIR before the engine's own status
        // check; it must still be a usage error naming the path, not an I/O error.
        let input = try scratch.write("input", [UInt8](repeating: 7, count: 100))
        let write = try await CLI.run(["write", directory, "--offset", "0", "--input", input])
        #expect(write.stdout.isEmpty, "\(write)")
        #expect(write.err.contains(directory), "\(write)")
        #expect(!FileManager.default.fileExists(atPath: directory + ".scidx"), "a failed write left an index beside a directory")
        #expect(write.status == 64, "\(write)")
        #expect(write.err.contains("is a directory"), "\(write)")
    }

    @Test("a corrupt index: exit 65 for every command but verify --repair, which rebuilds it (exit 1)", arguments: [
        ["info"], ["info", "--json"], ["read"], ["verify"], ["verify", "--repair"], ["write", "--offset", "0", "--input"],
    ])
    func corruptIndex(command: [String]) async throws {
        var random = CLIRandom(defaultSeed: 0xBAD1D5)
        let scratch = try CLIScratch("corrupt-index")
        let resource = try await makeCompleteResource(scratch, source: random.bytes(50_000))
        let index = resource + ".scidx"
        let garbage = random.bytes(8192)
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: index))
        try handle.write(contentsOf: Data(garbage))
        try handle.close()

        var arguments = [command[0], resource] + command.dropFirst()
        if command[0] == "write" { arguments.append(try scratch.write("input", [UInt8](repeating: 1, count: 10))) }
        let result = try await CLI.run(arguments)
        if command == ["verify", "--repair"] {
            // The one command that rewrites it: rebuilt from what the region still holds, the
            // damaged index kept beside it; exit 1, damage repaired.
            #expect(result.status == 1 && result.out.contains("the index was rebuilt from"), "seed \(random.seed)\n\(result)")
            #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: index + ".damaged")).prefix(8192)) == garbage, "\(result)")
            return
        }
        #expect(result.status == 65, "seed \(random.seed)\n\(result)")
        // With --json the error is a JSON object on stdout; otherwise stdout stays empty.
        if arguments.contains("--json") {
            #expect(try result.json()["code"] as? String == "corruptIndex", "\(result)")
        } else {
            #expect(result.stdout.isEmpty, "\(result)")
        }
        #expect(result.err.contains(index), "\(result)")
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: index)).prefix(8192)) == garbage, "the command rewrote a corrupt index")
    }

    @Test("an index from a future format version: exit 65 naming the version", arguments: ["info", "read", "verify", "write"])
    func futureVersion(command: String) async throws {
        var random = CLIRandom(defaultSeed: 0xF00D)
        let scratch = try CLIScratch("future-version")
        let resource = try await makeCompleteResource(scratch, source: random.bytes(50_000))
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: resource + ".scidx"))
        for slot: UInt64 in [0, 4096] {
            try handle.seek(toOffset: slot + 8)
            try handle.write(contentsOf: Data([99, 0, 0, 0]))
        }
        try handle.close()

        var arguments = [command, resource]
        if command == "write" { arguments += ["--offset", "0", "--input", try scratch.write("input", [UInt8](repeating: 1, count: 10))] }
        let result = try await CLI.run(arguments)
        #expect(result.status == 65, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
        #expect(result.err.contains("version 99"), "\(result)")
    }

    @Test(
        "negative or garbage sizes: exit 64 naming the option, nothing created",
        arguments: [
            UsageCase(arguments: ["--offset", "-5"], message: "invalid size '-5' for --offset"),
            UsageCase(arguments: ["--offset", "12Q"], message: "invalid size '12Q' for --offset"),
            UsageCase(arguments: ["--offset=-5"], message: "invalid size '-5' for --offset"),
            UsageCase(arguments: ["--offset", ""], message: "invalid size '' for --offset"),
            UsageCase(arguments: ["--offset", "99999999999T"], message: "invalid size '99999999999T' for --offset"),
            UsageCase(arguments: ["--offset", "0", "--size", "-1"], message: "invalid size '-1' for --size"),
            UsageCase(arguments: ["--offset", "0", "--size", "1X"], message: "invalid size '1X' for --size"),
            UsageCase(arguments: ["--offset", "0", "--segment-size", "3K"], message: "--segment-size must be a power of two from 4K to 16M, got 3072"),
            UsageCase(arguments: ["--offset", "0", "--segment-size", "32M"], message: "--segment-size must be a power of two from 4K to 16M, got 33554432"),
            UsageCase(arguments: ["--offset", "0", "--segment-size", "junk"], message: "invalid size 'junk' for --segment-size"),
        ])
    func badWriteSizes(_ usage: UsageCase) async throws {
        let scratch = try CLIScratch("bad-sizes")
        let resource = scratch.file("r.bin")
        let input = try scratch.write("input", [UInt8](repeating: 3, count: 5000))
        let result = try await CLI.run(["write", resource] + usage.arguments + ["--input", input])
        #expect(result.status == 64, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
        #expect(result.err.contains(usage.message), "expected '\(usage.message)'\n\(result)")
        #expect(!FileManager.default.fileExists(atPath: resource) && !FileManager.default.fileExists(atPath: resource + ".scidx"))
    }

    @Test("bad read sizes and demo sizes: exit 64")
    func badReadSizes() async throws {
        var random = CLIRandom(defaultSeed: 0x51E)
        let scratch = try CLIScratch("bad-read-sizes")
        let resource = try await makeCompleteResource(scratch, source: random.bytes(30_000))
        for options in [["--offset", "-5"], ["--offset", "12Q"], ["--length", "-1"], ["--length", "1.5K"]] {
            let result = try await CLI.run(["read", resource] + options)
            #expect(result.status == 64 && result.stdout.isEmpty, "\(result)")
            #expect(result.err.contains(options[1]), "\(result)")
        }
        for options in [["--size", "0"], ["--size", "-8M"], ["--seed", "x"]] {
            let result = try await CLI.run(["demo"] + options)
            #expect(result.status == 64 && result.stdout.isEmpty, "\(result)")
        }
    }

    @Test("a different segment size or length on an existing resource: exit 64 naming both")
    func mismatchedSegmentSizeOrLength() async throws {
        var random = CLIRandom(defaultSeed: 0x5E6)
        let scratch = try CLIScratch("mismatch")
        let source = random.bytes(100_000)
        let resource = try await makeCompleteResource(scratch, source: source)
        let input = try scratch.write("input", source.prefix(16384))

        let segment = try await CLI.run(["write", resource, "--offset", "0", "--segment-size", "64K", "--input", input])
        #expect(segment.status == 64 && segment.stdout.isEmpty, "\(segment)")
        #expect(segment.err.contains("65536") && segment.err.contains("16384"), "\(segment)")

        let length = try await CLI.run(["write", resource, "--offset", "0", "--size", "100001", "--input", input])
        #expect(length.status == 64 && length.stdout.isEmpty, "\(length)")
        #expect(length.err.contains("100001") && length.err.contains("100000"), "\(length)")

        // Matching values are accepted, and nothing was changed by the refused writes.
        let same = try await CLI.run(["write", resource, "--offset", "0", "--size", "100000", "--segment-size", "16K", "--input", input])
        #expect(same.status == 0 && same.out.contains("already present (skipped): 16384 bytes"), "\(same)")
        let read = try await CLI.run(["read", resource])
        #expect(read.status == 0 && read.stdout == source, "\(read)")
    }

    // MARK: - Locking

    @Test("write while another process writes: exit 75 locked; readers still work")
    func lockedByAnotherWriter() async throws {
        var random = CLIRandom(defaultSeed: 0x10CC)
        let scratch = try CLIScratch("locked")
        let source = random.bytes(65536)
        let resource = scratch.file("r.bin")

        // The holder creates the resource, then waits on its standard input.
        let holder = try await CLI.startWithOpenInput(["write", resource, "--offset", "0", "--size", "65536", "--segment-size", "16K"])
        defer { holder.kill() }
        try await waitForLock(holder, index: resource + ".scidx")

        let input = try scratch.write("input", source)
        let second = try await CLI.run(["write", resource, "--offset", "0", "--input", input])
        #expect(second.status == 75, "\(second)")
        #expect(second.stdout.isEmpty, "\(second)")
        #expect(second.err.contains("locked"), "\(second)")

        // Read-only commands take no lock.
        let info = try await CLI.run(["info", resource, "--json"])
        #expect(info.status == 0 && (try? CLIJSON.int(info.json()["length"])) == 65536, "\(info)")
        let verify = try await CLI.run(["verify", resource])
        #expect(verify.status == 0, "\(verify)")

        try holder.send(Array(source.prefix(32768)))
        let first = try await holder.finish()
        #expect(first.status == 0 && first.out.contains("present now: [0, 32768)"), "\(first)")

        let retry = try await CLI.run(["write", resource, "--offset", "0", "--input", input])
        #expect(retry.status == 0 && retry.out.contains("present now: [32768, 65536)"), "\(retry)")
        let read = try await CLI.run(["read", resource])
        #expect(read.status == 0 && read.stdout == source, "\(read)")
    }

    @Test("verify --repair while another process writes: exit 75; plain verify still reports")
    func repairWhileLocked() async throws {
        var random = CLIRandom(defaultSeed: 0x4E9A)
        let scratch = try CLIScratch("repair-locked")
        let source = random.bytes(65536)
        let resource = try await makeCompleteResource(scratch, source: source)
        try flipByte(resource, at: 16384 + 5)

        let holder = try await CLI.startWithOpenInput(["write", resource, "--offset", "0"])
        defer { holder.kill() }
        try await waitForLock(holder, index: resource + ".scidx")

        let verify = try await CLI.run(["verify", resource, "--json"])
        #expect(verify.status == 65 && (try? damagedSegments(verify)) == [1], "\(verify)")
        let repair = try await CLI.run(["verify", resource, "--repair"])
        #expect(repair.status == 75, "\(repair)")
        #expect(repair.err.contains("locked"), "\(repair)")

        let first = try await holder.finish()
        #expect(first.status == 0, "\(first)")
        let repaired = try await CLI.run(["verify", resource, "--repair"])
        #expect(repaired.status == 1 && repaired.out.contains("repaired"), "\(repaired)")
        let clean = try await CLI.run(["verify", resource])
        #expect(clean.status == 0, "\(clean)")
    }

    // MARK: - demo

    @Test("demo --size 8M: clean, and every byte equals the source")
    func demo() async throws {
        let result = try await CLI.run(["demo", "--size", "8M"])
        #expect(result.status == 0, "\(result)")
        #expect(result.out.contains("clean"), "\(result)")
        #expect(result.out.contains("every byte equals the source: yes"), "\(result)")
        #expect(result.out.contains("dropped at the restart: yes"), "\(result)")
    }

    // MARK: - Helpers

    private func flipByte(_ path: String, at offset: Int64) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        guard let old = try handle.read(upToCount: 1)?.first else { throw CLIFailure("no byte at \(offset) in '\(path)'") }
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: Data([old ^ 0x40]))
    }

    private func damagedSegments(_ result: CLIResult) throws -> [Int] {
        guard let damaged = try result.json()["damaged"] as? [Any] else { throw CLIFailure("no 'damaged' array\n\(result)") }
        return damaged.compactMap { ($0 as? [String: Any]).flatMap { CLIJSON.int($0["segment"]) }.map(Int.init) }
    }

    /// Waits until `holder` holds its write lock. Two signs, either is enough: /proc/locks lists
    /// a flock owned by its pid, or it has the index open (a writer locks the data file before
    /// it opens or creates the index).
    private func waitForLock(_ holder: RunningCLI, index: String) async throws {
        let indexPath = URL(fileURLWithPath: index).resolvingSymlinksInPath().path
        let pid = String(holder.pid)
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            guard holder.isRunning else {
                let result = try await holder.finish()
                throw CLIFailure("the lock holder exited early\n\(result)")
            }
            if let locks = try? String(contentsOfFile: "/proc/locks", encoding: .utf8),
                locks.split(separator: "\n").contains(where: { $0.contains("FLOCK") && $0.split(separator: " ").contains(Substring(pid)) })
            {
                return
            }
            let descriptors = "/proc/\(pid)/fd"
            if let entries = try? FileManager.default.contentsOfDirectory(atPath: descriptors),
                entries.contains(where: { (try? FileManager.default.destinationOfSymbolicLink(atPath: descriptors + "/" + $0)) == indexPath })
            {
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw CLIFailure("the lock holder did not take its lock within 60 s")
    }
}

// MARK: - Segment arithmetic and ranges

/// The segments of a resource, for predicting what `write` reports.
struct CLILayout {
    let length: Int64
    let segmentSize: Int64

    var segmentCount: Int { Int((length + segmentSize - 1) / segmentSize) }

    func bytes(of segment: Int) -> Range<Int64> {
        let start = Int64(segment) * segmentSize
        return start..<min(start + segmentSize, length)
    }

    struct WritePrediction {
        var completed: [Range<Int64>] = []
        var notKept: [Range<Int64>] = []
        var skipped: Int64 = 0
    }

    /// What one `write` invocation of `chunk` does: segments it covers whole become present,
    /// bytes of segments already present are skipped, the rest is not kept.
    func predictWrite(_ chunk: Range<Int64>, present: inout Set<Int>) -> WritePrediction {
        var prediction = WritePrediction()
        guard !chunk.isEmpty else { return prediction }
        for segment in Int(chunk.lowerBound / segmentSize)...Int((chunk.upperBound - 1) / segmentSize) {
            let whole = bytes(of: segment)
            let overlap = max(whole.lowerBound, chunk.lowerBound)..<min(whole.upperBound, chunk.upperBound)
            if present.contains(segment) {
                prediction.skipped += Int64(overlap.count)
            } else if overlap == whole {
                present.insert(segment)
                prediction.completed.append(whole)
            } else {
                prediction.notKept.append(overlap)
            }
        }
        prediction.completed = CLIRanges.merge(prediction.completed)
        prediction.notKept = CLIRanges.merge(prediction.notKept)
        return prediction
    }

    func ranges(of segments: Set<Int>) -> [Range<Int64>] {
        CLIRanges.merge(segments.sorted().map { bytes(of: $0) })
    }
}

/// Byte-range helpers in the CLI's half-open notation.
enum CLIRanges {
    /// Sorted, with touching and overlapping ranges joined.
    static func merge(_ ranges: [Range<Int64>]) -> [Range<Int64>] {
        var result: [Range<Int64>] = []
        for range in ranges.filter({ !$0.isEmpty }).sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = result.last, range.lowerBound <= last.upperBound {
                result[result.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                result.append(range)
            }
        }
        return result
    }

    /// The parts of `whole` that `ranges` (sorted, disjoint) do not cover.
    static func complement(of ranges: [Range<Int64>], in whole: Range<Int64>) -> [Range<Int64>] {
        var gaps: [Range<Int64>] = []
        var position = whole.lowerBound
        for range in ranges {
            if range.lowerBound > position { gaps.append(position..<range.lowerBound) }
            position = max(position, range.upperBound)
        }
        if position < whole.upperBound { gaps.append(position..<whole.upperBound) }
        return gaps
    }

    /// "[a, b), [c, d)", the CLI's notation.
    static func describe(_ ranges: [Range<Int64>]) -> String {
        ranges.map { "[\($0.lowerBound), \($0.upperBound))" }.joined(separator: ", ")
    }
}

/// Typed access to JSONSerialization's values.
enum CLIJSON {
    static func int(_ value: Any?) -> Int64? {
        guard let number = value as? NSNumber else { return nil }
        return number.int64Value
    }

    static func bool(_ value: Any?) -> Bool? {
        (value as? NSNumber)?.boolValue ?? (value as? Bool)
    }

    /// `[[start, end], ...]` as half-open ranges.
    static func ranges(_ value: Any?) throws -> [Range<Int64>] {
        guard let pairs = value as? [Any] else { throw CLIFailure("not an array: \(String(describing: value))") }
        return try pairs.map { pair in
            guard let bounds = pair as? [Any], bounds.count == 2, let start = int(bounds[0]), let end = int(bounds[1]), start <= end else {
                throw CLIFailure("not a [start, end) pair: \(pair)")
            }
            return start..<end
        }
    }
}
