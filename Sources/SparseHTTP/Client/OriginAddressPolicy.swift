import CShim
import SparseCacheBase

#if canImport(Glibc)
    import Glibc
#endif

/// Which origins a forward proxy (URL mode) may connect to: no server-side request forgery.
///
/// A client of a URL-mode proxy names any URL, so without a policy it reaches whatever the
/// proxy reaches: services on the proxy's own loopback, the intranet, cloud metadata at
/// 169.254.169.254. By default an origin is refused when any address its name resolves to is
/// loopback, unspecified, link-local, private (RFC 1918), shared (CGNAT, RFC 6598),
/// unique-local (RFC 4193), multicast or reserved, or one of this machine's own interface
/// addresses; IPv4 inside IPv6 (mapped, compatible, NAT64) counts as the IPv4 address. The
/// operator admits such origins by pattern (``Pattern``): `host`, `host:port`, `*.domain`.
///
/// The check runs on the resolved addresses and the connection goes to those very addresses
/// (``TCPConnection/connect(host:port:resolver:policy:)``), so a name that resolves to a
/// public address for the check and to 127.0.0.1 for the connection (DNS rebinding) cannot
/// slip through; numeric forms such as `2130706433`, `0x7f.1` or `127.1` are read by the
/// resolver like any address and refused as what they are. Refusals say "not allowed" and
/// nothing else: not which kind of address, and never whether a port accepts connections.
package struct OriginAddressPolicy: Sendable {
    /// An admitted origin: a host name or numeric address, optionally with a port; `*.domain`
    /// admits every name under `domain` (not `domain` itself, as nginx's `server_name`).
    package struct Pattern: Sendable, Equatable, CustomStringConvertible {
        package var host: String
        package var port: Int?
        package var wildcard: Bool

        /// Reads `host`, `host:port`, `[v6]`, `[v6]:port` or `*.domain[:port]`.
        package init?(_ text: String) {
            var rest = Substring(text.lowercased())
            var port: Int?
            if rest.hasPrefix("[") {
                guard let close = rest.firstIndex(of: "]") else { return nil }
                let after = rest[rest.index(after: close)...]
                if !after.isEmpty {
                    guard after.hasPrefix(":"), let number = Int(after.dropFirst()), (1...65535).contains(number) else { return nil }
                    port = number
                }
                rest = rest[rest.index(after: rest.startIndex)..<close]
            } else if rest.filter({ $0 == ":" }).count == 1, let colon = rest.lastIndex(of: ":") {
                guard let number = Int(rest[rest.index(after: colon)...]), (1...65535).contains(number) else { return nil }
                port = number
                rest = rest[..<colon]
            }
            wildcard = rest.hasPrefix("*.")
            if wildcard { rest = rest.dropFirst(2) }
            while rest.hasSuffix(".") { rest = rest.dropLast() }
            guard !rest.isEmpty, !rest.contains("*"), !rest.contains("/") else { return nil }
            host = String(rest)
            self.port = port
        }

        package var description: String {
            let name = (wildcard ? "*." : "") + (host.contains(":") ? "[\(host)]" : host)
            return name + (port.map { ":\($0)" } ?? "")
        }

        /// Whether an origin named `name` (as the URL gives it) on `port`, at `address`, is this one.
        func matches(name: String, port: Int, address: IPAddress) -> Bool {
            if let wanted = self.port, wanted != port { return false }
            if let literal = IPAddress(numeric: host) { return !wildcard && literal == address }
            var name = name.lowercased()
            while name.hasSuffix(".") { name.removeLast() }
            return wildcard ? name.hasSuffix("." + host) : name == host
        }
    }

    package let allowed: [Pattern]
    /// This machine's interface addresses when the policy was made: refused like loopback.
    let ownAddresses: [IPAddress]

    package init(allowing allowed: [Pattern] = []) {
        self.allowed = allowed
        ownAddresses = IPAddress.interfaceAddresses()
    }

    /// Whether the origin `name:port` may be reached at every one of `addresses`.
    package func permits(name: String, port: Int, addresses: [IPAddress]) -> Bool {
        !addresses.isEmpty
            && addresses.allSatisfy { address in
                (address.isGlobal && !ownAddresses.contains(address))
                    || allowed.contains { $0.matches(name: name, port: port, address: address) }
            }
    }

    /// The refusal: the origin as the client named it, and nothing about why.
    package static func refusal(name: String, port: Int) -> HTTPError {
        HTTPError(
            .notAllowed, operation: "policy", peer: TCPConnection.address(host: name, port: port),
            detail: "not allowed: this proxy does not fetch from that origin (serve --allow-origin admits local and private ones)")
    }

    /// Resolves `name` (off the cooperative pool) and throws ``refusal(name:port:)`` unless
    /// every address is permitted: for origins reached through a client that resolves again
    /// by itself (URLSession), which leaves a window for DNS rebinding (docs/SECURITY.md).
    package func check(name: String, port: Int, resolver: BlockingExecutor) async throws {
        let addresses = try await TCPConnection.resolve(host: name, port: port, resolver: resolver)
        guard permits(name: name, port: port, addresses: addresses.compactMap(IPAddress.init)) else {
            throw Self.refusal(name: name, port: port)
        }
    }
}

