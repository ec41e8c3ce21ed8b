import Foundation
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// The admin listener of `sparsecache serve` (loopback by default): metrics, status and live
/// administration of a running cache, as ``HTTPServer`` handler.
///
/// | request | answer |
/// |---|---|
/// | `GET /` | the status page (HTML, reloads itself): totals, fills in progress, resources with their segment maps, `?order=size` (default) or `recent`, `&page=N` (``StatusPage``) |
/// | `GET /metrics` | the Prometheus text exposition (``MetricsExposition``) |
/// | `GET /status` | JSON: the store, what is in flight, connections, request totals |
/// | `GET /resources` | JSON: every stored resource with its live last access (`sparsecache ls` beside a server), streamed one entry per line (``StoreListing``) |
/// | `POST /purge?key=URL` | drops the URL and its variants; `key=URL*` every key with the prefix |
/// | `POST /budget?bytes=N` | changes the budget and evicts down to it |
/// | `POST /evict?bytes=N` | evicts least recently used resources down to N bytes on disk, once |
/// | `POST /prefetch?url=URL[&pin=1]` | brings the whole URL into the cache (first contact now, the rest in the background); with `pin=1` also pins it |
/// | `POST /pin?key=URL`, `POST /unpin?key=URL` | a pinned resource is never evicted (kept across restarts) |
///
/// It has no authentication of its own: it is for the machine (or the private network) it
/// listens on, as Varnish's admin port and nginx's stub_status are.
package final class AdminService: Sendable {
    package let proxy: CachingProxy
    package let metrics: ProxyMetrics
    private let connections: @Sendable () -> (open: Int, rejected: Int)
    private let started = Date()

    package init(proxy: CachingProxy, metrics: ProxyMetrics, connections: @escaping @Sendable () -> (open: Int, rejected: Int)) {
        self.proxy = proxy
        self.metrics = metrics
        self.connections = connections
    }

    package func handle(_ request: HTTPRequestHead, _ response: HTTPResponseWriter) async throws {
        let (path, query) = Self.split(request.target)
        switch (request.method, path) {
        case (.get, "/"), (.head, "/"):
            try await send(response, type: "text/html; charset=utf-8", body: Array(await statusPage(query).utf8))
        case (.get, "/metrics"), (.head, "/metrics"):
            try await send(response, type: "text/plain; version=0.0.4; charset=utf-8", body: Array(await metricsText().utf8))
        case (.get, "/status"), (.head, "/status"):
            try await sendJSON(response, await status())
        case (.get, "/resources"), (.head, "/resources"):
            // The live catalog: last accesses as the server knows them now (the catalog file
            // on disk is saved now and then), what `sparsecache ls` shows beside a server.
            try await sendListing(response)
        case (.post, "/purge"):
            guard let key = query["key"], !key.isEmpty else {
                return try await refuse(response, 400, "POST /purge needs ?key=<URL> (or <URL>* for a prefix)")
            }
            let dropped = try await proxy.purge(key: key)
            try await sendJSON(response, ["key": key, "purged": String(dropped)], status: dropped == 0 ? 404 : 200)
        case (.post, "/budget"):
            guard let text = query["bytes"], let bytes = Int64(text), bytes > 0 else {
                return try await refuse(response, 400, "POST /budget needs ?bytes=<positive number of bytes>")
            }
            do {
                try await proxy.cache.store.setBudget(bytes)
            } catch let error as SparseCacheError where error.code == .invalidArgument {
                return try await refuse(response, 400, "\(error)")
            }
            try await sendJSON(response, await status())
        case (.post, "/evict"):
            guard let text = query["bytes"], let bytes = Int64(text), bytes >= 0 else {
                return try await refuse(response, 400, "POST /evict needs ?bytes=<size on disk to evict down to>")
            }
            // Resources kept open for the next reader would be skipped: they are closed first.
            await proxy.cache.closeIdle()
            let evicted = try await proxy.cache.store.evict(toSize: bytes)
            let left = await proxy.cache.store.totals()
            try await sendJSON(response, Evicted(evicted: evicted, resources: left.resourceCount, allocatedBytes: left.allocatedBytes))
        case (.post, "/pin"), (.post, "/unpin"):
            guard let key = query["key"], !key.isEmpty else { return try await refuse(response, 400, "POST \(path) needs ?key=<URL>") }
            do {
                if path == "/pin" { try await proxy.cache.store.pin(key: key) } else { try await proxy.cache.store.unpin(key: key) }
            } catch let error as SparseCacheError where error.code == .notFound {
                return try await refuse(response, 404, "not cached: \(key)")
            }
            try await sendJSON(response, ["key": key, "pinned": path == "/pin" ? "true" : "false"])
        case (.post, "/prefetch"):
            guard let text = query["url"], let url = URL(string: text), let scheme = url.scheme?.lowercased(),
                scheme == "http" || scheme == "https", url.host != nil
            else {
                return try await refuse(response, 400, "POST /prefetch needs ?url=<percent-encoded http(s) URL>")
            }
            do {
                let (key, length) = try await proxy.prefetch(url)
                if query["pin"] == "1" { try await proxy.cache.store.pin(key: key) }
                try await sendJSON(response, ["key": key, "length": String(length), "state": "filling"], status: 202)
            } catch {
                try await refuse(response, 502, "prefetch of \(text) failed: \(error)")
            }
        case (_, "/"), (_, "/metrics"), (_, "/status"), (_, "/resources"), (_, "/purge"), (_, "/budget"), (_, "/evict"), (_, "/prefetch"),
            (_, "/pin"),
            (_, "/unpin"):
            try await refuse(response, 405, "method \(request.method) not allowed on \(path)")
        default:
            try await refuse(
                response, 404,
                "no such admin endpoint \(path): use /, /metrics, /status, /resources, /purge, /budget, /evict, /prefetch, /pin or /unpin")
        }
    }

    /// The status page for a request's query (`order`, `page`).
    func statusPage(_ query: [String: String]) async -> String {
        let order = query["order"].flatMap(StatusPage.Order.init(rawValue:)) ?? .size
        let snapshot = await proxy.cache.store.listingSnapshot()
        let pages = max(1, (snapshot.count + StatusPage.pageSize - 1) / StatusPage.pageSize)
        let page = min(max(0, query["page"].flatMap(Int.init) ?? 0), pages - 1)
        let origin = proxy.origin.map { String($0.absoluteString.reversed().drop { $0 == "/" }.reversed()) }
        var rows: [StatusPage.Row] = []
        for entry in StatusPage.select(snapshot, order: order, page: page) {
            let target = origin.flatMap { entry.key.hasPrefix($0) ? String(entry.key.dropFirst($0.count)) : nil }
            rows.append(
                StatusPage.Row(
                    entry: entry, hits: target.flatMap { metrics.hits(target: $0) }, map: await proxy.cache.presentRanges(key: entry.key)))
        }
        return StatusPage.render(
            status: await status(), rows: rows, filling: await proxy.cache.filling(limit: 20), order: order, page: page,
            total: snapshot.count)
    }

    func metricsText() async -> String {
        let store = await proxy.cache.store.totals()
        let activity = await proxy.cache.activity
        let connections = connections()
        return MetricsExposition.render(
            requests: metrics.snapshot, fill: proxy.cache.statistics, activity: activity, connections: connections.open,
            rejectedConnections: connections.rejected, store: store)
    }

    /// What `POST /evict` answers.
    package struct Evicted: Codable, Sendable {
        package var evicted: [String]
        package var resources: Int
        package var allocatedBytes: Int64
    }

    /// What `GET /status` answers (and `sparsecache stats` prints).
    package struct Status: Codable, Sendable {
        package var uptimeSeconds: Int
        package var origin: String?
        package var directory: String
        package var budgetBytes: Int64
        package var allocatedBytes: Int64
        package var presentBytes: Int64
        package var resources: Int
        package var evictions: Int
        package var openResources: Int
        package var fetchesInFlight: Int
        package var readers: Int
        package var connections: Int
        package var requests: Int
        package var hits: Int
        package var bytesFromCache: Int64
        package var bytesFromOrigin: Int64
        package var originRequests: Int
    }

    package func status() async -> Status {
        let store = await proxy.cache.store.totals()
        let activity = await proxy.cache.activity
        let requests = metrics.snapshot
        return Status(
            uptimeSeconds: Int(Date().timeIntervalSince(started)), origin: proxy.origin?.absoluteString, directory: store.directory,
            budgetBytes: store.budget, allocatedBytes: store.allocatedBytes, presentBytes: store.presentBytes,
            resources: store.resourceCount, evictions: store.evictions ?? 0, openResources: activity.openResources,
            fetchesInFlight: activity.fetchesInFlight, readers: activity.readers, connections: connections().open,
            requests: requests.totalRequests, hits: requests.requests.filter { $0.key.cache == "hit" }.values.reduce(0, +),
            bytesFromCache: requests.bytesFromCache, bytesFromOrigin: requests.bytesFromOrigin,
            originRequests: ProxyMetrics.originRequests.value)
    }

    // MARK: Answers

    private func send(_ response: HTTPResponseWriter, status: Int = 200, type: String, body: [UInt8]) async throws {
        try await response.writeHead(
            status: status, headers: [("Content-Type", type), ("Cache-Control", "no-store")], contentLength: Int64(body.count),
            withFirstBody: true)
        try await response.writeBody(body)
    }

    private func sendJSON(_ response: HTTPResponseWriter, _ value: some Encodable, status: Int = 200) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let body = (try? encoder.encode(value)).map { Array($0) + [10] } ?? Array("{}\n".utf8)
        try await send(response, status: status, type: "application/json", body: body)
    }

    /// `GET /resources`: the store's resources as a ``StoreListing`` document, written chunk by
    /// chunk as the entries are made (never the whole list in memory), one entry per line.
    private func sendListing(_ response: HTTPResponseWriter) async throws {
        let snapshot = await proxy.cache.store.listingSnapshot()
        try await response.writeHead(
            status: 200, headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")], contentLength: nil)
        var listing = StoreListing(directory: snapshot.directory, budget: snapshot.budget)
        var chunk = listing.header
        for entry in snapshot {
            chunk += listing.add(entry)
            if chunk.utf8.count >= 64 << 10 {
                try await response.writeBody(Array(chunk.utf8))
                chunk = ""
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let failures = (try? encoder.encode(snapshot.housekeepingFailures)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
        chunk += listing.footer(
            allocatedBytes: snapshot.allocatedBytes, extra: ["\"evictions\":\(snapshot.evictions)", "\"housekeepingFailures\":" + failures])
        try await response.writeBody(Array(chunk.utf8))
        try await response.finishBody()
    }

    private func refuse(_ response: HTTPResponseWriter, _ status: Int, _ message: String) async throws {
        try await response.respond(status: status, message: message, headers: [("Cache-Control", "no-store")])
    }

    /// The path and the decoded query parameters of a target.
    static func split(_ target: String) -> (String, [String: String]) {
        let parts = target.split(separator: "?", maxSplits: 1)
        var query: [String: String] = [:]
        for pair in (parts.count > 1 ? parts[1] : "").split(separator: "&") {
            let nameValue = pair.split(separator: "=", maxSplits: 1)
            let value = nameValue.count > 1 ? String(nameValue[1]) : ""
            query[String(nameValue[0])] = value.removingPercentEncoding ?? value
        }
        return (parts.first.map(String.init) ?? "/", query)
    }
}
