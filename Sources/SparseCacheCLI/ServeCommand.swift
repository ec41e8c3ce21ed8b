import Dispatch
import Foundation
import SparseCache
@_spi(Locking) import SparseCacheEngine

#if canImport(Glibc)
import Glibc
#endif

/// `sparsecache serve [options]`: the options are declared in ``ServeOptions``.
enum ServeCommand: Command {
    static let name = "serve"
    static let abstract = "Serve a cache directory over HTTP to players, filling it from origins"
    static let overview = """
        Serve cached resources over HTTP, filling the cache from their origin.

        A local HTTP/1.1 proxy for players (ffmpeg, mpv, VLC, browsers): what is cached comes
        from disk, checked against its CRC32C; what is missing is fetched from the origin once for
        every client that wants it and sent as it arrives, while it is written and committed
        behind the client (claimed only once durable). A second play of the same bytes needs no
        origin.

        Requests:
          with --origin http://host:port   GET /path is the origin's /path (reverse proxy)
          without --origin                 GET /name.mp4?url=<percent-encoded URL> (URL mode;
                                           the name only helps players guess the type), or
                                           GET http://host/path from a player told to use
                                           this server as its HTTP proxy (ffmpeg -http_proxy,
                                           mpv --http-proxy, curl -x)
        GET and HEAD, keep-alive, Range in all forms (a-b, a-, -n): 206 with Content-Range,
        200 without a Range, 416 when no range overlaps or the ranges are malformed, and the
        whole resource (200) for a request of several ranges. A shared cache by RFC 9111: the
        origin's end-to-end fields are stored and replayed with Age, Via and Cache-Status;
        freshness, revalidation, Vary, no-store/private/Authorization and client
        conditionals as docs/HTTP-CACHING.md says. The origin's 4xx/5xx pages and redirects
        pass through as sent, answers without a length stream and are stored once complete;
        an unreachable origin is 502, one that does not answer in time 504.

        Other methods (POST, PUT, DELETE, PATCH, OPTIONS but a CORS preflight under --cors,
        any other) go to the origin with the client's fields and body (Content-Length or
        chunked, streamed; Expect: 100-continue answered) and the answer comes back unstored.
        A 2xx or 3xx to an unsafe method drops what is stored for its URL (and a same-origin
        Location or Content-Location). CONNECT is refused (405): an https tunnel cannot be
        cached.

        Streaming: HLS playlists (.m3u8) and DASH manifests (.mpd) are stored as the origin
        sent them and served rewritten, so every segment, key and variant URL in them goes
        through the cache, in both modes (docs/STREAMING.md). A live playlist without
        freshness information is reused for at most half its target duration. After a media
        playlist or a segment is served, the next segments are prefetched (--prefetch); a
        request a player waits on goes before prefetch at the per-origin connection limit.
        """
    static let options = ServeOptions.all
    static let notes = """
        One line per request goes to stdout: client, method, target, range, status, body bytes,
        bytes from the cache (hit) and from the origin (miss), duration, and what the cache made
        of it (hit, stale, revalidated, miss, pass, error). Credentials in URLs are hidden. SIGINT or SIGTERM
        stops accepting, lets responses in progress finish for 2 seconds, stops the fetches,
        commits what they received and exits 0; a second signal exits at once. SIGHUP reopens
        the access log. (Settings change live through the admin listener: /budget.)

        EXIT STATUS: 0 after a signal, 64 usage error, 74 cannot listen or I/O error,
                     75 the cache directory is used by another process.
        """

