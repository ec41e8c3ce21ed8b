import Foundation
import SparseCache
@_spi(Locking) import SparseCacheEngine

#if canImport(Glibc)
    import Glibc
#endif

/// `sparsecache demo`: the main job on an embedded default, no network needed.
enum DemoCommand: Command {
    static let name = "demo"
    static let abstract = "Fill a synthetic resource the way a player would (no network needed)"
    static let overview = """
        Fill a synthetic resource the way a video player would, with no network.

        A deterministic in-process source stands in for an HTTP origin and delivers unaligned
        chunks. The demo plays from the start, seeks forward, back and near the end while
        filling, serves partial reads from what is present at every step, shows progress and a
        picture of the segment map, restarts (closes and reopens the resource) and resumes
        only what is missing, then verifies every checksum and compares every byte.
        """
    static let directory = CLIOption.value(
        "--dir", "PATH", defaultDescription: "a new temporary directory, removed at the end unless --keep", completion: .directory,
        help: "Directory for the resource")
    static let size = CLIOption.value("--size", "SIZE", default: "96M", help: "Resource length")
    static let segmentSize = CLIOption.value(
        "--segment-size", "S", default: SizeParser.shortForm(Int64(SparseFileOptions.defaultSegmentSize)), help: "Segment size")
    static let seed = CLIOption.value("--seed", "N", default: "1", help: "Seed for chunk sizes")
    static let keep = CLIOption.flag("--keep", help: "Keep the resource; prints its path")
    static let options = [directory, size, segmentSize, seed, keep]

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let size = try arguments.size(Self.size) ?? 0
        let segmentSize = Int(try arguments.size(Self.segmentSize) ?? 0)
        guard size > 0, size <= (64 << 30) else { throw UsageError("--size must be between 1 byte and 64G") }
        guard let seed = UInt64(arguments.value(Self.seed) ?? "") else { throw UsageError("\(Self.seed.name) must be a non-negative integer") }
        let keep = arguments.has(Self.keep)
        // SIGPIPE would end the process before it could remove its temporary directory: a
        // closed standard output is seen as EPIPE instead, and SIGINT/SIGTERM as events.
        signal(SIGPIPE, SIG_IGN)
        try ShutdownSignals.install()
        let scratch: TemporaryDirectory?
        let path: String
        if let directory = arguments.value(Self.directory) {
            path = directory + "/movie.bin"
            // Never overwrite: the demo's resource is made fresh, and a file of that name may
            // be someone's.
            for existing in [path, SparseFile.indexPath(for: path)] where pathExists(existing) {
                Output.error(
                    "sparsecache demo: '\(existing)' exists; the demo never overwrites a file: remove it or choose another --dir")
                return ExitStatus.cannotCreate
            }
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            scratch = nil
        } else {
            let made = try TemporaryDirectory(prefix: "sparsecache-demo-")
            path = made.path + "/movie.bin"
            scratch = keep ? nil : made
        }
        // Ctrl-C (or SIGTERM): the temporary directory goes too.
        let interrupted = Task {
            guard let signal = try? await ShutdownSignals.next(), !Task.isCancelled else { return }
            scratch?.remove()
            Output.error(
                "sparsecache demo: \(signal == SIGINT ? "SIGINT" : "SIGTERM"): stopped"
                    + (scratch.map { "; removed \($0.path)" } ?? "; kept \(path)"))
            exit(128 + signal)
        }
        defer { interrupted.cancel() }

        var demo = Demo(path: path, length: size, segmentSize: segmentSize, seed: seed)
        let clean: Bool
        do {
            clean = try await demo.run()
            if keep { try Demo.say("kept: \(path) (and \(SparseFile.indexPath(for: path)))") }
        } catch is StandardOutputClosed {
            scratch?.remove()
            Output.error("sparsecache demo: standard output was closed; stopped" + (scratch.map { "; removed \($0.path)" } ?? ""))
            return 128 + SIGPIPE
        } catch {
            scratch?.remove()
            throw error
        }
        scratch?.remove()
        return clean ? ExitStatus.ok : ExitStatus.dataError
    }

    private static func pathExists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0 || errno != ENOENT
    }
}

/// Standard output was closed by its reader (EPIPE): nobody is watching any more.
struct StandardOutputClosed: Error {}

/// A new directory from mkdtemp(3) under $TMPDIR (or /tmp), removed at most once, from any
/// thread (the signal task or the command's own).
final class TemporaryDirectory: Sendable {
    let path: String
    private let removed = Lock(false)

