// The CLI over a cache directory and the exit statuses every verb shares (issue 14, items 5
// and 9): `ls` after a crash, `verify --cache-dir`, mistyped directories and keys, failed
// commands that leave nothing behind, permission errors, and demo's temporary directory.
import Foundation
import LoopbackOrigins
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseCacheStore
import TestSupport
import StoreTestSupport

#if canImport(Glibc)
    import Glibc
#endif

@Suite("CLI over a cache directory; exit statuses (issue 14, items 5 and 9)")
struct CLIStoreTests {
    static let segment = 16384

    /// A store directory with `keys`, each written whole (`length` bytes) and the catalog saved.
    private func makeStore(_ directory: String, keys: [String], length: Int64) async throws {
        let store = try await SparseStore.open(directory: directory, options: .testing(budget: 1 << 30, segmentSize: Self.segment))
        for key in keys { try await fill(store, key: key, length: length) }
        try await store.close()
    }

    private func dataPath(_ directory: String, key: String) async throws -> String {
        let summary = try await SparseStore.inspect(directory: directory)
        guard let entry = summary.entries.first(where: { $0.key == key }) else { throw CLIFailure("no entry for \(key)") }
        return directory + "/resources/" + entry.name
    }

    private func entry(_ result: CLIResult, key: String) throws -> [String: Any] {
        let entries = try result.json()["entries"] as? [[String: Any]] ?? []
        guard let entry = entries.first(where: { $0["key"] as? String == key }) else { throw CLIFailure("no '\(key)' in\n\(result)") }
        return entry
    }

    // MARK: - ls after a crash (item 5)

    @Test("ls shows what the indexes hold, not the catalog saved before a crash; text output names each file")
    func lsReadsTheIndexes() async throws {
        let scratch = try CLIScratch("ls-indexes")
        let directory = scratch.path
        // A resource of unknown length with one segment, as the catalog last saw it...
        let store = try await SparseStore.open(directory: directory, options: .testing(budget: 1 << 30, segmentSize: Self.segment))
        let handle = try await store.open(key: "movie")
        try await handle.write(keyedBytes("movie", 0..<Int64(Self.segment)), at: 0)
        try await handle.file.commit()
        try await handle.release()
        try await store.close()
        let path = try await dataPath(directory, key: "movie")
        let name = (path as NSString).lastPathComponent
        let before = try await CLI.run(["ls", "--cache-dir", directory, "--json"])
        #expect(CLIJSON.int(try entry(before, key: "movie")["presentBytes"]) == Int64(Self.segment), "\(before)")

        // ...then commits the catalog never saw: what a serve killed with SIGKILL between
        // catalog saves leaves (its catalog is saved 2 s after a change at the earliest).
        let length = Int64(8 * Self.segment)
        var options = SparseFileOptions.testing(segmentSize: Self.segment, length: length)
        options.create = false
        let file = try await SparseFile.open(path, options: options)
        try await file.write(keyedBytes("movie", 0..<Int64(5 * Self.segment)), at: 0)
        try await file.commit()
        try await file.close()

        let list = try await CLI.run(["ls", "--cache-dir", directory, "--json"])
        #expect(list.status == 0, "\(list)")
        let listed = try entry(list, key: "movie")
        #expect(CLIJSON.int(listed["presentBytes"]) == Int64(5 * Self.segment), "\(list)")
        #expect(CLIJSON.int(listed["length"]) == length, "\(list)")
        #expect(CLIJSON.int(try list.json()["presentBytes"]) == Int64(5 * Self.segment), "\(list)")

        let text = try await CLI.run(["ls", "--cache-dir", directory])
        #expect(text.status == 0, "\(text)")
        let line = text.out.split(separator: "\n").first { $0.hasSuffix(" movie") }
        #expect(line?.contains(name) == true, "the line does not name the file '\(name)'\n\(text)")
        #expect(line?.contains("80.0 KiB") == true && line?.contains("128.0 KiB") == true && line?.contains("62.5") == true, "\(text)")
        #expect(text.out.contains("FILE"), "\(text)")
    }

