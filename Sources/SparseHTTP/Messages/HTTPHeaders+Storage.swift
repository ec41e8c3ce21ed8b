extension HTTPHeaders {
    /// The fields as text for storage beside a cached body: one `name: value` per line, in
    /// order. Values never hold line breaks (the parsers refuse them and
    /// ``HTTPSyntax/sanitizedFieldValue(_:)`` strips them from values made here).
    package var storageText: String {
        // Into one buffer of the known size: every stored answer makes it (a small object's on
        // the event loop that served it).
        var text = ""
        text.reserveCapacity(storageTextBound)
        for (index, field) in fields.enumerated() {
            if index > 0 { text.append("\n") }
            text.append(field.name)
            text.append(": ")
            text.append(HTTPSyntax.sanitizedFieldValue(field.value))
        }
        return text
    }

    /// At least the length of ``storageText``, from the fields' lengths alone (the text drops
    /// the control bytes of values, which this does not look for): enough for a size check
    /// that nearly always passes, on every answer stored.
    package var storageTextBound: Int {
        fields.reduce(Swift.max(0, fields.count - 1)) { count, field in count + field.name.utf8.count + 2 + field.value.utf8.count }
    }

    /// The length in bytes of ``storageText``, counted without building it.
    package var storageTextCount: Int {
        fields.reduce(Swift.max(0, fields.count - 1)) { count, field in
            count + field.name.utf8.count + 2 + field.value.utf8.count - field.value.utf8.count(where: HTTPSyntax.isControl)
        }
    }

    /// Fields read back from ``storageText``; nil when a line is not `name: value` with a token
    /// for a name (damaged or foreign text is not replayed to clients).
    package init?(storageText: String) {
        // On the UTF-8 bytes: every hit from storage reads its head back through here.
        var fields: [HTTPHeaderField] = []
        let bytes = storageText.utf8
        var lineStart = bytes.startIndex
        while lineStart < bytes.endIndex {
            let lineEnd = bytes[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
            defer { lineStart = lineEnd < bytes.endIndex ? bytes.index(after: lineEnd) : lineEnd }
            if lineStart == lineEnd { continue }
            let line = bytes[lineStart..<lineEnd]
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > lineStart,
                line[..<colon].allSatisfy(HTTPSyntax.isTokenByte)
            else { return nil }
            var valueStart = bytes.index(after: colon)
            while valueStart < lineEnd, bytes[valueStart] == UInt8(ascii: " ") { valueStart = bytes.index(after: valueStart) }
            fields.append(
                HTTPHeaderField(name: String(Substring(line[..<colon])), value: String(Substring(bytes[valueStart..<lineEnd]))))
        }
        self.init(fields)
    }
}
