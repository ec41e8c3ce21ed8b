import SparseCacheEngine
import SparseCacheStore

/// Replays a ``Trace`` against the store's own eviction code (``LeastRecentlyUsed`` and
/// ``SegmentQueues``, the types ``SparseStore`` runs) on a model of the store's disk: one
/// request at a time, the resource open (held) while its missing segments are written, the
/// budget enforced after every segment written, as the store does after every write. Also
/// Belady's MIN over the same segments, the offline bound.
struct TraceSimulator {
    struct Result: Sendable {
        var policy: String
        var asked: Int64 = 0
        var originBytes: Int64 = 0
        var requests = 0
        var requestHits = 0
        var peakBytes: Int64 = 0

        var originShare: Double { asked == 0 ? 0 : Double(originBytes) / Double(asked) }
        var byteHitRatio: Double { 1 - originShare }
        var objectHitRatio: Double { requests == 0 ? 0 : Double(requestHits) / Double(requests) }
    }

    let budget: Int64
    let segmentSize: Int64

    private func segments(_ request: Trace.Request) -> Range<Int> {
        Int(request.range.lowerBound / segmentSize)..<Int((request.range.upperBound - 1) / segmentSize + 1)
    }

    private func bytes(of segment: Int, size: Int64) -> Int64 { min(segmentSize, size - Int64(segment) * segmentSize) }

    /// The store's policy `policy` on the trace.
    func run(_ trace: Trace, policy: EvictionPolicy) -> Result {
        var result = Result(policy: policy.rawValue)
        var entries: [String: StoreEntry] = [:]
        var present: [String: Set<Int>] = [:]
        var touched: [String: [Int: Int]] = [:]
        var sizes: [String: Int64] = [:]
        var queues = SegmentQueues()
        var allocated: Int64 = 0
        var clock = 0

        func drop(_ key: String, _ segment: Int) {
            guard present[key]?.remove(segment) != nil else { return }
            let freed = bytes(of: segment, size: sizes[key] ?? segmentSize)
            allocated -= freed
            entries[key]?.allocatedBytes -= freed
            touched[key]?[segment] = nil
        }
        func removeWhole(_ key: String) {
            for segment in present[key] ?? [] { drop(key, segment) }
            entries[key] = nil
            present[key] = nil
            touched[key] = nil
            queues.noteRemoved(key: key)
        }
        /// The larger-than-budget window of the held resource: its least recently used
        /// segments, keeping one.
        func shrink(_ key: String) -> Bool {
            guard let list = touched[key], list.count > 1 else { return false }
            let coldest = list.sorted { ($0.value, $0.key) < ($1.value, $1.key) }
            var freed = false
            for (segment, _) in coldest.dropLast() where allocated > budget {
                drop(key, segment)
                queues.noteDiscarded(key: key, segments: segment..<(segment + 1))
                freed = true
            }
            return freed
        }
        func enforce(held: String?) {
            while allocated > budget {
                let need = allocated - budget
                switch policy {
                case .lru:
                    let order = LeastRecentlyUsed.order(entries.values.filter { $0.key != held })
                    let victims = LeastRecentlyUsed.victims(in: order, need: need, isHeld: { $0 == held })
                    if victims.isEmpty {
                        guard let held, shrink(held) else { return }
                    }
                    for key in victims { removeWhole(key) }
                case .sfifo:
                    let limit = Int((need + segmentSize - 1) / segmentSize)
                    guard let victim = queues.takeVictim(limit: limit, isHeld: { $0 == held }) else {
                        guard let held, shrink(held) else { return }
                        continue
                    }
                    if queues.runs[victim.key] == nil {
                        removeWhole(victim.key)
                    } else {
                        for segment in victim.segments { drop(victim.key, segment) }
                    }
                }
            }
        }

        for request in trace.requests {
            clock += 1
            let key = request.key
            sizes[key] = request.size
            if entries[key] == nil {
                entries[key] = StoreEntry(
                    key: key, name: key, length: request.size, presentBytes: 0, allocatedBytes: 0, lastAccess: 0, pinnedPrefix: 0,
                    isOpen: false)
            }
            entries[key]?.lastAccess = Int64(clock)
            result.requests += 1
            result.asked += Int64(request.range.count)
            var missed = false
            for segment in segments(request) {
                touched[key, default: [:]][segment] = clock
                if present[key]?.contains(segment) == true {
                    queues.noteRead(key: key, segments: segment..<(segment + 1))
                    continue
                }
                missed = true
                let size = bytes(of: segment, size: request.size)
                result.originBytes += size
                present[key, default: []].insert(segment)
                allocated += size
                entries[key]?.allocatedBytes += size
                if policy == .sfifo { queues.noteWritten(key: key, segments: segment..<(segment + 1)) }
                result.peakBytes = max(result.peakBytes, allocated)
                enforce(held: key)
            }
            if !missed { result.requestHits += 1 }
            enforce(held: nil)
        }
        return result
    }