    // MARK: - verify --cache-dir (item 5)

    @Test("verify --cache-dir: every resource, the catalog against the indexes, leftovers, totals; --repair; exit 65 on damage")
    func verifyCacheDirectory() async throws {
        let scratch = try CLIScratch("verify-dir")
        let directory = scratch.path
        let length = Int64(4 * Self.segment)
        try await makeStore(directory, keys: ["a", "b", "c"], length: length)
        let clean = try await CLI.run(["verify", "--cache-dir", directory])
        #expect(clean.status == 0 && clean.out.hasSuffix("clean\n"), "\(clean)")
        #expect(clean.out.contains("totals: 3 resources (3 clean, 0 damaged), 12 segments"), "\(clean)")

        // Damage one resource, let the catalog lag another, leave what crashes leave.
        let damaged = try await dataPath(directory, key: "b")
        let damagedName = (damaged as NSString).lastPathComponent
        try RawFile.flip(damaged, at: Int64(2 * Self.segment + 7))
        let lagging = try await dataPath(directory, key: "c")
        let laggingName = (lagging as NSString).lastPathComponent
        var options = SparseFileOptions.testing(segmentSize: Self.segment)
        options.create = false
        let file = try await SparseFile.open(lagging, options: options)
        try await file.discard(segments: [3])
        try await file.commit()
        try await file.close()
        let orphan = directory + "/resources/00000000000000aa"
        try scratch.write("resources/00000000000000aa", [UInt8](repeating: 1, count: 5000))
        try scratch.write("resources/00000000000000bb.scidx.tmp", [UInt8](repeating: 2, count: 100))
        try scratch.write("resources/README", [UInt8](repeating: 3, count: 10))

        let json = try await CLI.run(["verify", "--cache-dir", directory, "--json"])
        #expect(json.status == 65, "\(json)")
        let report = try json.json()
        #expect(CLIJSON.bool(report["clean"]) == false && CLIJSON.bool(report["inUse"]) == false, "\(json)")
        let resources = report["resources"] as? [[String: Any]] ?? []
        #expect(resources.count == 3, "\(json)")
        let bad = resources.first { $0["name"] as? String == damagedName }
        #expect(bad?["status"] as? String == "damaged" && bad?["key"] as? String == "b", "\(json)")
        let segments = ((bad?["report"] as? [String: Any])?["damaged"] as? [[String: Any]])?.compactMap { CLIJSON.int($0["segment"]) }
        #expect(segments == [2], "\(json)")
        let differences = report["catalogDifferences"] as? [String] ?? []
        #expect(differences == ["\(laggingName): \(length) bytes present in the catalog, \(length - Int64(Self.segment)) in the index"], "\(json)")
        let leftovers = (report["leftovers"] as? [[String: Any]] ?? []).map { "\($0["path"] ?? "") \($0["kind"] ?? "")" }.sorted()
        #expect(
            leftovers == ["resources/00000000000000aa data file without an index", "resources/00000000000000bb.scidx.tmp temporary file"],
            "\(json)")
        #expect(CLIJSON.int(report["foreignFiles"]) == 1, "\(json)")

        let text = try await CLI.run(["verify", "--cache-dir", directory])
        #expect(text.status == 65, "\(text)")
        #expect(text.out.contains("DAMAGED   resources/\(damagedName)"), "\(text)")
        #expect(text.out.contains("damaged segment 2 [32768, 49152): checksum mismatch"), "\(text)")
        #expect(text.out.contains("totals: 3 resources (2 clean, 1 damaged)"), "\(text)")
        #expect(text.out.contains("leftover: resources/00000000000000aa: data file without an index"), "\(text)")

