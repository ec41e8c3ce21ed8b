#if canImport(Glibc)
    import Glibc
#endif
import SparseCacheEngine
import SparseCacheStore
import SparseHTTP

/// First contact with the origin for a resource the cache holds nothing of: the request is the
/// reader's own (``FirstRequest``), its answer teaches the length and the validators, and its
/// body becomes the resource's first fetch (``FirstAnswer``). A new key's request goes out while
/// the store makes the files (``EarlyContact``); an answer a small-object attempt found too large
/// is taken over instead of asked again (``HandedOverAnswer``).
extension ProgressiveCache {
    /// The range first contact asks the origin for (nil: the whole): the reader's range from its
    /// segment-aligned start, at most ``FillOptions/maximumFetch`` of it, and the first
    /// read-ahead window when open-ended. A revalidation asks the same, so that its answer, when
    /// it is a new version, is the new resource's first contact.
    nonisolated func firstContactRange(for first: FirstRequest) -> Range<Int64>? {
        guard case .range(let wanted) = first else { return nil }
        let segmentSize = Int64(store.options.segmentSize)
        let shift = Int64(segmentSize.trailingZeroBitCount)
        let start = (max(0, wanted.lowerBound) >> shift) << shift
        let bounded = wanted.upperBound != .max && wanted.upperBound - start <= options.maximumFetch
        let window = max(segmentSize, 2 * options.readAheadMinimum)
        let stop = bounded ? ((wanted.upperBound + segmentSize - 1) >> shift) << shift : start + window
        return start..<max(start + segmentSize, stop)
    }

    /// First contact asks the origin for what the reader itself wants (`first`): the answer
    /// tells the length, the validators and whether ranges work, and its body becomes the
    /// first fetch, which the reader reads from memory as it arrives (no separate request for
    /// the first segment before the reader's own). A range is asked from its segment-aligned
    /// start, bounded (``FirstRequest``); the whole resource without a range, its `200` read on
    /// to the end. An answer without a length (chunked or close-delimited) is received whole
    /// from here on (``StreamFill``).
    ///
    /// `early`: the request made already, while the files were being made.
    func firstContact(
        _ resource: FillResource, source: any RangeSource, handle: ResourceHandle, first: FirstRequest, early: EarlyContact? = nil
    ) async throws {
        var handle = handle
        if await handle.file.presentBytes > 0 {
            // Bytes without a length: a body of unknown length that never ended (the process
            // stopped while it arrived). They are not the resource: start again without them.
            resource.update { _ = $0.dropHandle() }
            await release(handle)
            do {
                try await store.remove(key: resource.key)
                handle = try await store.open(key: resource.key)
            } catch {
                early?.abandon()
                throw error
            }
            resource.update { $0.opened(handle) }
        }
        let shift = Int64(handle.file.segmentShift)
        let segmentSize = Int64(handle.file.segmentSize)
        let probe = 0..<segmentSize
        var asked = firstContactRange(for: first)
        // A prefetch's first contact takes its connection under a promotion of its own, which
        // the fetch reading the answer on keeps: a player that comes to wait on it promotes it.
        var promotion = early?.promotion ?? ConnectionLimiter.newPromotion()
        var response: RangeResponse
        do {
            do {
                if let received = resource.update({ $0.takeHandedOver() }) {
                    // A small-object attempt asked already (the same request) and found the
                    // answer large or ranged: no second request.
                    response = received.response
                    asked = received.asked
                    promotion = received.promotion
                } else if let early {
                    // The same request, asked while the files were made.
                    response = try await early.task.value
                } else {
                    response = try await ConnectionLimiter.$promotion.withValue(promotion) {
                        try await fetchWithRetries(source, asked, validator: nil, key: resource.key)
                    }
                }
            } catch let error as OriginError where error.status == 416 && asked != nil && asked != probe {
                // Past the end: the resource is shorter than the reader thought. Its start tells
                // the length (the reader then gets its own error).
                response = try await ConnectionLimiter.$promotion.withValue(promotion) {
                    try await fetchWithRetries(source, probe, validator: nil, key: resource.key)
                }
            }
        } catch let error as OriginError where error.status == 416 || error.status == 206 {
            // No byte range of an empty resource is satisfiable (RFC 9110, section 14.1.1):
            // some origins say so rather than send the empty 200. A 206 that does not say
            // the total length cannot be placed. Ask for the whole.
            response = try await askWhole(resource, source: source, handle: handle, promotion: promotion)
            asked = nil
        } catch {
            await forgetUnknown(resource, handle: handle)
            throw error
        }
        if response.isPartial, source.partsNeedStrongValidator, !response.info.validator.isStrong {
            // A part without a strong validator could never be completed by another answer
            // (RFC 9111 section 3.4): the whole is asked for instead, read on by one answer.
            // (Through the proxy such a part is passed on before it gets here.)
            response.cancel()
            response = try await askWhole(resource, source: source, handle: handle, promotion: promotion)
            asked = nil
        }
        guard let length = response.info.length else {
            do {
                try await receiveWhole(response, in: resource, handle: handle)
            } catch {
                response.cancel()
                throw error
            }
            return
        }
        do {
            try await adopt(response.info, in: resource)
        } catch {
            response.cancel()
            throw error
        }
        if length == 0 {
            response.cancel()
            try await handle.file.commit()
            return
        }
        // The answer's bytes: from where it starts (0 for a 200) to the end of what was asked,
        // or on to the end for a 200 (asked for whole, or a range the origin ignored: then no
        // read-ahead may split the fill into spans that each download from byte 0 again).
        let whole = asked == nil || response.offset < asked!.lowerBound
        if asked != nil, whole { resource.ignoresRanges = true }
        let from = Int(response.offset >> shift)
        let upTo = whole ? min(length, response.offset + options.maximumFetch) : min(length, asked!.upperBound)
        let segments = from..<max(from + 1, Int((upTo + segmentSize - 1) >> shift))
        let opener = registerFetch(
            resource, segments: segments, first: FirstAnswer(response: response, readsOn: whole, promotion: promotion), interest: 1)
        resource.update { $0.startedOpenerFetch(opener) }
    }

