// The CLI: bad input, locking, demo. Part of the CLITests suite (CLITests.swift).
import CShim
import Foundation
import LoopbackOrigins
import Testing

#if canImport(Glibc)
import Glibc
#endif
import TestSupport

extension CLITests {
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
        let directory = try scratch.directory("dir")
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
}