    static func run(_ commandLine: ParsedArguments) async throws -> Int32 {
        let configPath = commandLine.value(ServeOptions.config)
        let arguments = try configPath.map { ServeConfig.merged(commandLine, over: try ServeConfig.load($0, spec: spec)) } ?? commandLine
        var options = HTTPServer.Options()
        (options.host, options.port) = try parseListen(arguments.value(ServeOptions.listen) ?? "", option: ServeOptions.listen.name)
        if let text = arguments.value(ServeOptions.maxConnections) {
            guard let count = Int(text), count > 0 else {
                throw UsageError("invalid \(ServeOptions.maxConnections.name) '\(text)': use a positive number")
            }
            options.maximumConnections = count
        }
        if let text = arguments.value(ServeOptions.maxConnectionsPerClient) {
            guard let count = Int(text), count > 0 else {
                throw UsageError("invalid \(ServeOptions.maxConnectionsPerClient.name) '\(text)': use a positive number")
            }
            options.maximumConnectionsPerAddress = count
        }
        let allowed = arguments.values(ServeOptions.allowOrigin)
        for pattern in allowed where OriginAddressPolicy.Pattern(pattern) == nil {
            throw UsageError("invalid \(ServeOptions.allowOrigin.name) '\(pattern)': use HOST, HOST:PORT or *.DOMAIN, e.g. 127.0.0.1:9000")
        }
        let hostCheck = HostCheck(listenHost: options.host, names: arguments.values(ServeOptions.serverName))
        if let size = try arguments.size(ServeOptions.maxBodySize) { options.maximumBodySize = size }
        options.underscoresInFieldNames = arguments.has(ServeOptions.underscoresInHeaders)
        let origin = try arguments.value(ServeOptions.origin).map(parseOrigin)
        let directory = arguments.value(ServeOptions.cacheDirectory) ?? defaultCacheDirectory()
        let maximumResourceLength = try arguments.size(ServeOptions.maxResourceSize)
        let smallObjectSize = try arguments.size(ServeOptions.smallObjectSize)
        if let smallObjectSize, smallObjectSize > Int64(SparseFileOptions.defaultSegmentSize) {
            throw UsageError(
                "invalid \(ServeOptions.smallObjectSize.name) \(smallObjectSize): at most the segment size, \(SparseFileOptions.defaultSegmentSize) bytes")
        }
        let givenBudget = try arguments.size(ServeOptions.maxSize)
        let eviction = try evictionPolicy(arguments)
        let budget = givenBudget ?? DefaultBudget.compute(directory: directory) ?? .max
        let quiet = arguments.has(ServeOptions.quiet)
        var streaming = StreamingOptions()
        if let text = arguments.value(ServeOptions.prefetch), text != "auto" {
            guard let count = Int(text), (0...100).contains(count) else {
                throw UsageError("invalid \(ServeOptions.prefetch.name) '\(text)': use a number of segments from 0 (off) to 100, or auto")
            }
            streaming.prefetchSegments = count
        }
        let cors = try corsPolicy(arguments)
        let adminListen = arguments.value(ServeOptions.adminListen) ?? ""
        let admin = adminListen == "off" ? nil : try parseListen(adminListen, option: ServeOptions.adminListen.name)
        RequestLog.setFormat(json: try logFormat(arguments), quiet: quiet)

        if let path = arguments.value(ServeOptions.accessLog) { try RequestLog.open(path) }
        // Before anything is in flight: a signal from here on shuts down gracefully.
        try ShutdownSignals.install(hangup: true)
        noteIfNewCacheDirectory(directory, command: name)
        var storeOptions = StoreOptions(budget: budget)
        storeOptions.eviction = eviction
        // Housekeeping that fails without failing a request (an eviction, a background release)
        // is logged as it happens, whatever --quiet says.
        storeOptions.log = { line in RequestLog.problem(line) }
        let descriptors = raiseDescriptorLimit()
        storeOptions.smallObjects.maximumOpenLogs = openLogBudget(descriptors: descriptors, connections: options.maximumConnections)
        let store = try await SparseStore.open(directory: directory, options: storeOptions)
        var fillOptions = FillOptions()
        fillOptions.maximumKeptOpen = keptOpenBudget(descriptors: descriptors, connections: options.maximumConnections)
        if let smallObjectSize { fillOptions.smallObjectThreshold = smallObjectSize }
        let cache = ProgressiveCache(store: store, options: fillOptions)
        let proxy = CachingProxy(
            cache: cache, origin: origin, allowedOrigins: allowed,
            maximumResourceLength: maximumResourceLength ?? CachingProxy.defaultMaximumResourceLength, streaming: streaming,
            cors: cors)
        let metrics = ProxyMetrics()
        let log: @Sendable (HTTPLogEntry) -> Void = { entry in
            metrics.record(entry)
            RequestLog.write(entry)
        }
        let server: HTTPServer
        do {
            let quick: QuickHandler = { request, reply in hostCheck.refusal(for: request) == nil && proxy.answerQuickly(request, &reply) }
            server = try HTTPServer.start(options: options, log: log, quick: quick) { request, body, response in
                if let refusal = hostCheck.refusal(for: request) {
                    try await response.respond(status: 421, message: refusal, headers: proxy.cors?.apply([], for: request) ?? [])
                    return
                }
                try await proxy.handle(request, body, response)
            }
        } catch {
            try? await store.close()
            throw error
        }
        let shown = options.host.contains(":") ? "[\(options.host)]" : options.host
        // Where `sparsecache evict` finds the server that owns the directory.
        let connectHost = options.host == "0.0.0.0" ? "127.0.0.1" : options.host == "::" ? "::1" : options.host
        RunningServer.publish(host: connectHost, port: server.port, in: directory)
        defer { RunningServer.withdraw(in: directory) }
        var adminServer: HTTPServer?
        if let admin {
            let service = AdminService(proxy: proxy, metrics: metrics) { [server] in (server.connectionCount, server.rejectedConnections) }
            var adminOptions = HTTPServer.Options()
            (adminOptions.host, adminOptions.port) = admin
            adminOptions.maximumConnections = 16
            do {
                adminServer = try HTTPServer.start(options: adminOptions) { request, _, response in try await service.handle(request, response) }
            } catch {
                await server.shutdown(grace: .zero)
                try? await store.close()
                throw error
            }
            let adminHost = admin.0 == "0.0.0.0" ? "127.0.0.1" : admin.0 == "::" ? "::1" : admin.0
            RunningServer.publish(host: adminHost, port: adminServer?.port ?? 0, in: directory, file: RunningServer.adminFile)
        }
        defer { RunningServer.withdraw(in: directory, file: RunningServer.adminFile) }
        Output.error(
            "sparsecache serve: listening on http://\(shown):\(server.port)/ "
                + (origin.map { "as a reverse proxy for \($0.absoluteString)" } ?? "in URL mode (/<name>?url=<percent-encoded URL>)")
                + "; cache \(directory)"
                + (budget == .max
                    ? "" : ", budget \(SizeParser.describe(budget))" + (givenBudget == nil ? " (a quarter of the free space; --max-size sets it)" : ""))
                + (adminServer.map { "; admin on http://\(admin.map { $0.0.contains(":") ? "[\($0.0)]" : $0.0 } ?? ""):\($0.port)/" } ?? ""))

        var signal = try await ShutdownSignals.next()
        var running = arguments
        while signal == SIGHUP {
            if let configPath {
                running = await reload(configPath, commandLine: commandLine, running: running, store: store)
            } else {
                RequestLog.reopen()
            }
            signal = try await ShutdownSignals.next()
        }
        Output.error("sparsecache serve: \(signal == SIGINT ? "SIGINT" : "SIGTERM"): shutting down (a second signal stops at once)")
        Task {
            // The committed index is crash-safe: stopping at once loses only uncommitted bytes.
            while let second = try? await ShutdownSignals.next() {
                if second != SIGHUP { exit(128 + second) }
            }
        }
        await server.shutdown(grace: .seconds(2))
        await adminServer?.shutdown(grace: .zero)
        await proxy.shutdown()
        await cache.shutdown()
        let statistics = cache.statistics
        let failures = await store.housekeepingFailures
        try await store.close()
        Output.error(
            "sparsecache serve: stopped; \(SizeParser.describe(statistics.bytesReceived)) from origins in \(statistics.requests) "
                + "request\(statistics.requests == 1 ? "" : "s"), \(SizeParser.describe(statistics.bytesFromCache)) served from the cache"
                + (failures.total == 0
                    ? "" : "; housekeeping failures: \(failures.evictions) eviction(s), \(failures.releases) release(s)"))
        return ExitStatus.ok
    }

