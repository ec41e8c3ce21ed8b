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
    public func removingHopByHop() -> HTTPHeaders {
        let listed = connectionOptions
        return HTTPHeaders(
            fields.filter { field in
                let lowered = field.name.lowercased()
                return !Self.hopByHop.contains(lowered) && !lowered.hasPrefix("proxy-") && !listed.contains(lowered)
            })
    }

    /// The field names `Connection` lists, lowercased.
    private var connectionOptions: Set<String> { Set(listElements("connection").map { $0.lowercased() }) }
}
