import SparseCache

/// The options of `sparsecache serve`, each declared once. A new option is one more
/// declaration here and its place in ``all`` (the order of the help); ``ServeCommand`` reads
/// it by the declaration.
enum ServeOptions {
    static let cacheDirectory = CLIOption.cacheDirectory
    static let listen = CLIOption.value(
        "--listen", "ADDR:PORT", default: "127.0.0.1:8080",
        help: "Where to listen (a bare port means 127.0.0.1; IPv6 as [::1]:8080). Anything but loopback lets other machines "
            + "use this proxy and, in URL mode, fetch any URL through it.")
    static let maxSize = CLIOption.value(
        "--max-size", "SIZE",
        defaultDescription: "a quarter of the free space of its file system at start, at least 64 MiB; printed at start",
        help: "The cache directory's budget; --eviction chooses what goes beyond it")
    static let eviction = CLIOption.value(
        "--eviction", "POLICY", default: EvictionPolicy.defaultPolicy.rawValue,
        completion: .words(EvictionPolicy.allCases.map(\.rawValue)),
        help: "sfifo: segment runs in a small and a main FIFO queue, so bytes asked for once go before bytes asked for "
            + "again and a video's cold tail before its head; lru: whole least recently used resources (docs/EVICTION.md)")
    static let maxResourceSize = CLIOption.value(
        "--max-resource-size", "SIZE", default: SizeParser.shortForm(CachingProxy.defaultMaximumResourceLength),
        help: "Resources longer than this (as the origin states their length) are passed on, not stored")
    static let smallObjectSize = CLIOption.value(
        "--small-object-size", "SIZE", default: SizeParser.shortForm(FillOptions().smallObjectThreshold),
        help: "Complete answers with a length up to this are kept as records in the small-object logs (DIR/objects; one "
            + "shared fdatasync, no file per answer); larger ones as sparse files (at most the segment size, "
            + "\(SizeParser.shortForm(Int64(SparseFileOptions.defaultSegmentSize))); 0: every answer a sparse file)")
    static let origin = CLIOption.value(
        "--origin", "URL", help: "Reverse-proxy mode: the http(s) origin every path is fetched from")
    static let allowOrigin = CLIOption.value(
        "--allow-origin", "PATTERN", repeatable: true,
        help: "URL mode: also fetch from this origin although it is loopback, private or local (refused by default: no "
            + "server-side request forgery). HOST, HOST:PORT or *.DOMAIN")
    static let serverName = CLIOption.value(
        "--server-name", "NAME", repeatable: true,
        help: "A Host name this server answers besides loopback and the listen address (others get 421, against DNS "
            + "rebinding). Listening beyond loopback, the check applies only once a name is given")
    static let maxConnections = CLIOption.value(
        "--max-connections", "N", default: String(HTTPServer.Options().maximumConnections),
        help: "Connection slots. When all are taken, a newcomer takes the slot of the connection that has waited longest "
            + "without a request; 503 only when every slot is busy")
    static let maxConnectionsPerClient = CLIOption.value(
        "--max-connections-per-client", "N", default: String(HTTPServer.Options().maximumConnectionsPerAddress),
        help: "Slots one client address may hold")
    static let maxBodySize = CLIOption.value(
        "--max-body-size", "SIZE", default: SizeParser.shortForm(HTTPServer.Options().maximumBodySize),
        help: "The largest request body taken; larger ones are answered 413 (to https origins a body is collected first)")
    static let underscoresInHeaders = CLIOption.flag(
        "--underscores-in-headers",
        help: "Pass request header fields whose name holds '_' to the origin (dropped by default, as nginx does: "
            + "CGI/WSGI-style origins read X_Y as X-Y, so Transfer_Encoding would smuggle a request). Names that read as "
            + "Content-Length, Transfer-Encoding or a hop-by-hop field are dropped even so")
    static let prefetch = CLIOption.value(
        "--prefetch", "N|auto", default: "auto",
        help: "HLS and DASH segments fetched ahead of each player, 0 to 100; 0: off; auto: 1 to 8, from the origin's speed "
            + "over the stream's, 3 until measured")
    static let cors = CLIOption.value(
        "--cors", "ORIGIN", repeatable: true,
        help: "Web pages from ORIGIN (scheme://host[:port], as a browser sends it in Origin; * for any page) may read the "
            + "answers: every answer gets Access-Control-Allow-Origin and Access-Control-Expose-Headers (the origin's own "
            + "Access-Control-* fields are replaced), and CORS preflights are answered here, with the origin down too. "
            + "Without it the origin's fields pass as sent and OPTIONS goes to the origin (docs/STREAMING.md)")
    static let corsMaxAge = CLIOption.value(
        "--cors-max-age", "SECONDS", default: String(CORSPolicy.defaultMaxAge),
        help: "How long a browser keeps a preflight's answer (with --cors)")
    static let quiet = CLIOption.flag("--quiet", help: "No request log")
    static let config = CLIOption.value(
        "--config", "FILE", completion: .file,
        help: "Options from FILE, one per line without the dashes (\"max-size 20G\", \"quiet\"; # comments); the command "
            + "line wins. SIGHUP reads it again and applies max-size, log-format, access-log and quiet; other changes need "
            + "a restart")
    static let adminListen = CLIOption.value(
        "--admin-listen", "ADDR:PORT|off", default: "127.0.0.1:0",
        help: "The admin listener: GET /metrics (Prometheus), GET /status and /resources (JSON), POST /purge?key=URL, "
            + "/budget?bytes=N, /evict?bytes=N, /prefetch?url=URL, /pin?key=URL. Port 0 takes a free port; the address is "
            + "written to DIR/serve.admin for 'sparsecache stats' and 'ls'; 'off' for none. No authentication: keep it on "
            + "loopback or a private network.")
    static let logFormat = CLIOption.value(
        "--log-format", "FORMAT", default: "text", completion: .words(["text", "json"]),
        help: "text, or json: one JSON object per line with a request id, the time, and the cache outcome")
    static let accessLog = CLIOption.value(
        "--access-log", "FILE", completion: .file,
        help: "The request log goes to FILE (appended) instead of stdout; SIGHUP reopens it (after logrotate moved it)")

    /// Every option, in the order of the help.
    static let all = [
        cacheDirectory, listen, maxSize, eviction, maxResourceSize, smallObjectSize, origin, allowOrigin, serverName, maxConnections,
        maxConnectionsPerClient, maxBodySize, underscoresInHeaders, prefetch, cors, corsMaxAge, quiet, config, adminListen,
        logFormat, accessLog,
    ]

    /// The options a SIGHUP applies (with `--config`); the others need a restart.
    static let live: Set<String> = Set([maxSize, logFormat, accessLog, quiet].map(\.name))
}
