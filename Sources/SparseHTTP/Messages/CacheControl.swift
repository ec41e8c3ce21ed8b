/// The directives of a message's `Cache-Control` fields (RFC 9111, section 5.2), parsed once:
/// `token [ "=" ( token / quoted-string ) ]`, comma-separated, names compared without regard
/// to case. Every field line of the message counts, in order, as one list (RFC 9110, 5.3).
///
/// Lenient where that is safe and strict where a guess could make a response look fresher
/// than it is: a malformed element is skipped (the rest still count), and a delta-seconds
/// argument that is not 1*DIGIT is ``Seconds/invalid`` (callers treat it as stale).
package struct CacheControl: Sendable, Equatable {
    package struct Directive: Sendable, Equatable {
        /// The name, lowercased.
        package var name: String
        /// The argument without quotes or escapes, or nil when there was none.
        package var argument: String?
    }

    /// The value of a delta-seconds directive (RFC 9111, section 1.2.2).
    package enum Seconds: Sendable, Equatable {
        case seconds(Int64)
        /// Not a non-negative integer, or the directive repeated with different values: the
        /// response is to be treated as stale (section 4.2.1 allows either choice; staleness is
        /// the safe one).
        case invalid

        /// The number of seconds, or nil when invalid.
        package var seconds: Int64? {
            if case .seconds(let value) = self { return value }
            return nil
        }
    }

    package internal(set) var directives: [Directive] = []

    /// The directives of every `Cache-Control` field of `headers`.
    package init(_ headers: HTTPHeaders) {
        self.init(fieldValues: headers.values("cache-control"))
    }

    package init(fieldValues: [String]) {
        for value in fieldValues { Self.parse(Array(value.utf8), into: &directives) }
    }

    /// Whether the directive `name` (lowercase) is present, with or without an argument.
    package func contains(_ name: String) -> Bool { directives.contains { $0.name == name } }

    /// The argument of the first `name` directive: nil when absent; "" when present bare.
    package func argument(_ name: String) -> String? {
        guard let directive = directives.first(where: { $0.name == name }) else { return nil }
        return directive.argument ?? ""
    }

    /// The value of the delta-seconds directive `name`, or nil when absent. Past 2^31 the
    /// value is 2^31 (section 1.2.2).
    package func seconds(_ name: String) -> Seconds? {
        // One pass, no arrays: every policy asks for several of these on every request.
        var found: Seconds?
        for directive in directives where directive.name == name {
            let value = Self.deltaSeconds(directive.argument)
            if let first = found, first != value { return .invalid }
            found = value
        }
        return found
    }

    /// The field names qualifying `no-cache` or `private` (`no-cache="Set-Cookie"`): empty when
    /// the directive has no argument.
    package func fieldNames(_ name: String) -> [String] {
        guard let argument = argument(name), !argument.isEmpty else { return [] }
        return HTTPSyntax.listElements([argument]).map { $0.lowercased() }
    }

    /// A delta-seconds value (`max-age`'s argument, an `Age` field): 1*DIGIT, capped at 2^31.
    package static func deltaSeconds(_ argument: String?) -> Seconds {
        // On the bytes, capped as it goes (every stored answer's `max-age` comes through here).
        guard let argument, !argument.isEmpty else { return .invalid }
        var seconds: Int64 = 0
        for byte in argument.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return .invalid }
            seconds = min(seconds * 10 + Int64(byte - UInt8(ascii: "0")), Self.maximumSeconds)
        }
        return .seconds(seconds)
    }

    /// 2^31, the value of any larger delta-seconds (RFC 9111, section 1.2.2).
    package static let maximumSeconds: Int64 = 1 << 31

    private static func parse(_ bytes: [UInt8], into directives: inout [Directive]) {
        var index = 0
        func skipWhitespace() {
            while index < bytes.count, bytes[index] == HTTPSyntax.space || bytes[index] == HTTPSyntax.tab { index += 1 }
        }
        func skipToNextElement() {
            var quoted = false
            while index < bytes.count {
                let byte = bytes[index]
                if quoted, byte == UInt8(ascii: "\\") {
                    index += 2
                    continue
                }
                if byte == UInt8(ascii: "\"") { quoted.toggle() }
                if !quoted, byte == UInt8(ascii: ",") { break }
                index += 1
            }
        }
        while index < bytes.count {
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            let nameStart = index
            while index < bytes.count, HTTPSyntax.isTokenByte(bytes[index]) { index += 1 }
            guard index > nameStart else {
                skipToNextElement()
                continue
            }
            let name = String(decoding: bytes[nameStart..<index], as: UTF8.self).lowercased()
            var argument: String?
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "=") {
                index += 1
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "\"") {
                    // quoted-string: backslash escapes one byte (RFC 9110, section 5.6.4).
                    index += 1
                    var value: [UInt8] = []
                    var closed = false
                    while index < bytes.count {
                        let byte = bytes[index]
                        index += 1
                        if byte == UInt8(ascii: "\\"), index < bytes.count {
                            value.append(bytes[index])
                            index += 1
                        } else if byte == UInt8(ascii: "\"") {
                            closed = true
                            break
                        } else {
                            value.append(byte)
                        }
                    }
                    guard closed else { return }
                    argument = String(decoding: value, as: UTF8.self)
                } else {
                    let valueStart = index
                    while index < bytes.count, HTTPSyntax.isTokenByte(bytes[index]) { index += 1 }
                    argument = String(decoding: bytes[valueStart..<index], as: UTF8.self)
                }
            }
            skipWhitespace()
            if index < bytes.count, bytes[index] != UInt8(ascii: ",") {
                // Garbage after the element: the element is not well-formed, skip it whole.
                skipToNextElement()
                continue
            }
            directives.append(Directive(name: name, argument: argument))
        }
    }
}