    /// Raises the soft limit on open descriptors to the hard one, as nginx does with
    /// `worker_rlimit_nofile`: every client, origin connection and open resource takes
    /// descriptors, and the common soft default (1024) is far below what a busy cache needs.
    /// Returns the limit in force.
    static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return limit.rlim_cur > rlim_t(Int32.max) ? Int(Int32.max) : Int(limit.rlim_cur)
    }

    /// How many idle resources may stay open: an eighth of the descriptors left after every
    /// connection slot (a client, an origin connection and a small-object log a read may hold
    /// past its eviction, each), a reserve, and the small-object logs' own share (each resource
    /// takes two, its data file and index, and a third once a read misses the page cache and
    /// goes through its read channel); at least 16, at most 4096.
    static func keptOpenBudget(descriptors: Int, connections: Int) -> Int {
        let logs = openLogBudget(descriptors: descriptors, connections: connections)
        return min(4096, max(16, (descriptors - 3 * connections - 64 - logs) / 8))
    }

    /// How many small-object log descriptors the store holds (`SmallObjectOptions.maximumOpenLogs`):
    /// a sixteenth of the descriptors left after every connection slot and a reserve; at least
    /// 4, at most 256 (a log holds thousands of objects: a few serve the hot ones).
    static func openLogBudget(descriptors: Int, connections: Int) -> Int {
        min(256, max(4, (descriptors - 3 * connections - 64) / 16))
    }

    /// `--cors` (repeatable) and `--cors-max-age`; nil without `--cors`.
    static func corsPolicy(_ arguments: ParsedArguments) throws -> CORSPolicy? {
        let origins = arguments.values(ServeOptions.cors)
        for origin in origins where origin != "*" && CORSPolicy.normalizedOrigin(origin) == nil {
            throw UsageError(
                "invalid \(ServeOptions.cors.name) '\(origin)': use * or an origin as a browser sends it, scheme://host[:port] without a path, "
                    + "e.g. https://player.example.com or http://127.0.0.1:3000")
        }
        var maxAge = CORSPolicy.defaultMaxAge
        if let text = arguments.given(ServeOptions.corsMaxAge) {
            guard let seconds = Int(text), seconds >= 0 else {
                throw UsageError("invalid \(ServeOptions.corsMaxAge.name) '\(text)': use a number of seconds, 0 or more")
            }
            guard !origins.isEmpty else { throw UsageError("\(ServeOptions.corsMaxAge.name) needs \(ServeOptions.cors.name)") }
            maxAge = seconds
        }
        return origins.isEmpty ? nil : CORSPolicy(origins: origins, maxAge: maxAge)
    }

    static func logFormat(_ arguments: ParsedArguments) throws -> Bool {
        switch arguments.value(ServeOptions.logFormat) ?? "" {
        case "text": return false
        case "json": return true
        case let other: throw UsageError("invalid \(ServeOptions.logFormat.name) '\(other)': use text or json")
        }
    }

    /// SIGHUP with `--config`: reads the file again and applies what changes live (the budget,
    /// the log); names on stderr the options that changed and need a restart. A file that does
    /// not parse changes nothing. Returns the settings now in force.
    static func reload(_ path: String, commandLine: ParsedArguments, running: ParsedArguments, store: SparseStore) async -> ParsedArguments {
        let next: ParsedArguments
        let json: Bool
        do {
            next = ServeConfig.merged(commandLine, over: try ServeConfig.load(path, spec: spec))
            json = try logFormat(next)
            _ = try next.size(ServeOptions.maxSize)
        } catch let error as UsageError {
            RequestLog.problem("SIGHUP: \(error.message); nothing changed")
            return running
        } catch {
            RequestLog.problem("SIGHUP: \(error); nothing changed")
            return running
        }
        var applied: [String] = []
        if let budget = try? next.size(ServeOptions.maxSize), next.given(ServeOptions.maxSize) != running.given(ServeOptions.maxSize) {
            do {
                try await store.setBudget(budget)
                applied.append("budget \(SizeParser.describe(budget))")
            } catch {
                RequestLog.problem("SIGHUP: the budget stays: \(error)")
            }
        }
        if let path = next.value(ServeOptions.accessLog), path != running.value(ServeOptions.accessLog) {
            do {
                try RequestLog.open(path)
                applied.append("access log \(path)")
            } catch {
                RequestLog.problem("SIGHUP: the access log stays: \(error)")
            }
        } else {
            RequestLog.reopen()
        }
        RequestLog.setFormat(json: json, quiet: next.has(ServeOptions.quiet))
        let restart = Set(next.options.keys).union(running.options.keys).subtracting(ServeOptions.live)
            .filter { next.options[$0] != running.options[$0] || next.repeated[$0] != running.repeated[$0] }.sorted()
        RequestLog.problem(
            "SIGHUP: \(path) read again" + (applied.isEmpty ? "" : "; now \(applied.joined(separator: ", "))")
                + (restart.isEmpty ? "" : "; needs a restart to change: \(restart.joined(separator: ", "))"))
        return next
    }

    /// "host:port", "[v6]:port" or a bare port.
    static func parseListen(_ text: String, option: String) throws -> (String, Int) {
        var host = "127.0.0.1"
        var portText = text
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = String(text[text.index(after: close)...].drop { $0 == ":" })
        } else if let colon = text.lastIndex(of: ":") {
            host = String(text[..<colon])
            portText = String(text[text.index(after: colon)...])
        }
        guard let port = Int(portText), (0...65535).contains(port), !host.isEmpty else {
            throw UsageError("invalid \(option) '\(text)': use ADDR:PORT, e.g. 127.0.0.1:8080 or [::1]:8080")
        }
        var address = in6_addr()
        guard inet_pton(AF_INET, host, &address) == 1 || inet_pton(AF_INET6, host, &address) == 1 else {
            throw UsageError("invalid \(option) '\(text)': the address must be numeric, e.g. 127.0.0.1, ::1 or 0.0.0.0")
        }
        return (host, port)
    }

    static func parseOrigin(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host != nil,
            url.query == nil
        else {
            throw UsageError("invalid \(ServeOptions.origin.name) '\(text)': use an http:// or https:// URL without a query, e.g. http://127.0.0.1:8000")
        }
        return url
    }
}

