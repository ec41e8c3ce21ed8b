/// One header field of a request or a response: the name as sent, the value without the
/// whitespace around it.
public struct HTTPHeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}