        let repair = try await CLI.run(["verify", "--cache-dir", directory, "--repair"])
        #expect(repair.status == 1 && repair.out.contains("repaired: dropped 1 segment(s)"), "\(repair)")
        #expect(!FileManager.default.fileExists(atPath: orphan), "the orphan is still there\n\(repair)")
        #expect(FileManager.default.fileExists(atPath: directory + "/resources/README"), "a foreign file was removed")
        let after = try await CLI.run(["verify", "--cache-dir", directory, "--json"])
        #expect(after.status == 0, "\(after)")
        let afterReport = try after.json()
        #expect((afterReport["catalogDifferences"] as? [String])?.isEmpty == true, "\(after)")
        #expect((afterReport["leftovers"] as? [Any])?.isEmpty == true, "\(after)")
        let list = try await CLI.run(["ls", "--cache-dir", directory, "--json"])
        #expect(CLIJSON.int(try entry(list, key: "b")["presentBytes"]) == length - Int64(Self.segment), "\(list)")
    }

    @Test("verify --cache-dir beside the directory's owner: read-only check works, --repair exits 75; an index without data is damage")
    func verifyCacheDirectoryInUse() async throws {
        let scratch = try CLIScratch("verify-dir-locked")
        let directory = scratch.path
        try await makeStore(directory, keys: ["a", "b"], length: Int64(2 * Self.segment))
        let gone = try await dataPath(directory, key: "b")
        // The owner opens first (its start-up removes an index without data), then the data
        // file goes under it.
        let store = try await SparseStore.open(directory: directory, options: .testing(budget: 1 << 30, segmentSize: Self.segment))
        try FileManager.default.removeItem(atPath: gone)
        let check = try await CLI.run(["verify", "--cache-dir", directory])
        #expect(check.status == 65, "\(check)")
        #expect(check.out.contains("in use by another process"), "\(check)")
        #expect(check.out.contains("index without a data file"), "\(check)")
        let repair = try await CLI.run(["verify", "--cache-dir", directory, "--repair"])
        #expect(repair.status == 75 && repair.err.contains("in use by another process"), "\(repair)")
        #expect(FileManager.default.fileExists(atPath: gone + ".scidx"), "a refused repair changed the directory")
        try await store.close()

        let repaired = try await CLI.run(["verify", "--cache-dir", directory, "--repair"])
        #expect(repaired.status == 1 && repaired.out.contains("(removed)"), "\(repaired)")
        let after = try await CLI.run(["verify", "--cache-dir", directory])
        #expect(after.status == 0 && after.out.contains("totals: 1 resources (1 clean, 0 damaged)"), "\(after)")
    }

    // MARK: - Exit statuses and leftovers (item 9)

    @Test("a mistyped --cache-dir: exit 66 naming it, nothing created", arguments: [
        ["ls"], ["evict", "--key", "k"], ["evict", "--to-size", "0"], ["clear"], ["verify"], ["verify", "--repair"],
    ])
    func mistypedCacheDirectory(command: [String]) async throws {
        let scratch = try CLIScratch("mistyped")
        let missing = scratch.file("cahce")
        let result = try await CLI.run([command[0], "--cache-dir", missing] + command.dropFirst())
        #expect(result.status == 66 && result.stdout.isEmpty, "\(result)")
        #expect(result.err.contains(missing) && result.err.contains("no such cache directory"), "\(result)")
        #expect(!FileManager.default.fileExists(atPath: missing), "created '\(missing)'")

        // A directory that is not a cache directory is refused too, and left as it was.
        let plain = try scratch.directory("plain")
        let refused = try await CLI.run([command[0], "--cache-dir", plain] + command.dropFirst())
        #expect(refused.status == 66 && refused.err.contains("not a sparsecache cache directory"), "\(refused)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: plain).isEmpty, "files created in '\(plain)'")
    }

    @Test("evict --key of an unknown key: exit 66, nothing evicted")
    func evictUnknownKey() async throws {
        let scratch = try CLIScratch("evict-unknown")
        try await makeStore(scratch.path, keys: ["kept"], length: Int64(Self.segment))
        let result = try await CLI.run(["evict", "--cache-dir", scratch.path, "--key", "nope"])
        #expect(result.status == 66 && result.stdout.isEmpty && result.err.contains("'nope'"), "\(result)")
        let list = try await CLI.run(["ls", "--cache-dir", scratch.path, "--json"])
        #expect((try? entry(list, key: "kept")) != nil, "\(list)")
    }

    @Test("write --input of a directory: exit 64, no resource left behind")
    func writeFromDirectoryLeavesNothing() async throws {
        let scratch = try CLIScratch("write-dir-input")
        let input = try scratch.directory("adir")
        let resource = scratch.file("r.bin")
        let result = try await CLI.run(["write", resource, "--offset", "0", "--input", input])
        #expect(result.status == 64 && result.err.contains("is a directory"), "\(result)")
        #expect(!FileManager.default.fileExists(atPath: resource), "left '\(resource)'")
        #expect(!FileManager.default.fileExists(atPath: resource + ".scidx"), "left its index")
    }

    @Test("a failed write that created the resource and committed nothing removes it")
    func failedWriteRemovesWhatItCreated() async throws {
        let scratch = try CLIScratch("write-fails")
        let resource = scratch.file("r.bin")
        // Past the resource's length: refused by the first write, after the resource was made.
        let input = try scratch.write("input", [UInt8](repeating: 9, count: 3 * Self.segment))
        let result = try await CLI.run(["write", resource, "--offset", "0", "--size", "\(Self.segment)", "--input", input])
        #expect(result.status == 64, "\(result)")
        #expect(!FileManager.default.fileExists(atPath: resource) && !FileManager.default.fileExists(atPath: resource + ".scidx"), "\(result)")

        // An existing resource is never removed by a failed write.
        let first = try scratch.write("first", [UInt8](repeating: 1, count: Self.segment))
        let made = try await CLI.run(["write", resource, "--offset", "0", "--size", "\(Self.segment)", "--input", first])
        #expect(made.status == 0, "\(made)")
        let again = try await CLI.run(["write", resource, "--offset", "0", "--input", input])
        #expect(again.status == 64 && FileManager.default.fileExists(atPath: resource + ".scidx"), "\(again)")
    }

    @Test("permission denied: exit 77 (as root, only the case root cannot pass: a read-only sysfs file)")
    func permissionDenied() async throws {
        let scratch = try CLIScratch("permission")
        let resource = scratch.file("r.bin")
        let input = try scratch.write("input", [UInt8](repeating: 5, count: Self.segment))
        let made = try await CLI.run(["write", resource, "--offset", "0", "--size", "\(Self.segment)", "--input", input])
        #expect(made.status == 0, "\(made)")
        var checked = 0
        // Mode 0444 in sysfs refuses writers with EACCES, root included.
        let sysfs = "/sys/kernel/notes"
        if FileManager.default.fileExists(atPath: sysfs) {
            let result = try await CLI.run(["read", resource, "--output", sysfs])
            #expect(result.status == 77 && result.err.contains("Permission denied"), "\(result)")
            checked += 1
        }
        // Root ignores file modes: these run only for other users.
        if geteuid() != 0 {
            chmod(resource + ".scidx", 0)
            defer { chmod(resource + ".scidx", 0o644) }
            for command in [["info", resource], ["verify", resource], ["read", resource]] {
                let result = try await CLI.run(command)
                #expect(result.status == 77, "\(result)")
            }
            let cache = scratch.file("cache")
            try FileManager.default.createDirectory(atPath: cache + "/resources", withIntermediateDirectories: true)
            chmod(cache + "/resources", 0)
            defer { chmod(cache + "/resources", 0o755) }
            let list = try await CLI.run(["ls", "--cache-dir", cache])
            #expect(list.status == 77, "\(list)")
            checked += 1
        }
        #expect(checked > 0, "no permission case could run here (root without /sys/kernel/notes)")
    }

    // MARK: - demo (item 9)

    @Test("demo --dir never overwrites an existing file: exit 73, the file untouched")
    func demoRefusesToOverwrite() async throws {
        let scratch = try CLIScratch("demo-exists")
        for name in ["movie.bin", "movie.bin.scidx"] {
            let directory = scratch.file(name + "-dir")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            let mine = Array("someone's file".utf8)
            try scratch.write(name + "-dir/" + name, mine)
            let result = try await CLI.run(["demo", "--dir", directory, "--size", "1M"])
            #expect(result.status == 73 && result.err.contains("never overwrites"), "\(result)")
            #expect(try scratch.read(name + "-dir/" + name) == mine, "the demo changed '\(name)'")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == [name], "\(result)")
        }
    }

    @Test("demo removes its temporary directory after SIGINT")
    func demoInterrupted() async throws {
        let scratch = try CLIScratch("demo-sigint")
        let output = scratch.file("stdout")
        let demo = try await DemoProcess(temporary: scratch.file("tmp"), stdout: .file(output))
        defer { demo.kill() }
        // Its first line names the resource in its temporary directory, made by then.
        let printed = try await eventually(timeout: .seconds(60), interval: .milliseconds(20)) {
            guard demo.isRunning else { return true }
            return (try? String(contentsOfFile: output, encoding: .utf8))?.contains("\n") == true
        }
        guard printed, (try? String(contentsOfFile: output, encoding: .utf8))?.contains("\n") == true else {
            throw CLIFailure("the demo printed nothing")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: demo.temporary).count == 1)
        Glibc.kill(demo.pid, SIGINT)
        let (status, signaled, stderr) = await demo.finish()
        #expect(status == 130 && !signaled && stderr.contains("SIGINT"), "exit \(status) signaled \(signaled): \(stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: demo.temporary).isEmpty, "left \(demo.temporary)'s contents")
    }

    @Test("demo removes its temporary directory when the reader of its output goes away (EPIPE)")
    func demoClosedPipe() async throws {
        let scratch = try CLIScratch("demo-pipe")
        let pipe = Pipe()
        let demo = try await DemoProcess(temporary: scratch.file("tmp"), stdout: .pipe(pipe))
        defer { demo.kill() }
        // As `sparsecache demo | head -1` does: one line, then the read end closes.
        let reader = pipe.fileHandleForReading
        let first: [UInt8] = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var bytes: [UInt8] = []
                while !bytes.contains(10), let chunk = try? reader.read(upToCount: 1), let byte = chunk.first { bytes.append(byte) }
                continuation.resume(returning: bytes)
            }
        }
        #expect(String(decoding: first, as: UTF8.self).hasPrefix("sparsecache demo:"))
        try reader.close()
        let (status, signaled, stderr) = await demo.finish()
        #expect(status == 141 && !signaled && stderr.contains("standard output was closed"), "exit \(status) signaled \(signaled): \(stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: demo.temporary).isEmpty, "left \(demo.temporary)'s contents")
    }
}