    init(prefix: String) throws {
        var base = FileManager.default.temporaryDirectory.path
        while base.count > 1, base.hasSuffix("/") { base.removeLast() }
        var template = Array((base + "/" + prefix + "XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SparseCacheError(.io, operation: "mkdtemp", path: base, errno: errno)
        }
        path = String(cString: made)
    }

    /// Deletes the directory and everything in it. A file created in it meanwhile (the demo
    /// still runs on another thread) makes the first tries fail; a few more settle it.
    func remove() {
        guard removed.withLock({ done in
            defer { done = true }
            return !done
        }) else { return }
        for _ in 0..<5 {
            if (try? FileManager.default.removeItem(atPath: path)) != nil || !FileManager.default.fileExists(atPath: path) { return }
        }
        Output.error("sparsecache demo: could not remove the temporary directory '\(path)'")
    }
}

/// The demo's script: a player that seeks around a resource while a filler fetches from where
/// it plays.
struct Demo {
    let path: String
    let length: Int64
    let segmentSize: Int
    var random: SplitMix
    var served: Int64 = 0
    var partialReads = 0
    var fetched: Int64 = 0
    var lastPicture = -1
    var lastPictured: Int64 = -1
    var droppedAtRestart: Int64 = 0

    init(path: String, length: Int64, segmentSize: Int, seed: UInt64) {
        self.path = path
        self.length = length
        self.segmentSize = segmentSize
        self.random = SplitMix(seed: seed)
    }

    /// One line on standard output; throws ``StandardOutputClosed`` when its reader is gone.
    static func say(_ text: String) throws {
        var line = text + "\n"
        let written = line.withUTF8 { Output.writeAll(UnsafeRawBufferPointer($0), to: 1) }
        guard written else {
            if errno == EPIPE { throw StandardOutputClosed() }
            throw SparseCacheError(.io, operation: "write", path: "standard output", errno: errno)
        }
    }

    mutating func run() async throws -> Bool {
        let started = ContinuousClock.now
        try Self.say("sparsecache demo: a \(SizeParser.describe(length)) resource in \(SizeParser.describe(Int64(segmentSize))) segments at \(path)")
        try Self.say("map legend: █ present  ▓ mostly  ▒ partly  · missing\n")
        var options = SparseFileOptions()
        options.length = length
        options.segmentSize = segmentSize
        options.commitPolicy = .manual
        options.metadata = ResourceMetadata(key: "demo://movie.bin", contentType: "video/mp4", etag: "\"demo-v1\"")
        var file = try await SparseFile.open(path, options: options)

        // Watch from the start, jump ahead, jump back, then near the end: each seek starts
        // filling from the new playhead, and plays what is present as it arrives.
        let seeks: [(String, Double, Double)] = [
            ("play from the start", 0.0, 0.14), ("seek to 55%", 0.55, 0.12),
            ("seek back to 20%", 0.20, 0.10), ("seek to 88%", 0.88, 0.12),
        ]
        for (label, position, share) in seeks {
            try await play(file, label: label, from: Int64(Double(length) * position), budget: Int64(Double(length) * share))
        }
        let before = await file.presentBytes
        let held = await file.incompleteRanges().reduce(Int64(0)) { $0 + Int64($1.count) }
        droppedAtRestart = held
        try Self.say("\nrestart: closing with \(SizeParser.describe(before)) present; \(held) bytes of incomplete segments are dropped")
        try await file.close()
        file = try await SparseFile.open(path, options: options)
        let after = await file.presentBytes
        try Self.say("reopened: index recovered \(SizeParser.describe(after)) present (\(after == before ? "same as before" : "DIFFERENT"))")
        try Self.say("          " + SegmentMap.render(present: await file.presentRanges(), length: length, width: 64))

        try Self.say("\nresume: fetching only what is missing")
        try await play(file, label: "play to the end from 0", from: 0, budget: length)
        try await file.close()

        let elapsed = ContinuousClock.now - started
        try Self.say("\nverify:")
        let report = try await Verifier.verify(path: path)
        try Self.say("  \(report.segmentsChecked) segments, \(report.bytesChecked) bytes checked against their CRC32C: \(report.isClean ? "clean" : "DAMAGED")")
        let identical = try await compareWithSource()
        try Self.say("  every byte equals the source: \(identical ? "yes" : "NO")")
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let refetched = fetched - length
        try Self.say(
            "\nsummary: fetched \(SizeParser.describe(fetched)) for a \(SizeParser.describe(length)) resource; the \(refetched) bytes fetched twice are exactly the incomplete segments dropped at the restart: \(refetched == droppedAtRestart ? "yes" : "NO")")
        try Self.say("         served \(SizeParser.describe(served)) to the player while filling; \(partialReads) reads got a partial prefix because the fill had not got that far; \(String(Int(seconds * 1000))) ms in all")
        return report.isClean && identical && refetched == droppedAtRestart
    }

