@_spi(Locking) import SparseCacheEngine

#if canImport(Glibc)
    import Glibc
#endif

/// The child side of ``CrashHarness``: closures registered under names, one of which a small
/// executable runs when the harness names it in `SPARSECACHE_CRASH_CLOSURE`.
///
/// ```swift
/// // Sources/crash-worker/main.swift of your package
/// import SparseCacheTesting
/// CrashWorker.register("fill") { arguments in
///     let file = try await SparseFile.create(at: arguments[0], options: options)
///     for i in 0..<8 {
///         try await file.write(at: Int64(i * 65536), bytes(i))
///         try await file.commit()
///         CrashWorker.acknowledge("\(i)")     // only after the commit returned
///     }
/// }
/// await CrashWorker.main()
/// ```
public enum CrashWorker {
    public typealias Body = @Sendable (_ arguments: [String]) async throws -> Void

    private static let registry = Lock<[String: Body]>([:])

    /// Registers `body` under `name` (a later registration of the name replaces it).
    public static func register(_ name: String, _ body: @escaping Body) {
        registry.withLock { $0[name] = body }
    }

    /// Tells the harness that `text` was acknowledged (is durable): one line on standard
    /// output, written with write(2) at once, so a crash right after cannot lose it.
    public static func acknowledge(_ text: String) {
        let line = Array((CrashHarness.acknowledgementPrefix + text + "\n").utf8)
        var offset = 0
        while offset < line.count {
            let n = line[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            offset += n
        }
    }

    /// Runs the closure `SPARSECACHE_CRASH_CLOSURE` names with the process's arguments (after
    /// the program name) and exits: 0 when it returns, 70 when it throws (the error on standard
    /// error), 64 when no closure of that name is registered. A crash rule may end it earlier.
    public static func main() async -> Never {
        guard let name = getenv(CrashHarness.closureVariable).map({ String(cString: $0) }) else {
            fail(64, "\(CrashHarness.closureVariable) is not set: this program runs closures for CrashHarness")
        }
        guard let body = registry.withLock({ $0[name] }) else {
            let known = registry.withLock { $0.keys.sorted() }.joined(separator: ", ")
            fail(64, "no closure registered as '\(name)' (registered: \(known))")
        }
        do {
            try await body(Array(CommandLine.arguments.dropFirst()))
        } catch {
            fail(70, "closure '\(name)' threw: \(error)")
        }
        exit(0)
    }

    private static func fail(_ status: Int32, _ message: String) -> Never {
        let line = Array("crash-worker: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        exit(status)
    }
}
