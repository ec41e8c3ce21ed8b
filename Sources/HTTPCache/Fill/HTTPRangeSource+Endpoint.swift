import Foundation
import SparseHTTP

extension HTTPRangeSource {
    /// Where the source's `http://` requests go and what they name, taken from its URL once
    /// (Foundation's URL accessors each parse or copy: a dozen of them on every request cost a
    /// few microseconds of a proxy's miss), or without any URL for a proxy's request target on
    /// its configured origin (``HTTPRangeSource/init(endpoint:on:key:)``).
    struct Endpoint: Sendable {
        /// The host to connect to (an IPv6 literal without its brackets) and the port.
        var host: String
        var port: Int
        /// The `Host` field.
        var hostField: String
        /// The request target: the path and query as the URL has them (percent-encoded); nil
        /// when they cannot be sent as one (a byte outside printable ASCII).
        var target: String?
        /// `Basic` credentials from the URL's user and password.
        var authorization: String?

        /// Nil for a URL without a host.
        init?(_ url: URL) {
            guard let host = url.host else { return nil }
            self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
            port = url.port ?? 80
            hostField = HTTPSyntax.hostField(host, port: url.port)
            // From the URL's own parse (a URLComponents would parse it again).
            let absolute = url.absoluteURL
            var target = absolute.path(percentEncoded: true)
            if target.isEmpty { target = "/" }
            if let query = absolute.query(percentEncoded: true) { target += "?" + query }
            self.target = target.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F } ? target : nil
            if let user = url.user {
                let credentials = (user.removingPercentEncoding ?? user) + ":" + ((url.password?.removingPercentEncoding ?? url.password) ?? "")
                authorization = "Basic \(Data(credentials.utf8).base64EncodedString())"
            }
        }

        /// This endpoint's host for `target` under its path (which has no query): what parsing
        /// the URL with `target` appended would give, for a target of ``isPlainTarget(_:)``.
        func appending(_ target: String) -> Endpoint {
            var endpoint = self
            var prefix = self.target ?? ""
            while prefix.hasSuffix("/") { prefix.removeLast() }
            endpoint.target = prefix + target
            return endpoint
        }
    }

    /// Whether `target` is an origin-form request target (RFC 9112, section 3.2.1) made only of
    /// characters a URL keeps as they are (RFC 3986: unreserved, sub-delimiters, `:`, `@`, `/`,
    /// `?` and `%` with two hex digits): appended to a URL's text it gives the URL Foundation
    /// would parse, byte for byte, with no encoding added and no fragment. Other targets take
    /// the parse.
    static func isPlainTarget(_ target: String) -> Bool {
        var bytes = target.utf8.makeIterator()
        guard bytes.next() == UInt8(ascii: "/") else { return false }
        while let byte = bytes.next() {
            if plainBytes.contains(byte) { continue }
            guard byte == UInt8(ascii: "%"), let high = bytes.next(), let low = bytes.next(), isHexDigit(high), isHexDigit(low) else {
                return false
            }
        }
        return true
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"): true
        default: false
        }
    }

    /// The bytes of ``isPlainTarget(_:)`` but `%`, as a 128-bit set.
    private static let plainBytes: ASCIISet = {
        var set = ASCIISet()
        for byte in UInt8(ascii: "a")...UInt8(ascii: "z") { set.insert(byte) }
        for byte in UInt8(ascii: "A")...UInt8(ascii: "Z") { set.insert(byte) }
        for byte in UInt8(ascii: "0")...UInt8(ascii: "9") { set.insert(byte) }
        for byte in "-._~!$&'()*+,;=:@/?".utf8 { set.insert(byte) }
        return set
    }()

    /// A set of ASCII bytes, two words.
    struct ASCIISet: Sendable {
        private var low: UInt64 = 0
        private var high: UInt64 = 0

        mutating func insert(_ byte: UInt8) {
            if byte < 64 { low |= 1 << UInt64(byte) } else if byte < 128 { high |= 1 << UInt64(byte - 64) }
        }

        func contains(_ byte: UInt8) -> Bool {
            byte < 64 ? low & (1 << UInt64(byte)) != 0 : byte < 128 && high & (1 << UInt64(byte - 64)) != 0
        }
    }
}
