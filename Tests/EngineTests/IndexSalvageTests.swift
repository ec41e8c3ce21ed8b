// An index whose two superblock copies are both unusable: what a repair salvages from the
// checkpoints and the journal, settled against the data file.
import Foundation
import Testing

@testable import SparseCacheEngine
import TestSupport

@Suite("index salvage: both superblock copies unusable")
struct IndexSalvageTests {
    @Test(
        "an unproven checkpoint is salvaged segment by segment against the data: matching segments kept, a damaged one dropped, the journal's unvalidatable records not claimed"
    )
    func checkpointSettledAgainstData() async throws {
        let directory = try TemporaryDirectory("salvage-checkpoint")
        let path = directory.file("r.bin")
        let segment = 16_384
        let source = (0..<(8 * segment)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
        var options = SparseFileOptions()
        options.length = Int64(source.count)
        options.segmentSize = segment
        options.commitPolicy = .manual
        let file = try await SparseFile.open(path, options: options)
        try await file.write(Array(source[0..<(6 * segment)]), at: 0)
        try await file.commit()
        // Segments 0-5 in a checkpoint; 6-7 only in a journal record after it.
        try await file.forceCheckpoint()
        try await file.write(Array(source[(6 * segment)...]), at: Int64(6 * segment))
        try await file.commit()
        try await file.close()

        // Both slots garbage (no salt survives), and segment 2's data damaged.
        try RawFile.write(path + ".scidx", offset: 0, [UInt8](repeating: 0xA5, count: 8192))
        try RawFile.flip(path, at: Int64(2 * segment + 100))
        let data = try FileDescriptor.open(path, access: .readOnly)
        let salvage = try #require(try IndexFile.salvage(path: path + ".scidx", evidence: .reading(data)))
        data.close()
        #expect(salvage.checkpointSegments == 6 && !salvage.checkpointProven && salvage.journalRecords == 0, "\(salvage.summary)")
        #expect(salvage.mismatched == 1, "\(salvage.summary)")
        #expect(salvage.state.present.setRuns == [0..<2, 3..<6], "\(salvage.summary)")

        let report = try await Verifier.verify(path: path, repair: true)
        #expect(report.repaired && report.indexDamage.first?.contains("the index was rebuilt") == true, "\(report)")
        let reopened = try await SparseFile.open(path, mode: .readOnly)
        #expect(await reopened.presentRanges() == [0..<Int64(2 * segment), Int64(3 * segment)..<Int64(6 * segment)])
        #expect(try await reopened.read(offset: Int64(3 * segment), length: 3 * segment) == Array(source[(3 * segment)..<(6 * segment)]))
        try await reopened.close()
        #expect(try await Verifier.verify(path: path).isClean)
    }

    @Test("one usable superblock copy: no salvage (recovery proper applies)")
    func oneSlotUsable() async throws {
        let directory = try TemporaryDirectory("salvage-one-slot")
        let path = directory.file("r.bin")
        var options = SparseFileOptions()
        options.length = 65_536
        let file = try await SparseFile.open(path, options: options)
        try await file.write([UInt8](repeating: 1, count: 65_536), at: 0)
        try await file.close()
        try RawFile.write(path + ".scidx", offset: 0, [UInt8](repeating: 0, count: 4096))
        let data = try FileDescriptor.open(path, access: .readOnly)
        defer { data.close() }
        #expect(try IndexFile.salvage(path: path + ".scidx", evidence: .reading(data)) == nil)
    }
}
