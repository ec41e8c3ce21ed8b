// The I/O error sweep (SQLite's way): run a workload once to count its I/O calls, then again
// failing the N-th call, for every N, once and persistently, with EIO and with ENOSPC; EINTR
// at every N must be invisible. After each failure the rule is removed and the resource is
// reopened: everything acknowledged must be there with its bytes, verify must be clean, and
// writing must work again. A second sweep fails each call of recovery itself.
import CShim
import Foundation
import Testing

@_spi(Locking) @testable import SparseCacheEngine

#if canImport(Glibc)
import Glibc
import SparseCacheTesting
import TestSupport
#endif

@Suite("Fault sweep: fail every I/O call", .tags(.slow), .unlessSkippingSlow)
struct FaultSweepTests {
    static let model = ContentModel(segmentSize: 4096, length: 8 * 4096 - 100, salt: 21)

    /// The workload: returns the acknowledged segments (segment -> version) so far through
    /// `acked`, and throws the first error.
    static func workload(_ path: String, acked: inout [Int: Int], versions: inout [Int]) async throws {
        let model = Self.model
        var file = try await SparseFile.open(path, options: .testing(length: model.length))
        func ack() async {
            acked = [:]
            for run in await file.presentSegments() { for segment in run { acked[segment] = versions[segment] } }
        }
        do {
            try await file.write(model.bytes(100..<9000, versions: versions), at: 100)
            try await file.write(model.bytes(0..<100, versions: versions), at: 0)
            try await file.commit()
            await ack()
            try await file.write(model.bytes(9000..<20000, versions: versions), at: 9000)
            try await file.setMetadata(ResourceMetadata(key: "sweep"))
            try await file.commit()
            await ack()
            // From the moment a discard starts, the segment may be gone.
            acked[1] = nil
            try await file.discard(segments: [1])
            versions[1] += 1
            await ack()
            try await file.forceCheckpoint()
            try await file.write(model.bytes(4096..<8192, versions: versions), at: 4096)
            try await file.commit()
            await ack()
            try await file.close()
            await ack()
            file = try await SparseFile.open(path, options: .testing())
            try await file.write(model.bytes(20000..<model.length, versions: versions), at: 20000)
            _ = try await file.read(offset: 0, length: 8192)
            try await file.close()
            await ack()
        } catch {
            try? await file.close()
            throw error
        }
    }

    enum Mode: String, CaseIterable { case once, persistent }

    @Test("fail the N-th call for every N, once and persistently, EIO and ENOSPC; EINTR is invisible")
    func sweep() async throws {
        try await offPool("fault-sweep") { try await self.sweepOnItsThread() }
    }

    /// The body of ``sweep()``, on a thread of its own (OffPool.swift).
    private func sweepOnItsThread() async throws {
        let all = Set(FaultOperation.allCases)
        // Count the workload's calls.
        let calls: Int = try await {
            let directory = try faultScopedDirectory("sweep-count")
            defer { directory.remove() }
            let counter = try FaultInjection.add(FaultRule(all, pathContains: directory.path, trigger: .nth(Int.max)))
            defer { FaultInjection.remove(counter) }
            var acked: [Int: Int] = [:]
            var versions = [Int](repeating: 0, count: Self.model.segments)
            try await Self.workload(directory.file("r.bin"), acked: &acked, versions: &versions)
            return FaultInjection.matches(counter)
        }()
        #expect(calls > 20)
        var runs = 0
        var failures = 0
        var violations = 0
        for errno in [EIO, ENOSPC, EINTR] {
            for mode in errno == EINTR ? [Mode.once] : Mode.allCases {
                for n in 1...calls {
                    let directory = try faultScopedDirectory("sweep")
                    defer { directory.remove() }
                    let path = directory.file("r.bin")
                    let trigger: FaultRule.Trigger = mode == .once ? .nth(n) : .after(n - 1)
                    let rule = try FaultInjection.add(.fail(all, errno: errno, trigger: trigger, pathContains: directory.path))
                    var acked: [Int: Int] = [:]
                    var versions = [Int](repeating: 0, count: Self.model.segments)
                    var failure: Error?
                    do {
                        try await Self.workload(path, acked: &acked, versions: &versions)
                    } catch {
                        failure = error
                    }
                    FaultInjection.remove(rule)
                    runs += 1
                    let label = "\(SparseCacheError.errnoText(errno)) \(mode) at call \(n) of \(calls)"
                    if errno == EINTR {
                        if let failure {
                            violations += 1
                            Issue.record("\(label): EINTR was not transparent: \(failure)")
                        }
                        continue
                    }
                    if let failure {
                        failures += 1
                        guard let error = failure as? SparseCacheError, error.code == .io || error.code == .needsReopen,
                            error.code == .needsReopen || error.errno == errno
                        else {
                            violations += 1
                            Issue.record("\(label): unclear error \(failure)")
                            continue
                        }
                    }
                    var ledger = DurabilityLedger()
                    ledger.acks = [.init(operation: 0, present: acked, metadata: nil)]
                    for segment in 0..<Self.model.segments { ledger.written[segment] = Set(0...versions[segment]) }
                    let found = await CrashInvariants.check(
                        path: path, model: Self.model, ledger: ledger, before: 0, options: .testing(length: Self.model.length),
                        verify: true, resume: true)
                    if !found.isEmpty {
                        violations += found.count
                        Issue.record("\(label): \(found)")
                    }
                }
            }
        }
        reportCounts("I/O error sweep", ["calls per workload": calls, "runs": runs, "injected failures surfaced": failures, "violations": violations])
        #expect(violations == 0)
    }

