import SparseHTTP

/// A proxy's name in `Via` (RFC 9110, section 7.6.3), and loop detection by it.
///
/// Every ``CachingProxy`` picks a pseudonym of its own (`sparsecache-` and 8 random hex digits),
/// so two tiers of sparsecache (an edge in front of a parent, even in one process) tell each
/// other apart, while a request that comes back to the proxy that already forwarded it (a
/// URL-mode `?url=` naming the proxy itself, an `--origin` pointing at it) carries its own name
/// and is refused at once.
package struct ProxyVia: Sendable, Equatable {
    /// The received-by pseudonym.
    package let pseudonym: String

    /// A new random pseudonym.
    package init() {
        var generator = SystemRandomNumberGenerator()
        let hex = String(UInt32.random(in: .min ... .max, using: &generator), radix: 16)
        pseudonym = "sparsecache-" + String(repeating: "0", count: 8 - hex.count) + hex
    }

    /// The `Via` element the proxy adds to requests it forwards and answers it gives.
    package var element: String { "1.1 " + pseudonym }

    /// Whether a request already passed through this proxy: one of its `Via` elements names our
    /// pseudonym as received-by (the token after the protocol, before any comment).
    package func isLoop(_ headers: HTTPHeaders) -> Bool {
        headers.listElements("via").contains { element in
            let parts = element.split(whereSeparator: { $0 == " " || $0 == "\t" })
            return parts.count >= 2 && parts[1] == pseudonym
        }
    }
}
