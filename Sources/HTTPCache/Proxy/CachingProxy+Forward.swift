import Foundation
import SparseCacheEngine
import SparseHTTP

/// The proxy's requests to the origin: revalidation of stored responses, and answers passed on
/// as they came.
extension CachingProxy {
    /// What a revalidation found (RFC 9111, section 4.3).
    enum Revalidation: Sendable {
        /// The stored response is still the origin's: its head, freshened, is now stored.
        case freshened(StoredHead, status: Int)
        /// The origin has another version: the stored one was dropped. When the origin sent
        /// the new version in answer, `response` holds it for the first contact of the new
        /// resource (one origin request, not a second one to fetch what just arrived).
        case changed(status: Int, response: PreparedResponse?)
        /// The origin answered with something else (an error page, a response not to store);
        /// a 2xx or 4xx dropped the stored response, a 5xx did not.
        case answered(OriginAnswer)
        /// The origin could not be asked.
        case failed(Error)
    }

    /// Starts (or joins) the revalidation of `key`: one conditional request however many
    /// clients find it stale at once.
    ///
    /// - Parameter first: what the client that starts it would ask a first contact for: the
    ///   revalidation asks the same, so that a new version's answer serves as that first
    ///   contact. Nil (a background revalidation nobody waits on) asks for the first segment.
    func startRevalidation(
        key: String, policy: CachePolicy, length: Int64, source: ProxiedSource, first: FirstRequest?
    ) -> Task<Revalidation, Never> {
        revalidations.task(for: key) {
            Task { [self] in
                let outcome = await revalidate(key: key, policy: policy, length: length, source: source, first: first)
                revalidations.remove(key)
                return outcome
            }
        }
    }

    /// One conditional request (`If-None-Match` / `If-Modified-Since`, RFC 9111 section 4.3.1)
    /// for what a first contact asks for (the first segment): a `304`, or a `2xx` of the same
    /// version, freshens the stored head; another version drops the stored one, and its answer
    /// becomes the new resource's first contact instead of being asked for again.
    private func revalidate(key: String, policy: CachePolicy, length: Int64, source: ProxiedSource, first: FirstRequest?) async
        -> Revalidation
    {
        var headers = source.forwarding.headers
        for field in policy.revalidationHeaders { headers.append(name: field.name, value: field.value) }
        let clock = ExchangeTimes()
        let response: RangeResponse
        var forwarding = source.forwarding
        forwarding.headers = headers
        // A client's range: what first contact would ask for it. The whole (or nobody waiting):
        // the first segment only, so that an origin without conditional requests sends little
        // when the version is the same; an origin that answers with all of it anyway (a 200
        // that ignores Range) hands that answer to the whole-resource first contact.
        let firstSegment = 0..<Int64(cache.store.options.segmentSize)
        let asked = first.flatMap { cache.firstContactRange(for: $0) } ?? firstSegment
        do {
            response = try await source.base.fetch(asked, validator: nil, forwarding: forwarding)
        } catch let error as OriginError where error.status == 416 {
            // The client's range is past the end of what the origin has now: not the stored
            // version (a match would have been a 304 whatever the range, RFC 9110 13.2.2).
            _ = try? await cache.invalidate(key: key)
            return .changed(status: 416, response: nil)
        } catch let answer as OriginAnswer {
            let (requestTime, responseTime) = clock.finished()
            if answer.head.status == 304 {
                // No body: reading its end finishes the exchange, and the connection is reused.
                do { for try await _ in answer.body {} } catch { answer.cancel() }
                if let fresh = policy.freshened(by: answer.head, requestTime: requestTime, responseTime: responseTime) {
                    let head = fresh.storedHead
                    do {
                        if try await cache.updateStoredHead(key: key, head) { return .freshened(head, status: 304) }
                    } catch {
                        return .failed(error)
                    }
                }
                _ = try? await cache.invalidate(key: key)
                return .changed(status: 304, response: nil)
            }
            if !HTTPStatus(answer.head.status).isServerError { _ = try? await cache.invalidate(key: key) }
            return .answered(answer)
        } catch {
            return .failed(error)
        }
        let stored = policy.response.headers
        if let fresh = response.info.stored, Self.sameVersion(fresh.headers, stored), response.info.length == length,
            (try? await cache.updateStoredHead(key: key, fresh)) == true
        {
            response.cancel()
            return .freshened(fresh, status: response.info.stored?.status ?? 200)
        }
        _ = try? await cache.invalidate(key: key)
        return .changed(status: response.info.stored?.status ?? 200, response: PreparedResponse(response, asked: asked))
    }

