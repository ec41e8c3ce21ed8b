import Foundation
import SparseCache

/// `sparsecache stats [--cache-dir DIR] [--json | --metrics]`
enum StatsCommand: Command {
    static let name = "stats"
    static let abstract = "What a running serve is doing: requests, hits, bytes, store, in flight"
    static let overview = """
        Show what a running `sparsecache serve` is doing.

        Asks the server that owns the cache directory, on its admin listener (the address is in
        DIR/serve.admin): requests and hits, bytes from the cache and from origins, what is in
        flight, the store against its budget. Exits 69 when no server runs on the directory
        (or it was started with --admin-listen off).
        """
    static let usage = ["stats [--cache-dir DIR] [--json | --metrics]"]
    static let json = CLIOption.json("The server's status as JSON (GET /status)")
    static let metrics = CLIOption.flag("--metrics", help: "The Prometheus metrics as the server exposes them (GET /metrics)")
    static let options = [CLIOption.cacheDirectory, json, metrics]

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let directory = arguments.value(.cacheDirectory) ?? defaultCacheDirectory()
        let json = arguments.has(Self.json), metrics = arguments.has(Self.metrics)
        guard !(json && metrics) else { throw UsageError("give at most one of \(Self.json.name) and \(Self.metrics.name)") }
        guard let address = RunningServer.address(in: directory, file: RunningServer.adminFile) else {
            return SparseCacheTool.fail(
                name, "no running server with an admin listener on \(directory) (no serve.admin there)", code: "originUnavailable",
                status: ExitStatus.originUnavailable, json: json)
        }
        let body: [UInt8]
        do {
            body = try await RunningServer.get(metrics ? "/metrics" : "/status", at: address)
        } catch {
            return SparseCacheTool.fail(
                name, "the admin listener at \(address.host):\(address.port) did not answer: \(error)", code: "originUnavailable",
                status: ExitStatus.originUnavailable, json: json)
        }
        if json || metrics {
            Output.write(String(decoding: body, as: UTF8.self), to: 1)
            return ExitStatus.ok
        }
        let status = try JSONDecoder().decode(AdminService.Status.self, from: Data(body))
        let hitRatio = status.requests == 0 ? 0 : Double(status.hits) * 100 / Double(status.requests)
        Output.print("server:     up \(status.uptimeSeconds) s" + (status.origin.map { ", reverse proxy for \($0)" } ?? ", URL mode"))
        Output.print("store:      \(status.resources) resources, \(SizeParser.describe(status.allocatedBytes)) of \(status.budgetBytes == .max ? "no" : SizeParser.describe(status.budgetBytes)) budget, \(status.evictions) evicted")
        Output.print("requests:   \(status.requests), \(status.hits) hits (\(String(format: "%.1f", hitRatio))%)")
        Output.print("bytes:      \(SizeParser.describe(status.bytesFromCache)) from the cache, \(SizeParser.describe(status.bytesFromOrigin)) from origins (\(status.originRequests) origin requests)")
        Output.print("now:        \(status.connections) connections, \(status.readers) readers, \(status.fetchesInFlight) fetches in flight, \(status.openResources) open resources")
        return ExitStatus.ok
    }
}
