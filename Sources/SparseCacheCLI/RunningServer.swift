import Foundation
import SparseCache

/// The address of the `sparsecache serve` that owns a cache directory, in `serve.address` beside
/// its catalog, so `sparsecache evict` can ask it to drop a key while it runs.
enum RunningServer {
    /// The proxy's own listener.
    static let serveFile = "serve.address"
    /// The admin listener (``AdminService``).
    static let adminFile = "serve.admin"

    static func path(in directory: String, file: String = serveFile) -> String { directory + "/" + file }

    /// Writes `host port` (replacing a stale file atomically). Best effort: without it, evict
    /// reports the lock as before.
    static func publish(host: String, port: Int, in directory: String, file: String = serveFile) {
        let temporary = path(in: directory, file: file) + ".tmp"
        guard (try? "\(host) \(port)\n".write(toFile: temporary, atomically: false, encoding: .utf8)) != nil else { return }
        if rename(temporary, path(in: directory, file: file)) != 0 { unlink(temporary) }
    }

    static func withdraw(in directory: String, file: String = serveFile) {
        unlink(path(in: directory, file: file))
    }

    /// The server's host and port, when one published them.
    static func address(in directory: String, file: String = serveFile) -> (host: String, port: Int)? {
        guard let text = try? String(contentsOfFile: path(in: directory, file: file), encoding: .utf8) else { return nil }
        let parts = text.split(whereSeparator: \.isWhitespace)
        guard parts.count == 2, let port = Int(parts[1]) else { return nil }
        return (String(parts[0]), port)
    }

    /// `PURGE <key>` (the absolute URL as the request target) to the server: its status and
    /// the first line of its answer.
    static func purge(_ key: String, at server: (host: String, port: Int)) async throws -> (Int, String) {
        let hostField = server.host.contains(":") ? "[\(server.host)]:\(server.port)" : "\(server.host):\(server.port)"
        let request = HTTPRequestHead(
            method: .purge, target: key, headers: HTTPHeaders([("Host", hostField), ("Connection", "close")]))
        let exchange = try await HTTPExchange.start(
            host: server.host, port: server.port, request: request.encoded(), name: "\(hostField)", timeout: .seconds(30),
            resolver: { BlockingExecutor(label: "sparsecache.evict") }, pool: nil)
        var body: [UInt8] = []
        while let chunk = try await exchange.nextChunk(), body.count < 4096 { body += chunk }
        exchange.cancel()
        let text = String(decoding: body, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        return (exchange.head.status, text)
    }

    /// `GET path` from the server: the body of a 2xx answer, else an error naming the status.
    static func get(_ path: String, at server: (host: String, port: Int)) async throws -> [UInt8] {
        try await ask(.get, path, at: server)
    }

    /// `GET path` from the server, handing each piece of the body of a 2xx answer to `body` as
    /// it arrives (a listing of a million resources is never held whole); an error names the
    /// status otherwise.
    static func stream(_ path: String, at server: (host: String, port: Int), _ body: ([UInt8]) throws -> Void) async throws {
        let hostField = server.host.contains(":") ? "[\(server.host)]:\(server.port)" : "\(server.host):\(server.port)"
        let request = HTTPRequestHead(method: .get, target: path, headers: HTTPHeaders([("Host", hostField), ("Connection", "close")]))
        let exchange = try await HTTPExchange.start(
            host: server.host, port: server.port, request: request.encoded(), name: hostField, timeout: .seconds(30),
            resolver: { BlockingExecutor(label: "sparsecache.admin") }, pool: nil)
        defer { exchange.cancel() }
        guard (200...299).contains(exchange.head.status) else {
            var text: [UInt8] = []
            while let chunk = try await exchange.nextChunk(), text.count < 300 { text += chunk }
            throw SparseCacheError(
                .io, operation: "GET \(path)", path: hostField,
                detail:
                    "answered \(exchange.head.status): \(String(decoding: text.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))"
            )
        }
        while let chunk = try await exchange.nextChunk() { try body(chunk) }
    }

    /// `POST path` (no body) to the server: the body of a 2xx answer.
    static func post(_ path: String, at server: (host: String, port: Int)) async throws -> [UInt8] {
        try await ask(.post, path, at: server)
    }

    private static func ask(_ method: HTTPMethod, _ path: String, at server: (host: String, port: Int)) async throws -> [UInt8] {
        let hostField = server.host.contains(":") ? "[\(server.host)]:\(server.port)" : "\(server.host):\(server.port)"
        let request = HTTPRequestHead(method: method, target: path, headers: HTTPHeaders([("Host", hostField), ("Connection", "close")]))
        let exchange = try await HTTPExchange.start(
            host: server.host, port: server.port, request: request.encoded(), name: hostField, timeout: .seconds(30),
            resolver: { BlockingExecutor(label: "sparsecache.admin") }, pool: nil)
        var body: [UInt8] = []
        while let chunk = try await exchange.nextChunk() { body += chunk }
        guard (200...299).contains(exchange.head.status) else {
            throw SparseCacheError(
                .io, operation: "\(method) \(path)", path: hostField,
                detail:
                    "answered \(exchange.head.status): \(String(decoding: body.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))"
            )
        }
        return body
    }
}