    /// Whether a new response shows the same version as the stored one: an equal strong entity
    /// tag, or (both without one) an equal `Last-Modified`. Without any validator nothing
    /// proves it, and the stored bytes are dropped rather than mixed with the new ones.
    static func sameVersion(_ new: HTTPHeaders, _ stored: HTTPHeaders) -> Bool {
        if let etag = new["etag"], let old = stored["etag"] { return Precondition.strongMatch(etag, old) }
        if new["etag"] != nil || stored["etag"] != nil { return false }
        guard let modified = new["last-modified"], let old = stored["last-modified"] else { return false }
        return modified == old
    }

    /// A stale (or client-refused) stored response: ask the origin, then answer.
    func revalidateAndAnswer(_ reader: CacheReader, policy: CachePolicy, source: ProxiedSource, _ exchange: Exchange) async throws {
        let outcome = await startRevalidation(
            key: source.key, policy: policy, length: reader.length, source: source, first: Self.firstRequest(for: exchange.request)
        ).value
        switch outcome {
        case .freshened(let head, let status):
            let fresh = head.policy
            let age = fresh.currentAge(now: exchange.now)
            exchange.status.forwardStatus = status
            exchange.status.ttl = fresh.freshnessLifetime - age
            try await send(reader, head: head, age: age, exchange)
        case .changed(let status, let response):
            await reader.close()
            exchange.status.forwardStatus = status
            try await fetchAndAnswer(response.map { source.answered(by: $0) } ?? source, exchange)
        case .answered(let answer):
            exchange.status.forwardStatus = answer.head.status
            if HTTPStatus(answer.head.status).isServerError, policy.mayServeStaleOnError(now: exchange.now) {
                if answer.claim() { answer.cancel() }
                exchange.status.detail = "stale-if-error"
                exchange.status.stale = true
                try await send(reader, head: policy.storedHead, age: policy.currentAge(now: exchange.now), exchange)
                return
            }
            await reader.close()
            try await passOn(answer, exchange)
        case .failed(let error):
            if policy.mayServeStaleOnError(now: exchange.now) || policy.mayServeStaleWhenDisconnected {
                exchange.status.detail = "stale: the origin cannot be reached"
                exchange.status.stale = true
                try await send(reader, head: policy.storedHead, age: policy.currentAge(now: exchange.now), exchange)
                return
            }
            throw error
        }
    }