    @Test("fail each I/O call of recovery: a clear error or a good open, never damage")
    func recoveryErrors() async throws {
        try await offPool("recovery-faults") { try await self.recoveryErrorsOnItsThread() }
    }

    /// The body of ``recoveryErrors()``, on a thread of its own (OffPool.swift).
    private func recoveryErrorsOnItsThread() async throws {
        let directory = try faultScopedDirectory("sweep-recovery")
        defer { directory.remove() }
        let path = directory.file("r.bin")
        var acked: [Int: Int] = [:]
        var versions = [Int](repeating: 0, count: Self.model.segments)
        try await Self.workload(path, acked: &acked, versions: &versions)
        // A torn last record, as a crash leaves it.
        let indexSize = try RawFile.size(SparseFile.indexPath(for: path))
        try RawFile.write(SparseFile.indexPath(for: path), offset: indexSize, Array("SPJR".utf8) + [UInt8](repeating: 0xAB, count: 100))
        let before = try RawFile.read(SparseFile.indexPath(for: path))
        let counter = try FaultInjection.add(FaultRule(Set(FaultOperation.allCases), pathContains: directory.path, trigger: .nth(Int.max)))
        let file = try await SparseFile.open(path, options: .testing())
        _ = try await file.read(offset: 0, length: 8192)
        try await file.close()
        _ = try await Verifier.verify(path: path)
        let calls = FaultInjection.matches(counter)
        FaultInjection.remove(counter)
        var violations = 0
        for errno in [EIO, ENOSPC] {
            for n in 1...calls {
                let rule = try FaultInjection.add(.fail(Set(FaultOperation.allCases), errno: errno, trigger: .nth(n), pathContains: directory.path))
                do {
                    let file = try await SparseFile.open(path, options: .testing())
                    _ = try? await file.read(offset: 0, length: 8192)
                    try? await file.close()
                    _ = try? await Verifier.verify(path: path)
                } catch let error as SparseCacheError where error.code == .io && error.errno == errno {
                    // A clear error naming the call.
                } catch {
                    violations += 1
                    Issue.record("recovery with call \(n) failing: unclear error \(error)")
                }
                FaultInjection.remove(rule)
                let reopened = try await SparseFile.open(path, mode: .readOnly)
                let present = Set(await reopened.presentSegments().flatMap { Array($0) })
                try await reopened.close()
                if present != Set(acked.keys) {
                    violations += 1
                    Issue.record("after failing call \(n) of recovery the state changed: \(present.sorted())")
                }
            }
        }
        #expect(try RawFile.read(SparseFile.indexPath(for: path)) == before, "a read-only recovery never writes")
        reportCounts("recovery error sweep", ["calls": calls, "runs": calls * 2, "violations": violations])
        #expect(violations == 0)
    }
}
