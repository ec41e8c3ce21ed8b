/// Who gets a connection slot: the server's admission policy, as a plain value the server keeps
/// under its lock.
///
/// A connection holds a slot from accept to close. Connections that wait (for the first byte
/// of a request, for the rest of a head, or idle between keep-alive requests) cost the server
/// nothing but that slot, and a client that opens many and sends nothing (or one byte a
/// second) must not lock everyone else out. So when the slots run out, a newcomer takes the
/// slot of the connection that has been waiting longest instead of being answered 503; a
/// connection whose request is being handled is never taken. Per client address there is a
/// cap too: past it, the newcomer takes the longest-waiting slot of its own address, so one
/// address cannot fill the table by itself and mostly evicts its own connections.
/// Only when nothing is waiting (every slot busy with a request) is the newcomer refused.
///
/// nginx and Apache instead shorten their timeouts under load (Apache's mod_reqtimeout raises
/// the minimum rate, nginx `reset_timedout_connection`); closing the longest waiter first
/// frees a slot at once, which is what a client arriving now needs.
struct ConnectionSlots {
    /// Slots in all.
    let limit: Int
    /// Slots one client address may hold.
    let perAddress: Int

    private struct Slot {
        var address: String
        /// When the connection began its current wait; nil while a request is handled.
        var waitingSince: UInt64?
    }

    private var slots: [Int: Slot] = [:]
    private var perAddressCount: [String: Int] = [:]

    init(limit: Int, perAddress: Int) {
        self.limit = max(1, limit)
        self.perAddress = max(1, min(perAddress, limit))
    }

    /// What to do with a newcomer.
    enum Admission: Equatable {
        /// Take a free slot.
        case admit
        /// Take the slot of connection `id` (the server closes it).
        case evict(Int)
        /// Every slot it could take is busy with a request: answer 503.
        case refuse
    }

    var count: Int { slots.count }

    /// Decides for a connection from `address` and, unless refused, gives it slot `id` (waiting
    /// since `now`). An evicted connection's slot is released here, so the count never passes
    /// the limit.
    mutating func admit(id: Int, address: String, now: UInt64) -> Admission {
        var admission = Admission.admit
        if perAddressCount[address, default: 0] >= perAddress {
            guard let victim = longestWaiting(from: address) else { return .refuse }
            admission = .evict(victim)
        } else if slots.count >= limit {
            guard let victim = longestWaiting(from: nil) else { return .refuse }
            admission = .evict(victim)
        }
        if case .evict(let victim) = admission { release(victim) }
        slots[id] = Slot(address: address, waitingSince: now)
        perAddressCount[address, default: 0] += 1
        return admission
    }

    /// Marks connection `id` as waiting (since `now`) or, with nil, as handling a request.
    /// False when its slot went to a newcomer meanwhile (the connection is being closed).
    @discardableResult
    mutating func setWaiting(_ id: Int, since now: UInt64?) -> Bool {
        // Read and written back rather than changed through the optional subscript, whose
        // in-place access allocated twice for every request.
        guard var slot = slots[id] else { return false }
        slot.waitingSince = now
        slots[id] = slot
        return true
    }

    /// Frees connection `id`'s slot (again is harmless).
    mutating func release(_ id: Int) {
        guard let slot = slots.removeValue(forKey: id) else { return }
        let left = perAddressCount[slot.address, default: 1] - 1
        perAddressCount[slot.address] = left > 0 ? left : nil
    }

    private func longestWaiting(from address: String?) -> Int? {
        var best: (id: Int, since: UInt64)?
        for (id, slot) in slots {
            guard let since = slot.waitingSince, address == nil || slot.address == address else { continue }
            if best == nil || since < best!.since || (since == best!.since && id < best!.id) { best = (id, since) }
        }
        return best?.id
    }

    /// The address part of a peer name (`host:port`, `[v6]:port`): what the per-address cap counts.
    static func address(ofPeer peer: String) -> String {
        guard let colon = peer.lastIndex(of: ":") else { return peer }
        return String(peer[..<colon])
    }
}
