/// Targeted cache control (RFC 9213): `CDN-Cache-Control` and fields like it carry cache
/// directives for one class of caches, as a Structured Field Dictionary (RFC 8941, section 3.2).
extension CacheControl {
    /// The directives of a targeted field (`CDN-Cache-Control`), or nil when it is absent,
    /// empty or not valid: then the cache falls back to `Cache-Control` and `Expires` (RFC 9213,
    /// section 2.2). Valid means a Structured Field Dictionary whose duration directives
    /// (`max-age`, `s-maxage`, `stale-while-revalidate`, `stale-if-error`) are non-negative
    /// Integers; `max-age="60"` or a member that is no dictionary member at all makes the
    /// whole field invalid. Parameters are allowed and ignored, as unknown directives are.
    package static func targeted(fieldValues: [String]) -> CacheControl? {
        guard !fieldValues.isEmpty else { return nil }
        // Field lines of a dictionary are combined with commas (RFC 8941, section 4.2).
        guard let members = StructuredDictionary.parse(Array(fieldValues.joined(separator: ",").utf8)), !members.isEmpty else {
            return nil
        }
        var result = CacheControl(fieldValues: [])
        for (name, value) in members {
            switch (name, value) {
            case ("max-age", .integer(let seconds)), ("s-maxage", .integer(let seconds)),
                ("stale-while-revalidate", .integer(let seconds)), ("stale-if-error", .integer(let seconds)):
                guard seconds >= 0 else { return nil }
                result.directives.append(Directive(name: name, argument: String(min(seconds, maximumSeconds))))
            case ("max-age", _), ("s-maxage", _), ("stale-while-revalidate", _), ("stale-if-error", _):
                return nil
            case (_, .boolean(true)):
                result.directives.append(Directive(name: name, argument: nil))
            case (_, .other(let text)):
                result.directives.append(Directive(name: name, argument: text))
            default:
                result.directives.append(Directive(name: name, argument: nil))
            }
        }
        return result
    }
}

/// The parts of RFC 8941 (Structured Field Values) a targeted cache-control field needs: a
/// Dictionary whose members are checked to be well formed, with Integers and Booleans told
/// apart from the rest (a String's contents, a Token, a Decimal or a Byte Sequence's text).
/// Inner lists are accepted and carry no value.
enum StructuredDictionary {
    enum Value: Equatable {
        case integer(Int64)
        case boolean(Bool)
        case other(String)
    }

    /// The members in order (a repeated key keeps its last value, section 3.2), or nil when
    /// `input` is not a valid Dictionary.
    static func parse(_ input: [UInt8]) -> [(String, Value)]? {
        var parser = Parser(bytes: input)
        parser.skip(spaces: true)
        var members: [(String, Value)] = []
        while !parser.atEnd {
            guard let key = parser.key() else { return nil }
            var value = Value.boolean(true)
            if parser.peek == UInt8(ascii: "=") {
                parser.index += 1
                guard let item = parser.memberValue() else { return nil }
                value = item
            }
            guard parser.parameters() else { return nil }
            members.removeAll { $0.0 == key }
            members.append((key, value))
            parser.skip(spaces: false)
            if parser.atEnd { break }
            guard parser.peek == UInt8(ascii: ",") else { return nil }
            parser.index += 1
            parser.skip(spaces: false)
            // A trailing comma is not allowed (section 4.2.2).
            if parser.atEnd { return nil }
        }
        return members
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index >= bytes.count }
        var peek: UInt8? { atEnd ? nil : bytes[index] }

        /// SP only (`spaces`), or OWS (SP and HTAB) around list separators.
        mutating func skip(spaces: Bool) {
            while let byte = peek, byte == 0x20 || (!spaces && byte == 0x09) { index += 1 }
        }

