// The HTTP caching tests' bench: the scripted origin, the proxy in process in front of it, and
// curl through the proxy. Helpers, not tests: no assertions here.
import Foundation
import HTTPCache
import SparseHTTP
import Synchronization
import TestSupport

/// A scripted origin (``OriginServer/scripted(root:)``) with a ``ProxyFixture`` in front of it.
final class ScriptedProxy: Sendable {
    let files: TemporaryDirectory
    let origin: OriginServer
    let proxy: ProxyFixture
    /// Requests made through ``get(_:_:timeout:)``.
    private let asked = Atomic<Int>(0)

    init(options: HTTPServer.Options = ProxyFixture.defaultOptions, fill: FillOptions = .testing, cors: CORSPolicy? = nil) async throws {
        files = try TemporaryDirectory("scripted-origin")
        origin = try await OriginServer.scripted(root: files.path)
        do {
            proxy = try await ProxyFixture(origin: origin.baseURL, options: options, fill: fill, cors: cors)
        } catch {
            origin.stop()
            throw error
        }
    }

    /// Scripts `/<name>`: `status`, `headers` in order, `body`; `conditional` answers matching
    /// If-None-Match / If-Modified-Since with 304. `adjust` sets the rest of the script.
    func script(
        _ name: String, status: Int = 200, _ headers: [(String, String)], body: String = "", conditional: Bool = true,
        adjust: (inout OriginScript) -> Void = { _ in }
    ) throws {
        var script = OriginScript(status: status, headers: headers, body: body, conditional: conditional)
        adjust(&script)
        try script.write(root: files.path, name: name)
    }

    /// Scripts `/<name>` with a whole ``OriginScript``.
    func script(_ name: String, _ script: OriginScript) throws {
        try script.write(root: files.path, name: name)
    }

    /// curl through the proxy for `/<name>`, with curl `arguments` (e.g. `["-H", "If-None-Match: \"v1\""]`).
    func get(_ name: String, _ arguments: [String] = [], timeout: Int = 90) async throws -> CurlResult {
        asked.add(1, ordering: .relaxed)
        return try await Curl.run(proxy.baseURL + "/" + name, arguments, timeout: timeout)
    }

    /// How many answers the proxy gave on its event loop, once it has logged every request
    /// made through ``get(_:_:timeout:)``: the server counts a quick answer after its bytes went
    /// out and logs the request after that, so curl can have the whole answer first.
    var quickAnswers: Int {
        get async throws {
            try await waitUntil("the proxy logged \(proxy.log.all.count) of \(asked.load(ordering: .relaxed)) requests") {
                proxy.log.all.count >= asked.load(ordering: .relaxed)
            }
            return proxy.cache.statistics.quickAnswers
        }
    }

    /// curl straight to the origin (what the origin itself answers), for `/<name>`.
    func direct(_ name: String, _ arguments: [String] = []) async throws -> CurlResult {
        try await Curl.run(origin.url(name).absoluteString, arguments, timeout: 30)
    }

    /// The requests for `/<name>` (query aside) that reached the origin, oldest first.
    func requests(_ name: String) -> [OriginServer.LoggedRequest] {
        origin.requestLog().filter { $0.path.split(separator: "?", maxSplits: 1).first.map(String.init) == "/" + name }
    }

    /// How many requests for `/<name>` reached the origin.
    func count(_ name: String) -> Int { requests(name).count }

    func stop() async {
        await proxy.stop()
        origin.stop()
        files.remove()
    }

    /// An IMF-fixdate (RFC 9110 5.6.7) `offset` seconds from now.
    static func httpDate(_ offset: TimeInterval) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSinceNow: offset).rounded())
    }
}

extension Date {
    /// Whole seconds, as HTTP dates carry.
    fileprivate func rounded() -> Date { Date(timeIntervalSince1970: timeIntervalSince1970.rounded(.down)) }
}

extension CurlResult {
    /// The body as UTF-8 text.
    var text: String { String(decoding: body, as: UTF8.self) }

    /// The members of our `Cache-Status` entry (RFC 9211): for `sparsecache; fwd=stale;
    /// fwd-status=304` that is `["fwd=stale", "fwd-status=304"]`; empty without one.
    var cacheStatus: [String] {
        guard let field = headers["cache-status"] else { return [] }
        let ours = field.split(separator: ",").last { $0.trimmingCharacters(in: .whitespaces).hasPrefix("sparsecache") } ?? ""
        return ours.split(separator: ";").dropFirst().map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
    }

    /// Whether our Cache-Status entry is a hit (`hit`, nothing forwarded).
    var isHit: Bool { cacheStatus.contains("hit") && !cacheStatus.contains { $0.hasPrefix("fwd=") } }
}
