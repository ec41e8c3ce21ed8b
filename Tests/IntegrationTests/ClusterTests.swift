// Scale-out as docs/DEPLOY.md sets it up: sparsecache nodes behind nginx with consistent
// hashing of the request URI (each URL lives on one node, so the origin sends each byte once for
// the whole cluster), a node killed mid-run, and two tiers (edge sparsecache -> parent
// sparsecache -> origin). Real nginx in front, real nginx as the origin, curl as the client.
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

@Suite("serve: nodes behind nginx, two tiers", .tags(.external, .slow), .unlessSkippingExternal, .unlessSkippingSlow, .serialized, .timeLimit(.minutes(8)))
struct ClusterTests {
    /// nginx in front of `nodes`, spreading URLs over them by `hash $request_uri consistent`
    /// and going on to the next node when one refuses (the config of docs/DEPLOY.md). Each
    /// answer names the node in `X-Node`.
    static func front(nodes: [String]) async throws -> OriginServer {
        let work = try TemporaryDirectory("nginx-front")
        let port = try Loopback.freePort()
        let servers = nodes.map { "server \($0.replacingOccurrences(of: "http://", with: "")) max_fails=1 fail_timeout=60s;" }
        let upstream = "upstream caches {\n hash $request_uri consistent;\n \(servers.joined(separator: "\n "))\n keepalive 16;\n}"
        let location = """
            location / {
                proxy_pass http://caches;
                proxy_http_version 1.1;
                proxy_set_header Connection "";
                proxy_set_header Host $http_host;
                proxy_next_upstream error timeout http_502;
                proxy_buffering off;
                add_header X-Node $upstream_addr always;
            }
            """
        let log = work.file("logs/access.log")
        let process = try NginxServer.process(root: work.path, work: work.path, port: port, accessLog: log, locations: location, http: upstream)
        return try await OriginServer.launch(process, root: work.path, port: port, work: work, log: log)
    }

    /// Origin body bytes sent per path, from the origin's log.
    static func originBytes(_ origin: OriginServer) -> [String: Int64] {
        origin.requests().reduce(into: [:]) { $0[$1.path, default: 0] += $1.bytes }
    }

    @Test("3 nodes behind nginx: each URL on one node, each byte from the origin once for the cluster; a killed node's URLs move to the others, nothing wrong is served")
    func threeNodes() async throws {
        let files = try TemporaryDirectory("cluster-origin")
        defer { files.remove() }
        var contents: [String: [UInt8]] = [:]
        for index in 0..<12 {
            let name = "part\(index).bin"
            contents[name] = try originFile(files.path, name, count: 100_000 + index * 7_919, seed: UInt64(index + 1))
        }
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let scratch = try CLIScratch("cluster")
        var nodes: [(RunningCLI, String)] = []
        for index in 0..<3 {
            nodes.append(try await ServeProcess.start(cacheDir: scratch.file("node\(index)"), origin: origin.baseURL, extra: ["--quiet"]))
        }
        let front = try await Self.front(nodes: nodes.map(\.1))
        defer { front.stop() }
        let names = contents.keys.sorted()

        func playAll() async throws -> [String: String] {
            var placement: [String: String] = [:]
            for name in names {
                let result = try await Curl.run(front.baseURL.absoluteString + "/" + name)
                #expect(result.status == 200 && result.body == contents[name], "\(name) through the cluster: \(result)")
                placement[name] = result.headers["x-node"]
            }
            return placement
        }

        let first = try await playAll()
        #expect(Set(first.values).count >= 2, "URLs spread over the nodes: \(first)")
        for (name, bytes) in Self.originBytes(origin) {
            #expect(bytes == Int64(contents[String(name.dropFirst())]?.count ?? -1), "\(name): each byte once from the origin for the whole cluster")
        }
        let originRequests = origin.requests().count
        let second = try await playAll()
        #expect(second == first, "a URL stays on its node")
        #expect(origin.requests().count == originRequests, "the second round is all hits")

        // Kill the node with the most URLs: nginx finds it refusing and goes on to the next.
        let counts = Dictionary(grouping: first.keys, by: { first[$0]! })
        let victim = counts.max { $0.value.count < $1.value.count }!.key
        let index = nodes.firstIndex { $0.1.hasSuffix(victim) }!
        nodes[index].0.kill()
        _ = try await nodes[index].0.finish()
        let before = Self.originBytes(origin)
        let third = try await playAll()
        for name in names {
            if first[name] == victim {
                #expect(third[name] != victim, "\(name) moved off the dead node")
            } else {
                #expect(third[name] == first[name], "\(name) stays where it was: only the dead node's URLs move")
            }
        }
        let after = Self.originBytes(origin)
        for name in names {
            let added = (after["/" + name] ?? 0) - (before["/" + name] ?? 0)
            let expected = first[name] == victim ? Int64(contents[name]!.count) : 0
            #expect(added == expected, "\(name): origin bytes after the kill \(added), expected \(expected)")
        }
        for (node, _) in nodes where node.process.isRunning {
            node.kill()
            _ = try await node.finish()
        }
    }

    @Test("two tiers (edge -> parent -> origin): bytes right, Via and Cache-Status name both caches, a second request is an edge hit that asks nobody")
    func twoTiers() async throws {
        let files = try TemporaryDirectory("tiers-origin")
        defer { files.remove() }
        let movie = try originFile(files.path, "movie.bin", count: 600_000, seed: 9)
        let origin = try await OriginServer.nginx(root: files.path, locations: "expires 1h;")
        defer { origin.stop() }
        let scratch = try CLIScratch("tiers")
        let parentDir = scratch.file("parent")
        let (parent, parentBase) = try await ServeProcess.start(cacheDir: parentDir, origin: origin.baseURL, extra: ["--quiet"])
        let (edge, edgeBase) = try await ServeProcess.start(cacheDir: scratch.file("edge"), origin: URL(string: parentBase)!, extra: ["--quiet"])

        let first = try await Curl.run(edgeBase + "/movie.bin")
        #expect(first.status == 200 && first.body == movie, "\(first)")
        let via = first.headers["via"] ?? ""
        #expect(via.components(separatedBy: "sparsecache").count - 1 == 2, "Via names both caches: \(via)")
        let range = try await Curl.run(edgeBase + "/movie.bin", ["-r", "100000-100099"])
        #expect(range.status == 206 && range.body == Array(movie[100_000..<100_100]), "\(range)")
        #expect(Self.originBytes(origin)["/movie.bin"] == Int64(movie.count), "the origin sent each byte once")

        let admin = try await AdminTests.adminBase(parentDir)
        let parentBefore = try await AdminTests.scrape(admin) { _ in true }["sparsecache_requests_total{cache=\"miss\",status=\"200\"}"]
        let again = try await Curl.run(edgeBase + "/movie.bin")
        #expect(again.body == movie, "\(again)")
        #expect(again.headers["cache-status"]?.components(separatedBy: ",").last?.contains("hit") == true, "the edge's own entry is last, a hit: \(again.headers)")
        let parentMetrics = try await AdminTests.scrape(admin) { _ in true }
        let parentRequests = parentMetrics.filter { $0.key.hasPrefix("sparsecache_requests_total{") }.values.reduce(0, +)
        #expect(parentMetrics["sparsecache_requests_total{cache=\"miss\",status=\"200\"}"] == parentBefore, "the parent was not asked again")
        #expect(parentRequests >= 1)
        for server in [edge, parent] {
            server.kill()
            _ = try await server.finish()
        }
    }
}
