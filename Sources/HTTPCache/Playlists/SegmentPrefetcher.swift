import Foundation
@_spi(Locking) import SparseCacheEngine
import SparseHTTP

/// Brings the next segments of the variant a player plays into the cache before the player
/// asks for them.
///
/// A session is one player on one stream: the client's address and the stream's group (the
/// master playlist that named the media playlist, or the media playlist itself when no master
/// was seen). A media playlist served starts the session at its first segment (VOD) or at the
/// segments a player starts a live stream with (its last few); each segment the player asks
/// for moves it on. The session fetches up to its window of segments (``StreamingOptions/prefetchSegments``,
/// or from the bandwidth seen, ``StreamingOptions/automaticPrefetch``)
/// past the last one asked for, one at a time, at background priority (``ConnectionLimiter``:
/// a request a client waits on goes first, and a prefetch holding a connection yields it).
/// Prefetched segments stay open, so pinned, until the player has asked for them, switches
/// variant (a segment of another media playlist of the same group: the session starts over
/// there and the old one's fetches stop), or asks for nothing for ``StreamingOptions/pinIdle``.
final class SegmentPrefetcher: Sendable {
    let options: StreamingOptions
    private let state = Lock(State())

    init(options: StreamingOptions) {
        self.options = options
    }

    private struct State {
        /// Media playlists seen, by URL: their segments in order and their group.
        var playlists: [String: Playlist] = [:]
        var playlistOrder: [String] = []
        /// Segment URL -> (media playlist URL, index).
        var segments: [String: (playlist: String, index: Int)] = [:]
        /// Media playlist URL -> the master playlist that named it.
        var groups: [String: String] = [:]
        var sessions: [String: Session] = [:]
        var nextID = 0
    }

    private struct Playlist {
        var segments: [URL]
        /// Seconds of playing time of each segment (0: unknown).
        var durations: [Double]
        var group: String
    }

    private struct Session {
        let id: Int
        var playlist: String
        /// The last segment the player asked for (-1: none yet).
        var position: Int
        /// The next segment to prefetch.
        var next: Int
        var task: Task<Void, Never>?
        /// The task is only waiting out ``StreamingOptions/pinIdle``.
        var idle = false
        var pins: [Int: CacheReader] = [:]
        var forwarding: HTTPRangeSource.Forwarding
        var lastActivity = ContinuousClock.now
        /// The origin's speed over the stream's, as measured (nil: not yet).
        var speed: Double?
    }

    /// The most media playlists remembered.
    static let playlistCapacity = 64

    /// Whether any media playlist is known (a request for anything else costs nothing then).
    var isEmpty: Bool { state.withLock { $0.playlists.isEmpty } }

    /// Whether `url` is a segment of a playlist it knows: its requests tell it where a player is
    /// (``requested(_:proxy:exchange:)``), so they take the proxy's handler.
    func knows(_ url: URL) -> Bool { state.withLock { $0.segments[url.absoluteString] != nil } }

    /// A playlist went out to a client: remembers its variants (master) or segments (media),
    /// and starts or moves that client's session.
    func servedPlaylist(_ hls: HLSPlaylist, proxy: CachingProxy, exchange: CachingProxy.Exchange) {
        guard options.prefetches else { return }
        let key = hls.url.absoluteString
        if hls.isMaster {
            state.withLock { state in
                // Audio renditions play beside a video variant: each switch group is a stream of its own.
                for variant in hls.variants { state.groups[variant.absoluteString] = key + "#" + (hls.switchGroups[variant] ?? "") }
            }
            return
        }
        guard !hls.segments.isEmpty else { return }
        let client = Self.client(exchange)
        let closing: [CacheReader] = state.withLock { state in
            let group = state.groups[key] ?? key
            let old = Self.register(&state, key: key, segments: hls.segments, durations: hls.durations, group: group)
            let sessionKey = client + " " + group
            if var session = state.sessions[sessionKey], session.playlist == key {
                // A live reload: the window may have slid (segments dropped from the top), so
                // indexes move; the player's place is found again by the URL of the segment
                // it last asked for, and the pins move with it.
                if let old, old.segments.indices.contains(session.position),
                    let moved = hls.segments.firstIndex(of: old.segments[session.position])
                {
                    let shift = moved - session.position
                    session.position = moved
                    session.next += shift
                    session.pins = Dictionary(uniqueKeysWithValues: session.pins.map { ($0.key + shift, $0.value) })
                    state.sessions[sessionKey] = session
                }
                return []
            }
            if let switched = state.sessions.removeValue(forKey: sessionKey) {
                // A switch to this variant: the old one's fetches stop, and the new session
                // starts at the first segment the player asks for here (a player switches
                // mid-stream, not at the start).
                return Self.end(switched)
            }
            // A new session: start where a player starts.
            let closing: [CacheReader] = []
            let start = hls.ended ? 0 : max(0, hls.segments.count - 3)
            state.nextID += 1
            state.sessions[sessionKey] = Session(
                id: state.nextID, playlist: key, position: start - 1, next: start, forwarding: exchange.forwarding.withoutInterim)
            return closing
        }
        close(closing)
        // A playlist's segments are asked for right after it: start now.
        run(sessionKey: client + " " + (state.withLock { $0.playlists[key]?.group } ?? key), proxy: proxy)
    }

