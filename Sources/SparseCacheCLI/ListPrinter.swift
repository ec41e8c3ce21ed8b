import Foundation
import SparseCache

/// What `sparsecache ls` prints, one entry at a time as entries are read (from the directory or
/// from a running server's `GET /resources`): the text table, or the ``StoreListing`` JSON
/// document. Output is buffered in 64 KiB pieces, never the whole listing.
///
/// @unchecked Sendable: used by one thread at a time (the directory is read on the CLI's
/// blocking queue; a server's answer on the task that reads it).
final class ListPrinter: @unchecked Sendable {
    let directory: String
    let json: Bool
    /// Whether anything went to stdout yet (before that a failed server answer can fall back
    /// to reading the directory).
    private(set) var started = false
    private var listing: StoreListing
    private var buffer = ""
    private var pendingLine: [UInt8] = []
    private var serverTotals: (allocated: Int64, present: Int64)?
    private var fromServer = false
    private let formatter: DateFormatter = {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter
    }()

    init(directory: String, json: Bool) {
        self.directory = directory
        self.json = json
        listing = StoreListing(directory: directory, budget: 0)
    }

    /// Starts the output; `server` names the running server the list comes from.
    func begin(server: String?) {
        started = true
        fromServer = server != nil
        if json {
            if server == nil { buffer += listing.header }
        } else {
            buffer += "cache directory: \(directory)" + (server.map { " (from the running server at \($0))" } ?? "") + "\n"
        }
    }

    /// One entry read from the directory.
    func add(_ entry: StoreEntry) {
        let line = listing.add(entry)
        if json {
            buffer += line
        } else {
            if listing.count == 1 {
                buffer +=
                    pad("PRESENT", 12) + pad("LENGTH", 12) + pad("%", 8) + pad("ON DISK", 12) + pad("LAST ACCESS", 22) + pad("FILE", 20)
                    + "KEY\n"
            }
            let share = entry.percentPresent.map { String(format: "%.1f", $0) } ?? "?"
            buffer +=
                pad(SizeParser.describe(entry.presentBytes), 12) + pad(entry.length.map(SizeParser.describe) ?? "unknown", 12)
                + pad(share, 8) + pad(SizeParser.describe(entry.allocatedBytes), 12) + pad(timestamp(entry.lastAccess), 22)
                + pad(entry.name, 20) + entry.key + "\n"
        }
        if buffer.utf8.count >= 64 << 10 { flush() }
    }

    /// A piece of a server's `GET /resources` answer: passed on as it is for `--json` (the
    /// same document), else cut into lines and each entry line printed as a row.
    func addServerBytes(_ bytes: [UInt8]) throws {
        if json {
            flush()
            _ = bytes.withUnsafeBytes { Output.writeAll($0, to: 1) }
            return
        }
        var start = 0
        for index in bytes.indices where bytes[index] == 10 {
            pendingLine += bytes[start..<index]
            try serverLine(pendingLine)
            pendingLine.removeAll(keepingCapacity: true)
            start = index + 1
        }
        pendingLine += bytes[start...]
    }

    private func serverLine(_ line: [UInt8]) throws {
        if line.first == UInt8(ascii: "{"), line.starts(with: Array("{\"directory\"".utf8)) { return }
        if line.first == UInt8(ascii: "]") {
            // The totals: `],"allocatedBytes":...}` is the rest of the document's object.
            let object = try JSONSerialization.jsonObject(with: Data([UInt8(ascii: "{")] + line.dropFirst(2))) as? [String: Any]
            serverTotals = (
                (object?["allocatedBytes"] as? NSNumber)?.int64Value ?? 0, (object?["presentBytes"] as? NSNumber)?.int64Value ?? 0
            )
            return
        }
        let entryBytes = line.first == UInt8(ascii: ",") ? Array(line.dropFirst()) : line
        guard !entryBytes.isEmpty else { return }
        add(try JSONDecoder().decode(StoreEntry.self, from: Data(entryBytes)))
    }

    /// Ends the output: the totals (a server's when the list came from one).
    func finish() {
        if json {
            // From a server its document came whole; read from the directory it needs its end.
            if !fromServer { buffer += listing.footer() }
        } else if listing.count == 0 {
            buffer += "no resources\n"
        } else {
            let allocated = serverTotals?.allocated ?? listing.allocatedBytes
            let present = serverTotals?.present ?? listing.presentBytes
            buffer +=
                "\(listing.count) resources, \(SizeParser.describe(present)) present, \(SizeParser.describe(allocated)) on disk\n"
        }
        flush()
    }

    private func flush() {
        guard !buffer.isEmpty else { return }
        Output.write(buffer, to: 1)
        buffer = ""
    }

    private func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }

    private func timestamp(_ nanoseconds: Int64) -> String {
        guard nanoseconds > 0 else { return "never" }
        return formatter.string(from: Date(timeIntervalSince1970: Double(nanoseconds) / 1e9)) + "Z"
    }
}
