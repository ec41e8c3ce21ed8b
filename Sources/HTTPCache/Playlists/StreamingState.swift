@_spi(Locking) import SparseCacheEngine

/// The proxy's streaming state: the origins playlists named (which reverse-proxy mode may
/// fetch by `?url=`) and the segment prefetcher.
final class StreamingState: Sendable {
    let options: StreamingOptions
    /// `scheme://host:port` of every other origin a served playlist named.
    let referencedOrigins = Lock<Set<String>>([])
    let prefetcher: SegmentPrefetcher

    init(options: StreamingOptions) {
        self.options = options
        prefetcher = SegmentPrefetcher(options: options)
    }
}
