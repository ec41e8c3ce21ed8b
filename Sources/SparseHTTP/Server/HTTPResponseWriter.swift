import Foundation
import SparseCacheEngine
import Synchronization

/// Writes one response on a connection: a head, then a body of exactly the length the head
/// announced. For a HEAD request the body is counted but not sent.
///
/// `Sendable` so a body can be written from the closure a ``CacheReader`` calls; the writes of
/// one response are sequential, and the lock only keeps the bookkeeping consistent.
public final class HTTPResponseWriter: Sendable {
    public let request: HTTPRequestHead
    let connection: TCPConnection
    private let activity: @Sendable (_ sending: Bool) -> Void

    private struct State {
        var status = 0
        var headSent = false
        var announced: Int64 = 0
        var bodyBytes: Int64 = 0
        var closes: Bool
        var cacheHitBytes: Int64 = 0
        var cacheMissBytes: Int64 = 0
        var note: String?
        /// A head held back to go out with the first body bytes.
        var pendingHead: [UInt8]?
    }

    private let state: Mutex<State>

    init(request: HTTPRequestHead, connection: TCPConnection, closes: Bool, activity: @escaping @Sendable (_ sending: Bool) -> Void) {
        self.request = request
        self.connection = connection
        self.activity = activity
        state = Mutex(State(closes: closes || !request.keepAlive))
    }

    /// The status sent (0 before the head).
    public var status: Int { state.withLock { $0.status } }
    public var headSent: Bool { state.withLock { $0.headSent } }
    /// Body bytes written so far.
    public var bodyBytes: Int64 { state.withLock { $0.bodyBytes } }
    /// The connection closes after this response.
    public var closesConnection: Bool { state.withLock { $0.closes } }
    /// Whether the body is complete: a connection whose response fell short must close, since
    /// the client can no longer tell where the next response starts.
    var isComplete: Bool {
        let isHead = request.method == "HEAD"
        return state.withLock { $0.headSent && (isHead || $0.bodyBytes == $0.announced) }
    }
    var cacheBytes: (hit: Int64, miss: Int64) { state.withLock { ($0.cacheHitBytes, $0.cacheMissBytes) } }
    var note: String? { state.withLock { $0.note } }

    /// Counts body bytes by where they came from, for the request log.
    public func countCacheBytes(hit: Int64 = 0, miss: Int64 = 0) {
        state.withLock {
            $0.cacheHitBytes += hit
            $0.cacheMissBytes += miss
        }
    }

    /// A short text for the request log (an error's reason, say).
    public func setNote(_ note: String) {
        state.withLock { $0.note = note }
    }

    /// Sends the status line and headers. `Content-Length`, `Connection`, `Date` and `Server`
    /// are added here; `headers` holds the rest.
    ///
    /// With `withFirstBody`, the head waits for the first ``writeBody(_:)`` and goes out in the
    /// same send: one segment and one wake-up of the client for a small cached response instead
    /// of two. Only for bodies that follow at once (the server sends a head still held when the
    /// handler returns): a client waiting on a slow origin should see the head at once.
    public func writeHead(status: Int, headers: [(String, String)] = [], contentLength: Int64, withFirstBody: Bool = false) async throws {
        let hold = withFirstBody && contentLength > 0 && request.method != "HEAD"
        let head = state.withLock { state -> [UInt8]? in
            guard !state.headSent else { return nil }
            state.headSent = true
            state.status = status
            state.announced = contentLength
            var fields = HTTPHeaders([("Server", "sparsecache"), ("Date", HTTPDate.now())] + headers)
            fields.append(name: "Content-Length", value: String(contentLength))
            fields.append(name: "Connection", value: state.closes ? "close" : "keep-alive")
            let bytes = HTTPResponseHead(status: status, headers: fields).encoded()
            if hold { state.pendingHead = bytes }
            return bytes
        }
        guard let head else {
            throw SparseCacheError(
                .invalidArgument, operation: "respond", path: request.target, detail: "the response head was already sent")
        }
        if !hold { try await send(head) }
    }

    /// Sends part of the body (nothing for a HEAD request, whose handler need not call this).
    /// Throws when it would run past the announced length.
    public func writeBody(_ bytes: [UInt8]) async throws {
        let isHead = request.method == "HEAD"
        let head = try state.withLock { state -> [UInt8]? in
            guard state.headSent, state.bodyBytes + Int64(bytes.count) <= state.announced else {
                throw SparseCacheError(
                    .invalidArgument, operation: "respond", path: request.target,
                    detail: "body bytes past the announced Content-Length \(state.announced)")
            }
            state.bodyBytes += Int64(bytes.count)
            defer { state.pendingHead = nil }
            return state.pendingHead
        }
        if isHead { return }
        if let head {
            try await send(head + bytes)
        } else {
            try await send(bytes)
        }
    }

    /// Sends a head still held for the first body bytes (a handler that wrote none).
    func flush() async throws {
        let head = state.withLock { state in
            defer { state.pendingHead = nil }
            return state.pendingHead
        }
        if let head { try await send(head) }
    }

    /// A complete response with a one-line text body (errors, mostly).
    public func respond(status: Int, message: String, headers: [(String, String)] = []) async throws {
        setNote(message)
        let body = Array((message + "\n").utf8)
        try await writeHead(
            status: status, headers: [("Content-Type", "text/plain; charset=utf-8")] + headers, contentLength: Int64(body.count))
        try await writeBody(body)
    }

    private func send(_ bytes: [UInt8]) async throws {
        activity(true)
        defer { activity(false) }
        try await connection.send(bytes) { self.activity(true) }
    }
}
