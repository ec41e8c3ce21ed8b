import Foundation
import NoteLog
import SparseCache
import SparseCacheTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

func temporaryDirectory() throws -> String {
    let path = FileManager.default.temporaryDirectory.path + "/notelog-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// A note long enough that a write torn after 100 bytes leaves it different on disk.
func text(_ index: Int) -> String { String(repeating: "note \(index); ", count: 200) }

@Suite("NoteLog under injected faults")
struct NoteLogFaultTests {
    @Test("a torn write of the log's data reported as success: the note is not served, the others are")
    func tornDataWrite() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/notes.bin"
        try await withFaultScope { faults in
            // Files whose path contains "notes.bin" see pwrites in this order (docs/TESTING.md,
            // "The system calls of open, write, commit and close"): 4 to notes.bin.scidx.tmp at
            // open, then per note one to notes.bin and one journal record to notes.bin.scidx.
            // The 7th is note 1's data: only 100 bytes reach the file, and the device says all
            // went well.
            try faults.add(.tornWrite(path: "notes.bin", atWrite: 7, keeping: 100))
            let log = try await NoteLog.open(path)
            for index in 0..<3 { try await log.append(text(index), at: index) }
            try await log.close()
        }
        // Reopened: the engine checks every segment's CRC; note 1 does not match what was
        // committed, so it is never returned as a note.
        let log = try await NoteLog.open(path)
        let notes = try await log.notes()
        try await log.close()
        #expect(notes[0] == text(0) && notes[2] == text(2), "\(notes.keys.sorted())")
        #expect(notes[1] == nil, "a torn note was served: \(String(describing: notes[1]?.prefix(40)))")
    }

    @Test("EIO at a commit's fdatasync: the append fails, nothing after the last good sync is claimed")
    func syncError() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/notes.bin"
        try await withFaultScope { faults in
            try faults.add(.syncError(EIO, path: "notes.bin.scidx", atSync: 3))
            let log = try await NoteLog.open(path)
            try await log.append("note 0", at: 0)
            await #expect(throws: SparseCacheError.self) { try await log.append("note 1", at: 1) }
            try? await log.close()
        }
        let log = try await NoteLog.open(path)
        let notes = try await log.notes()
        try await log.close()
        #expect(notes[0] == "note 0")
    }

    @Test("a crash after the 6th sync, in a child: every acknowledged note is there after reopening")
    func crashAfterSync() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/notes.bin"
        let worker = try #require(CrashHarness.builtProduct("note-crash-worker"))
        let outcome = try await CrashHarness.run(
            closure: "append", in: worker, arguments: [path, "8"], faults: [.crash(afterSync: 6, path: "notes.bin")])
        #expect(outcome.crashed, "\(outcome)")
        #expect(outcome.acknowledged.count < 8)
        let log = try await NoteLog.open(path)
        let notes = try await log.notes()
        try await log.close()
        for index in outcome.acknowledged.compactMap(Int.init) {
            #expect(notes[index] == "note \(index)", "acknowledged note \(index) lost: \(notes)")
        }
    }
}
