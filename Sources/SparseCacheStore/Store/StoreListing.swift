import SparseCacheEngine

/// A listing of a store's resources written as they are read, never built whole first
/// (`sparsecache ls`, the admin listener's `GET /resources`): a million small objects list in
/// the memory of one line.
///
/// The JSON form is one document, a ``StoreSummary`` whose totals come after the entries
/// (they are known only then), with one entry per line so a reader can take them as they come:
///
/// ```
/// {"directory":"/var/cache/sc","budget":1073741824,"entries":[
/// {"allocatedBytes":8192,"isOpen":false,"key":"http://a/x","lastAccess":0,"length":4096,...}
/// ,{"allocatedBytes":4500,...}
/// ],"allocatedBytes":12692,"presentBytes":8192}
/// ```
package struct StoreListing: Sendable {
    package let directory: String
    package let budget: Int64
    package private(set) var count = 0
    /// Sums over the entries listed so far.
    package private(set) var allocatedBytes: Int64 = 0
    package private(set) var presentBytes: Int64 = 0

    package init(directory: String, budget: Int64) {
        self.directory = directory
        self.budget = budget
    }

    /// The first line of the JSON form (with its newline).
    package var header: String {
        "{\"directory\":" + Self.quoted(directory) + ",\"budget\":\(budget),\"entries\":[\n"
    }

    /// Counts `entry` into the totals and returns its line of the JSON form (with its newline).
    package mutating func add(_ entry: StoreEntry) -> String {
        defer { count += 1 }
        allocatedBytes += entry.allocatedBytes
        presentBytes += entry.presentBytes
        return (count == 0 ? "" : ",") + Self.json(entry) + "\n"
    }

    /// The last line of the JSON form: the totals (`allocatedBytes` given by a live store, which
    /// counts what no entry holds, such as dead log records), and `extra` members (each
    /// `"name":value`).
    package func footer(allocatedBytes: Int64? = nil, extra: [String] = []) -> String {
        "],\"allocatedBytes\":\(allocatedBytes ?? self.allocatedBytes),\"presentBytes\":\(presentBytes)"
            + extra.map { "," + $0 }.joined() + "}\n"
    }

    /// One entry as a JSON object on one line, members in the order JSONEncoder's sortedKeys
    /// gives (a nil length is left out, as Codable does).
    package static func json(_ entry: StoreEntry) -> String {
        "{\"allocatedBytes\":\(entry.allocatedBytes),\"isOpen\":\(entry.isOpen),\"key\":" + quoted(entry.key)
            + ",\"lastAccess\":\(entry.lastAccess)" + (entry.length.map { ",\"length\":\($0)" } ?? "") + ",\"name\":"
            + quoted(entry.name) + ",\"pinnedPrefix\":\(entry.pinnedPrefix),\"presentBytes\":\(entry.presentBytes)}"
    }

    /// `text` as a JSON string (RFC 8259, section 7).
    package static func quoted(_ text: String) -> String { JSONText.quoted(text) }
}
