/// One header field of a request or a response: the name as sent, the value without the
/// whitespace around it.
public struct HTTPHeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Whether the field's name is `name`, compared without regard to case (RFC 9110,
    /// section 5.1). `name` must be lowercase.
    @inlinable
    public func hasName(_ name: String) -> Bool {
        self.name.utf8.count == name.utf8.count && self.name.lowercased() == name
    }
}
