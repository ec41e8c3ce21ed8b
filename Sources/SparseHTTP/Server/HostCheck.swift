/// Which `Host` values a server listening on loopback answers: a defence against DNS
/// rebinding.
///
/// A web page on `evil.example` can make the browser resolve that name to 127.0.0.1 and send
/// its own requests to a local server: the same-origin policy sees one origin, the request
/// carries `Host: evil.example:8080`. A server that answers any Host hands that page whatever
/// it serves, and a URL-mode proxy whatever it can reach. So a request in origin form whose
/// Host is not a loopback name or address, the listen address, or a name the operator
/// configured gets 421 Misdirected Request (RFC 9110, section 15.5.20: this server will not
/// produce an answer for that authority). A request in absolute form (`GET http://host/...`)
/// comes from a client told to use this server as its proxy, which browsers' pages cannot
/// make, and a request without Host (HTTP/1.0) from no browser: neither is checked.
///
/// Listening elsewhere, the check applies only when names are configured; see docs/SECURITY.md.
package struct HostCheck: Sendable {
    /// Names (lowercased, without port) answered besides loopback and the listen address.
    package let names: Set<String>
    let listenHost: String
    /// `bare(listenHost)`, worked out once: every request compares with it.
    private let bareListenHost: String
    /// Whether a request's Host is checked at all.
    package let enforced: Bool

    /// - Parameters:
    ///   - listenHost: the numeric address the server listens on.
    ///   - names: `--server-name` values.
    package init(listenHost: String, names: [String]) {
        self.listenHost = listenHost.lowercased()
        bareListenHost = Self.bare(listenHost)
        self.names = Set(names.map { Self.bare($0) })
        enforced = Self.isLoopback(listenHost) || !names.isEmpty
    }

    /// Nil when the request may be answered, else why not (for a 421 body).
    package func refusal(for request: HTTPRequestHead) -> String? {
        guard enforced, request.target.hasPrefix("/"), let host = request.header("host") else { return nil }
        let name = Self.bare(host)
        // The listen address first: what a local client's Host nearly always is.
        if name == bareListenHost || Self.isBareLoopback(name) || names.contains(name) { return nil }
        return "misdirected request: this server does not answer for the host in the Host field "
            + "(a loopback address, the listen address or a name given with serve --server-name)"
    }

    /// The host of a Host value or name: lowercased, without port, brackets or a final dot.
    static func bare(_ text: String) -> String {
        // On bytes: every request's Host comes here. ASCII only; anything else (not a valid
        // Host anyway) takes Unicode lower-casing.
        guard text.utf8.allSatisfy({ $0 < 0x80 }) else { return bareUnicode(text) }
        var text = text
        return text.withUTF8 { utf8 in
            var host = utf8[...]
            if host.first == UInt8(ascii: "[") {
                host = host.dropFirst().prefix { $0 != UInt8(ascii: "]") }
            } else if let colon = host.lastIndex(of: UInt8(ascii: ":")), host.firstIndex(of: UInt8(ascii: ":")) == colon {
                host = host[..<colon]
            }
            while host.last == UInt8(ascii: ".") { host = host.dropLast() }
            // Written lowercased straight into the string (one that fits inline allocates nothing).
            return String(unsafeUninitializedCapacity: host.count) { bytes in
                for (index, byte) in host.enumerated() { bytes[index] = byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
                return host.count
            }
        }
    }

    private static func bareUnicode(_ text: String) -> String {
        var host = Substring(text.lowercased())
        if host.hasPrefix("[") {
            host = host.dropFirst().prefix { $0 != "]" }
        } else if host.filter({ $0 == ":" }).count == 1, let colon = host.lastIndex(of: ":") {
            host = host[..<colon]
        }
        while host.hasSuffix(".") { host = host.dropLast() }
        return String(host)
    }

    /// `localhost` (and names under it, RFC 6761), 127.0.0.0/8 and ::1.
    static func isLoopback(_ text: String) -> Bool {
        isBareLoopback(bare(text))
    }

    /// ``isLoopback(_:)`` of a host already ``bare(_:)``.
    private static func isBareLoopback(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        if case .v4(let value) = IPAddress(numeric: host) { return value >> 24 == 127 }
        return false
    }
}