    /// Fills from `from` forward (skipping what is present) in unaligned network-sized chunks,
    /// committing every 1 MiB, while the player reads whatever is present at its playhead.
    mutating func play(_ file: SparseFile, label: String, from start: Int64, budget: Int64) async throws {
        try Self.say("\(label) (offset \(start))")
        var playhead = start
        var spent: Int64 = 0
        var sinceCommit: Int64 = 0
        // Missing and not already held in memory: never fetch the same byte twice.
        var missing = ByteSet(await file.missingRanges(in: start..<length))
        for held in await file.incompleteRanges() { missing.remove(held) }
        outer: for range in missing.ranges {
            var position = range.lowerBound
            while position < range.upperBound {
                if spent >= budget { break outer }
                let chunk = min(Int64(16_384 + Int(random.next() % 180_000)), range.upperBound - position)
                try await file.write(Source.bytes(at: position, count: Int(chunk)), at: position)
                position += chunk
                spent += chunk
                fetched += chunk
                sinceCommit += chunk
                if sinceCommit >= 1 << 20 || position == range.upperBound {
                    try await file.commit()
                    sinceCommit = 0
                    playhead = try await consume(file, playhead: playhead)
                    try await picture(file)
                }
            }
        }
        try await file.commit()
        playhead = try await consume(file, playhead: playhead)
        try await picture(file, force: true)
    }

    /// The player: reads what is present at the playhead, a partial read when the fill has
    /// not got that far yet.
    mutating func consume(_ file: SparseFile, playhead: Int64) async throws -> Int64 {
        var playhead = playhead
        while playhead < length {
            let want = 512 * 1024
            let bytes = try await file.readAvailable(from: playhead, maxLength: want)
            if bytes.isEmpty { break }
            guard bytes == Source.bytes(at: playhead, count: bytes.count) else {
                throw SparseCacheError(.corruptData, operation: "demo read", path: path, offset: playhead, detail: "served bytes differ from the source")
            }
            served += Int64(bytes.count)
            if bytes.count < want, playhead + Int64(bytes.count) < length { partialReads += 1 }
            playhead += Int64(bytes.count)
            if bytes.count < want { break }
        }
        return playhead
    }

    mutating func picture(_ file: SparseFile, force: Bool = false) async throws {
        let present = await file.presentBytes
        let step = Int(present * 10 / length)
        guard (force && present != lastPictured) || step != lastPicture else { return }
        lastPicture = step
        lastPictured = present
        let ranges = await file.presentRanges()
        let share = percent(present, of: length)
        try Self.say("  " + SegmentMap.render(present: ranges, length: length, width: 64) + "  \(share) present")
    }

    func compareWithSource() async throws -> Bool {
        try await withResource(path, mode: .readOnly) { file in
            var position: Int64 = 0
            while position < length {
                let count = Int(min(8 << 20, length - position))
                guard try await file.read(offset: position, length: count) == Source.bytes(at: position, count: count) else { return false }
                position += Int64(count)
            }
            return true
        }
    }
}

/// The demo's origin: byte i is a fixed function of i, so any range can be produced and checked.
enum Source {
    static func bytes(at offset: Int64, count: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var position = offset
            var index = 0
            while index < count {
                let word = SplitMix.mix(UInt64(position >> 3))
                let shift = UInt64(position & 7) * 8
                buffer[index] = UInt8(truncatingIfNeeded: word >> shift)
                index += 1
                position += 1
            }
            initialized = count
        }
    }
}

/// SplitMix64: a tiny seeded generator (and mixing function) for reproducible demos.
struct SplitMix {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return Self.mix(state)
    }

    static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Sorted disjoint byte ranges with removal, for the demo's bookkeeping.
struct ByteSet {
    private(set) var ranges: [Range<Int64>]

    init(_ ranges: [Range<Int64>]) { self.ranges = merged(ranges) }

    mutating func remove(_ cut: Range<Int64>) {
        ranges = ranges.flatMap { range -> [Range<Int64>] in
            guard range.overlaps(cut) else { return [range] }
            return [range.lowerBound..<max(range.lowerBound, cut.lowerBound), min(range.upperBound, cut.upperBound)..<range.upperBound]
                .filter { !$0.isEmpty }
        }
    }
}
