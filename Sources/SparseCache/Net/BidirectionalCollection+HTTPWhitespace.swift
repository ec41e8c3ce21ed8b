extension BidirectionalCollection where Element == UInt8, SubSequence == Self {
    /// Without leading and trailing spaces and tabs: HTTP's optional whitespace around field
    /// values and list elements (RFC 9110, section 5.6.3). Shared by the request and response
    /// parsers and the Range interpretation.
    func trimmingHTTPWhitespace() -> Self {
        var bytes = self
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes = bytes.dropFirst() }
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes = bytes.dropLast() }
        return bytes
    }
}
