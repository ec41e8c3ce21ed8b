/// An origin answer of unknown length (chunked or close-delimited: a dynamic page, a live
/// playlist) on its way into the cache. One task receives the body from byte 0 and writes it
/// into the resource as it comes, committing as it goes; the length is set, and the resource
/// becomes a complete one served with ranges, only when the body has ended as its framing says.
///
/// Readers of the resource meanwhile (the client that caused it, and any that join) read what
/// is present from the file and the rest from ``arrived`` (the bytes received but not yet
/// committed), as readers of a range fetch do: cut-through, as docs/DURABILITY.md allows ("Delivery is not a claim"), so a
/// client sees each chunk as it arrives, not one segment or one commit later. Nothing held
/// there is ever claimed present.
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
    /// The bytes received and not yet present (from byte 0 on); its ``ArrivedBytes/end`` is the
    /// resource length once the body has ended.
    let arrived = ArrivedBytes(at: 0)
    /// Why the body stopped before its end; readers that followed it fail with it.
    var failure: Error?

    init(id: Int, cancel: @escaping @Sendable () -> Void) {
        self.id = id
        self.cancel = cancel
    }
}
