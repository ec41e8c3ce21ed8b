/// The live records of a store's logs, built file by file in increasing order (open, `ls`):
/// per key the record with the highest sequence number, unless that is a tombstone. A
/// compaction copy keeps its original's number, so meeting both copies is harmless, and a
/// newer file may hold a record older than a tombstone met before it (``removed`` keeps it
/// dead).
struct SmallObjectReplay {
    var index: [String: SmallObjectStore.Location] = [:]
    /// Tombstones of each file, by key with their sequence.
    var tombstones: [UInt32: [String: UInt64]] = [:]
    /// Keys whose newest record met so far is a tombstone, with its sequence.
    var removed: [String: UInt64] = [:]
    /// The lowest sequence number of any record of each file.
    var minimumSequence: [UInt32: UInt64] = [:]
    var nextSequence: UInt64 = 1

    /// Folds in the records of one file (files must come in increasing id order).
    mutating func add(_ scan: SmallObjectLogScan) {
        var lowest = UInt64.max
        for record in scan.records {
            lowest = min(lowest, record.sequence)
            nextSequence = max(nextSequence, record.sequence &+ 1)
            switch record.kind {
            case .tombstone:
                tombstones[scan.id, default: [:]][record.key] = record.sequence
                if let known = index[record.key] {
                    if known.sequence > record.sequence { continue }
                    index[record.key] = nil
                }
                if let dead = removed[record.key], dead >= record.sequence { continue }
                removed[record.key] = record.sequence
            case .object:
                // One hash of the key in the common case (no tombstones, the key new): at 10^6
                // keys every dictionary access is a cache miss.
                if !removed.isEmpty, let dead = removed[record.key], dead > record.sequence { continue }
                let location = SmallObjectStore.Location(
                    file: scan.id, offset: record.offset, count: record.recordCount, bodyCount: record.bodyCount,
                    sequence: record.sequence, lastAccess: 0)
                if let known = index.updateValue(location, forKey: record.key), known.sequence > record.sequence {
                    index[record.key] = known
                }
            }
        }
        if lowest != .max { minimumSequence[scan.id] = lowest }
    }
}
