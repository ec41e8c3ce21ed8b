/// Message heads as bytes on the wire (RFC 9112, sections 3, 4 and 5): the start line, one line
/// per field, and the empty line. The one writer both sides use: the server's responses and the
/// origin client's requests. Field values are sanitized (``HTTPSyntax/sanitizedFieldValue(_:)``)
/// so no value can inject a line.
extension HTTPRequestHead {
    /// The head as sent: `METHOD target HTTP/1.x`, the fields, an empty line.
    public func encoded() -> [UInt8] {
        HTTPHeadEncoding.encode(startLine: "\(method) \(target) HTTP/1.\(minorVersion)", headers: headers)
    }
}

extension HTTPResponseHead {
    /// The head as sent: `HTTP/1.x status reason`, the fields, an empty line. An empty reason
    /// phrase is sent as the standard one for the status.
    public func encoded() -> [UInt8] {
        let phrase = reason.isEmpty ? Self.standardReason(for: status) : HTTPSyntax.sanitizedFieldValue(reason)
        return HTTPHeadEncoding.encode(startLine: "HTTP/1.\(minorVersion) \(status) \(phrase)", headers: headers)
    }

    /// The reason phrase RFC 9110 (section 15) gives a status, or a generic one for its class.
    public static func standardReason(for status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 204: "No Content"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 410: "Gone"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 416: "Range Not Satisfiable"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        default:
            status < 200
                ? "Informational" : status < 300 ? "OK" : status < 400 ? "Redirect" : status < 500 ? "Client Error" : "Server Error"
        }
    }
}

enum HTTPHeadEncoding {
    /// Straight into bytes: every response goes through here, and building a String first
    /// costs a copy and several reallocations per head.
    static func encode(startLine: String, headers: HTTPHeaders) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(startLine.utf8.count + headers.reduce(4) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 })
        bytes += startLine.utf8
        bytes += crlf
        for field in headers {
            bytes += field.name.utf8
            bytes += separator
            if field.value.utf8.contains(where: HTTPSyntax.isControl) {
                bytes += field.value.utf8.filter { !HTTPSyntax.isControl($0) }
            } else {
                bytes += field.value.utf8
            }
            bytes += crlf
        }
        bytes += crlf
        return bytes
    }

    private static let crlf: [UInt8] = [13, 10]
    private static let separator: [UInt8] = [UInt8(ascii: ":"), UInt8(ascii: " ")]
}
