// Shared by the crash, fault and fuzz suites: a model of what a workload wrote and what it
// was told was durable, and the invariant checks run on a resource after every crash.
import CShim
import Foundation
import SeededRandom
import Testing

@_spi(Locking) import SparseCacheEngine

/// The bytes each segment holds at each version: a discarded segment is rewritten with the
/// next version, so stale bytes can be told from new ones.
package struct ContentModel: Sendable {
    package let segmentSize: Int
    package let length: Int64
    package let salt: UInt64

    package init(segmentSize: Int, length: Int64, salt: UInt64) {
        self.segmentSize = segmentSize
        self.length = length
        self.salt = salt
    }

    package var segments: Int { Int((length + Int64(segmentSize) - 1) / Int64(segmentSize)) }

    /// Version 0 of every segment.
    package var firstVersions: [Int] { [Int](repeating: 0, count: segments) }

    /// A new resource `r.bin` in `directory` of the model's length (``SparseFileOptions/testing(segmentSize:length:create:)``)
    /// whose first `committed` bytes are written (version 0) and committed.
    package func newFile(in directory: TemporaryDirectory, committing committed: Int64) async throws -> (path: String, file: SparseFile) {
        let path = directory.file("r.bin")
        return (path, try await newFile(path, committing: committed))
    }

    /// ``newFile(in:committing:)`` at `path`.
    package func newFile(_ path: String, committing committed: Int64) async throws -> SparseFile {
        let file = try await SparseFile.open(path, options: .testing(length: length))
        try await file.write(bytes(0..<committed, versions: firstVersions), at: 0)
        try await file.commit()
        return file
    }

    package func range(_ segment: Int) -> Range<Int64> {
        let start = Int64(segment * segmentSize)
        return start..<min(start + Int64(segmentSize), length)
    }

    package func bytes(_ segment: Int, version: Int) -> [UInt8] {
        sourceBytes(range(segment), salt: salt &+ UInt64(version) &* 0x1000_0000_01)
    }

    /// Bytes `range` as the current versions would write them.
    package func bytes(_ range: Range<Int64>, versions: [Int]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Int(range.count))
        var offset = range.lowerBound
        while offset < range.upperBound {
            let segment = Int(offset / Int64(segmentSize))
            let end = min(range.upperBound, self.range(segment).upperBound)
            let all = bytes(segment, version: versions[segment])
            let from = Int(offset - self.range(segment).lowerBound)
            out.append(contentsOf: all[from..<(from + Int(end - offset))])
            offset = end
        }
        return out
    }
}

/// What a workload was told: each acknowledgement (a commit or discard that returned) with the
/// operation count at that moment, and each discard with the count when it started.
package struct DurabilityLedger: Sendable {
    package struct Ack: Sendable {
        package var operation: Int
        /// Segment -> version, for every segment present when the commit returned.
        package var present: [Int: Int]
        package var metadata: ResourceMetadata?

        package init(operation: Int, present: [Int: Int], metadata: ResourceMetadata?) {
            self.operation = operation
            self.present = present
            self.metadata = metadata
        }
    }

    package var createdAt: Int?
    package var acks: [Ack] = []
    package var drops: [(operation: Int, segments: [Int])] = []
    /// Every setMetadata call, with the operation count at the call.
    package var metadataSets: [(operation: Int, metadata: ResourceMetadata)] = []
    /// Every version written to each segment.
    package var written: [Int: Set<Int>] = [:]

    package init() {}

    /// The segments (with versions) a crash before operation `k` must keep.
    package func required(before k: Int) -> [Int: Int] {
        guard let ack = acks.last(where: { $0.operation <= k }) else { return [:] }
        var required = ack.present
        for drop in drops where drop.operation >= ack.operation && drop.operation < k {
            for segment in drop.segments { required[segment] = nil }
        }
        return required
    }

    /// The metadata a crash before operation `k` may show: the acknowledged one, or one set
    /// after it whose commit was in flight.
    package func metadata(before k: Int) -> [ResourceMetadata]? {
        guard let ack = acks.last(where: { $0.operation <= k }), let acked = ack.metadata else { return nil }
        return [acked] + metadataSets.filter { $0.operation >= ack.operation && $0.operation <= k }.map(\.metadata)
    }
}