    /// A DASH manifest went out to a client: remembers each Representation's segments, as
    /// media playlists of one group per AdaptationSet (a player plays one Representation of
    /// each set at once: video and audio are two sessions, and switching happens within a set).
    /// Which one the player plays shows with its first segment request
    /// (``requested(_:proxy:exchange:)``), which starts the session.
    func servedManifest(_ dash: DASHManifest) {
        guard options.prefetches else { return }
        let manifest = dash.url.absoluteString
        let representations = DASHSegments(dash).representations
        guard !representations.isEmpty else { return }
        state.withLock { state in
            for (id, set, segments, durations) in representations {
                Self.register(&state, key: manifest + "#" + id, segments: segments, durations: durations, group: manifest + "#set " + set)
            }
        }
    }

    /// Remembers (or updates) media playlist `key` and returns what it was before.
    @discardableResult
    private static func register(_ state: inout State, key: String, segments: [URL], durations: [Double], group: String) -> Playlist? {
        let old = state.playlists[key]
        if let old {
            for segment in old.segments where state.segments[segment.absoluteString]?.playlist == key {
                state.segments[segment.absoluteString] = nil
            }
        } else {
            state.playlistOrder.append(key)
            if state.playlistOrder.count > playlistCapacity {
                let dropped = state.playlistOrder.removeFirst()
                if let old = state.playlists.removeValue(forKey: dropped) {
                    for segment in old.segments where state.segments[segment.absoluteString]?.playlist == dropped {
                        state.segments[segment.absoluteString] = nil
                    }
                }
            }
        }
        state.playlists[key] = Playlist(segments: segments, durations: durations, group: group)
        for (index, segment) in segments.enumerated() { state.segments[segment.absoluteString] = (key, index) }
        return old
    }

    /// A request for `url` went out to a client: when it is a known segment, the client's
    /// session moves to it (switching variant if it is another playlist's).
    func requested(_ url: URL, proxy: CachingProxy, exchange: CachingProxy.Exchange) {
        guard options.prefetches else { return }
        let client = Self.client(exchange)
        var sessionKey = ""
        let closing: [CacheReader]? = state.withLock { state in
            guard let (playlist, index) = state.segments[url.absoluteString], let group = state.playlists[playlist]?.group else {
                return nil
            }
            sessionKey = client + " " + group
            var closing: [CacheReader] = []
            if var session = state.sessions[sessionKey], session.playlist == playlist {
                // Segments it has reached are the player's now.
                for (pinned, reader) in session.pins where pinned <= index {
                    closing.append(reader)
                    session.pins[pinned] = nil
                }
                session.position = max(session.position, index)
                session.next = max(session.next, index + 1)
                session.lastActivity = .now
                state.sessions[sessionKey] = session
            } else {
                closing = state.sessions[sessionKey].map(Self.end) ?? []
                state.nextID += 1
                state.sessions[sessionKey] = Session(
                    id: state.nextID, playlist: playlist, position: index, next: index + 1, forwarding: exchange.forwarding.withoutInterim)
            }
            return closing
        }
        guard let closing else { return }
        close(closing)
        run(sessionKey: sessionKey, proxy: proxy)
    }

    /// Stops every session and lets go of its pins (the proxy is shutting down).
    func stop() async {
        let (tasks, readers) = state.withLock { state in
            let tasks = state.sessions.values.compactMap(\.task)
            let readers = state.sessions.values.flatMap { Self.end($0) }
            state.sessions.removeAll()
            return (tasks, readers)
        }
        for task in tasks { await task.value }
        for reader in readers { await reader.close() }
    }

    /// Each session's window now (for tests).
    var windows: [String: Int] {
        state.withLock { state in state.sessions.mapValues { window(of: $0) } }
    }

    /// Sessions running now, and the segments each has pinned (for tests).
    var pinnedSegments: [String: [Int]] {
        state.withLock { state in state.sessions.mapValues { $0.pins.keys.sorted() } }
    }

    // MARK: Running a session

    /// Starts the session's task unless one is fetching already.
    private func run(sessionKey: String, proxy: CachingProxy) {
        let idleTask: Task<Void, Never>? = state.withLock { state in
            guard var session = state.sessions[sessionKey] else { return nil }
            if session.task != nil, !session.idle { return nil }
            let waiting = session.task
            let id = session.id
            session.idle = false
            session.task = Task { [self] in
                await ConnectionLimiter.$priority.withValue(.background) {
                    await self.work(sessionKey: sessionKey, id: id, proxy: proxy)
                }
            }
            state.sessions[sessionKey] = session
            return waiting
        }
        idleTask?.cancel()
    }

