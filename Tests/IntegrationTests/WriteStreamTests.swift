// Issue 14, item 7: `write` from a stream commits as it goes, and SIGINT/SIGTERM commit what
// was written and say what was kept. Before, a kill after 28 MiB kept nothing and Ctrl-C exited
// 130 silently with nothing committed.
import Foundation
import SeededRandom
import Testing
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

@Suite("write from a stream: commits as it goes, and on SIGINT/SIGTERM")
struct WriteStreamTests {
    /// Feeds `megabytes` MiB of seeded bytes to a running `write` and returns them.
    static func feed(_ running: RunningCLI, megabytes: Int, seed: UInt64) throws -> [UInt8] {
        var random = SplitMix64(seed: seed)
        let bytes = random.bytes(megabytes << 20)
        for start in stride(from: 0, to: bytes.count, by: 1 << 20) { try running.send(Array(bytes[start..<(start + (1 << 20))])) }
        return bytes
    }

    static func presentBytes(_ path: String) async throws -> Int {
        let info = try await CLI.run(["info", path, "--json"])
        return Int(CLIJSON.int(try info.json()["presentBytes"]) ?? -1)
    }

    /// Waits (up to 20 s) for the process to exit without closing its input.
    static func waitForExit(_ running: RunningCLI) async throws {
        _ = try await eventually(timeout: .seconds(20)) { !running.isRunning }
    }

    @Test("a kill in the middle of a long stream keeps what was committed on the way (every 8 MiB)")
    func killKeepsCommitted() async throws {
        let scratch = try CLIScratch("write-kill")
        defer { scratch.remove() }
        let resource = scratch.file("stream.bin")
        let running = try await CLI.startWithOpenInput(["write", resource, "--offset", "0", "--size", "64M"])
        defer { running.kill() }
        let bytes = try Self.feed(running, megabytes: 28, seed: 0x57E)
        // The input stays open: the write is still going when it is killed.
        Glibc.kill(running.pid, SIGKILL)
        let result = try await running.finish()
        #expect(result.signaled, "\(result)")
        let present = try await Self.presentBytes(resource)
        // 28 MiB were handed over; at least three 8 MiB commits happened inside write.
        #expect(present >= 16 << 20, "kept \(present) bytes of 28 MiB")
        let read = try await CLI.run(["read", resource, "--offset", "0", "--length", "\(present)"])
        #expect(read.status == 0 && read.stdout == Array(bytes.prefix(present)), "\(read.status)")
    }

    @Test("SIGINT and SIGTERM commit what was written, say what was kept, and exit 130 / 143", arguments: [SIGINT, SIGTERM])
    func signalCommits(signal: Int32) async throws {
        let scratch = try CLIScratch("write-signal")
        defer { scratch.remove() }
        let resource = scratch.file("stream.bin")
        let running = try await CLI.startWithOpenInput(["write", resource, "--offset", "0", "--size", "64M"])
        defer { running.kill() }
        // Below the 8 MiB threshold, and sent within much less than the 1 s interval: before
        // the signal nothing need be committed, so what is kept is the signal's commit.
        let bytes = try Self.feed(running, megabytes: 6, seed: 0x5161 + UInt64(signal))
        // A moment for write to take the bytes in (not observable from here).
        try await Task.sleep(for: .milliseconds(200))
        Glibc.kill(running.pid, signal)
        try await Self.waitForExit(running)
        #expect(!running.isRunning, "write did not stop on signal \(signal)")
        let result = try await running.finish()
        #expect(!result.signaled && result.status == 128 + signal, "\(result)")
        let name = signal == SIGINT ? "SIGINT" : "SIGTERM"
        #expect(result.err.contains("\(name): stopped after") && result.err.contains("present bytes"), "\(result)")
        let present = try await Self.presentBytes(resource)
        // What had reached the resource when the signal came: all of it, as whole segments of
        // the 4 MiB chunks it had read (6 MiB sent: one full chunk at least).
        #expect(present >= 4 << 20 && result.err.contains("holds \(present) present bytes"), "kept \(present)\n\(result)")
        let read = try await CLI.run(["read", resource, "--offset", "0", "--length", "\(present)"])
        #expect(read.status == 0 && read.stdout == Array(bytes.prefix(present)))
    }
}
