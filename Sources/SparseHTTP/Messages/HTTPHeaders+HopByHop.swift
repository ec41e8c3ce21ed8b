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
        let lowered = name.lowercased()
        return Self.hopByHop.contains(lowered) || lowered.hasPrefix("proxy-") || connectionOptions.contains(lowered)
    }

    /// The message's fields without the hop-by-hop ones: what a cache stores and a proxy sends on.
    /// Returns the fields as they are when none is hop-by-hop (the usual stored head), without
    /// lowercasing a copy of every name.
    public func removingHopByHop() -> HTTPHeaders {
        let listed = contains("connection") ? connectionOptions : []
        func belongsToConnection(_ field: HTTPHeaderField) -> Bool {
            Self.hopByHop.contains { field.hasName($0) } || field.hasNamePrefix("proxy-")
                || (!listed.isEmpty && listed.contains(field.name.lowercased()))
        }
        guard fields.contains(where: belongsToConnection) else { return self }
        return HTTPHeaders(fields.filter { !belongsToConnection($0) })
    }

    /// The field names `Connection` lists, lowercased.
    private var connectionOptions: Set<String> { Set(listElements("connection").map { $0.lowercased() }) }
}

extension HTTPHeaderField {
    /// Whether the name starts with `prefix` (ASCII lowercase), compared without regard to case.
    func hasNamePrefix(_ prefix: StaticString) -> Bool {
        let name = self.name.utf8
        guard name.count >= prefix.utf8CodeUnitCount else { return false }
        return prefix.withUTF8Buffer { expected in
            zip(name, expected).allSatisfy { ($0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0) == $1 }
        }
    }
}
