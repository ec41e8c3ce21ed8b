extension HTTPHeaders {
    /// The fields that describe one connection rather than the message (RFC 9110, section
    /// 7.6.1): never stored by a cache nor forwarded by a proxy. `Proxy-*` fields are
    /// included (they authenticate to and configure one proxy hop).
    package static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    ]

    /// Whether a field `name` (any case) belongs to one connection: a fixed hop-by-hop field, a
    /// `Proxy-*` field, or one that `Connection` lists.
    package func isHopByHop(_ name: String) -> Bool {
        Self.isHopByHop(HTTPHeaderField(name: name, value: ""), listed: namesConnectionLists)
    }

    /// The message's fields without the hop-by-hop ones: what a cache stores and a proxy sends on.
    /// Returns the fields as they are when none is hop-by-hop (the usual stored head), without
    /// lowercasing a copy of every name.
    package func removingHopByHop() -> HTTPHeaders {
        removingHopByHop { _ in false }
    }

    /// ``removingHopByHop()`` without the fields `isDropped` picks too, in the same pass (a
    /// cache storing a response drops its framing fields with the hop-by-hop ones).
    package func removingHopByHop(and isDropped: (HTTPHeaderField) -> Bool) -> HTTPHeaders {
        let listed = namesConnectionLists
        guard fields.contains(where: { Self.isHopByHop($0, listed: listed) || isDropped($0) }) else { return self }
        return keeping { !Self.isHopByHop($0, listed: listed) && !isDropped($0) }
    }

    /// One rule for both: a fixed hop-by-hop name, `Proxy-*`, or a name in `listed`; names
    /// compared by ASCII case folding, as every header lookup is.
    private static func isHopByHop(_ field: HTTPHeaderField, listed: [String]) -> Bool {
        isHopByHopName(field.name) || listed.contains { field.hasName($0) }
    }

    /// The field names `Connection` lists beyond the fixed hop-by-hop ones (and its `close`):
    /// none for the usual `Connection: keep-alive`, so no array is made.
    private var namesConnectionLists: [String] {
        guard contains("connection") else { return [] }
        var names: [String] = []
        _ = containsListElement(of: "connection") { element in
            if !HTTPSyntax.equalsIgnoringCase(element, 0..<element.count, "close"), !Self.isHopByHopName(element) {
                names.append(String(decoding: element, as: UTF8.self))
            }
            return false
        }
        return names
    }

    /// Whether `name` is one of ``hopByHop`` or starts with `proxy-`, compared where its bytes
    /// lie (every field of every request and response forwarded or stored is asked).
    private static func isHopByHopName(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { isHopByHopName($0) }
    }

    private static func isHopByHopName(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let all = 0..<bytes.count
        switch bytes.count {
        case 2: if HTTPSyntax.equalsIgnoringCase(bytes, all, "te") { return true }
        case 7: if HTTPSyntax.equalsIgnoringCase(bytes, all, "trailer") || HTTPSyntax.equalsIgnoringCase(bytes, all, "upgrade") { return true }
        case 10: if HTTPSyntax.equalsIgnoringCase(bytes, all, "connection") || HTTPSyntax.equalsIgnoringCase(bytes, all, "keep-alive") { return true }
        case 17: if HTTPSyntax.equalsIgnoringCase(bytes, all, "transfer-encoding") { return true }
        default: break
        }
        // `proxy-connection` and every other `proxy-` field.
        return bytes.count >= 6 && HTTPSyntax.equalsIgnoringCase(bytes, 0..<6, "proxy-")
    }
}