/// Request log lines go out on a serial queue: a full stdout pipe (or a slow disk under the
/// access log) must not stall a connection, nor block the cooperative pool. At most 10,000
/// lines wait; past that they are dropped and counted (``LogQueue``).
enum RequestLog {
    private static let queue = LogQueue(label: "sparsecache.serve.log") { line in
        if let file { Output.write(line + "\n", to: file.fd) } else { Output.print(line) }
    }
    /// The access log file, when there is one (else lines go to stdout). Touched on `queue`
    /// only, after `open`.
    private nonisolated(unsafe) static var file: (path: String, fd: Int32)?

    /// Sends the log to `path` (appended, created if missing). Throws when it cannot be opened.
    static func open(_ path: String) throws {
        let fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw SparseCacheError(.io, operation: "open access log", path: path, errno: errno) }
        queue.sync(execute: {
            if let old = file { close(old.fd) }
            file = (path, fd)
        })
    }

    /// Opens the access log's path again (SIGHUP after a rotation); the old file is closed once
    /// the new one is open, so no line is lost.
    static func reopen() {
        queue.async(execute: { @Sendable in
            guard let current = file else { return }
            let fd = Glibc.open(current.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                Output.error("sparsecache serve: SIGHUP: cannot reopen the access log '\(current.path)': \(String(cString: strerror(errno))); still writing to the old file")
                return
            }
            close(current.fd)
            file = (current.path, fd)
        })
    }

    /// How lines are written: JSON or text, or not at all (`--quiet`); changed by SIGHUP.
    private static let format = Lock((json: false, quiet: false))

    static func setFormat(json: Bool, quiet: Bool) {
        format.withLock { $0 = (json, quiet) }
    }

    static func write(_ entry: HTTPLogEntry) {
        let (json, quiet) = format.withLock { $0 }
        if quiet { return }
        queue.enqueue(json ? entry.json : entry.description)
    }

    /// A problem the cache got past (on stderr, in order with the request log).
    static func problem(_ text: String) {
        let line = "sparsecache serve: " + text
        queue.async(execute: { @Sendable in Output.error(line) })
    }
}
