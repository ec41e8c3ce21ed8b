import SparseCache
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `sparsecache write <file> --offset N [options]`
enum WriteCommand: Command {
    static let name = "write"
    static let abstract = "Write bytes into a resource at an offset (creates it if needed)"
    static let overview = """
        Write bytes into a resource at an offset, commit, and report what became present.

        Creates the resource (data file plus '<file>.scidx') when it does not exist. Bytes of
        segments that the input does not complete are not kept: they are listed so they can be
        written again together with their neighbours. A long input is committed as it goes
        (every 8 MiB and every second), so a crash keeps what was committed; SIGINT or SIGTERM
        commits what was written, says what the resource holds and exits 130 or 143.
        """
    static let positionals = [CLIArgument(name: "file", help: "The resource's data file")]

    static let offset = CLIOption.value("--offset", "N", required: true, help: "Where the input's first byte goes")
    static let size = CLIOption.value(
        "--size", "TOTAL",
        help: "The resource length, when known (required once for the last segment to complete; must match if already set)")
    static let segmentSize = CLIOption.value(
        "--segment-size", "S", default: SizeParser.shortForm(Int64(SparseFileOptions.defaultSegmentSize)),
        help: "Segment size for a new resource: a power of two from 4K to 16M; must match an existing resource's")
    static let input = CLIOption.value(
        "--input", "PATH", completion: .file, help: "Read the bytes from PATH instead of standard input")
    static let options = [offset, size, segmentSize, input]
    static let notes = "Sizes accept K, M, G and T suffixes (binary: 64K = 65536)."

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let path = arguments.positionals[0]
        guard let offset = try arguments.size(Self.offset) else { throw UsageError("\(Self.offset.name) is required") }
        var options = SparseFileOptions()
        options.length = try arguments.size(Self.size)
        // Only when given: an existing resource keeps its own, a new one gets the engine's default.
        if arguments.given(segmentSize) != nil { options.segmentSize = try arguments.size(segmentSize).map { Int($0) } }
        // As the library commits on its own: every 8 MiB or second, so a kill or a crash in the
        // middle of a long stream keeps what was committed.
        options.commitPolicy = .automatic
        if let size = options.segmentSize, !(SparseFileOptions.segmentSizes.contains(size) && size.nonzeroBitCount == 1) {
            throw UsageError("--segment-size must be a power of two from 4K to 16M, got \(size)")
        }
        let input = try InputStream(path: arguments.value(Self.input))
        defer { input.close() }
        // A failed write that created the resource and committed nothing removes it again:
        // a failed command leaves nothing behind.
        let created = !fileExists(path) && !fileExists(SparseFile.indexPath(for: path))
        let file = try await SparseFile.open(path, mode: .readWrite, options: options)
        if file.recovery.reclaimedBytes > 0 {
            Output.print("reclaimed \(file.recovery.reclaimedBytes) bytes of disk left by an earlier write that was never committed")
        }
        let written = WrittenBytes()
        // SIGINT or SIGTERM: commit what was written, say what was kept, exit 130 or 143. The
        // read that is waiting for input is left behind (it may never return).
        try ShutdownSignals.install()
        let interrupted = Task { await commitOnSignal(file, path: path, offset: offset, written: written) }
        defer { interrupted.cancel() }
        var completed: [Range<Int64>] = []
        var skipped = 0
        var dropped: [Range<Int64>] = []
        var position = offset
        // On a terminal, a line that says how far a long write (a pipe) has come.
        let progress = Output.isTerminal(2) ? WriteProgress() : nil
        do {
            while let chunk = try await input.next(maximum: 4 << 20) {
                let result = try await file.write(chunk, at: position)
                completed.append(contentsOf: result.completed)
                skipped += result.alreadyPresentBytes
                dropped.append(contentsOf: result.dropped)
                position += Int64(chunk.count)
                written.count.store(position - offset, ordering: .relaxed)
                if let progress, progress.due() { progress.draw(written: position - offset, committed: await file.presentBytes) }
            }
            try await file.commit()
            progress?.draw(written: position - offset, committed: await file.presentBytes)
            progress?.finish()
        } catch {
            let keptNothing = await file.presentBytes == 0
            try? await file.close()
            if created, keptNothing { removeCreatedResource(path) }
            throw error
        }
        let incomplete = await file.incompleteRanges()
        let present = await file.presentBytes
        let length = await file.length
        let segments = await file.segmentCount
        let presentSegments = await file.presentSegments().reduce(0) { $0 + $1.count }
        try await file.close()

        Output.print("wrote \(position - offset) bytes at offset \(offset) to '\(path)'")
        Output.print("present now: " + (completed.isEmpty ? "nothing new" : describe(merged(completed))))
        if skipped > 0 { Output.print("already present (skipped): \(skipped) bytes") }
        let notKept = merged(incomplete + dropped)
        Output.print("not kept (incomplete segments): " + (notKept.isEmpty ? "none" : describe(notKept)))
        var summary = "resource: \(presentSegments) of \(segments) segments present, \(present) bytes"
        if let length, length > 0 {
            summary += " of \(length) (\(percent(present, of: length)))"
        } else if length == nil {
            summary += " (length unknown: pass --size to complete the last segment)"
        }
        Output.print(summary)
        return ExitStatus.ok
    }
}

/// The progress line of a write on a terminal: bytes read so far, the rate, and the bytes the
/// resource holds committed (durable and claimed). Drawn at most four times a second.
private final class WriteProgress {
    private let started = ContinuousClock.now
    private var lastDraw: ContinuousClock.Instant?

