import SparseCacheEngine

/// A stored small object: its key, its metadata (for an HTTP cache, the response head) and its
/// whole body, read from disk and checked against the record's CRC32C.
public struct SmallObject: Sendable, Equatable {
    public let key: String
    public let metadata: ResourceMetadata
    public let body: [UInt8]
    /// The record's sequence number: a later store of the key has a higher one.
    public let sequence: UInt64
}

/// One object for ``SmallObjectStore/put(_:)``: stored under `key` with `metadata` and `body`.
public struct SmallObjectWrite: Sendable {
    public var key: String
    public var metadata: ResourceMetadata
    public var body: [UInt8]

    public init(key: String, metadata: ResourceMetadata, body: [UInt8]) {
        self.key = key
        self.metadata = metadata
        self.body = body
    }
}
