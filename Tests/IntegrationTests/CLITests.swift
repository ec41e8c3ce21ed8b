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
    func checkWriteReport(
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

    // MARK: - Helpers

    func flipByte(_ path: String, at offset: Int64) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        guard let old = try handle.read(upToCount: 1)?.first else { throw CLIFailure("no byte at \(offset) in '\(path)'") }
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: Data([old ^ 0x40]))
    }

    func damagedSegments(_ result: CLIResult) throws -> [Int] {
        guard let damaged = try result.json()["damaged"] as? [Any] else { throw CLIFailure("no 'damaged' array\n\(result)") }
        return damaged.compactMap { ($0 as? [String: Any]).flatMap { CLIJSON.int($0["segment"]) }.map(Int.init) }
    }

    /// Waits until `holder` holds its write lock. Two signs, either is enough: /proc/locks lists
    /// a flock owned by its pid, or it has the index open (a writer locks the data file before
    /// it opens or creates the index).
    func waitForLock(_ holder: RunningCLI, index: String) async throws {
        let indexPath = URL(fileURLWithPath: index).resolvingSymlinksInPath().path
        let pid = String(holder.pid)
        let locked = try await eventually(timeout: .seconds(60), interval: .milliseconds(20)) {
            guard holder.isRunning else {
                let result = try await holder.finish()
                throw CLIFailure("the lock holder exited early\n\(result)")
            }
            if let locks = try? String(contentsOfFile: "/proc/locks", encoding: .utf8),
                locks.split(separator: "\n").contains(where: { $0.contains("FLOCK") && $0.split(separator: " ").contains(Substring(pid)) })
            {
                return true
            }
            let descriptors = "/proc/\(pid)/fd"
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: descriptors)) ?? []
            return entries.contains(where: { (try? FileManager.default.destinationOfSymbolicLink(atPath: descriptors + "/" + $0)) == indexPath })
        }
        guard locked else { throw CLIFailure("the lock holder did not take its lock within 60 s") }
    }
}
