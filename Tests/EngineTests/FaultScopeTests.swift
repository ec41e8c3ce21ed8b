// Fault rules scoped to a test (SparseCacheTesting.FaultScope): two tests that run in parallel
// each add a rule for every file, and each sees only its own.
import Foundation
import SparseCacheTesting
import Synchronization
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Lets two parallel tests wait until both have their rules set, so each one's I/O runs while
/// the other's rules are in the table. Run alone (a filter, or no parallelism), a test waits
/// for the other at most `patience` and then goes on: it still checks its own rule.
actor Rendezvous {
    static let scopedPair = Rendezvous()
    private var arrived: Set<String> = []
    private var left: Set<String> = []

    func meet(_ name: String, expecting count: Int, patience: Duration = .seconds(60)) async {
        arrived.insert(name)
        _ = try? await eventually(timeout: patience, interval: .milliseconds(5)) { arrived.count >= count }
    }

    /// Waits until the other test is done with its I/O (so its rules stay set meanwhile).
    func leave(_ name: String, expecting count: Int, patience: Duration = .seconds(60)) async {
        left.insert(name)
        _ = try? await eventually(timeout: patience, interval: .milliseconds(5)) { left.count >= count || arrived.count <= 1 }
    }
}

/// Writes one segment and commits it in a new resource under `directory`: the engine's writes
/// and syncs run on its blocking-work queues, where the task's scope must reach.
private func writeAndCommit(_ directory: String) async throws {
    var options = SparseFileOptions()
    options.segmentSize = 4096
    options.length = 8192
    options.commitPolicy = .manual
    let file = try await SparseFile.open(directory + "/r.bin", options: options)
    do {
        _ = try await file.write([UInt8](repeating: 1, count: 4096), at: 0)
        try await file.commit()
    } catch {
        try? await file.close()
        throw error
    }
    try await file.close()
}

@Suite("fault scopes: rules limited to a task or a directory")
struct FaultScopeTests {
    @Test("parallel test A: its scope fails every pwrite with EIO; B's fdatasync rule never reaches it")
    func scopedPwriteRule() async throws {
        let directory = try TemporaryDirectory("scope-a")
        defer { directory.remove() }
        try await withFaultScope { faults in
            // No path filter: without the scope this rule would fail every pwrite in the process.
            let rule = try faults.add(FaultRule(parsing: "pwrite:every:errno=EIO"))
            await Rendezvous.scopedPair.meet("A", expecting: 2)
            let error = await expectError(.io) { try await writeAndCommit(directory.path) }
            #expect(error?.errno == EIO, "A's own rule: \(String(describing: error))")
            #expect(FaultInjection.fired(rule) >= 1)
            await Rendezvous.scopedPair.leave("A", expecting: 2)
        }
    }

    @Test("parallel test B: its scope fails every fdatasync with ENOSPC; A's pwrite rule never reaches it")
    func scopedSyncRule() async throws {
        let directory = try TemporaryDirectory("scope-b")
        defer { directory.remove() }
        try await withFaultScope { faults in
            let rule = try faults.add(FaultRule.fail([.fdatasync], errno: ENOSPC))
            await Rendezvous.scopedPair.meet("B", expecting: 2)
            do {
                try await writeAndCommit(directory.path)
                Issue.record("B's commit succeeded under its own fdatasync rule")
            } catch let error as SparseCacheError {
                #expect(error.errno == ENOSPC, "B's writes must pass and its sync fail with ENOSPC: \(error)")
            }
            #expect(FaultInjection.fired(rule) >= 1)
            await Rendezvous.scopedPair.leave("B", expecting: 2)
        }
    }

    @Test("a scope's rules reach the tasks it starts, not tasks outside it; they are removed when it ends")
    func scopeInheritance() async throws {
        let inside = try TemporaryDirectory("scope-inside")
        let outside = try TemporaryDirectory("scope-outside")
        defer {
            inside.remove()
            outside.remove()
        }
        let gate = Lock<FaultInjection.RuleID?>(nil)
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let (done, doneContinuation) = AsyncStream<Void>.makeStream()
        // A task started before the scope, doing its I/O while the scope's rule is set.
        let bystander = Task {
            for await _ in ready { break }
            defer { doneContinuation.finish() }
            try await writeAndCommit(outside.path)
        }
        await withFaultScope { faults in
            gate.withLock { $0 = try? faults.add(.fail([.pwrite], errno: EIO)) }
            readyContinuation.finish()
            for await _ in done {}
            let child = Task { try await writeAndCommit(inside.path) }
            let error = await expectError(.io) { try await child.value }
            #expect(error?.errno == EIO, "an unstructured task started in the scope is in it")
        }
        try await bystander.value
        let rule = try #require(gate.withLock { $0 })
        #expect(FaultInjection.fired(rule) >= 1)
        // Removed with the scope: the same I/O in the same task now passes.
        let after = try TemporaryDirectory("scope-after")
        defer { after.remove() }
        try await writeAndCommit(after.path)
    }

    @Test("a directory scope limits rules to files under it, whoever makes the call")
    func directoryScope() async throws {
        let mine = try TemporaryDirectory("scope-dir")
        let other = try TemporaryDirectory("scope-dir-other")
        defer {
            mine.remove()
            other.remove()
        }
        let scope = FaultScope(directory: mine.path, limitedToTask: false)
        defer { scope.removeAll() }
        let rule = try scope.add(.syncError(EIO))
        try await writeAndCommit(other.path)
        #expect(FaultInjection.fired(rule) == 0)
        let error = await expectError(.io) { try await writeAndCommit(mine.path) }
        #expect(error?.errno == EIO)
        #expect(FaultInjection.fired(rule) == 1)
        #expect(throws: SparseCacheError.self) { try scope.add(FaultRule([.pwrite], pathPrefix: other.path + "/", error: EIO)) }
    }
}
