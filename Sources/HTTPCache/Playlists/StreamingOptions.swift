/// How `sparsecache serve` helps adaptive streaming (docs/STREAMING.md).
public struct StreamingOptions: Sendable {
    /// Segments fetched ahead of a player: after it gets a media playlist, and after each
    /// segment it asks for, the next this many segments of that variant are brought into the
    /// cache (and pinned while they are ahead of it). 0 turns prefetch off. Nil (the default):
    /// from the bandwidth seen (``automaticPrefetch``).
    public var prefetchSegments: Int? = nil

    /// The automatic prefetch window: how many segments ahead of the player, from the origin's
    /// speed relative to the stream's. Each prefetch that brings at least 64 KiB from the origin
    /// measures it: bytes per second over the segment's bytes per second of playing time (its
    /// `EXTINF`, or its duration in the DASH manifest). The window is as many segments as the
    /// origin delivers while one plays, rounded up, within `range`: an origin that barely keeps
    /// up gets 1 (prefetch would compete with the player for it), a fast one the upper end (it
    /// costs little). `initial` until the first measurement.
    public var automaticPrefetch = (initial: 3, range: 1...8)

    /// Whether segments are prefetched at all.
    var prefetches: Bool { prefetchSegments.map { $0 > 0 } ?? true }
    /// How long prefetched segments stay pinned after the player's last request: a player
    /// that stopped releases them after this.
    public var pinIdle: Duration = .seconds(60)

    public init() {}
}