/// `sparsecache demo` with its own TMPDIR, so what it leaves there can be checked.
private final class DemoProcess: @unchecked Sendable {
    enum Stdout {
        case file(String)
        case pipe(Pipe)
    }

    let temporary: String
    let process = Process()
    private let stderrPath: String
    private let exited: Task<Void, Never>

    init(temporary: String, stdout: Stdout) async throws {
        guard let binary = CLI.binary else { throw CLIFailure("no sparsecache binary") }
        self.temporary = temporary
        try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
        stderrPath = temporary + "-stderr"
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["demo", "--size", "256M"]
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = temporary
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        switch stdout {
        case .file(let path):
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        case .pipe(let pipe):
            process.standardOutput = pipe
        }
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        process.terminationHandler = { _ in continuation.finish() }
        exited = Task { for await _ in stream {} }
        try await ProcessLaunch.run(process)
        try? (process.standardError as? FileHandle)?.close()
        if case .file = stdout { try? (process.standardOutput as? FileHandle)?.close() }
        if case .pipe(let pipe) = stdout { try? pipe.fileHandleForWriting.close() }
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }

    /// Waits for the exit: the status (128 + signal when killed), whether a signal ended it,
    /// and what it wrote to stderr.
    func finish() async -> (Int32, Bool, String) {
        await exited.value
        let signaled = process.terminationReason == .uncaughtSignal
        let stderr = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
        return (signaled ? 128 + process.terminationStatus : process.terminationStatus, signaled, stderr)
    }

    func kill() {
        if process.isRunning { process.terminate() }
    }
}
