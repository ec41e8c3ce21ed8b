/// Hides the user information of URLs in text meant for logs: `http://user:secret@host/`
/// becomes `http://***@host/`, in plain form (an absolute-form request target, an error that
/// names a URL) and percent-encoded (`?url=http%3A%2F%2Fuser%3Asecret%40host%2F`, URL mode).
/// A password in a URL must reach the origin, never the log.
package enum CredentialRedaction {
    package static func redacting(_ text: String) -> String {
        let bytes = Array(text.utf8)
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        var changed = false
        while index < bytes.count {
            guard let separator = schemeSeparator(bytes, at: index) else {
                output.append(bytes[index])
                index += 1
                continue
            }
            // The authority runs to the first path, query or fragment delimiter (or the end of
            // the URL); its last `@` ends the user information.
            let authority = index + separator
            let encoded = separator > 3
            var end = authority
            var at: Int?
            while end < bytes.count, !endsAuthority(bytes, at: end, encoded: encoded) {
                if bytes[end] == UInt8(ascii: "@") || matches(bytes, at: end, "%40") { at = end }
                end += 1
            }
            output += bytes[index..<authority]
            if let at {
                output += Array("***".utf8)
                output += bytes[at..<end]
                changed = true
            } else {
                output += bytes[authority..<end]
            }
            index = end
        }
        return changed ? String(decoding: output, as: UTF8.self) : text
    }

    /// The length of `://` or its percent-encoded form at `index`.
    private static func schemeSeparator(_ bytes: [UInt8], at index: Int) -> Int? {
        if matches(bytes, at: index, "://") { return 3 }
        if matches(bytes, at: index, "%3A%2F%2F") { return 9 }
        return nil
    }

    /// Whether a URL's authority ends at `index`: at `/ ? #`, white space or a quote, and in a
    /// percent-encoded URL (a query parameter) also at `&` and an encoded `/ ? #`.
    private static func endsAuthority(_ bytes: [UInt8], at index: Int, encoded: Bool) -> Bool {
        switch bytes[index] {
        case UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: " "), UInt8(ascii: "'"), UInt8(ascii: "\""),
            UInt8(ascii: ">"), 9, 10, 13:
            return true
        case UInt8(ascii: "&"):
            return encoded
        default:
            return encoded && (matches(bytes, at: index, "%2F") || matches(bytes, at: index, "%3F") || matches(bytes, at: index, "%23"))
        }
    }

    private static func lowercased(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte }

    /// An ASCII-case-insensitive match of `pattern` at `index`.
    private static func matches(_ bytes: [UInt8], at index: Int, _ pattern: StaticString) -> Bool {
        let count = pattern.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        return pattern.withUTF8Buffer { pattern in
            for offset in 0..<count where lowercased(bytes[index + offset]) != lowercased(pattern[offset]) { return false }
            return true
        }
    }
}