/// An IPv4 or IPv6 address, as the policy compares and classifies them.
package enum IPAddress: Sendable, Equatable, CustomStringConvertible {
    case v4(UInt32)
    /// 16 bytes, network order.
    case v6([UInt8])

    /// A strictly numeric address (inet_pton: dotted quad or IPv6, brackets allowed).
    package init?(numeric text: String) {
        var text = Substring(text)
        if text.hasPrefix("["), text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        var v4 = in_addr()
        if inet_pton(AF_INET, String(text), &v4) == 1 {
            self = .v4(UInt32(bigEndian: v4.s_addr))
            return
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, String(text), &v6) == 1 else { return nil }
        self = .v6(withUnsafeBytes(of: &v6) { Array($0) })
    }

    /// The address of a resolver answer.
    init?(_ address: sc_address) {
        var storage = address.storage
        self.init(socketAddress: &storage)
    }

    init?(socketAddress storage: UnsafePointer<sockaddr_storage>) {
        switch Int32(storage.pointee.ss_family) {
        case AF_INET:
            let v4 = UnsafeRawPointer(storage).assumingMemoryBound(to: sockaddr_in.self).pointee
            self = .v4(UInt32(bigEndian: v4.sin_addr.s_addr))
        case AF_INET6:
            var v6 = UnsafeRawPointer(storage).assumingMemoryBound(to: sockaddr_in6.self).pointee.sin6_addr
            self = .v6(withUnsafeBytes(of: &v6) { Array($0) })
        default:
            return nil
        }
    }

    /// The IPv4 address inside an IPv6 one: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d,
    /// deprecated) and NAT64 (64:ff9b::a.b.c.d) reach that IPv4 host.
    var embeddedV4: UInt32? {
        guard case .v6(let bytes) = self else { return nil }
        let tail = bytes[12..<16].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let head = Array(bytes[0..<12])
        if head == [UInt8](repeating: 0, count: 10) + [0xff, 0xff] { return tail }
        if head == [UInt8](repeating: 0, count: 12), tail > 1 { return tail }
        if head == [0x00, 0x64, 0xff, 0x9b] + [UInt8](repeating: 0, count: 8) { return tail }
        return nil
    }

    /// Whether the address is on the public internet: not loopback, unspecified, link-local,
    /// private, shared, unique-local, site-local, multicast, documentation or reserved.
    package var isGlobal: Bool {
        switch self {
        case .v4(let value):
            return Self.isGlobalV4(value)
        case .v6(let bytes):
            if let v4 = embeddedV4 { return Self.isGlobalV4(v4) }
            if bytes.allSatisfy({ $0 == 0 }) { return false }  // ::
            if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return false }  // ::1
            if bytes[0] & 0xfe == 0xfc { return false }  // fc00::/7 unique-local
            if bytes[0] == 0xfe && bytes[1] & 0xc0 == 0x80 { return false }  // fe80::/10 link-local
            if bytes[0] == 0xfe && bytes[1] & 0xc0 == 0xc0 { return false }  // fec0::/10 site-local
            if bytes[0] == 0xff { return false }  // multicast
            if bytes[0] == 0x20 && bytes[1] == 0x01 && bytes[2] == 0x0d && bytes[3] == 0xb8 { return false }  // documentation
            return true
        }
    }

    private static func isGlobalV4(_ value: UInt32) -> Bool {
        let blocked: [(UInt32, Int)] = [
            (0x0000_0000, 8),  // 0/8 "this network", 0.0.0.0
            (0x0A00_0000, 8),  // 10/8 private
            (0x6440_0000, 10),  // 100.64/10 shared (CGNAT)
            (0x7F00_0000, 8),  // 127/8 loopback
            (0xA9FE_0000, 16),  // 169.254/16 link-local (cloud metadata)
            (0xAC10_0000, 12),  // 172.16/12 private
            (0xC000_0000, 24),  // 192.0.0/24 protocol assignments
            (0xC000_0200, 24),  // 192.0.2/24 documentation
            (0xC0A8_0000, 16),  // 192.168/16 private
            (0xC612_0000, 15),  // 198.18/15 benchmarking
            (0xC633_6400, 24),  // 198.51.100/24 documentation
            (0xCB00_7100, 24),  // 203.0.113/24 documentation
            (0xE000_0000, 4),  // 224/4 multicast
            (0xF000_0000, 4),  // 240/4 reserved, 255.255.255.255
        ]
        return !blocked.contains { prefix, bits in value >> (32 - bits) == prefix >> (32 - bits) }
    }

    /// This machine's interface addresses (getifaddrs).
    static func interfaceAddresses() -> [IPAddress] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return [] }
        defer { freeifaddrs(list) }
        var found: [IPAddress] = []
        var entry: UnsafeMutablePointer<ifaddrs>? = first
        while let current = entry {
            if let address = current.pointee.ifa_addr {
                var storage = sockaddr_storage()
                let family = Int32(address.pointee.sa_family)
                let size = family == AF_INET ? MemoryLayout<sockaddr_in>.size : family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : 0
                if size > 0 {
                    withUnsafeMutableBytes(of: &storage) { UnsafeMutableRawPointer($0.baseAddress!).copyMemory(from: address, byteCount: size) }
                    if let ip = IPAddress(socketAddress: &storage), !found.contains(ip) { found.append(ip) }
                }
            }
            entry = current.pointee.ifa_next
        }
        return found
    }

    package var description: String {
        switch self {
        case .v4(let value):
            return [24, 16, 8, 0].map { String((value >> UInt32($0)) & 0xff) }.joined(separator: ".")
        case .v6(var bytes):
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            inet_ntop(AF_INET6, &bytes, &text, socklen_t(text.count))
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}
