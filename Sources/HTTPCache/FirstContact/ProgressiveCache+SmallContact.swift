import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// The small-object first contact: the first request of a key the cache holds nothing of, made
/// by the cache (``firstContactSmall(_:first:)``) or claimed by its caller (the proxy's miss:
/// ``claimContact(key:)``, then ``keepClaimed(_:with:)`` or ``dropClaimed(_:failure:)``). Readers
/// that come meanwhile wait for it. A whole body within the threshold becomes a small object;
/// any other answer is handed over to the sparse first contact of the key
/// (``ProgressiveCache/firstContact(_:source:handle:first:early:)``), which reads it instead of
/// asking again.
extension ProgressiveCache {
    /// First contact for a key the cache holds nothing of: asks for the first segment as the
    /// sparse first contact does. A whole body within the threshold becomes a small object
    /// (the reader gets it at once; the record is written in the background and claimed when
    /// durable); any other answer is left for the sparse first contact and nil returned.
    func firstContactSmall(_ source: any RangeSource, first: FirstRequest) async throws -> CacheReader? {
        // Concurrent first readers of one key share one request, as the sparse first contact's:
        // the first makes it on its own task (no task to hop to), the others wait for it.
        let key = source.key
        let outcome: (ContentInfo, [UInt8])?
        if let running = smallContacts[key] {
            do {
                outcome = try await withCheckedThrowingContinuation { running.waiters.append($0) }
            } catch is CancellationError where !Task.isCancelled {
                // The reader that asked went away mid-request: ask again for this one.
                return try await firstContactSmall(source, first: first)
            }
        } else {
            let claim = register(key)
            let result: Result<(ContentInfo, [UInt8])?, Error>
            do {
                result = .success(try await smallContact(source, first: first))
            } catch {
                result = .failure(error)
            }
            end(claim, result)
            outcome = try result.get()
        }
        guard let (info, body) = outcome else { return nil }
        return CacheReader(cache: self, source: source, info: info, body: body, fromCache: false)
    }

    /// A small-object first contact in flight and the readers waiting for it (touched on the
    /// cache's actor only).
    final class SmallContact {
        var waiters: [CheckedContinuation<(ContentInfo, [UInt8])?, Error>] = []
    }

    /// A small-object first contact made by the caller of ``claimContact(key:)`` (the proxy's
    /// miss, `CachingProxy.answerClaimed`) rather than by the cache: readers of the key that
    /// come meanwhile wait for it as for the cache's own. Ended by ``keepClaimed(_:with:)``
    /// or ``dropClaimed(_:failure:)``, once.
    struct ClaimedContact: @unchecked Sendable {
        // @unchecked: `contact` is only an identity outside the cache's actor; only the actor
        // touches it.
        let key: String
        fileprivate let contact: SmallContact
    }

    /// Claims the first contact of `key` for its caller, when it would be a small-object first
    /// contact of the whole resource (as ``open(_:first:lookedUp:)`` decides for `.whole`) and
    /// the caller has just looked the key up and found nothing (``openIfStored(_:)``), with no
    /// await since; nil otherwise.
    func claimContact(key: String) -> ClaimedContact? {
        guard options.smallObjectThreshold > 0, smallContacts[key] == nil, resources[key] == nil, movingToSmall[key] == nil else {
            return nil
        }
        return register(key)
    }

    /// Ends a claimed first contact with the answer its caller received, as the cache's own
    /// ends (``smallContact(_:first:)``): a whole body within the threshold is kept (read to
    /// its end first when it did not come with the head) and returned with its info, for a
    /// reader from memory; any other answer is left for the sparse first contact of the key,
    /// which ``open(_:first:)`` then takes over (nil is returned). Readers that waited get the
    /// same.
    func keepClaimed(_ claim: ClaimedContact, with response: RangeResponse) async -> (info: ContentInfo, body: [UInt8])? {
        count { $0.requests += 1 }
        let outcome = await takeSmall(response, asked: nil, promotion: nil, key: claim.key)
        end(claim, .success(outcome))
        return outcome
    }

    /// Ends a claimed first contact without an answer to keep: readers that waited get
    /// `failure` (the request's error, or an origin's answer to pass on), or, without one, ask
    /// for themselves, as when the reader that asked went away (a `CancellationError` of a
    /// task that is not cancelled). Not nil: that tells a waiter the answer went to the sparse
    /// first contact, which here it did not.
    func dropClaimed(_ claim: ClaimedContact, failure: Error?) {
        count { $0.requests += 1 }
        end(claim, .failure(failure ?? CancellationError()))
    }

    /// Registers a small-object first contact of `key`, which nothing else holds.
    private func register(_ key: String) -> ClaimedContact {
        let contact = SmallContact()
        smallContacts[key] = contact
        return ClaimedContact(key: key, contact: contact)
    }

    /// Ends `claim` with `result`, handed to every reader that waited for it.
    private func end(_ claim: ClaimedContact, _ result: Result<(ContentInfo, [UInt8])?, Error>) {
        if smallContacts[claim.key] === claim.contact { smallContacts[claim.key] = nil }
        for waiter in claim.contact.waiters { waiter.resume(with: result) }
    }

