/// The header fields of a message, in the order sent, with names compared without regard to
/// case (RFC 9110, section 5.1). The one field collection requests and responses, parsers and
/// writers, the origin client and the server all use.
public struct HTTPHeaders: Sendable, Equatable, RandomAccessCollection, ExpressibleByArrayLiteral {
    public private(set) var fields: [HTTPHeaderField]

    public init(_ fields: [HTTPHeaderField] = []) {
        self.fields = fields
    }

    public init(arrayLiteral elements: HTTPHeaderField...) {
        fields = elements
    }

    /// Fields from name-value pairs, in order.
    public init(_ pairs: [(String, String)]) {
        fields = pairs.map { HTTPHeaderField(name: $0.0, value: $0.1) }
    }

    public var startIndex: Int { fields.startIndex }
    public var endIndex: Int { fields.endIndex }
    public subscript(position: Int) -> HTTPHeaderField { fields[position] }

    /// The first value of the field `name`, or nil.
    public subscript(name: String) -> String? {
        fields.first { $0.hasName(name) }?.value
    }

    /// Every value of the field `name`, in the order sent. A value that is a comma-separated
    /// list is returned as one string; ``listElements(_:)`` splits them.
    public func values(_ name: String) -> [String] {
        // One pass, and no array at all for a field that is absent (the usual answer).
        var values: [String] = []
        for field in fields where field.hasName(name) { values.append(field.value) }
        return values
    }

    /// The elements of every list value of the field `name` (RFC 9110, section 5.6.1).
    package func listElements(_ name: String) -> [String] {
        HTTPSyntax.listElements(values(name))
    }

    /// Whether a field `name` is present.
    public func contains(_ name: String) -> Bool {
        fields.contains { $0.hasName(name) }
    }

    /// Adds a field after the others.
    public mutating func append(name: String, value: String) {
        fields.append(HTTPHeaderField(name: name, value: value))
    }

    /// Removes every field `name`.
    public mutating func remove(_ name: String) {
        fields.removeAll { $0.hasName(name) }
    }

    /// Whether some list element (RFC 9110, section 5.6.1) of a field `name` satisfies
    /// `predicate`, which sees each element's bytes where they lie, without its surrounding
    /// whitespace (empty elements are skipped). No array, no string: `Connection` and
    /// `Content-Length` are asked this for every response.
    package func containsListElement(of name: String, where predicate: (UnsafeBufferPointer<UInt8>) -> Bool) -> Bool {
        for field in fields where field.hasName(name) {
            var value = field.value
            let found = value.withUTF8 { bytes in
                HTTPSyntax.forEachListElement(in: bytes) { predicate(UnsafeBufferPointer(rebasing: bytes[$0])) }
            }
            if found { return true }
        }
        return false
    }

    /// Whether a field `name` lists `token` (written in lower case), in any case.
    package func containsListElement(of name: String, _ token: StaticString) -> Bool {
        containsListElement(of: name) { HTTPSyntax.equalsIgnoringCase($0, 0..<$0.count, token) }
    }

    /// The fields `isIncluded` keeps, in order, in one allocation (`filter` grows its array
    /// one field at a time: four allocations for a typical response's fields).
    package func keeping(_ isIncluded: (HTTPHeaderField) throws -> Bool) rethrows -> HTTPHeaders {
        var kept: [HTTPHeaderField] = []
        kept.reserveCapacity(fields.count)
        for field in fields where try isIncluded(field) { kept.append(field) }
        return HTTPHeaders(kept)
    }
}
