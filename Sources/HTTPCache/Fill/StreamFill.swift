/// An origin answer of unknown length (chunked or close-delimited: a dynamic page, a live
/// playlist) on its way into the cache. One task receives the body from byte 0 and writes it
/// into the resource as it comes, committing as it goes; the length is set, and the resource
/// becomes a complete one served with ranges, only when the body has ended as its framing says.
///
/// Readers of the resource meanwhile (the client that caused it, and any that join) read what
/// is present from the file and the rest from ``buffer`` (the bytes received but not yet
/// committed): cut-through, as DESIGN.md rule 8 allows, so a client sees each chunk as it
/// arrives, not one segment or one commit later. Nothing in the buffer is ever claimed present.
///
/// A body that stops before its end (a cut connection, a timeout, every reader gone, shutdown)
/// is not a resource: it is dropped from the store, never served later as the whole.
/// Only the owning ``ProgressiveCache`` touches it, on its actor.
final class StreamFill {
    /// Its entry in ``FillResource/fetches`` (so shutdown stops and awaits it).
    let id: Int
    /// Stops the transfer at once (a stalled origin would otherwise hold the task until its
    /// timeout).
    let cancel: @Sendable () -> Void
    /// Body bytes received so far: the resource length once the body has ended.
    var received: Int64 = 0
    /// The offset of ``buffer``'s first byte: bytes before it are present in the file.
    var start: Int64 = 0
    /// The bytes from ``start`` to ``received``: received, not yet present. Bounded by what a
    /// fetch holds between commits (``FillOptions/commitEvery`` plus one partial segment).
    var buffer: [UInt8] = []
    /// Why the body stopped before its end; readers that followed it fail with it.
    var failure: Error?

    init(id: Int, cancel: @escaping @Sendable () -> Void) {
        self.id = id
        self.cancel = cancel
    }

    /// The received bytes at `offset` not yet present, at most `limit` of them; empty when
    /// `offset` is outside the buffer.
    func bytes(at offset: Int64, limit: Int64) -> [UInt8] {
        guard offset >= start, offset < received else { return [] }
        let from = Int(offset - start)
        let count = Int(min(limit, received - offset))
        return Array(buffer[from..<(from + count)])
    }
}
