import SparseCache

#if canImport(Glibc)
import Glibc
#endif

/// `sparsecache read <file> [--offset N] [--length N] [--partial] [--output PATH]`
enum ReadCommand: Command {
    static let name = "read"
    static let abstract = "Read present bytes from a resource"
    static let overview = """
        Read present bytes from a resource.

        Only present bytes are ever output: durable, named by the index, and checked against
        their CRC32C. When the range is not fully present nothing is output, the missing ranges
        are named on standard error and the exit status is 1; with --partial the present
        prefix of the range is output instead.
        """
    static let positionals = [CLIArgument(name: "file", help: "The resource's data file")]

    static let offset = CLIOption.value("--offset", "N", default: "0", help: "First byte to read")
    static let length = CLIOption.value(
        "--length", "N", defaultDescription: "to the end of the resource; required when its length is unknown", help: "Bytes to read")
    static let partial = CLIOption.flag("--partial", help: "Output the present prefix when the range is not fully present")
    static let output = CLIOption.value(
        "--output", "PATH", completion: .file,
        help: "Write the bytes to PATH ('-' for standard output); a regular file is fsynced when complete")
    static let options = [offset, length, partial, output]

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let path = arguments.positionals[0]
        let offset = try arguments.size(Self.offset) ?? 0
        return try await withResource(path, mode: .readOnly) { file in
            try await read(file, path: path, offset: offset, arguments: arguments)
        }
    }

    private static func read(_ file: SparseFile, path: String, offset: Int64, arguments: ParsedArguments) async throws -> Int32 {
        let resourceLength = await file.length
        guard var length = try arguments.size(Self.length) ?? resourceLength.map({ max(0, $0 - offset) }) else {
            throw UsageError("--length is required: the resource's length is not known yet")
        }
        let (rangeEnd, overflows) = offset.addingReportingOverflow(length)
        if overflows {
            throw UsageError("--offset \(offset) plus --length \(length) is past the largest offset \(Int64.max)")
        }
        if let resourceLength, rangeEnd > resourceLength {
            guard arguments.has(partial) else {
                throw UsageError("range [\(offset), \(rangeEnd)) runs past the resource length \(resourceLength)")
            }
            // --partial: what exists of the range, which may be nothing.
            length = max(0, resourceLength - offset)
            Output.error("sparsecache read: '\(path)': the range runs past the resource length \(resourceLength); reading to its end")
        }
        let requested = offset..<(offset + length)
        let missing = await file.missingRanges(in: requested)
        var end = requested.upperBound
        if !missing.isEmpty {
            guard arguments.has(partial) else {
                Output.error("sparsecache read: '\(path)': \(missing.reduce(0) { $0 + $1.count }) of \(length) bytes not present: missing \(describe(missing))")
                return ExitStatus.notPresent
            }
            end = missing[0].lowerBound
            Output.error("sparsecache read: '\(path)': \(end - offset) of \(length) bytes present from offset \(offset); output stops at \(end)")
        }
        let sink = try OutputSink(path: arguments.value(output))
        defer { sink.close() }
        var position = offset
        while position < end {
            let chunk = try await file.read(offset: position, length: Int(min(8 << 20, end - position)))
            try await sink.write(chunk)
            position += Int64(chunk.count)
        }
        try await sink.finish()
        return ExitStatus.ok
    }
}

/// Standard output or a path: a regular file is created, truncated, and fsynced when done;
/// anything else (a pipe, a FIFO, /dev/null, a terminal) is only written to, since fsync has no
/// meaning there (and fails with EINVAL on a pipe).
final class OutputSink {
    private let fd: Int32
    private let path: String?
    private let isRegularFile: Bool

    init(path: String?) throws {
        guard let path, path != "-" else {
            self.path = nil
            fd = 1
            isRegularFile = false
            return
        }
        self.path = path
        let opened = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard opened >= 0 else {
            throw SparseCacheError(errno == ENOENT ? .notFound : .io, operation: "open output", path: path, errno: errno)
        }
        fd = opened
        var status = stat()
        isRegularFile = fstat(opened, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG
    }

    /// Writes on ``BlockingExecutor/cliIO``.
    func write(_ bytes: [UInt8]) async throws {
        let fd = self.fd, path = self.path
        try await BlockingExecutor.cliIO.run {
            let ok = bytes.withUnsafeBytes { Output.writeAll($0, to: fd) }
            if !ok { throw SparseCacheError(.io, operation: "write output", path: path ?? "standard output", errno: errno) }
        }
    }

    func finish() async throws {
        guard let path, isRegularFile else { return }
        let fd = self.fd
        try await BlockingExecutor.cliIO.run {
            if fsync(fd) != 0 { throw SparseCacheError(.io, operation: "fsync output", path: path, errno: errno) }
        }
    }

    func close() {
        if path != nil { _ = Glibc.close(fd) }
    }
}
