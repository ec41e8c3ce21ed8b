import SeededRandom
import SparseCache

#if canImport(Glibc)
import Glibc
#endif

/// `sparsecache-stress <file> --seed S [--segments N] [--segment-size B] [--salt X]`
///
/// Writes and commits a resource forever, the way a network fill does (unaligned chunks,
/// random order, occasional discards), and prints one line per durable event straight to
/// standard output with write(2), unbuffered:
///
///     open <records replayed> <present segments>
///     ack <commit number> <first>-<last> ...   segments made present by a commit that returned
///     drop-begin <first>-<last>                before a discard starts
///     drop-ack <first>-<last>                  after the discard's commit returned
///
/// The crash tests kill it with SIGKILL at random moments (or let SPARSECACHE_FAULTS end it
/// mid-write) and check that everything acknowledged survived. Byte `i` of the resource is
/// always `sourceByte(at: i, salt:)` (SeededRandom), so any surviving byte can be checked.
enum StressWriter {
    static func main(_ arguments: [String]) async -> Int32 {
        guard let path = arguments.first(where: { !$0.hasPrefix("--") }) else {
            emit(
                "usage: sparsecache-stress <file> --seed S [--segments N] [--segment-size B] [--salt X]\n"
                    + "       sparsecache-stress --small-objects <directory> --seed S [--keys N] [--salt X]", fd: 2)
            return 64
        }
        func value(_ name: String, _ fallback: UInt64) -> UInt64 {
            guard let at = arguments.firstIndex(of: name), at + 1 < arguments.count, let v = UInt64(arguments[at + 1]) else { return fallback }
            return v
        }
        let seed = value("--seed", 1)
        if arguments.first == "--small-objects" {
            do {
                try await SmallObjectStressWriter.run(directory: path, seed: seed, keys: Int(value("--keys", 64)), salt: value("--salt", 0))
                return 0
            } catch {
                emit("error \(error)", fd: 2)
                return 74
            }
        }
        let segments = Int(value("--segments", 256))
        let segmentSize = Int(value("--segment-size", 4096))
        let salt = value("--salt", 0)
        do {
            try await run(path: path, seed: seed, segments: segments, segmentSize: segmentSize, salt: salt)
            return 0
        } catch {
            emit("error \(error)", fd: 2)
            return 74
        }
    }

    private static func run(path: String, seed: UInt64, segments: Int, segmentSize: Int, salt: UInt64) async throws {
        var options = SparseFileOptions()
        options.segmentSize = segmentSize
        options.length = Int64(segments * segmentSize)
        options.commitPolicy = .manual
        let file = try await SparseFile.open(path, options: options)
        var present = Set(await file.presentSegments().flatMap { Array($0) })
        emit("open \(file.recovery.recordsReplayed) \(present.count)")
        var random = SplitMix64(seed: seed)
        var commits = 0
        var pending: [Int] = []
        while true {
            if present.count + pending.count < segments, random.next() % 16 != 0 {
                // Fill a random run of absent segments in unaligned chunks.
                let absent = (0..<segments).filter { !present.contains($0) && !pending.contains($0) }
                let first = absent[Int(random.next() % UInt64(absent.count))]
                var last = first
                while last + 1 < segments, last - first < 7, !present.contains(last + 1), !pending.contains(last + 1), random.next() % 4 != 0 {
                    last += 1
                }
                var offset = Int64(first * segmentSize)
                let end = Int64((last + 1) * segmentSize)
                while offset < end {
                    let size = min(end - offset, Int64(1 + random.next() % UInt64(2 * segmentSize)))
                    let result = try await file.write((offset..<(offset + size)).map { sourceByte(at: $0, salt: salt) }, at: offset)
                    for range in result.completed {
                        pending.append(contentsOf: Int(range.lowerBound) / segmentSize..<Int(range.upperBound) / segmentSize)
                    }
                    offset += size
                }
                if random.next() % 3 == 0 { continue }
                try await file.commit()
                commits += 1
                emit("ack \(commits) " + runs(pending).joined(separator: " "))
                present.formUnion(pending)
                pending.removeAll()
            } else if !present.isEmpty {
                // Drop a random run of present segments, as repair or eviction would.
                let sorted = present.sorted()
                let first = sorted[Int(random.next() % UInt64(sorted.count))]
                var last = first
                while last + 1 < segments, last - first < 15, present.contains(last + 1) { last += 1 }
                let run = "\(first)-\(last)"
                emit("drop-begin \(run)")
                try await file.discard(segments: Array(first...last))
                emit("drop-ack \(run)")
                present.subtract(first...last)
            }
        }
    }

    private static func runs(_ segments: [Int]) -> [String] {
        var result: [String] = []
        var start: Int?
        var previous = -2
        for segment in segments.sorted() {
            if segment != previous + 1 {
                if let start { result.append("\(start)-\(previous)") }
                start = segment
            }
            previous = segment
        }
        if let start { result.append("\(start)-\(previous)") }
        return result
    }

    /// One line, one write(2): a kill can cut the stream only between lines or leave a
    /// partial last line, which the reader ignores.
    static func emit(_ line: String, fd: Int32 = 1) {
        let bytes = Array((line + "\n").utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 { return }
            done += n
        }
    }
}