    /// The request behind ``firstContactSmall(_:)``: the object's info and body, or nil when
    /// the answer was handed to the sparse first contact.
    private func smallContact(_ source: any RangeSource, first: FirstRequest) async throws -> (ContentInfo, [UInt8])? {
        let probe = 0..<Int64(store.options.segmentSize)
        // The same request as the sparse first contact's (which takes the answer over when it
        // is not a small object), with the same fallbacks.
        var asked = firstContactRange(for: first)
        let promotion = ConnectionLimiter.newPromotion()
        var response: RangeResponse
        do {
            do {
                response = try await ConnectionLimiter.$promotion.withValue(promotion) {
                    try await fetchWithRetries(source, asked, validator: nil, key: source.key)
                }
            } catch let error as OriginError where error.status == 416 && asked != nil && asked != probe {
                asked = probe
                response = try await ConnectionLimiter.$promotion.withValue(promotion) {
                    try await fetchWithRetries(source, probe, validator: nil, key: source.key)
                }
            }
        } catch let error as OriginError where error.status == 416 || error.status == 206 {
            // As the sparse first contact: an empty resource, or a 206 without a total.
            asked = nil
            response = try await ConnectionLimiter.$promotion.withValue(promotion) {
                try await fetchWithRetries(source, nil, validator: nil, key: source.key)
            }
        }
        return await takeSmall(response, asked: asked, promotion: promotion, key: source.key)
    }

    /// A first contact's answer as a small object: its info and whole body, kept (the reader
    /// gets it from memory, the record is written in the background); nil when it is not one,
    /// or its body was cut short: the answer (with what came of its body) is then left for the
    /// sparse first contact.
    private func takeSmall(_ response: RangeResponse, asked: Range<Int64>?, promotion: ConnectionLimiter.Promotion?, key: String) async
        -> (ContentInfo, [UInt8])?
    {
        // An answer without a length stays with the sparse path (StreamFill): it is handed to
        // its readers as it arrives and joined in flight, which buffering it here would undo.
        guard response.info.stored != nil, response.offset == 0, let length = response.info.length,
            length <= options.smallObjectThreshold
        else {
            handOver(response, asked: asked, promotion: promotion, key: key)
            return nil
        }
        let body: [UInt8]
        if let arrived = response.arrived, arrived.count == Int(length) {
            // It came with the head (most small answers do): nothing is left to read.
            count { $0.bytesReceived += Int64(arrived.count) }
            body = arrived
        } else {
            guard let read = await readSmall(response, length: Int(length), asked: asked, promotion: promotion, key: key) else {
                return nil
            }
            body = read
        }
        var info = response.info
        info.length = Int64(body.count)
        keepSmall(key: key, info: info, body: body)
        return (info, body)
    }

    /// The whole body of a small answer, read to its end (which lets the connection be
    /// reused); nil when it was cut short: the sparse first contact then keeps what came and
    /// fetches the rest by range.
    private func readSmall(
        _ response: RangeResponse, length: Int, asked: Range<Int64>?, promotion: ConnectionLimiter.Promotion?, key: String
    ) async -> [UInt8]? {
        var chunks: [[UInt8]] = []
        var received = 0
        var iterator = response.body.makeAsyncIterator()
        var whole = false
        do {
            while received < length {
                guard let chunk = try await iterator.next() else { break }
                count { $0.bytesReceived += Int64(chunk.count) }
                chunks.append(chunk)
                received += chunk.count
            }
            if received == length { whole = try await iterator.next() == nil }
        } catch {
            whole = false
        }
        guard whole else {
            handOver(
                RangeResponse(
                    info: response.info, offset: 0, body: Self.replay(chunks, then: iterator), cancel: response.cancel,
                    isPartial: response.isPartial),
                asked: asked, promotion: promotion, key: key)
            return nil
        }
        return chunks.count == 1 ? chunks[0] : Array(chunks.joined())
    }

    /// Leaves a first-contact answer for the sparse first contact of `key`, or ends it when
    /// another reader's first contact is already under way.
    private func handOver(_ response: RangeResponse, asked: Range<Int64>?, promotion: ConnectionLimiter.Promotion?, key: String) {
        let resource = entry(for: key)
        if !resource.update({ $0.handOver(HandedOverAnswer(response: response, asked: asked, promotion: promotion)) }) { response.cancel() }
    }

    /// `prefix`, then the rest of a body, read as the consumer asks.
    private static func replay(_ prefix: [[UInt8]], then rest: AsyncThrowingStream<[UInt8], Error>.AsyncIterator)
        -> AsyncThrowingStream<[UInt8], Error>
    {
        let body = ReplayedBody(prefix: prefix, rest: rest)
        return AsyncThrowingStream(unfolding: { try await body.next() })
    }
}

/// A body whose first chunks were already read. One consumer reads it, in order.
private final class ReplayedBody: @unchecked Sendable {
    // @unchecked: the one consumer of a response body calls next() one call at a time.
    private var prefix: [[UInt8]]
    private var rest: AsyncThrowingStream<[UInt8], Error>.AsyncIterator

    init(prefix: [[UInt8]], rest: AsyncThrowingStream<[UInt8], Error>.AsyncIterator) {
        self.prefix = prefix.reversed()
        self.rest = rest
    }

    func next() async throws -> [UInt8]? {
        if let chunk = prefix.popLast() { return chunk }
        return try await rest.next()
    }
}
