import Foundation
import SparseCacheBase

/// One line of the request log.
public struct HTTPLogEntry: Sendable, CustomStringConvertible {
    public var peer: String
    public var method: HTTPMethod
    public var target: String
    /// The request's Range header, if any.
    public var range: String?
    public var status: Int
    /// Body bytes sent (for HEAD, the length a GET would have sent).
    public var bytes: Int64
    /// Body bytes that were in the cache, and bytes that arrived from the origin meanwhile.
    package var cacheHitBytes: Int64
    package var cacheMissBytes: Int64
    public var duration: Duration
    /// False when the connection ended before the whole body was sent.
    public var complete: Bool
    public var note: String?
    /// What a cache made of the request (`hit`, `miss`, `stale`, `revalidated`, `pass`,
    /// `error`), when a cache answered it.
    package var cacheOutcome: String? = nil
    /// The request's number in this server, from 1: what ties a log line to a client's report.
    package var id: Int = 0
    /// When the request head was complete (seconds since 1970).
    package var time: Double = 0

    /// The line, with the user information of any URL in it (the target, an error in the
    /// note) hidden: see ``CredentialRedaction``.
    public var description: String {
        let milliseconds = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
        var text = "\(peer) \(method) \(target) range=\(range ?? "-") \(status) \(bytes) hit=\(cacheHitBytes) miss=\(cacheMissBytes) "
        text += String(format: "%.1fms", milliseconds)
        if let cacheOutcome { text += " " + cacheOutcome }
        if !complete { text += " incomplete" }
        if let note { text += " (\(note))" }
        return CredentialRedaction.redacting(text)
    }

    /// The entry as one line of JSON (`--log-format json`), credentials hidden as in the text
    /// form.
    public var json: String {
        var fields: [(String, String)] = [
            ("id", String(id)), ("time", String(format: "%.3f", time)), ("peer", Self.quoted(peer)), ("method", Self.quoted(method.rawValue)),
            ("target", Self.quoted(CredentialRedaction.redacting(target))), ("range", range.map(Self.quoted) ?? "null"),
            ("status", String(status)), ("bytes", String(bytes)), ("hit_bytes", String(cacheHitBytes)),
            ("miss_bytes", String(cacheMissBytes)),
            ("duration_ms", String(format: "%.3f", Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15)),
            ("complete", complete ? "true" : "false"), ("cache", cacheOutcome.map(Self.quoted) ?? "null"),
        ]
        if let note { fields.append(("note", Self.quoted(CredentialRedaction.redacting(note)))) }
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }

    /// A JSON string literal.
    static func quoted(_ text: String) -> String { JSONText.quoted(text) }
}
