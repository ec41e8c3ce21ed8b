import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// The metrics of a running `sparsecache serve` in the Prometheus text exposition format
/// (version 0.0.4): names by Prometheus conventions (`_total` for counters, `_bytes` and
/// `_seconds` for units), one `# HELP` and `# TYPE` per family.
struct MetricsExposition: Sendable {
    private var text = ""

    /// Everything one scrape shows: the proxy's requests, the fill's origin traffic, the
    /// server's connections, the store's size and the engine's disk timings.
    package static func render(
        requests: ProxyMetrics.Snapshot, fill: FillStatistics, activity: ProgressiveCache.Activity, connections: Int,
        rejectedConnections: Int, store: StoreSummary
    ) -> String {
        var out = MetricsExposition()
        out.family("sparsecache_requests_total", "counter", "Requests answered, by status and cache outcome.")
        for (key, count) in requests.requests.sorted(by: { $0.key < $1.key }) {
            out.sample("sparsecache_requests_total", ["status": String(key.status), "cache": key.cache], count)
        }
        out.family("sparsecache_responses_incomplete_total", "counter", "Responses cut short before their end.")
        out.sample("sparsecache_responses_incomplete_total", [:], requests.incomplete)
        out.family("sparsecache_response_body_bytes_total", "counter", "Response body bytes sent, by where they came from.")
        out.sample("sparsecache_response_body_bytes_total", ["source": "cache"], requests.bytesFromCache)
        out.sample("sparsecache_response_body_bytes_total", ["source": "origin"], requests.bytesFromOrigin)
        out.family("sparsecache_origin_requests_total", "counter", "Requests sent to origins.")
        out.sample("sparsecache_origin_requests_total", [:], ProxyMetrics.originRequests.value)
        out.family("sparsecache_origin_failures_total", "counter", "Origin requests that got no answer.")
        out.sample("sparsecache_origin_failures_total", [:], ProxyMetrics.originFailures.value)
        out.family("sparsecache_origin_retries_total", "counter", "Fill requests retried after a failure.")
        out.sample("sparsecache_origin_retries_total", [:], fill.retries)
        out.family(
            "sparsecache_fetch_yields_total", "counter",
            "Background transfers (prefetch, read-ahead) that gave their origin connection to a request a client waits on.")
        out.sample("sparsecache_fetch_yields_total", [:], fill.yields)
        out.family(
            "sparsecache_fetch_yielded_unread_bytes_total", "counter",
            "Bytes those transfers had asked for and not read when they yielded (the origin may have sent them anyway).")
        out.sample("sparsecache_fetch_yielded_unread_bytes_total", [:], fill.yieldedUnread)
        out.family("sparsecache_quick_hits_total", "counter", "Hits answered on the event loop, from the page cache, without a task.")
        out.sample("sparsecache_quick_hits_total", [:], fill.quickAnswers)
        out.family("sparsecache_fill_received_bytes_total", "counter", "Body bytes received by fills from origins.")
        out.sample("sparsecache_fill_received_bytes_total", [:], fill.bytesReceived)
        out.family("sparsecache_fetches_in_flight", "gauge", "Range fetches running now.")
        out.sample("sparsecache_fetches_in_flight", [:], activity.fetchesInFlight)
        out.family("sparsecache_open_resources", "gauge", "Resources open now.")
        out.sample("sparsecache_open_resources", [:], activity.openResources)
        out.family("sparsecache_connections", "gauge", "Client connections open now.")
        out.sample("sparsecache_connections", [:], connections)
        out.family("sparsecache_connections_rejected_total", "counter", "Connections refused because every slot was taken.")
        out.sample("sparsecache_connections_rejected_total", [:], rejectedConnections)
        out.family("sparsecache_store_allocated_bytes", "gauge", "Disk space the cache directory's resources take.")
        out.sample("sparsecache_store_allocated_bytes", [:], store.allocatedBytes)
        out.family("sparsecache_store_present_bytes", "gauge", "Bytes present (durable and checksummed) in the cache.")
        out.sample("sparsecache_store_present_bytes", [:], store.presentBytes)
        out.family("sparsecache_store_budget_bytes", "gauge", "The cache directory's budget.")
        out.sample("sparsecache_store_budget_bytes", [:], store.budget)
        out.family("sparsecache_store_resources", "gauge", "Resources stored.")
        out.sample("sparsecache_store_resources", [:], store.resourceCount)
        out.family("sparsecache_store_evictions_total", "counter", "Resources evicted or trimmed to keep the budget.")
        out.sample("sparsecache_store_evictions_total", [:], store.evictions ?? 0)
        out.family("sparsecache_housekeeping_failures_total", "counter", "Evictions and background releases that failed.")
        out.sample("sparsecache_housekeeping_failures_total", [:], store.housekeepingFailures?.total ?? 0)
        out.family("sparsecache_corrupt_segments_total", "counter", "Segments whose bytes failed their CRC32C when read.")
        out.sample("sparsecache_corrupt_segments_total", [:], EngineMetrics.corruptSegments.value)
        out.histogram("sparsecache_commit_duration_seconds", "Commits: data fdatasync, journal record, index sync.", EngineMetrics.commitSeconds)
        out.histogram("sparsecache_fdatasync_duration_seconds", "fdatasync calls of data and index files.", EngineMetrics.dataSyncSeconds)
        return out.text
    }

    private mutating func family(_ name: String, _ type: String, _ help: String) {
        text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
    }

    private mutating func sample(_ name: String, _ labels: [String: String], _ value: some BinaryInteger) {
        text += name + Self.labels(labels) + " \(value)\n"
    }

    private mutating func histogram(_ name: String, _ help: String, _ histogram: Histogram) {
        family(name, "histogram", help)
        let snapshot = histogram.snapshot
        var cumulative = 0
        for (bound, count) in zip(histogram.bounds, snapshot.buckets) {
            cumulative += count
            text += "\(name)_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        text += "\(name)_bucket{le=\"+Inf\"} \(snapshot.count)\n"
        text += "\(name)_sum \(snapshot.sum)\n"
        text += "\(name)_count \(snapshot.count)\n"
    }

    /// `{a="x",b="y"}` with values escaped as the format requires.
    private static func labels(_ labels: [String: String]) -> String {
        guard !labels.isEmpty else { return "" }
        let pairs = labels.sorted { $0.key < $1.key }.map { name, value in
            let escaped = value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                .replacingOccurrences(of: "\n", with: "\\n")
            return "\(name)=\"\(escaped)\""
        }
        return "{" + pairs.joined(separator: ",") + "}"
    }
}