    private func work(sessionKey: String, id: Int, proxy: CachingProxy) async {
        while !Task.isCancelled {
            let job: (index: Int, url: URL, duration: Double, forwarding: HTTPRangeSource.Forwarding)? = state.withLock { state in
                guard var session = state.sessions[sessionKey], session.id == id, let playlist = state.playlists[session.playlist],
                    session.next < playlist.segments.count, session.next <= session.position + window(of: session)
                else { return nil }
                let index = session.next
                session.next += 1
                state.sessions[sessionKey] = session
                return (index, playlist.segments[index], playlist.durations.indices.contains(index) ? playlist.durations[index] : 0, session.forwarding)
            }
            guard let job else { break }
            guard let fetched = await fetch(job.url, duration: job.duration, forwarding: job.forwarding, proxy: proxy) else { continue }
            let (reader, speed) = fetched
            if let speed {
                state.withLock { state in
                    guard var session = state.sessions[sessionKey], session.id == id else { return }
                    // Smoothed: one slow or fast segment moves the window by half its own say.
                    session.speed = session.speed.map { ($0 + speed) / 2 } ?? speed
                    state.sessions[sessionKey] = session
                }
            }
            let kept = state.withLock { state -> Bool in
                guard var session = state.sessions[sessionKey], session.id == id, job.index > session.position else { return false }
                session.pins[job.index] = reader
                state.sessions[sessionKey] = session
                return true
            }
            if !kept { await reader.close() }
        }
        // Fetched up to the window: wait for the player, and let the pins go if it never comes.
        let started: Bool = state.withLock { state in
            guard var session = state.sessions[sessionKey], session.id == id else { return false }
            session.idle = true
            state.sessions[sessionKey] = session
            return true
        }
        guard started, !Task.isCancelled else { return }
        try? await Task.sleep(for: options.pinIdle)
        if Task.isCancelled { return }
        let closing: [CacheReader] = state.withLock { state in
            guard let session = state.sessions[sessionKey], session.id == id, session.idle,
                ContinuousClock.now - session.lastActivity >= options.pinIdle
            else { return [] }
            state.sessions[sessionKey] = nil
            return Array(session.pins.values)
        }
        close(closing)
    }

    /// How many segments ahead of the player the session fetches.
    private func window(of session: Session) -> Int {
        if let fixed = options.prefetchSegments { return fixed }
        let automatic = options.automaticPrefetch
        guard let speed = session.speed else { return automatic.initial }
        let segments = speed.isFinite ? Int(min(speed.rounded(.up), 1_000)) : automatic.range.upperBound
        return min(max(segments, automatic.range.lowerBound), automatic.range.upperBound)
    }

    /// Brings one segment (of `duration` seconds) into the cache and returns it open
    /// (pinned), with the origin's speed over the stream's when this fetch measured it; nil
    /// when it cannot be stored (the origin's answer is not one to cache) or the fetch failed
    /// or was stopped.
    private func fetch(
        _ url: URL, duration: Double, forwarding: HTTPRangeSource.Forwarding, proxy: CachingProxy
    ) async -> (CacheReader, Double?)? {
        guard let base = try? proxy.source(for: url) else { return nil }
        let source = ProxiedSource(base: base, key: CachingProxy.cacheKey(url), forwarding: forwarding)
        let reader: CacheReader
        do {
            reader = try await proxy.cache.open(source)
        } catch let answer as OriginAnswer {
            if answer.claim() { answer.cancel() }
            return nil
        } catch {
            return nil
        }
        let length = reader.length
        let missing = (try? await reader.missingRanges(in: 0..<length))?.reduce(Int64(0)) { $0 + Int64($1.count) } ?? 0
        let started = ContinuousClock.now
        do {
            try await proxy.cache.prefetch(source)
        } catch {
            await reader.close()
            return nil
        }
        // Bytes per second from the origin over the segment's bytes per second of playing
        // time; only from a transfer long enough to say something.
        let elapsed = (ContinuousClock.now - started) / .seconds(1)
        guard missing >= Self.measuredBytes, duration > 0, length > 0, elapsed > 0 else { return (reader, nil) }
        return (reader, (Double(missing) / elapsed) / (Double(length) / duration))
    }

    /// The least a prefetch must bring from the origin to measure its speed.
    static let measuredBytes: Int64 = 64 << 10

    private static func end(_ session: Session) -> [CacheReader] {
        session.task?.cancel()
        return Array(session.pins.values)
    }

    private func close(_ readers: [CacheReader]) {
        guard !readers.isEmpty else { return }
        Task {
            for reader in readers { await reader.close() }
        }
    }

    /// The client's address without its port: one player.
    private static func client(_ exchange: CachingProxy.Exchange) -> String {
        let peer = exchange.response.peer
        guard let colon = peer.lastIndex(of: ":") else { return peer }
        return String(peer[..<colon])
    }
}
