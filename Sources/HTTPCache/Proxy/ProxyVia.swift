import SparseHTTP

/// This process's name in `Via` (RFC 9110, section 7.6.3), and loop detection by it.
///
/// Every process picks a pseudonym of its own at start (`sparsecache-` and 8 random hex
/// digits), so two tiers of sparsecache (an edge in front of a parent) tell each other apart,
/// while a request that comes back to the process that already forwarded it (a URL-mode
/// `?url=` naming the proxy itself, an `--origin` pointing at it, a redirect chain the client
/// follows back through it) carries our own name and is refused at once.
package enum ProxyVia {
    /// The received-by pseudonym of this process.
    package static let pseudonym: String = {
        var generator = SystemRandomNumberGenerator()
        let value = UInt32.random(in: .min ... .max, using: &generator)
        let hex = String(value, radix: 16)
        return "sparsecache-" + String(repeating: "0", count: 8 - hex.count) + hex
    }()

    /// The `Via` element this process adds to requests it forwards and answers it gives.
    package static var element: String { "1.1 " + pseudonym }

    /// Whether a request already passed through this process: one of its `Via` elements names
    /// our pseudonym as received-by (the token after the protocol, before any comment).
    package static func isLoop(_ headers: HTTPHeaders) -> Bool {
        headers.listElements("via").contains { element in
            let parts = element.split(whereSeparator: { $0 == " " || $0 == "\t" })
            return parts.count >= 2 && parts[1] == pseudonym
        }
    }
}
