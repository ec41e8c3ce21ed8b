// Many tasks on one SparseFile at once: overlapping unaligned writes and reads with racing
// commits checked against a model, close racing in-flight work, and a check that reads and
// syncs never hold the cooperative pool.
import Foundation
import SeededRandom
import SparseCacheTesting
import Synchronization
import Testing

@_spi(Locking) @testable import SparseCacheEngine
import TestSupport

/// Values shared by the tasks of one test.
private final class Shared: Sendable {
    let completed = Lock<[Range<Int64>]>([])
    let problems = Lock<[String]>([])
    let successes = Atomic<Int>(0)
    let closedErrors = Atomic<Int>(0)

    func problem(_ text: String) { problems.withLock { $0.append(text) } }
    func addCompleted(_ ranges: [Range<Int64>]) { completed.withLock { $0 += ranges } }
}

/// Counters for the large-reads test.
private final class ReadCounters: Sendable {
    let outstanding = Atomic<Int>(0)
    let wrong = Atomic<Int>(0)
}

/// Whether `ranges` (in any order) cover every byte of `range`.
private func covers(_ ranges: [Range<Int64>], _ range: Range<Int64>) -> Bool {
    ByteRanges(ranges).contains(range)
}

@Suite("Concurrency")
struct ConcurrencyTests {
    @Test("32 tasks write and read overlapping unaligned ranges while commits race; the model holds")
    func stress() async throws {
        let seed = testSeed(0x57E5_5000)
        let segmentSize = 4096
        let length = Int64(48 * segmentSize + 777)
        let shared = Shared()
        try await withTemporaryDirectory("stress") { directory in
            let path = directory.file("s.bin")
            let file = try await SparseFile.open(path, options: .testing(segmentSize: segmentSize, length: length))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<32 {
                    group.addTask {
                        var generator = SplitMix64(seed: seed &+ UInt64(task))
                        for step in 0..<40 {
                            let context = "seed \(seed), task \(task), step \(step)"
                            let start = Int64.random(in: 0..<length, using: &generator)
                            let count = Int64.random(in: 1...Int64(3 * segmentSize), using: &generator)
                            let range = start..<min(length, start + count)
                            switch Int.random(in: 0..<100, using: &generator) {
                            case 0..<50:
                                let result = try await file.write(sourceBytes(range, salt: seed), at: range.lowerBound)
                                for done in result.completed {
                                    // A completed range is whole segments (the last one may be short).
                                    let aligned = done.lowerBound % Int64(segmentSize) == 0
                                        && (done.upperBound % Int64(segmentSize) == 0 || done.upperBound == length)
                                    if !aligned { shared.problem("\(context): completed \(done) is not whole segments") }
                                }
                                shared.addCompleted(result.completed)
                            case 50..<75:
                                do {
                                    let bytes = try await file.read(offset: range.lowerBound, length: Int(range.count))
                                    if bytes != sourceBytes(range, salt: seed) { shared.problem("\(context): read \(range) returned wrong bytes") }
                                    shared.successes.add(1, ordering: .relaxed)
                                } catch let error as SparseCacheError where error.code == .notPresent {
                                    let inside = error.missing.allSatisfy { !$0.isEmpty && $0.lowerBound >= range.lowerBound && $0.upperBound <= range.upperBound }
                                    if error.missing.isEmpty || !inside { shared.problem("\(context): missing \(error.missing) for \(range)") }
                                }
                            case 75..<88:
                                let bytes = try await file.readAvailable(from: range.lowerBound, maxLength: Int(range.count))
                                let prefix = range.lowerBound..<(range.lowerBound + Int64(bytes.count))
                                if bytes.count > range.count || bytes != sourceBytes(prefix, salt: seed) {
                                    shared.problem("\(context): readAvailable \(range) returned \(bytes.count) wrong bytes")
                                }
                            default:
                                try await file.commit()
                            }
                        }
                    }
                }
                // A committer racing everything else.
                group.addTask {
                    for _ in 0..<30 {
                        try await file.commit()
                        await Task.yield()
                    }
                }
                try await group.waitForAll()
            }
            try await file.commit()

            let problems = shared.problems.withLock { $0 }
            #expect(problems.isEmpty, "seed \(seed): \(problems.count) problems, first: \(problems.prefix(5))")
            let completed = shared.completed.withLock { $0 }
            // Everything a write reported completed is present after the final commit...
            for range in completed {
                let missing = await file.missingRanges(in: range)
                #expect(missing.isEmpty, "seed \(seed): completed \(range) but missing \(missing)")
            }
            // ...and nothing else is: bytes of incomplete segments are never present.
            let present = await file.presentRanges()
            for range in present {
                #expect(covers(completed, range), "seed \(seed): \(range) is present but no write completed it")
                let bytes = try await file.read(offset: range.lowerBound, length: Int(range.count))
                expectBytes(bytes, equal: sourceBytes(range, salt: seed), "seed \(seed): content of \(range)")
            }
            #expect(!present.isEmpty, "seed \(seed): the stress wrote nothing complete")
            try await file.close()

            let reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing())
            #expect(await reopened.presentRanges() == present, "seed \(seed): the committed state survives reopen")
            for range in present {
                let bytes = try await reopened.read(offset: range.lowerBound, length: Int(range.count))
                expectBytes(bytes, equal: sourceBytes(range, salt: seed), "seed \(seed): content of \(range) after reopen")
            }
            try await reopened.close()
        }
    }

    @Test("concurrent commits all return, and each covers the writes that returned before it")
    func concurrentCommits() async throws {
        try await withTemporaryDirectory("commits") { directory in
            let segmentSize = 4096
            let file = try await SparseFile.open(directory.file("c.bin"), options: .testing(length: Int64(64 * segmentSize)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<64 {
                    group.addTask {
                        let range = Int64(index * segmentSize)..<Int64((index + 1) * segmentSize)
                        try await file.write(sourceBytes(range), at: range.lowerBound)
                        try await file.commit()
                        // This commit returned after this write: the segment must be present.
                        let missing = await file.missingRanges(in: range)
                        #expect(missing.isEmpty, "segment \(index) missing after its own commit")
                    }
                }
                try await group.waitForAll()
            }
            #expect(await file.isComplete)
            try await file.close()
        }
    }

    @Test("close waits for in-flight reads and writes; everything after it throws .closed")
    func closeRacesOperations() async throws {
        let seed = testSeed(0xC105_E000)
        let segmentSize = 64 * 1024
        let segments = 128
        let length = Int64(segments * segmentSize)
        let shared = Shared()
        try await withTemporaryDirectory("close") { directory in
            let path = directory.file("c.bin")
            let file = try await SparseFile.open(path, options: .testing(segmentSize: segmentSize, length: length))
            // The first half is present; writers fill in the second half.
            try await file.write(sourceBytes(0..<(length / 2), salt: seed), at: 0)
            try await file.commit()

            let workers = Task {
                await withTaskGroup(of: Void.self) { group in
                    for task in 0..<24 {
                        group.addTask {
                            var generator = SplitMix64(seed: seed &+ UInt64(task))
                            // Each worker runs until the resource tells it it is closed (a
                            // step count would end early on a fast machine, before close).
                            let deadline = ContinuousClock.now + Duration.seconds(120).asHangGuard
                            var step = 0
                            while ContinuousClock.now < deadline {
                                step += 1
                                let context = "seed \(seed), task \(task), step \(step)"
                                do {
                                    if task % 3 == 0 {
                                        let index = Int.random(in: (segments / 2)..<segments, using: &generator)
                                        let start = Int64(index * segmentSize)
                                        let range = start..<min(length, start + Int64(Int.random(in: 1...3, using: &generator) * segmentSize))
                                        let result = try await file.write(sourceBytes(range, salt: seed), at: range.lowerBound)
                                        shared.addCompleted(result.completed)
                                    } else {
                                        let start = Int64.random(in: 0..<(length / 2 - 1), using: &generator)
                                        let range = start..<min(length / 2, start + Int64.random(in: 1...(1 << 20), using: &generator))
                                        let bytes = try await file.read(offset: range.lowerBound, length: Int(range.count))
                                        // Spot checks keep a debug build fast; a short or shifted read fails them.
                                        let probes = [range.lowerBound, range.upperBound - 1, range.lowerBound + Int64(range.count / 2)]
                                        let good = bytes.count == range.count
                                            && probes.allSatisfy { bytes[Int($0 - range.lowerBound)] == sourceByte(at: $0, salt: seed) }
                                        if !good { shared.problem("\(context): read \(range) returned wrong bytes") }
                                    }
                                    shared.successes.add(1, ordering: .relaxed)
                                } catch let error as SparseCacheError where error.code == .closed {
                                    shared.closedErrors.add(1, ordering: .relaxed)
                                    return
                                } catch {
                                    shared.problem("\(context): \(error)")
                                    return
                                }
                            }
                            shared.problem("task \(task) never saw the resource close within \(Duration.seconds(120).asHangGuard)")
                        }
                    }
                }
            }
            // Close once work is well under way.
            while shared.successes.load(ordering: .relaxed) < 40, shared.problems.withLock({ $0.isEmpty }) {
                await Task.yield()
            }
            try await file.close()
            await workers.value

            let problems = shared.problems.withLock { $0 }
            #expect(problems.isEmpty, "seed \(seed): \(problems.count) problems, first: \(problems.prefix(5))")
            #expect(shared.closedErrors.load(ordering: .relaxed) == 24, "seed \(seed): every worker ends with .closed")
            await expectError(.closed) { try await file.read(offset: 0, length: 1) }
            await expectError(.closed) { try await file.write([1], at: length - 1) }
            await expectError(.closed) { try await file.commit() }
            try await file.close()

            // Writes that returned before close were committed by it.
            let completed = shared.completed.withLock { $0 }
            let reopened = try await SparseFile.open(path, mode: .readOnly, options: .testing(segmentSize: segmentSize))
            for range in completed {
                let missing = await reopened.missingRanges(in: range)
                #expect(missing.isEmpty, "seed \(seed): \(range) was completed before close but is missing after reopen")
            }
            for range in await reopened.presentRanges() {
                let bytes = try await reopened.read(offset: range.lowerBound, length: Int(range.count))
                expectBytes(bytes, equal: sourceBytes(range, salt: seed), "seed \(seed): content of \(range)")
            }
            try await reopened.close()
        }
    }

    @Test("close with nothing to commit still waits for large reads in flight")
    func closeWaitsForReads() async throws {
        let segmentSize = 1 << 20
        let length = Int64(16 << 20)
        let shared = Shared()
        let pattern = sourceBytes(0..<Int64(1 << 20), salt: 5)
        try await withTemporaryDirectory("close-reads") { directory in
            let path = directory.file("r.bin")
            let file = try await SparseFile.open(path, options: .testing(segmentSize: segmentSize, length: length))
            for start in stride(from: Int64(0), to: length, by: 1 << 20) { try await file.write(pattern, at: start) }
            try await file.commit()
            let readers = Task {
                await withTaskGroup(of: Void.self) { group in
                    for task in 0..<16 {
                        group.addTask {
                            for step in 0..<10_000 {
                                let start = Int64((task * 7 + step * 5) % 8) << 20
                                let count = 8 << 20
                                do {
                                    let bytes = try await file.read(offset: start + 3, length: count)
                                    let good = bytes.count == count
                                        && [0, count / 2, count - 1].allSatisfy { bytes[$0] == pattern[(3 + $0) % (1 << 20)] }
                                    if !good { shared.problem("task \(task), step \(step): wrong bytes") }
                                    shared.successes.add(1, ordering: .relaxed)
                                } catch let error as SparseCacheError where error.code == .closed {
                                    shared.closedErrors.add(1, ordering: .relaxed)
                                    return
                                } catch {
                                    // A read cut off by close shows up here (cancelled or short).
                                    shared.problem("task \(task), step \(step): \(error)")
                                    return
                                }
                            }
                        }
                    }
                }
            }
            while shared.successes.load(ordering: .relaxed) < 16, shared.problems.withLock({ $0.isEmpty }) {
                await Task.yield()
            }
            // Nothing is pending, so close goes straight to releasing the files.
            try await file.close()
            await readers.value
            let problems = shared.problems.withLock { $0 }
            #expect(problems.isEmpty, "\(problems.count) reads failed, first: \(problems.prefix(3))")
            #expect(shared.closedErrors.load(ordering: .relaxed) == 16)
        }
    }

    @Test("64 large reads through the DispatchIO channel and syncing commits in flight at once: every read gets its bytes")
    func largeReadsWithCommits() async throws {
        let segmentSize = 256 * 1024
        let length = Int64(32 << 20)
        let presentLength = Int64(24 << 20)
        // The content repeats every MiB, so setting it up stays cheap in a debug build.
        let pattern = sourceBytes(0..<Int64(1 << 20), salt: 77)
        try await withTemporaryDirectory("pool") { directory in
            // Every read goes through the DispatchIO channel, the path that can wait for the
            // device. (The page-cache path cannot wait by construction: RWF_NOWAIT; see
            // ReadPathTests. With it on, these reads finish as CPU work in a few milliseconds.)
            var options = SparseFileOptions.testing(segmentSize: segmentSize, length: length)
            options.readsFromPageCacheFirst = false
            let file = try await SparseFile.open(directory.file("p.bin"), options: options)
            for start in stride(from: Int64(0), to: presentLength, by: 1 << 20) {
                try await file.write(pattern, at: start)
            }
            try await file.commit()

            let counters = ReadCounters()
            try await withThrowingTaskGroup(of: Void.self) { group in
                var generator = SplitMix64(seed: 64)
                counters.outstanding.add(64, ordering: .relaxed)
                for _ in 0..<64 {
                    let start = Int64.random(in: 0..<(presentLength - Int64(3 << 20)), using: &generator)
                    let count = Int.random(in: (2 << 20)...(3 << 20), using: &generator)
                    group.addTask {
                        defer { counters.outstanding.subtract(1, ordering: .relaxed) }
                        let bytes = try await file.read(offset: start, length: count)
                        for probe in [0, count / 3, count - 1] where bytes[probe] != pattern[Int((start + Int64(probe)) % Int64(1 << 20))] {
                            counters.wrong.add(1, ordering: .relaxed)
                        }
                    }
                }
                // Writes with commits (fdatasync on the blocking queue) alongside the reads.
                group.addTask {
                    for start in stride(from: presentLength, to: length, by: 1 << 20) {
                        try await file.write(pattern, at: start)
                        try await file.commit()
                    }
                }
                try await group.waitForAll()
            }
            #expect(counters.wrong.load(ordering: .relaxed) == 0, "reads returned wrong bytes")
            #expect(counters.outstanding.load(ordering: .relaxed) == 0)
            // Whether the pool stays free is judged by `readsWaitOffThePool`: these reads are
            // page-cache fast, so a ticker would run between them even if they blocked it.
            #expect(await file.isComplete)
            try await file.close()
        }
    }

    @Test("reads that really wait (a 1 s delay fault on every read) leave the pool free: a ticker runs while all of them wait")
    func readsWaitOffThePool() async throws {
        // As many waiting reads as the pool has threads, and one more: were reads to wait on the
        // pool, every pool thread would be asleep while they all wait, and the ticker (a pool
        // task) could not run then at all. Each read is of its own resource, because one
        // resource's channel reads one at a time.
        let poolWidth = max(2, ProcessInfo.processInfo.activeProcessorCount)
        let readers = poolWidth + 1
        try await withTemporaryDirectory("pool-wait") { directory in
            var files: [SparseFile] = []
            for index in 0..<readers {
                let file = try await SparseFile.open(directory.file("r\(index).bin"), options: .testing(segmentSize: 65536, length: 65536))
                try await file.write(sourceBytes(0..<65536, salt: UInt64(index)), at: 0)
                try await file.commit()
                files.append(file)
            }
            // Reads try the page cache first (RWF_NOWAIT: under a delay rule it answers "not
            // cached" at once, never sleeping on the caller's thread), then the DispatchIO
            // channel, whose fault hook sleeps on the channel's queue.
            let rule = try FaultInjection.add(FaultRule([.pread], pathContains: directory.path + "/r", delay: .seconds(1)))
            defer { FaultInjection.remove(rule) }
            let ticksWhileAllWait = Atomic<Int>(0)
            let mostWaiting = Atomic<Int>(0)
            let ticker = Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(1))  // pacing: the sampling tick
                    let waiting = FaultInjection.delaying(rule)
                    if waiting > mostWaiting.load(ordering: .relaxed) { mostWaiting.store(waiting, ordering: .relaxed) }
                    if waiting >= poolWidth { ticksWhileAllWait.add(1, ordering: .relaxed) }
                }
            }
            // Rounds of reads until the ticker has run while they all wait: on a loaded machine
            // (other suites in parallel) other work may hold the pool through one window. Reads
            // that wait on the pool fail every round, however many.
            var rounds = 0
            while ticksWhileAllWait.load(ordering: .relaxed) == 0, rounds < 20 {
                rounds += 1
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    for (index, file) in files.enumerated() {
                        group.addTask { try await file.read(offset: 0, length: 65536) == sourceBytes(0..<65536, salt: UInt64(index)) }
                    }
                    for try await right in group { #expect(right, "a read returned wrong bytes") }
                }
            }
            ticker.cancel()
            await ticker.value
            #expect(FaultInjection.fired(rule) >= readers * rounds, "every read went through the delay")
            // Deterministic either way: with reads off the pool the ticker runs while all of them
            // sleep; with reads on it, no pool thread is free then, and it cannot run at all.
            let most = mostWaiting.load(ordering: .relaxed)
            #expect(
                ticksWhileAllWait.load(ordering: .relaxed) > 0,
                "no tick while \(poolWidth) or more reads waited (at most \(most) at once, \(rounds) rounds): reads hold the pool")
            for file in files { try await file.close() }
        }
    }
}