    func due() -> Bool {
        lastDraw.map { ContinuousClock.now - $0 >= .milliseconds(250) } ?? true
    }

    func draw(written: Int64, committed: Int64) {
        lastDraw = ContinuousClock.now
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = seconds > 0 ? ", " + SizeParser.describe(Int64(Double(written) / seconds)) + "/s" : ""
        Output.status("write: \(SizeParser.describe(written)) read\(rate), \(SizeParser.describe(committed)) committed")
    }

    /// Ends the line, so the report starts on a line of its own.
    func finish() {
        Output.write("\n", to: 2)
    }
}

/// Waits for SIGINT or SIGTERM; then commits the resource, reports what it holds on standard
/// error, and exits with 128 + the signal number. Returns only when cancelled (the input ended).
private func commitOnSignal(_ file: SparseFile, path: String, offset: Int64, written: WrittenBytes) async {
    guard let signal = try? await ShutdownSignals.next(), !Task.isCancelled else { return }
    let name = signal == SIGINT ? "SIGINT" : "SIGTERM"
    do {
        try await file.commit()
        let present = await file.presentBytes
        let runs = await file.presentRanges()
        Output.error(
            "sparsecache write: \(name): stopped after \(written.count.load(ordering: .relaxed)) bytes from offset \(offset); "
                + "committed: '\(path)' holds \(present) present bytes " + (runs.isEmpty ? "(none)" : describe(runs)))
    } catch {
        Output.error("sparsecache write: \(name): the final commit failed: \(error); only earlier commits are kept")
    }
    try? await file.close()
    exit(128 + signal)
}

/// Whether anything (a file, a directory, a dangling link) has this name.
private func fileExists(_ path: String) -> Bool {
    var status = stat()
    return lstat(path, &status) == 0 || errno != ENOENT
}

/// Deletes a resource this command created and left empty: the index first, as the store
/// does, so a crash in between leaves a data file that claims nothing.
private func removeCreatedResource(_ path: String) {
    for file in SparseFile.indexPaths(for: path) + [path] where unlink(file) != 0 && errno != ENOENT {
        Output.error("sparsecache write: could not remove '\(file)', created by this failed write: \(SparseCacheError.errnoText(errno))")
    }
}

/// Input bytes handed to the resource so far, read by the signal handler's task.
private final class WrittenBytes: Sendable {
    let count = Atomic<Int64>(0)
}

func merged(_ ranges: [Range<Int64>]) -> [Range<Int64>] {
    let sorted = ranges.filter { !$0.isEmpty }.sorted { $0.lowerBound < $1.lowerBound }
    var result: [Range<Int64>] = []
    for range in sorted {
        if let last = result.last, range.lowerBound <= last.upperBound {
            result[result.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
        } else {
            result.append(range)
        }
    }
    return result
}

func describe(_ ranges: [Range<Int64>]) -> String {
    ranges.map { "[\($0.lowerBound), \($0.upperBound))" }.joined(separator: ", ")
}

func percent(_ part: Int64, of whole: Int64) -> String {
    guard whole > 0 else { return "100%" }
    let tenths = (part * 1000) / whole
    return "\(tenths / 10).\(tenths % 10)%"
}

/// Standard input or a file, read in chunks with plain read(2) (the CLI's own I/O; the
/// engine's goes through the shim).
final class InputStream {
    private let fd: Int32
    private let ownsDescriptor: Bool
    let name: String

    init(path: String?) throws {
        guard let path else {
            fd = 0
            ownsDescriptor = false
            name = "standard input"
            return
        }
        let opened = open(path, O_RDONLY | O_CLOEXEC)
        guard opened >= 0 else {
            let code = errno
            throw SparseCacheError(code == ENOENT ? .notFound : .io, operation: "open input", path: path, errno: code)
        }
        // Checked before the resource is opened: reading a directory fails only at the first
        // read, after an empty resource was created.
        var status = stat()
        if fstat(opened, &status) == 0, (status.st_mode & S_IFMT) == S_IFDIR {
            _ = Glibc.close(opened)
            throw SparseCacheError(.invalidArgument, operation: "open input", path: path, detail: "is a directory, expected a file")
        }
        fd = opened
        ownsDescriptor = true
        name = path
    }

    /// Up to `maximum` bytes; nil at end of input. Read on ``BlockingExecutor/cliIO``.
    func next(maximum: Int) async throws -> [UInt8]? {
        let fd = self.fd, name = self.name
        return try await BlockingExecutor.cliIO.run { try Self.read(fd, maximum: maximum, name: name) }
    }

    private static func read(_ fd: Int32, maximum: Int, name: String) throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: maximum)
        var filled = 0
        while filled < maximum {
            let n = buffer.withUnsafeMutableBytes { raw in Glibc.read(fd, raw.baseAddress! + filled, maximum - filled) }
            if n < 0 {
                if errno == EINTR { continue }
                throw SparseCacheError(.io, operation: "read input", path: name, errno: errno)
            }
            if n == 0 { break }
            filled += n
        }
        if filled == 0 { return nil }
        buffer.removeLast(maximum - filled)
        return buffer
    }

    func close() {
        if ownsDescriptor { _ = Glibc.close(fd) }
    }
}

/// Opens a resource, runs `body`, and closes it on every path.
func withResource<T>(
    _ path: String, mode: AccessMode, options: SparseFileOptions = SparseFileOptions(),
    _ body: (SparseFile) async throws -> T
) async throws -> T {
    let file = try await SparseFile.open(path, mode: mode, options: options)
    do {
        let result = try await body(file)
        try await file.close()
        return result
    } catch {
        try? await file.close()
        throw error
    }
}
