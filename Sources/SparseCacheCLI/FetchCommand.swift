import Foundation
import SparseCache

#if canImport(Glibc)
import Glibc
#endif

/// `sparsecache fetch <url> [--cache-dir DIR] [--range A-B] [--output PATH] [--max-size SIZE]`
enum FetchCommand: Command {
    static let name = "fetch"
    static let abstract = "Download a URL into a cache directory by Range requests (resumes)"
    static let overview = """
        Download a resource into the cache by HTTP Range requests.

        Bytes already cached are not fetched again, so running the same command after an
        interrupted run resumes it. The resource's key in the cache is its URL ('sparsecache ls'
        lists it). Progress goes to stderr: a bar on a terminal, plain lines otherwise.
        """
    static let positionals = [CLIArgument(name: "url", help: "An http:// or https:// URL", completion: .none)]
    static let range = CLIOption.value(
        "--range", "A-B", help: "Only bytes A to B, inclusive, as in HTTP ('A-' runs to the end); sizes take K, M, G, T suffixes")
    static let output = CLIOption.value(
        "--output", "PATH", completion: .file,
        help: "Also write the bytes to PATH ('-' for stdout); without it the bytes only go into the cache")
    static let maxSize = CLIOption.value(
        "--max-size", "SIZE", defaultDescription: "no limit", help: "The cache directory's budget")
    static let options = [CLIOption.cacheDirectory, range, output, maxSize]
    static let notes = """
        EXIT STATUS: 0 ok, 64 usage error, 69 origin unreachable after retries, 74 I/O error,
                     75 cache directory in use or resource changed during the fetch,
                     76 the origin answered with an error (404, 403, 416...).
        """

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let text = arguments.positionals[0]
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host != nil else {
            throw UsageError("'\(text)' is not an http:// or https:// URL")
        }
        let range = try arguments.value(Self.range).map(parseRange)
        let directory = arguments.value(.cacheDirectory) ?? defaultCacheDirectory()
        let budget = try arguments.size(maxSize) ?? .max
        let output = try arguments.value(Self.output).map(OutputFile.init)
        let source = try HTTPRangeSource(url: url)
        noteIfNewCacheDirectory(directory, command: name)
        let store = try await SparseStore.open(directory: directory, options: StoreOptions(budget: budget))
        let cache = ProgressiveCache(store: store)
        let meter = ProgressMeter(terminal: Output.isTerminal(2))
        do {
            let start = range?.lowerBound ?? 0
            var position = start
            var total: Int64?
            for try await chunk in cache.read(source, range: range) {
                if let output { try await output.write(chunk, at: position - start) }
                position += Int64(chunk.count)
                if total == nil, let length = try await cache.progress(key: source.key).length {
                    total = min(range?.upperBound ?? length, length) - start
                }
                meter.update(done: position - start, total: total)
            }
            try output?.close()
            meter.finish()
            let statistics = cache.statistics
            let cached = try await cache.progress(key: source.key)
            try await store.close()
            Output.error(
                "fetched \(SizeParser.describe(position - start)) of \(source.key): "
                    + "\(SizeParser.describe(statistics.bytesReceived)) from the origin in \(statistics.requests) request\(statistics.requests == 1 ? "" : "s"); "
                    + "cache holds \(SizeParser.describe(cached.presentBytes)) of \(cached.length.map(SizeParser.describe) ?? "?") in \(directory)"
            )
            return ExitStatus.ok
        } catch {
            meter.finish()
            try? output?.close()
            try? await store.close()
            throw error
        }
    }

    /// "A-B" (inclusive) or "A-", with size suffixes.
    static func parseRange(_ text: String) throws -> Range<Int64> {
        let parts = text.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let first = SizeParser.parse(String(parts[0])) else {
            throw UsageError("invalid range '\(text)': use A-B (inclusive) or A-, e.g. 0-1023 or 1M-")
        }
        if parts[1].isEmpty { return first..<Int64.max }
        guard let last = SizeParser.parse(String(parts[1])), last >= first, last < Int64.max else {
            throw UsageError("invalid range '\(text)': the end must be a number at or after the start")
        }
        return first..<(last + 1)
    }
}

/// Where `--output` goes: a file written at offsets, or stdout in order.
final class OutputFile {
    private let fd: Int32
    private let path: String

    init(_ path: String) throws {
        self.path = path
        if path == "-" {
            fd = 1
        } else {
            fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw SparseCacheError(.io, operation: "open output", path: path, errno: errno)
            }
        }
    }

    /// Writes on ``BlockingExecutor/cliIO``.
    func write(_ bytes: [UInt8], at offset: Int64) async throws {
        let fd = self.fd, path = self.path
        try await BlockingExecutor.cliIO.run { try Self.write(bytes, at: offset, fd: fd, path: path) }
    }

    private static func write(_ bytes: [UInt8], at offset: Int64, fd: Int32, path: String) throws {
        let ok = bytes.withUnsafeBytes { buffer -> Bool in
            if fd == 1 { return Output.writeAll(buffer, to: 1) }
            var done = 0
            while done < buffer.count {
                let n = pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                done += n
            }
            return true
        }
        if !ok { throw SparseCacheError(.io, operation: "write output", path: path, offset: offset, errno: errno) }
    }

    func close() throws {
        guard fd != 1 else { return }
        if Glibc.close(fd) != 0 { throw SparseCacheError(.io, operation: "close output", path: path, errno: errno) }
    }
}

/// Progress on stderr: a redrawn bar on a terminal, a plain line every 10% (or every few
/// seconds) otherwise.
final class ProgressMeter {
    private let terminal: Bool
    private let started = ContinuousClock.now
    private var lastDraw = ContinuousClock.now - .seconds(1)
    private var lastTenth = -1

    init(terminal: Bool) {
        self.terminal = terminal
    }

    func update(done: Int64, total: Int64?) {
        let now = ContinuousClock.now
        let fraction = total.map { $0 > 0 ? Double(done) / Double($0) : 1 } ?? 0
        if terminal {
            guard now - lastDraw >= .milliseconds(100) else { return }
            lastDraw = now
            let width = 30
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            Output.status(
                "[\(bar)] \(percent(fraction)) \(SizeParser.describe(done))\(total.map { " / " + SizeParser.describe($0) } ?? "") \(rate(done))"
            )
        } else {
            let tenth = Int(fraction * 10)
            guard tenth > lastTenth || now - lastDraw >= .seconds(5) else { return }
            lastTenth = tenth
            lastDraw = now
            Output.error(
                "fetch: \(SizeParser.describe(done))\(total.map { " of " + SizeParser.describe($0) } ?? "") (\(percent(fraction))) \(rate(done))"
            )
        }
    }

    /// Ends the bar's line on a terminal.
    func finish() {
        if terminal { Output.write("\n", to: 2) }
    }

    private func percent(_ fraction: Double) -> String {
        String(format: "%5.1f%%", fraction * 100)
    }

    private func rate(_ done: Int64) -> String {
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        guard seconds > 0 else { return "" }
        return SizeParser.describe(Int64(Double(done) / seconds)) + "/s"
    }
}
