/// What a resource remembers about itself, committed atomically with its segment index.
public struct ResourceMetadata: Sendable, Equatable, Codable {
    /// The cache key, usually the origin URL.
    public var key: String?
    /// The MIME type, e.g. "video/mp4".
    public var contentType: String?
    /// The origin's ETag validator.
    public var etag: String?
    /// The origin's Last-Modified validator, as the header text.
    public var lastModified: String?
    /// Small application-defined values.
    public var user: [String: String]

    public init(
        key: String? = nil, contentType: String? = nil, etag: String? = nil,
        lastModified: String? = nil, user: [String: String] = [:]
    ) {
        self.key = key
        self.contentType = contentType
        self.etag = etag
        self.lastModified = lastModified
        self.user = user
    }

    /// Encoded metadata may not exceed this many bytes (it rides in every checkpoint).
    public static let maximumEncodedSize = 64 * 1024
}