    /// Hands an origin's answer to the client as it came (without hop-by-hop fields), or, when
    /// another client already took this shared answer or it answered another request (a
    /// first contact's range), asks the origin again with the client's own request.
    func passOn(_ answer: OriginAnswer, _ exchange: Exchange) async throws {
        exchange.status.forwardStatus = answer.head.status
        exchange.status.detail = answer.reason
        var head = answer.head
        let status = head.status
        // A part whose Content-Length is not the length its Content-Range gives (RFC 9110,
        // sections 14.4 and 15.3.7.1): which of the two lies is unknowable, and a client would
        // get a part cut short. Refused, as nginx and Varnish refuse a malformed upstream answer.
        if status == 206, case .length(let count) = head.framing,
            let sent = head.headers["content-range"].flatMap(ContentRange.init)?.range, Int64(sent.count) != count
        {
            if answer.claim() { answer.cancel() }
            throw OriginError(
                .badAnswer, operation: "fetch", key: exchange.target,
                detail: "the origin's 206 has Content-Range '\(head.headers["content-range"] ?? "")' (\(sent.count) bytes) "
                    + "but Content-Length \(count)")
        }
        // The proxy asked for a range of its own: a 206 answers the client only when it holds
        // the whole representation and the client asked for no range (it is then the 200).
        if status == 206, exchange.request.header("range") == nil,
            let range = head.headers["content-range"].flatMap(ContentRange.init), let total = range.total,
            range.range == 0..<total
        {
            head.status = 200
            head.reason = "OK"
            head.headers.remove("content-range")
        }
        // A 206 to first contact's request for the client's own range: the client's part of it
        // is the answer (its start when the client asked on to the end: RFC 9110, section
        // 15.3.7 leaves a client that gets less than it asked to ask again).
        var part: (skip: Int64, range: Range<Int64>, total: Int64)?
        if head.status == 206, let header = exchange.request.header("range"),
            let contentRange = head.headers["content-range"].flatMap(ContentRange.init), let sent = contentRange.range,
            let total = contentRange.total, case .single(let wanted) = RangeRequest.parse(header, length: total),
            sent.contains(wanted.lowerBound)
        {
            part = (wanted.lowerBound - sent.lowerBound, wanted.lowerBound..<min(wanted.upperBound, sent.upperBound), total)
        }
        let usable = (head.status != 206 || part != nil) && status != 304
        guard usable, answer.claim() else {
            if answer.claim() { answer.cancel() }
            try await passThrough(exchange)
            return
        }
        var whole = answer
        whole.head = head
        if let part, part.skip > 0 || head.framing != .length(Int64(part.range.count)) {
            whole = Self.slice(whole, skip: part.skip, range: part.range, total: part.total)
        }
        try await stream(whole, exchange)
    }