        /// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
        mutating func key() -> String? {
            guard let first = peek, isLower(first) || first == UInt8(ascii: "*") else { return nil }
            let start = index
            while let byte = peek, isLower(byte) || isDigit(byte) || "_-.*".utf8.contains(byte) { index += 1 }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        mutating func memberValue() -> Value? {
            if peek == UInt8(ascii: "(") { return innerList() ? .other("") : nil }
            return bareItem()
        }

        mutating func innerList() -> Bool {
            index += 1
            while true {
                skip(spaces: true)
                if peek == UInt8(ascii: ")") {
                    index += 1
                    return parameters()
                }
                guard bareItem() != nil, parameters() else { return false }
                guard let next = peek, next == 0x20 || next == UInt8(ascii: ")") else { return false }
            }
        }

        /// `;key[=bare-item]` as many times as they come.
        mutating func parameters() -> Bool {
            while peek == UInt8(ascii: ";") {
                index += 1
                skip(spaces: true)
                guard key() != nil else { return false }
                if peek == UInt8(ascii: "=") {
                    index += 1
                    guard bareItem() != nil else { return false }
                }
            }
            return true
        }

        mutating func bareItem() -> Value? {
            guard let first = peek else { return nil }
            switch first {
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "?"):
                index += 1
                guard let bit = peek, bit == UInt8(ascii: "0") || bit == UInt8(ascii: "1") else { return nil }
                index += 1
                return .boolean(bit == UInt8(ascii: "1"))
            case UInt8(ascii: ":"):
                index += 1
                let start = index
                while let byte = peek, byte != UInt8(ascii: ":") {
                    guard isAlpha(byte) || isDigit(byte) || "+/=".utf8.contains(byte) else { return nil }
                    index += 1
                }
                guard peek == UInt8(ascii: ":") else { return nil }
                index += 1
                return .other(String(decoding: bytes[start..<(index - 1)], as: UTF8.self))
            case _ where isAlpha(first) || first == UInt8(ascii: "*"):
                let start = index
                while let byte = peek, isTokenByte(byte) || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "/") { index += 1 }
                return .other(String(decoding: bytes[start..<index], as: UTF8.self))
            default:
                return nil
            }
        }

        /// sf-integer (at most 15 digits) or sf-decimal (at most 12 + 3 digits).
        mutating func number() -> Value? {
            var negative = false
            if peek == UInt8(ascii: "-") {
                negative = true
                index += 1
            }
            let start = index
            while let byte = peek, isDigit(byte) { index += 1 }
            let integerDigits = index - start
            guard integerDigits > 0 else { return nil }
            if peek == UInt8(ascii: ".") {
                index += 1
                let fraction = index
                while let byte = peek, isDigit(byte) { index += 1 }
                guard integerDigits <= 12, (1...3).contains(index - fraction) else { return nil }
                return .other(String(decoding: bytes[start..<index], as: UTF8.self))
            }
            guard integerDigits <= 15, let value = Int64(String(decoding: bytes[start..<index], as: UTF8.self)) else { return nil }
            return .integer(negative ? -value : value)
        }

        /// sf-string: printable ASCII, `\` escaping only `"` and `\`.
        mutating func string() -> Value? {
            index += 1
            var text: [UInt8] = []
            while let byte = peek {
                index += 1
                switch byte {
                case UInt8(ascii: "\\"):
                    guard let escaped = peek, escaped == UInt8(ascii: "\"") || escaped == UInt8(ascii: "\\") else { return nil }
                    text.append(escaped)
                    index += 1
                case UInt8(ascii: "\""):
                    return .other(String(decoding: text, as: UTF8.self))
                case 0x20...0x7E:
                    text.append(byte)
                default:
                    return nil
                }
            }
            return nil
        }

        func isLower(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z") }
        func isAlpha(_ byte: UInt8) -> Bool { isLower(byte) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) }
        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        func isTokenByte(_ byte: UInt8) -> Bool { isAlpha(byte) || isDigit(byte) || "!#$%&'*+-.^_`|~".utf8.contains(byte) }
    }
}
