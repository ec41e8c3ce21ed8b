import SparseHTTP

/// A stored answer's head as a quick hit sends it, encoded once per entry: what the handler's
/// head for the same hit would be (``CachingProxy/storedFields(_:status:age:lengthKnown:cacheStatus:)``,
/// then `Content-Range`, then what ``HTTPResponseWriter`` adds), byte for byte, with only what
/// changes from one request to the next written per request (``HeadWriter``): the status
/// line, `Cache-Status`'s `ttl`, `Age`, the range and the length, `Date` when the stored head
/// has none, and `Connection`.
///
/// A hit builds no field array and no string. QuickHeadTests compares the bytes with the
/// handler's head for the same stored fields.
final class QuickHead: Sendable {
    /// The stored fields but `Via`, then `Via` with this proxy's element.
    private let stored: [UInt8]
    /// `Accept-Ranges`, and `Content-Type` when the stored head has none.
    private let representation: [UInt8]
    private let addDate: Bool
    private let addServer: Bool

    /// The head of `stored` as the proxy whose `Via` element is `via` replays it; nil when a
    /// stored field would make the handler's head differ from the one written here (a stored
    /// `Content-Range`, which the handler replaces for a range).
    init?(_ stored: HTTPHeaders, via: String) {
        guard !stored.contains("content-range") else { return nil }
        // The order of proxyFields and storedFields, which the handler's head follows.
        self.stored = HTTPHeadEncoding.encodeFields(fieldsWithVia(stored, via: via))
        var representation = [("Accept-Ranges", "bytes")]
        if !stored.contains("content-type") { representation.append(("Content-Type", "application/octet-stream")) }
        self.representation = HTTPHeadEncoding.encodeFields(representation)
        addDate = !stored.contains("date")
        addServer = !stored.contains("server")
    }

    /// The most bytes ``write(into:ttl:age:range:of:closes:)`` writes.
    var capacity: Int { stored.count + representation.count + HeadWriter.variableCapacity }

    /// Writes the head of a fresh hit into `buffer` (at least ``capacity`` bytes): status 200
    /// for the whole `length`, or 206 for `range` of it. Returns the head's length.
    func write(into buffer: UnsafeMutableRawBufferPointer, ttl: Int64, age: Int64, range: Range<Int64>?, of length: Int64, closes: Bool) -> Int {
        var head = HeadWriter(buffer)
        head.statusLine(range == nil ? 200 : 206)
        head.encodedFields(stored)
        head.field("Cache-Status", "sparsecache; hit; ttl=", number: ttl)
        head.field("Age", number: age)
        head.encodedFields(representation)
        if let range { head.contentRange(range, of: length) }
        head.finish(contentLength: range.map { $0.upperBound - $0.lowerBound } ?? length, closes: closes, addDate: addDate, addServer: addServer)
        return head.count
    }
}
