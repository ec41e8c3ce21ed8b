// The IndexFile suite's fixtures: a starting state, changes, recovery in one call.
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

extension IndexFileTests {
    /// Opens the index read-only, returns its state and report, and closes it.
    func recover(_ path: String) throws -> (IndexState, IndexFile.RecoveryReport) {
        let (index, state, report) = try IndexFile.open(path: path, access: .readOnly)
        index.close()
        return (state, report)
    }

    /// A small starting state: 64 segments of 4 KiB, a few present, some metadata.
    func initialState() -> IndexState {
        var state = IndexState(segmentShift: 12, length: 64 * 4096 - 100, metadata: ResourceMetadata(key: "initial"))
        for segment in [0, 1, 2, 40] {
            state.present.insert(segment)
            state.checksums[segment] = UInt32(segment) &* 0x0101_0101 &+ 7
        }
        return state
    }

    /// The initial state with metadata that fills its checkpoint's sector almost to the end: a
    /// debug build checks the zero padding byte by byte, and the 32,768 reopens of the bit-flip test
    /// would spend most of their time there.
    func sectorFillingState() -> IndexState {
        var state = initialState()
        state.metadata.key = String(repeating: "k", count: 3950)
        #expect(Checkpoint.encode(state, generation: 0).count == 4096)
        return state
    }

    /// A change adding `segments` with checksums derived from `tag`.
    func adding(_ segments: [Int], tag: UInt32 = 1) -> IndexChange {
        var change = IndexChange()
        change.added = segments.sorted().map { (segment: $0, checksum: UInt32($0) &* 31 &+ tag) }
        return change
    }
}

extension IndexFile {
    /// An append for tests whose journals stay small: the state before the change is needed only
    /// when the record would run into the other copy's checkpoint, which these tests never reach.
    func append(_ change: IndexChange) throws {
        precondition(fallbackStart.map { journalEnd + (1 << 20) < $0 } ?? true, "this test's journal nears the other copy")
        try append(change, committed: IndexState(segmentShift: superblock.segmentShift, length: nil))
    }
}
