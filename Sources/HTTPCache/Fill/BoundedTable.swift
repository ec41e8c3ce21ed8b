/// Recent values by key, at most `capacity` of them; a new key in a full table clears it first.
/// For memos whose forgotten entries cost only their recomputation, never a wrong answer: the
/// proxy's routes and origin sources, the parsed heads of small objects. Clearing is O(1) per
/// insert over time and keeps no order to maintain.
struct BoundedTable<Value> {
    let capacity: Int
    private var values: [String: Value] = [:]

    init(capacity: Int) {
        self.capacity = capacity
    }

    subscript(key: String) -> Value? { values[key] }

    mutating func set(_ value: Value, for key: String) {
        if values.count >= capacity, values[key] == nil { values.removeAll(keepingCapacity: true) }
        values[key] = value
    }
}

extension BoundedTable: Sendable where Value: Sendable {}