/// Violations found in one recovered resource.
package struct CrashCheck {
    package var violations: [String] = []

    package mutating func fail(_ text: String) { violations.append(text) }
}

package enum CrashInvariants {
    /// Opens the resource at `path` the way an app would after a crash (writable, creating it
    /// when the crash came before its index existed), and checks: opening works; every required
    /// segment is present with its acknowledged bytes; every present segment holds exactly a
    /// version that was written there; `verify` is clean. Returns the violations.
    package static func check(
        path: String, model: ContentModel, ledger: DurabilityLedger, before k: Int,
        options: SparseFileOptions, verify: Bool = true, resume: Bool = false
    ) async -> [String] {
        var check = CrashCheck()
        let required = ledger.required(before: k)
        let indexExists = FileManager.default.fileExists(atPath: SparseFile.indexPath(for: path))
        // Creation alone makes no name durable (DURABILITY.md rule 6): the first commit does
        // (an fsync of the directory before its journal record, or, with nothing to record,
        // before it returns).
        if ledger.createdAt != nil, let committed = ledger.acks.first?.operation, committed <= k, !indexExists {
            check.fail("index missing although a commit returned at op \(committed)")
            return check.violations
        }
        let file: SparseFile
        do {
            file = try await SparseFile.open(path, mode: .readWrite, options: options)
        } catch {
            check.fail("open failed: \(error)")
            return check.violations
        }
        let present = Set(await file.presentSegments().flatMap { Array($0) })
        for (segment, _) in required where !present.contains(segment) {
            check.fail("acknowledged segment \(segment) is missing")
        }
        if let allowed = ledger.metadata(before: k), !allowed.contains(await file.metadata) {
            check.fail("acknowledged metadata lost: \(await file.metadata)")
        }
        let data = (try? RawFile.read(path)) ?? []
        for segment in present.sorted() {
            let range = model.range(segment)
            guard range.upperBound <= data.count else {
                check.fail("present segment \(segment) lies past the data file end (\(data.count))")
                continue
            }
            let actual = Array(data[Int(range.lowerBound)..<Int(range.upperBound)])
            let versions = ledger.written[segment] ?? []
            let matching = versions.first { model.bytes(segment, version: $0) == actual }
            if let want = required[segment] {
                if matching != want { check.fail("segment \(segment) does not hold its acknowledged version \(want) (holds \(matching.map(String.init) ?? "unknown bytes"))") }
            } else if matching == nil {
                check.fail("segment \(segment) is claimed but holds bytes never written there")
            }
        }
        if resume, check.violations.isEmpty {
            // The resource keeps working: fill what is missing, commit, read it all back.
            do {
                let versions = (0..<model.segments).map { segment in required[segment] ?? (ledger.written[segment]?.max() ?? 0) }
                if await file.length == nil { try await file.setLength(model.length) }
                let missing = await file.missingRanges(in: 0..<model.length)
                for range in missing {
                    try await file.write(model.bytes(range, versions: versions), at: range.lowerBound)
                }
                try await file.commit()
                _ = try await file.read(offset: 0, length: Int(model.length))
            } catch {
                check.fail("resume after recovery failed: \(error)")
            }
        }
        do { try await file.close() } catch { check.fail("close failed: \(error)") }
        if verify {
            do {
                let report = try await Verifier.verify(path: path)
                if !report.isClean { check.fail("verify not clean: \(report.damaged.map(\.reason)) \(report.indexDamage)") }
            } catch {
                check.fail("verify failed: \(error)")
            }
        }
        return check.violations
    }
}

/// Prints a suite's counts in one greppable line.
package func reportCounts(_ suite: String, _ counts: KeyValuePairs<String, Int>) {
    let text = counts.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    print("[crash-counts] \(suite): \(text)")
}

/// A directory name unique to one test: fault rules match on it, so they never touch the
/// files of suites running beside it.
package func faultScopedDirectory(_ label: String) throws -> TemporaryDirectory {
    try TemporaryDirectory("fault-\(label)-\(UInt32.random(in: 0 ... .max))")
}
