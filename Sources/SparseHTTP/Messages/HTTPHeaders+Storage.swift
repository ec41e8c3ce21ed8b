extension HTTPHeaders {
    /// The fields as text for storage beside a cached body: one `name: value` per line, in
    /// order. Values never hold line breaks (the parsers refuse them and
    /// ``HTTPSyntax/sanitizedFieldValue(_:)`` strips them from values made here).
    public var storageText: String {
        fields.map { "\($0.name): \(HTTPSyntax.sanitizedFieldValue($0.value))" }.joined(separator: "\n")
    }

    /// Fields read back from ``storageText``; nil when a line is not `name: value` with a token
    /// for a name (damaged or foreign text is not replayed to clients).
    public init?(storageText: String) {
        var fields: [HTTPHeaderField] = []
        for line in storageText.split(separator: "\n", omittingEmptySubsequences: true) {
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let name = line[..<colon]
            guard !name.isEmpty, name.utf8.allSatisfy(HTTPSyntax.isTokenByte) else { return nil }
            let value = line[line.index(after: colon)...].drop { $0 == " " }
            fields.append(HTTPHeaderField(name: String(name), value: String(value)))
        }
        self.init(fields)
    }
}
