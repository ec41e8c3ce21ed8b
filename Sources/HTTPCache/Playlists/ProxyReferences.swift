import Foundation

/// How a URL in a playlist is written so that the player asks this proxy for it.
///
/// Every reference is root-relative (`/path` or `/<name>?url=...`): the player resolves it
/// against the URL it fetched the playlist from, which is the proxy as the player reaches it.
/// So the proxy never needs to know its own externally visible address (no trust in `Host`,
/// and it stays right behind port forwarding or another proxy that keeps paths).
///
/// - Reverse-proxy mode: a URL on the origin becomes its path and query on the proxy.
/// - Otherwise (URL mode, or another origin in reverse mode): `/<name>?url=<percent-encoded
///   absolute URL>`, where `<name>` is the URL's last path segment, so players can still guess
///   the type from the extension.
///
/// Only `http` and `https` URLs are rewritten: `data:`, `skd:` (FairPlay keys) and the like
/// stay as they are.
struct ProxyReferences: Sendable {
    /// The origin in reverse-proxy mode.
    var origin: URL?

    /// The reference for `text` (a URL as written in the playlist) resolved against `base`, or
    /// nil when it is not an http(s) URL or cannot be parsed (it is then left alone).
    func reference(for text: String, base: URL) -> String? {
        guard let absolute = URL(string: text, relativeTo: base)?.absoluteURL, let scheme = absolute.scheme?.lowercased(),
            scheme == "http" || scheme == "https", absolute.host != nil
        else { return nil }
        return reference(for: absolute)
    }

    /// The reference for an absolute http(s) URL.
    func reference(for absolute: URL) -> String {
        var text = absolute.absoluteString
        if let fragment = text.firstIndex(of: "#") { text = String(text[..<fragment]) }
        if let origin, Self.originName(absolute) == Self.originName(origin), absolute.user == nil,
            let components = URLComponents(url: absolute, resolvingAgainstBaseURL: true)
        {
            var prefix = URLComponents(url: origin, resolvingAgainstBaseURL: true)?.percentEncodedPath ?? ""
            while prefix.hasSuffix("/") { prefix.removeLast() }
            let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
            if path.hasPrefix(prefix + "/") {
                let rest = String(path.dropFirst(prefix.count))
                return rest + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
            }
        }
        let name = absolute.lastPathComponent.isEmpty || absolute.lastPathComponent == "/" ? "resource" : absolute.lastPathComponent
        return "/" + Self.encode(name) + "?url=" + Self.encode(text)
    }

    /// A DASH `SegmentTemplate` attribute: its `$Identifier$` parts (`$Number%05d$`,
    /// `$RepresentationID$`, `$$`) are kept as they are, outside the percent-encoding, so the
    /// player still fills them in; the rest is resolved and rewritten like any URL.
    func reference(forTemplate template: String, base: URL) -> String? {
        let parts = template.split(separator: "$", omittingEmptySubsequences: false)
        // An even number of parts means an unclosed `$`: not a template, a plain URL.
        guard parts.count > 1, parts.count % 2 == 1 else { return reference(for: template, base: base) }
        var stand = ""
        var identifiers: [String] = []
        for (index, part) in parts.enumerated() {
            if index % 2 == 0 {
                stand += part
            } else {
                stand += "zzsparsecache\(identifiers.count)zz"
                identifiers.append("$" + part + "$")
            }
        }
        guard var rewritten = reference(for: stand, base: base) else { return nil }
        for (index, identifier) in identifiers.enumerated() {
            rewritten = rewritten.replacingOccurrences(of: "zzsparsecache\(index)zz", with: identifier)
        }
        return rewritten
    }

    /// `scheme://host:port` of a URL, lowercased, with the scheme's default port filled in.
    static func originName(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\((url.host ?? "").lowercased()):\(port)"
    }

    /// Percent-encodes everything but the unreserved characters (RFC 3986, section 2.3).
    static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? text
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}
