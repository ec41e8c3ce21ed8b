// The testing product's crash harness and power-loss helpers, as a user's tests would use
// them: a crash in a child process (never the test runner), what it acknowledged, and the
// files it left reopened and checked.
import Foundation
import SparseCacheTesting
import Testing

@testable import SparseCacheEngine
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The harness's child: Tests/crash-worker, built beside the test bundle.
func crashWorker() throws -> String {
    try #require(CrashHarness.builtProduct("SparseCacheCrashWorker"), "build with `swift build --build-tests` first")
}

/// Opens `path` read-only and returns the present segments with whether each holds the bytes
/// the worker's `fill` wrote there.
func filledSegments(_ path: String) async throws -> [Int: Bool] {
    let file = try await SparseFile.open(path, mode: .readOnly)
    var result: [Int: Bool] = [:]
    for run in await file.presentSegments() {
        for segment in run {
            let bytes = try await file.read(offset: Int64(segment * 4096), length: 4096)
            result[segment] = bytes == [UInt8](repeating: UInt8(segment + 1), count: 4096)
        }
    }
    try await file.close()
    return result
}

@Suite("crash harness: a crash in a child process, checked by the test")
struct CrashHarnessTests {
    @Test("a crash after the 6th sync ends the child, not the runner; every acknowledged commit survives", arguments: [2, 6, 11])
    func crashAfterSync(syncs: Int) async throws {
        let directory = try TemporaryDirectory("harness-sync")
        defer { directory.remove() }
        let path = directory.file("r.bin")
        let outcome = try await CrashHarness.run(
            closure: "fill", in: try crashWorker(), arguments: [path, "8"], faults: [.crash(afterSync: syncs, path: directory.path)])
        #expect(outcome.crashed, "\(outcome)")
        #expect(outcome.status == FaultInjection.crashStatus)
        #expect(outcome.acknowledged.count < 8, "the crash came before the end: \(outcome)")
        let present = try await filledSegments(path)
        for acknowledged in outcome.acknowledged {
            let segment = try #require(Int(acknowledged))
            #expect(present[segment] == true, "acknowledged segment \(segment) lost or wrong after the crash: \(present)")
        }
        #expect(present.values.allSatisfy { $0 }, "a present segment holds wrong bytes: \(present)")
    }

    @Test("a torn index write with a crash: the committed state before it is what reopens")
    func tornIndexWriteCrash() async throws {
        let directory = try TemporaryDirectory("harness-torn")
        defer { directory.remove() }
        let path = directory.file("r.bin")
        let outcome = try await CrashHarness.run(
            closure: "fill", in: try crashWorker(), arguments: [path, "8"],
            faults: [.tornWrite(path: directory.path + "/r.bin.scidx", atWrite: 6, keeping: 7, then: .crash)])
        #expect(outcome.crashed, "\(outcome)")
        #expect(!outcome.acknowledged.isEmpty && outcome.acknowledged.count < 8, "\(outcome)")
        let present = try await filledSegments(path)
        for acknowledged in outcome.acknowledged.compactMap(Int.init) {
            #expect(present[acknowledged] == true, "acknowledged segment \(acknowledged) lost: \(present)")
        }
    }

    @Test("without faults the closure runs to its end; a throwing or unknown closure is reported")
    func outcomes() async throws {
        let directory = try TemporaryDirectory("harness-clean")
        defer { directory.remove() }
        let clean = try await CrashHarness.run(closure: "fill", in: try crashWorker(), arguments: [directory.file("r.bin"), "3"])
        #expect(clean.status == 0 && !clean.crashed, "\(clean)")
        #expect(clean.acknowledged == ["0", "1", "2"])
        let failing = try await CrashHarness.run(closure: "fail", in: try crashWorker())
        #expect(failing.status == 70 && failing.errorOutput.contains("asked to fail"), "\(failing)")
        let unknown = try await CrashHarness.run(closure: "nope", in: try crashWorker())
        #expect(unknown.status == 64 && unknown.errorOutput.contains("no closure registered as 'nope'"), "\(unknown)")
    }

    @Test("an executable of one's own: acknowledgements by prefix, a signal counts as a crash")
    func ownExecutable() async throws {
        let outcome = try await CrashHarness.run(
            executable: "/bin/sh", arguments: ["-c", "echo 'ack 1'; echo other; echo 'ack 2'; kill -9 $$"], acknowledgementPrefix: "ack ")
        #expect(outcome.acknowledged == ["1", "2"])
        #expect(outcome.signal == SIGKILL && outcome.crashed, "\(outcome)")
    }
}

// Inside the serialized power-loss suite: the shim's power-loss recorder is one per process.
extension CrashPowerLossTests {
    @Suite("testing product: power-loss snapshots and cuts", .serialized)
    struct PowerCutTests {
        @Test("snapshot(into:) creates its directory and the missing ones above it")
        func snapshotCreatesDirectory() async throws {
            let base = try TemporaryDirectory("pl-mkdir")
            defer { base.remove() }
            let live = try base.directory("live")
            try PowerLoss.begin(directory: live)
            defer { PowerLoss.end() }
            let fd = open(live + "/f", O_CREAT | O_WRONLY, 0o644)
            close(fd)
            let target = base.file("snaps/a/b")
            try PowerLoss.snapshot(into: target, seed: 1, processCrash: true)
            var isDirectory: ObjCBool = false
            #expect(FileManager.default.fileExists(atPath: target, isDirectory: &isDirectory) && isDirectory.boolValue)
        }

        @Test("a power cut after the 4th sync: each snapshot keeps every commit acknowledged before it")
        func powerCutAfterSync() async throws {
            let base = try TemporaryDirectory("pl-cut")
            defer { base.remove() }
            let live = try base.directory("live")
            var options = SparseFileOptions()
            options.segmentSize = 4096
            options.length = 8 * 4096
            options.commitPolicy = .manual
            let file = try await SparseFile.open(live + "/r.bin", options: options)
            let cut = try PowerLoss.cut(afterSync: 4, directory: live, into: base.file("snaps"), seed: 7)
            var acknowledgedBeforeCut: [Int] = []
            for segment in 0..<8 {
                _ = try await file.write([UInt8](repeating: UInt8(segment + 1), count: 4096), at: Int64(segment * 4096))
                try await file.commit()
                if !cut.happened { acknowledgedBeforeCut.append(segment) }
            }
            try await file.close()
            cut.end()
            #expect(cut.happened)
            #expect(!acknowledgedBeforeCut.isEmpty && acknowledgedBeforeCut.count < 8, "\(acknowledgedBeforeCut)")
            #expect(cut.powerCutDirectories.count == 3)
            for directory in cut.powerCutDirectories + [cut.processCrashDirectory] {
                let present = try await filledSegments(directory + "/r.bin")
                for segment in acknowledgedBeforeCut {
                    #expect(present[segment] == true, "\(directory): acknowledged segment \(segment) lost: \(present)")
                }
                #expect(present.values.allSatisfy { $0 }, "\(directory): wrong bytes served: \(present)")
            }
        }
    }
}
