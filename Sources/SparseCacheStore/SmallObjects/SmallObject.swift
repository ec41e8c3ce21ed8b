import SparseCacheEngine

/// A stored small object: its key, its metadata (for an HTTP cache, the response head) and its
/// whole body, read from disk and checked against the record's CRC32C.
package struct SmallObject: Sendable, Equatable {
    package let key: String
    package let metadata: ResourceMetadata
    package let body: [UInt8]
    /// The record's sequence number: a later store of the key has a higher one.
    package let sequence: UInt64
}

/// One object for ``SmallObjectStore/put(_:)``: stored under `key` with `metadata` and `body`.
package struct SmallObjectWrite: Sendable {
    package var key: String
    package var metadata: ResourceMetadata
    package var body: [UInt8]

    package init(key: String, metadata: ResourceMetadata, body: [UInt8]) {
        self.key = key
        self.metadata = metadata
        self.body = body
    }
}
