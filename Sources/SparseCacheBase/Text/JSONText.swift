/// JSON text written by hand where a line must go out as soon as it is known (the request log,
/// streamed listings) rather than through an encoder that needs the whole value.
package enum JSONText {
    /// `text` as a JSON string (RFC 8259, section 7): quote, backslash and control characters
    /// (and DEL) escaped, the rest as UTF-8.
    package static func quoted(_ text: String) -> String {
        var out = "\""
        out.reserveCapacity(text.utf8.count + 2)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
