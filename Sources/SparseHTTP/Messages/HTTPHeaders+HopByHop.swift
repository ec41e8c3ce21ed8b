extension HTTPHeaders {
    /// The fields that describe one connection rather than the message (RFC 9110, section
    /// 7.6.1): never stored by a cache nor forwarded by a proxy. `Proxy-*` fields are
    /// included (they authenticate to and configure one proxy hop).
    public static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    ]

    /// Whether a field `name` (any case) belongs to one connection: a fixed hop-by-hop field, a
    /// `Proxy-*` field, or one that `Connection` lists.
    public func isHopByHop(_ name: String) -> Bool {
        isHopByHop(HTTPHeaderField(name: name, value: ""), connection: contains("connection"))
    }

    /// The message's fields without the hop-by-hop ones: what a cache stores and a proxy sends on.
    /// Returns the fields as they are when none is hop-by-hop (the usual stored head), without
    /// lowercasing a copy of every name.
    public func removingHopByHop() -> HTTPHeaders {
        let connection = contains("connection")
        guard fields.contains(where: { isHopByHop($0, connection: connection) }) else { return self }
        return keeping { !isHopByHop($0, connection: connection) }
    }

    /// One rule for both: a fixed hop-by-hop name, `Proxy-*`, or a name the `Connection` field
    /// lists (looked for only when there is one); names compared by ASCII case folding, as
    /// every header lookup is.
    private func isHopByHop(_ field: HTTPHeaderField, connection: Bool) -> Bool {
        if Self.isHopByHopName(field.name) { return true }
        guard connection else { return false }
        var name = field.name
        return name.withUTF8 { name in
            containsListElement(of: "connection") { element in
                element.count == name.count && HTTPSyntax.equalsIgnoringCase(element, name)
            }
        }
    }

    /// Whether `name` is one of ``hopByHop`` or starts with `proxy-`, compared where its bytes
    /// lie (every field of every request and response forwarded or stored is asked).
    private static func isHopByHopName(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { bytes in
            let all = 0..<bytes.count
            switch bytes.count {
            case 2: if HTTPSyntax.equalsIgnoringCase(bytes, all, "te") { return true }
            case 7: if HTTPSyntax.equalsIgnoringCase(bytes, all, "trailer") || HTTPSyntax.equalsIgnoringCase(bytes, all, "upgrade") { return true }
            case 10:
                if HTTPSyntax.equalsIgnoringCase(bytes, all, "connection") || HTTPSyntax.equalsIgnoringCase(bytes, all, "keep-alive") {
                    return true
                }
            case 17: if HTTPSyntax.equalsIgnoringCase(bytes, all, "transfer-encoding") { return true }
            default: break
            }
            // `proxy-connection` and every other `proxy-` field.
            return bytes.count >= 6 && HTTPSyntax.equalsIgnoringCase(bytes, 0..<6, "proxy-")
        }
    }
}