    /// Belady's MIN over segments: on a miss the segment is kept only if it is asked again
    /// sooner than the cached segment asked last, which goes. No policy without the future
    /// does better on the same segments.
    func belady(_ trace: Trace) -> Result {
        var result = Result(policy: "MIN")
        struct Unit: Hashable {
            var key: String
            var segment: Int
        }
        var ids: [Unit: Int] = [:]
        var unitBytes: [Int64] = []
        var accesses: [(unit: Int, request: Int)] = []
        for (index, request) in trace.requests.enumerated() {
            for segment in segments(request) {
                let unit = Unit(key: request.key, segment: segment)
                let id: Int
                if let known = ids[unit] {
                    id = known
                } else {
                    id = unitBytes.count
                    ids[unit] = id
                    unitBytes.append(bytes(of: segment, size: request.size))
                }
                accesses.append((id, index))
            }
        }
        let never = Int.max
        var next = [Int](repeating: never, count: accesses.count)
        var lastSeen = [Int](repeating: never, count: unitBytes.count)
        for index in accesses.indices.reversed() {
            next[index] = lastSeen[accesses[index].unit]
            lastSeen[accesses[index].unit] = index
        }
        var cachedNext = [Int](repeating: -1, count: unitBytes.count)  // -1: not cached
        var heap = MaxHeap()
        var used: Int64 = 0
        var missedRequest = [Bool](repeating: false, count: trace.requests.count)
        for (index, access) in accesses.enumerated() {
            let unit = access.unit
            if cachedNext[unit] >= 0 {
                cachedNext[unit] = next[index]
                heap.push(next[index], unit)
                continue
            }
            missedRequest[access.request] = true
            result.originBytes += unitBytes[unit]
            guard next[index] != never else { continue }
            while used + unitBytes[unit] > budget {
                guard let (farthest, victim) = heap.peek() else { break }
                if cachedNext[victim] != farthest {
                    heap.pop()
                    continue
                }
                guard farthest > next[index] else { break }
                heap.pop()
                cachedNext[victim] = -1
                used -= unitBytes[victim]
            }
            guard used + unitBytes[unit] <= budget else { continue }
            cachedNext[unit] = next[index]
            heap.push(next[index], unit)
            used += unitBytes[unit]
            result.peakBytes = max(result.peakBytes, used)
        }
        result.requests = trace.requests.count
        result.asked = trace.requests.reduce(0) { $0 + Int64($1.range.count) }
        result.requestHits = missedRequest.filter { !$0 }.count
        return result
    }
}

/// A binary max-heap of (priority, value) pairs.
private struct MaxHeap {
    private var items: [(Int, Int)] = []

    func peek() -> (Int, Int)? { items.first }

    mutating func push(_ priority: Int, _ value: Int) {
        items.append((priority, value))
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[parent].0 < items[child].0 else { break }
            items.swapAt(parent, child)
            child = parent
        }
    }

    mutating func pop() {
        guard !items.isEmpty else { return }
        items.swapAt(0, items.count - 1)
        items.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var largest = parent
            if left < items.count, items[left].0 > items[largest].0 { largest = left }
            if right < items.count, items[right].0 > items[largest].0 { largest = right }
            if largest == parent { break }
            items.swapAt(parent, largest)
            parent = largest
        }
    }
}