    /// The part `range` of a 206 answer whose body starts `skip` bytes before it: the same head
    /// with its Content-Range and Content-Length for the part, the body cut to it.
    static func slice(_ answer: OriginAnswer, skip: Int64, range: Range<Int64>, total: Int64) -> OriginAnswer {
        var head = answer.head
        head.headers.remove("content-range")
        head.headers.remove("content-length")
        head.headers.append(name: "Content-Range", value: "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(total)")
        head.headers.append(name: "Content-Length", value: String(range.count))
        let source = answer.body
        let cancel = answer.cancel
        let body = AsyncThrowingStream<[UInt8], Error> { continuation in
            let task = Task {
                var toSkip = skip
                var left = Int64(range.count)
                do {
                    for try await chunk in source {
                        var bytes = chunk[...]
                        if toSkip > 0 {
                            let dropped = Int(min(Int64(bytes.count), toSkip))
                            bytes = bytes.dropFirst(dropped)
                            toSkip -= Int64(dropped)
                        }
                        if bytes.isEmpty { continue }
                        let take = Int(min(Int64(bytes.count), left))
                        continuation.yield(Array(bytes.prefix(take)))
                        left -= Int64(take)
                        if left == 0 { break }
                    }
                    // The rest of the origin's part is not the client's: the exchange stops.
                    if left == 0 { cancel() }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
        return OriginAnswer(head: head, body: body, cancel: cancel, reason: answer.reason)
    }

    /// The client's request sent on as it is (its range and conditionals included), the answer
    /// streamed back, nothing stored.
    func passThrough(_ exchange: Exchange) async throws {
        var headers = exchange.forwarding.headers
        for name in ["range", "if-range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since"] {
            for value in exchange.request.headers.values(name) { headers.append(name: name, value: value) }
        }
        do {
            let response = try await exchange.base.fetch(
                nil, validator: nil, forwarding: .init(headers: headers, passOn: true, via: exchange.forwarding.via))
            response.cancel()
            throw OriginError(.badAnswer, operation: "fetch", key: exchange.target, detail: "a passed-on request came back as cacheable")
        } catch let answer as OriginAnswer {
            exchange.status.forwardStatus = answer.head.status
            try await stream(answer, exchange)
        }
    }

    /// Streams an origin's answer to the client: its end-to-end fields with `Via` and
    /// `Cache-Status`, its body with its length when it had one, chunked (or until close) else.
    func stream(_ answer: OriginAnswer, _ exchange: Exchange) async throws {
        let response = exchange.response
        var headers = answer.head.headers.removingHopByHop()
        headers.remove("content-length")
        let length: Int64?
        switch answer.head.framing {
        case .length(let count): length = count
        case .none: length = 0
        case .chunked, .untilClose: length = nil
        }
        do {
            try await response.writeHead(
                status: answer.head.status, headers: proxyFields(headers, status: exchange.status, via: via.element), contentLength: length)
            if exchange.request.method == .head || length == 0 {
                answer.cancel()
                return
            }
            for try await chunk in answer.body {
                response.countCacheBytes(miss: Int64(chunk.count))
                try await response.writeBody(chunk)
            }
            try await response.finishBody()
        } catch {
            answer.cancel()
            throw error
        }
    }
}

/// A proxy client's view of an origin resource: the shared ``HTTPRangeSource`` of its URL, the
/// cache key (the URL without credentials, or one of its `Vary` variants) and the client's
/// request fields to forward.
struct ProxiedSource: RangeSource {
    let base: HTTPRangeSource
    let key: String
    var forwarding: HTTPRangeSource.Forwarding
    /// An answer that already arrived (a revalidation's new version): the first fetch it
    /// fits takes it instead of asking the origin.
    var prepared: PreparedResponse? = nil

    var partsNeedStrongValidator: Bool { true }

    func fetch(_ range: Range<Int64>?, validator: ContentValidator?) async throws -> RangeResponse {
        if let response = prepared?.take(for: range) { return response }
        return try await base.fetch(range, validator: validator, forwarding: forwarding)
    }

    /// This source for a request the proxy makes on its own behalf, after its client may
    /// have had its answer: no interim response goes to that client.
    var inBackground: ProxiedSource {
        var source = self
        source.forwarding = forwarding.withoutInterim
        return source
    }

    /// This source, with `response` waiting for the fetch it answers.
    func answered(by response: PreparedResponse) -> ProxiedSource {
        var source = self
        source.prepared = response
        return source
    }
}

/// An origin's answer that arrived before the fetch that wants it: taken once, by a fetch that
/// asks for what it was asked for (`asked`), or by one that asks for the whole when it is the
/// whole (a `200`); cancelled when nobody takes it (another client opened the new resource
/// first, or the client left).
final class PreparedResponse: @unchecked Sendable {
    // @unchecked: `response` is read and cleared under `lock` only.
    private let lock = NSLock()
    private var response: RangeResponse?
    private let asked: Range<Int64>

    init(_ response: RangeResponse, asked: Range<Int64>) {
        self.response = response
        self.asked = asked
    }

    /// The answer, once, for a fetch of exactly what it was asked for; nil otherwise.
    func take(for range: Range<Int64>?) -> RangeResponse? {
        lock.lock()
        defer { lock.unlock() }
        guard let taken = response, range == nil ? !taken.isPartial && taken.offset == 0 : range == asked else { return nil }
        response = nil
        return taken
    }

    deinit {
        response?.cancel()
    }
}

extension CachePolicy {
    /// The stored response as a ``StoredHead`` again (its status too: a stored 404 stays one).
    var storedHead: StoredHead {
        StoredHead(
            status: response.status, headers: response.headers, requestTime: requestTime, responseTime: responseTime,
            varyRequest: request.headers, heuristicFreshness: allowsHeuristicFreshness)
    }
}

/// The revalidations in flight, by cache key.
final class RevalidationTable: @unchecked Sendable {
    // @unchecked: every access holds `lock`.
    private let lock = NSLock()
    private var running: [String: Task<CachingProxy.Revalidation, Never>] = [:]

    /// The task running for `key`, or the one `start` makes (registered before it can end).
    func task(for key: String, start: () -> Task<CachingProxy.Revalidation, Never>) -> Task<CachingProxy.Revalidation, Never> {
        lock.lock()
        defer { lock.unlock() }
        if let task = running[key] { return task }
        let task = start()
        running[key] = task
        return task
    }

    func remove(_ key: String) {
        lock.lock()
        running[key] = nil
        lock.unlock()
    }
}
