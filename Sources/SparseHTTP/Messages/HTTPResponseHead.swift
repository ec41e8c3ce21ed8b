import SparseCacheBase

/// An HTTP/1.x response head from an origin, as ``HTTPResponseParser`` reads it: the status
/// line and the header fields, with what a client needs to read the body that follows
/// (``framing``) and to decide whether the connection can be reused (``keepAlive``).
public struct HTTPResponseHead: Sendable, Equatable {
    /// The status code, 100...999 (three digits).
    public var status: Int
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    /// The reason phrase as sent; may be empty. Informational only.
    public var reason: String
    /// Header fields in order, names as sent.
    public var headers: HTTPHeaders

    /// A head as given: nothing is checked (``HTTPResponseParser`` does that for heads read
    /// from an origin), and ``framing`` stays total whatever the fields say.
    public init(status: Int, minorVersion: Int = 1, reason: String = "", headers: HTTPHeaders = []) {
        self.status = status
        self.minorVersion = minorVersion
        self.reason = reason
        self.headers = headers
    }

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? { headers[name] }

    /// Every value of a header, by case-insensitive name, in the order sent. A value that is a
    /// comma-separated list is returned as one string.
    public func values(_ name: String) -> [String] { headers.values(name) }

    /// Whether the connection may carry another request after this response's body:
    /// HTTP/1.1 unless a `Connection` token is `close`; HTTP/1.0 only with a `keep-alive` token.
    /// Always false when framing is ``HTTPBodyFraming/untilClose``, and for an HTTP/1.0 response
    /// carrying `Transfer-Encoding` (RFC 9112, section 6.1: its framing is suspect, so the
    /// connection is closed after it).
    package var keepAlive: Bool { keepAlive(framing: framing) }

    /// ``keepAlive`` for a caller that has the ``framing`` already.
    package func keepAlive(framing: HTTPBodyFraming) -> Bool {
        if framing == .untilClose { return false }
        if headers.containsListElement(of: "connection", "close") { return false }
        if minorVersion >= 1 { return true }
        return headers.containsListElement(of: "connection", "keep-alive") && !headers.contains("transfer-encoding")
    }

    /// How the body of this response (to a GET) is delimited. Total: ``HTTPResponseParser``
    /// refuses heads whose framing fields are unusable; for such a head built by hand, a
    /// `Transfer-Encoding` wins over `Content-Length` (RFC 9112, section 6.3) and a malformed
    /// `Content-Length` reads until close.
    package var framing: HTTPBodyFraming { checkedFraming().framing }

    /// The framing, and what is wrong with the framing fields when the parser must refuse the
    /// head: both `Transfer-Encoding` and `Content-Length` (the classic request-smuggling
    /// ambiguity), or a `Content-Length` that is not one decimal number. One function serves the
    /// parser's check and ``framing`` so the two cannot disagree.
    ///
    /// The fields are checked even on responses that have no body (1xx, 204, 304): an origin
    /// that sends contradictory framing is not one to trust with the next response on the
    /// same connection.
    func checkedFraming() -> (framing: HTTPBodyFraming, problem: String?) {
        let encoded = headers.contains("transfer-encoding")
        let lengthGiven = headers.contains("content-length")
        var problem: String?
        var length: Int64?
        if encoded, lengthGiven {
            problem = "both Transfer-Encoding and Content-Length"
        } else if lengthGiven {
            (length, problem) = contentLength()
        }
        let framing: HTTPBodyFraming
        if (100...199).contains(status) || status == 204 || status == 304 {
            framing = .none
        } else if encoded {
            // Only a final `chunked` delimits the body; any other last coding (gzip alone, an
            // unknown one) leaves the end to the connection's close.
            let last = HTTPSyntax.listElements(values("transfer-encoding")).last?.lowercased()
            framing = last == "chunked" ? .chunked : .untilClose
        } else if let length {
            framing = .length(length)
        } else {
            framing = .untilClose
        }
        return (framing, problem)
    }

    /// The length from every `Content-Length` value, or what is wrong with them. Repeated
    /// fields and comma lists are accepted only when every element is the same number (RFC 9110,
    /// section 8.6); each element is 1 to 18 decimal digits, so it always fits an Int64.
    private func contentLength() -> (length: Int64?, problem: String?) {
        enum Refusal { case invalid, conflicting }
        var length: Int64?
        for field in headers where field.hasName("content-length") {
            var value = field.value
            // Every element where it lies, empty ones included (each must be a number).
            let refusal = value.withUTF8 { bytes -> Refusal? in
                var refusal: Refusal?
                _ = HTTPSyntax.forEachListElement(in: bytes, includingEmpty: true) { element in
                    guard (1...18).contains(element.count) else {
                        refusal = .invalid
                        return true
                    }
                    var number: Int64 = 0
                    for index in element {
                        let byte = bytes[index]
                        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else {
                            refusal = .invalid
                            return true
                        }
                        number = number * 10 + Int64(byte - UInt8(ascii: "0"))
                    }
                    if let length, length != number {
                        refusal = .conflicting
                        return true
                    }
                    length = number
                    return false
                }
                return refusal
            }
            switch refusal {
            case .invalid?: return (nil, "invalid Content-Length \(HTTPSyntax.quoted(Array(field.value.utf8)))")
            case .conflicting?:
                let all = values("content-length").joined(separator: ", ")
                return (nil, "conflicting Content-Length values \(HTTPSyntax.quoted(Array(all.utf8)))")
            case nil: continue
            }
        }
        return (length, nil)
    }
}