    /// Sends first contact's request for a new key at once, before its files exist
    /// (``open(_:first:new:)``); ``firstContact(_:source:handle:first:early:)`` takes the answer.
    func startEarlyContact(_ resource: FillResource, source: any RangeSource, first: FirstRequest) -> EarlyContact {
        let asked = firstContactRange(for: first)
        let promotion = ConnectionLimiter.newPromotion()
        let key = resource.key
        let task = onLoop {
            try await ConnectionLimiter.$promotion.withValue(promotion) {
                try await self.fetchWithRetries(source, asked, validator: nil, key: key)
            }
        }
        return EarlyContact(promotion: promotion, task: task)
    }

    /// Whether nothing is held for `key` as a sparse resource: not open here, and no store
    /// entry. Its first contact may then ask the origin before the files exist.
    func isUnknown(_ key: String) async -> Bool {
        guard resources[key] == nil else { return false }
        return await !hasEntry(key)
    }

    /// Whether `first` asks for bytes past ``FillOptions/smallObjectThreshold``, which a small
    /// object has none of: a range starting there, or ending past it. A client that asks so
    /// expects a large resource (a player, a download manager); one that is small after all is
    /// kept as a sparse resource, as before small objects existed.
    func reachesPastSmall(_ first: FirstRequest) -> Bool {
        guard case .range(let wanted) = first else { return false }
        let threshold = options.smallObjectThreshold
        return wanted.lowerBound >= threshold || (wanted.upperBound != .max && wanted.upperBound > threshold)
    }

    /// First contact's fallback: the whole resource, under the first contact's promotion; a
    /// failure leaves no empty resource behind.
    private func askWhole(
        _ resource: FillResource, source: any RangeSource, handle: ResourceHandle, promotion: ConnectionLimiter.Promotion?
    ) async throws -> RangeResponse {
        do {
            return try await ConnectionLimiter.$promotion.withValue(promotion) {
                try await fetchWithRetries(source, nil, validator: nil, key: resource.key)
            }
        } catch {
            await forgetUnknown(resource, handle: handle)
            throw error
        }
    }

    /// Nothing was learned: leave no empty resource behind (a client asking for missing URLs
    /// must not fill the store with them).
    private func forgetUnknown(_ resource: FillResource, handle: ResourceHandle) async {
        if resource.handle === handle, await handle.file.length == nil, await handle.file.presentBytes == 0 {
            // Re-check after the awaits: the work may have let the handle go meanwhile.
            guard resource.handle === handle else { return }
            resource.update { _ = $0.dropHandle() }
            await release(handle)
            try? await store.remove(key: resource.key)
        }
    }
}
