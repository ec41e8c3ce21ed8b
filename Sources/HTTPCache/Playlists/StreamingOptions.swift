/// How `sparsecache serve` helps adaptive streaming (docs/STREAMING.md).
public struct StreamingOptions: Sendable {
    /// Segments fetched ahead of a player: after it gets a media playlist, and after each
    /// segment it asks for, the next this many segments of that variant are brought into the
    /// cache (and pinned while they are ahead of it). 0 turns prefetch off. Default 3: about
    /// what HLS players themselves keep buffered (three target durations).
    public var prefetchSegments = 3
    /// How long prefetched segments stay pinned after the player's last request: a player
    /// that stopped releases them after this.
    public var pinIdle: Duration = .seconds(60)

    public init() {}
}
