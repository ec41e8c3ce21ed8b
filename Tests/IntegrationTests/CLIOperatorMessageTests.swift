// What an operator reads after a crash or damage: errors that say what is there and what to
// do, JSON errors under --json, fsck's exit statuses for verify --repair, write's progress.
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

@Suite("CLI operator messages")
struct CLIOperatorMessageTests {
    /// A complete resource of `count` bytes in 16 KiB segments, written through the CLI.
    private func resource(_ scratch: CLIScratch, count: Int, name: String = "r.bin") async throws -> String {
        let path = scratch.file(name)
        let source = try scratch.write(name + ".src", (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        let result = try await CLI.run(["write", path, "--offset", "0", "--size", "\(count)", "--segment-size", "16K", "--input", source])
        try #require(result.status == 0, "\(result)")
        return path
    }

    private func flipByte(_ path: String, at offset: UInt64) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: offset)
        let old = try handle.read(upToCount: 1)?.first ?? 0
        try handle.seek(toOffset: offset)
        try handle.write(contentsOf: Data([old ^ 0x10]))
    }

    @Test("--json: an error is a JSON object on stdout with the same exit status (verify MISSING --json exits 66)")
    func jsonErrors() async throws {
        let scratch = try CLIScratch("json-errors")
        let missing = scratch.file("MISSING")
        let cases: [([String], Int32, String)] = [
            (["verify", missing, "--json"], 66, "notFound"),
            (["info", missing, "--json"], 66, "notFound"),
            (["ls", "--cache-dir", scratch.file("no-cache"), "--json"], 66, "notFound"),
            (["stats", "--cache-dir", scratch.path, "--json"], 69, "originUnavailable"),
            (["verify", "--json", "--bogus"], 64, "usage"),
            (["verify", "--json"], 64, "usage"),
        ]
        for (arguments, status, code) in cases {
            let result = try await CLI.run(arguments)
            #expect(result.status == status, "\(result)")
            let object = try result.json()
            #expect(object["code"] as? String == code, "\(result)")
            #expect((object["status"] as? NSNumber)?.int32Value == status, "\(result)")
            let message = object["error"] as? String ?? ""
            #expect(!message.isEmpty && result.err.contains(message), "the sentence goes to stderr as well\n\(result)")
            if code == "notFound" { #expect(message.contains(arguments[1] == "--cache-dir" ? arguments[2] : arguments[1]), "\(result)") }
        }
        // Without --json, stdout stays empty.
        let plain = try await CLI.run(["verify", missing])
        #expect(plain.status == 66 && plain.stdout.isEmpty && plain.err.contains("no such resource"), "\(plain)")
    }

    @Test("verify of a directory, a cache directory, and what a write killed before its first commit leaves: says what it is")
    func verifyWhatIsThere() async throws {
        let scratch = try CLIScratch("verify-what")
        let directory = try scratch.directory("plain-dir")
        let plain = try await CLI.run(["verify", directory])
        #expect(plain.status == 66 && plain.err.contains("is a directory") && plain.err.contains("--cache-dir"), "\(plain)")

        let cache = scratch.file("cache")
        let made = try await CLI.run(["fetch", "http://127.0.0.1:1/x", "--cache-dir", cache])
        #expect(made.status != 0, "\(made)")
        let cacheVerify = try await CLI.run(["verify", cache])
        #expect(cacheVerify.status == 66 && cacheVerify.err.contains("verify --cache-dir \(cache)"), "\(cacheVerify)")

        // A write killed before its first commit leaves the data file and 'NAME.scidx.tmp'.
        let path = try await resource(scratch, count: 40_000, name: "t.bin")
        try FileManager.default.moveItem(atPath: path + ".scidx", toPath: path + ".scidx.tmp")
        for command in ["verify", "info", "read"] {
            let result = try await CLI.run([command, path])
            #expect(result.status == 66, "\(result)")
            #expect(result.err.contains("nothing was ever committed") && result.err.contains("t.bin.scidx.tmp"), "\(result)")
            #expect(!result.err.contains("errno"), "\(result)")
        }
        // What it says to do works: writing again starts the resource afresh.
        let input = try scratch.write("again", [UInt8](repeating: 9, count: 16_384))
        let again = try await CLI.run(["write", path, "--offset", "0", "--input", input])
        #expect(again.status == 0, "\(again)")
        let verify = try await CLI.run(["verify", path])
        #expect(verify.status == 0, "\(verify)")
    }

    @Test("verify --repair follows fsck: 0 clean, 1 damage repaired (so '--repair && next' goes on), 65 damage left")
    func repairExitStatuses() async throws {
        let scratch = try CLIScratch("repair-status")
        let path = try await resource(scratch, count: 100_000)
        let clean = try await CLI.run(["verify", path, "--repair"])
        #expect(clean.status == 0, "\(clean)")
        try flipByte(path, at: 20_000)
        let found = try await CLI.run(["verify", path])
        #expect(found.status == 65, "\(found)")
        let repaired = try await CLI.run(["verify", path, "--repair"])
        #expect(repaired.status == 1 && repaired.out.contains("repaired"), "\(repaired)")
        let after = try await CLI.run(["verify", path, "--repair"])
        #expect(after.status == 0, "\(after)")
        let help = try await CLI.run(["verify", "--help"])
        #expect(help.out.contains("1 --repair: damage was found and repaired"), "\(help)")
    }

    @Test("read of a segment with a flipped bit says only what was done: the read-only open leaves the index, verify still finds it")
    func readAfterFlippedBit() async throws {
        let scratch = try CLIScratch("read-flip")
        let path = try await resource(scratch, count: 100_000)
        try flipByte(path, at: 40_000)
        let read = try await CLI.run(["read", path, "--offset", "32768", "--length", "16384"])
        #expect(read.status == 65 && read.stdout.isEmpty, "\(read)")
        #expect(!read.err.contains("were dropped"), "\(read)")
        #expect(read.err.contains("the index still names them"), "\(read)")
        // What the message says holds: the index still names the segment.
        let verify = try await CLI.run(["verify", path])
        #expect(verify.status == 65 && verify.out.contains("damaged segment 2 "), "\(verify)")
    }

    @Test("write from a pipe on a terminal shows progress on stderr: bytes read, rate, bytes committed")
    func writeProgressOnTerminal() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), let binary = CLI.binary else { return }
        let scratch = try CLIScratch("write-progress")
        let input = try scratch.write("input", [UInt8](repeating: 5, count: 3 << 20))
        let target = scratch.file("p.bin")
        // script(1) gives the command a terminal; its input comes from a pipe.
        let command = "cat '\(input)' | '\(binary)' write '\(target)' --offset 0 > '\(scratch.file("report"))'"
        let result = try await ChildProcess.run("/usr/bin/script", ["-qec", command, "/dev/null"])
        #expect(result.status == 0, "\(result.text)\(result.errorText)")
        #expect(
            result.text.contains("write: ") && result.text.contains("MiB read") && result.text.contains("3.0 MiB committed"),
            "\(result.text)")
        let plain = try await CLI.run(["write", scratch.file("q.bin"), "--offset", "0", "--input", input])
        #expect(plain.status == 0 && !plain.err.contains("committed"), "no progress without a terminal\n\(plain)")
    }

    /// Overwrites `count` bytes at `offset` of `path` with `bytes(index)`.
    private func overwrite(_ path: String, at offset: UInt64, _ bytes: [UInt8]) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: offset)
        try handle.write(contentsOf: Data(bytes))
    }

    @Test(
        "both superblock copies unusable: verify says what --repair can recover; --repair rebuilds from the checkpoint and journal (exit 1), every byte reads back"
    )
    func bothSuperblocksSalvaged() async throws {
        let scratch = try CLIScratch("salvage")
        let path = try await resource(scratch, count: 300_000)
        let source = try scratch.read("r.bin.src")
        // Both magics gone; the slots' other fields (the journal's salt) survive.
        for slot: UInt64 in [0, 4096] { try overwrite(path + ".scidx", at: slot, Array("DAMAGED!".utf8)) }
        let before = try scratch.read("r.bin.scidx")
        for command in ["info", "read"] {
            let other = try await CLI.run([command, path])
            #expect(other.status == 65 && other.err.contains("'sparsecache verify <file>' says what can be recovered"), "\(other)")
        }
        let check = try await CLI.run(["verify", path])
        #expect(
            check.status == 65 && check.err.contains("no usable superblock") && check.err.contains("What --repair can recover"), "\(check)")
        #expect(check.err.contains("1 journal record(s)") && check.err.contains("19 segment(s) (300000 bytes) match"), "\(check)")
        #expect(try scratch.read("r.bin.scidx") == before, "a plain verify changed the index")

        let repair = try await CLI.run(["verify", path, "--repair"])
        #expect(repair.status == 1 && repair.out.contains("the index was rebuilt from"), "\(repair)")
        #expect(try scratch.read("r.bin.scidx.damaged") == before, "the damaged index is not kept")
        let after = try await CLI.run(["verify", path])
        #expect(after.status == 0, "\(after)")
        let read = try await CLI.run(["read", path])
        #expect(read.status == 0 && read.stdout == source, "\(read.status), \(read.stdout.count) bytes")
    }

    @Test(
        "both superblock copies garbage: the journal cannot be validated and says so; with no checkpoint left, nothing can be recovered and nothing changes"
    )
    func bothSuperblocksLost() async throws {
        let scratch = try CLIScratch("salvage-lost")
        var random = CLIRandom(defaultSeed: 0x5A1)
        let path = try await resource(scratch, count: 100_000)
        try overwrite(path + ".scidx", at: 0, random.bytes(8192))
        let check = try await CLI.run(["verify", path, "--json"])
        #expect(check.status == 65, "seed \(random.seed)\n\(check)")
        let message = try check.json()["error"] as? String ?? ""
        #expect(message.contains("0 journal record(s)") && message.contains("no damaged slot of generation"), "\(check)")

        // No checkpoint either: nothing to recover, and the repair changes nothing.
        try overwrite(path + ".scidx", at: 0, [UInt8](repeating: 0, count: 64 << 10))
        let before = try scratch.read("r.bin.scidx")
        for arguments in [["verify", path], ["verify", path, "--repair"]] {
            let result = try await CLI.run(arguments)
            #expect(result.status == 65 && result.err.contains("nothing of the index can be recovered"), "\(result)")
        }
        #expect(try scratch.read("r.bin.scidx") == before)
        #expect(!FileManager.default.fileExists(atPath: path + ".scidx.damaged"))
    }
}
