/// A response status code (RFC 9110, section 15): its class and its standard reason phrase.
package struct HTTPStatus: RawRepresentable, Hashable, Sendable {
    package let rawValue: Int

    package init(rawValue: Int) { self.rawValue = rawValue }
    package init(_ code: Int) { self.rawValue = code }

    /// 1xx: an interim answer; the final one follows (section 15.2).
    package var isInformational: Bool { (100..<200).contains(rawValue) }
    /// 2xx (section 15.3).
    package var isSuccessful: Bool { (200..<300).contains(rawValue) }
    /// 3xx (section 15.4).
    package var isRedirection: Bool { (300..<400).contains(rawValue) }
    /// 4xx (section 15.5).
    package var isClientError: Bool { (400..<500).contains(rawValue) }
    /// 5xx (section 15.6).
    package var isServerError: Bool { rawValue >= 500 }

    /// The reason phrase RFC 9110 (section 15) gives the status, or a generic one for its class.
    package var reasonPhrase: String {
        switch rawValue {
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
            isInformational
                ? "Informational" : isSuccessful ? "OK" : isRedirection ? "Redirect" : isClientError ? "Client Error" : "Server Error"
        }
    }
}
