extension HTTPHeaders {
    /// The fields without those whose name holds `_`, as nginx treats a request's fields by
    /// default (`underscores_in_headers off`). CGI, WSGI and similar gateways pass fields on as
    /// `HTTP_<NAME>` variables with `-` turned into `_`: for them `Transfer_Encoding` is
    /// `Transfer-Encoding`, and a proxy that checked the framing by one name and sent the other
    /// on lets a request be smuggled past it.
    ///
    /// - Parameter keepingOthers: keep fields with `_` (nginx's `underscores_in_headers on`),
    ///   except those that with `_` read as `-` name the framing (`Content-Length`,
    ///   `Transfer-Encoding`) or a hop-by-hop field (`Keep-Alive`, `Proxy-*`): no origin needs
    ///   those from a client, and a gateway would read them as its own.
    /// - Returns: the fields as they are when no name holds `_` (nearly every request), without
    ///   a copy.
    package func droppingUnderscoreNames(keepingOthers: Bool = false) -> HTTPHeaders {
        guard fields.contains(where: { Self.hasUnderscore($0.name) }) else { return self }
        return keeping { field in
            guard Self.hasUnderscore(field.name) else { return true }
            guard keepingOthers else { return false }
            let dashed = HTTPHeaderField(
                name: String(decoding: field.name.utf8.map { $0 == UInt8(ascii: "_") ? UInt8(ascii: "-") : $0 }, as: UTF8.self),
                value: field.value)
            return !dashed.hasName("content-length") && !HTTPHeaders([dashed]).isHopByHop(dashed.name)
        }
    }

    private static func hasUnderscore(_ name: String) -> Bool {
        name.utf8.contains(UInt8(ascii: "_"))
    }
}
