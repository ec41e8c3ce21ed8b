import Foundation
import SparseCacheEngine

/// One line of the request log.
public struct HTTPLogEntry: Sendable, CustomStringConvertible {
    public var peer: String
    public var method: String
    public var target: String
    /// The request's Range header, if any.
    public var range: String?
    public var status: Int
    /// Body bytes sent (for HEAD, the length a GET would have sent).
    public var bytes: Int64
    /// Body bytes that were in the cache, and bytes that arrived from the origin meanwhile.
    public var cacheHitBytes: Int64
    public var cacheMissBytes: Int64
    public var duration: Duration
    /// False when the connection ended before the whole body was sent.
    public var complete: Bool
    public var note: String?

    /// The line, with the user information of any URL in it (the target, an error in the
    /// note) hidden: see ``CredentialRedaction``.
    public var description: String {
        let milliseconds = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
        var text = "\(peer) \(method) \(target) range=\(range ?? "-") \(status) \(bytes) hit=\(cacheHitBytes) miss=\(cacheMissBytes) "
        text += String(format: "%.1fms", milliseconds)
        if !complete { text += " incomplete" }
        if let note { text += " (\(note))" }
        return CredentialRedaction.redacting(text)
    }
}
