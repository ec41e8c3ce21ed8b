import SparseCacheBase

/// The error of the engine and the store: a stable code plus the context an operator needs to
/// act. It names storage problems only; SparseHTTP throws its own `HTTPError`, the HTTP cache an
/// `OriginError` for what an origin did (docs/ARCHITECTURE.md, "Errors").
///
/// Its description reads like
/// `pwrite failed for 'movie.bin' at offset 8192 (65536 bytes): No space left on device (errno 28)`.
public struct SparseCacheError: Error, Sendable, CustomStringConvertible, Equatable {
    /// What went wrong, stable across releases (the CLI maps it to an exit status).
    public enum Code: String, Sendable, Equatable, CaseIterable {
        /// Some requested bytes are not present; `missing` names them.
        case notPresent
        /// A system call failed; `errno` holds its error number.
        case io
        /// Another process holds the resource open for writing.
        case locked
        /// The index failed validation; `detail` names the check (magic, checksum, ...).
        case corruptIndex
        /// The index was written by a newer format version than this build reads.
        case unsupportedVersion
        /// Stored bytes do not match their checksum; `segments` names the damaged segments.
        case corruptData
        /// An argument is out of range or inconsistent with the resource.
        case invalidArgument
        /// The path does not exist.
        case notFound
        /// The resource was closed, or is closing.
        case closed
        /// An earlier durability failure (fsync error) poisoned the resource: reopen it.
        case needsReopen
    }

    public var code: Code
    /// The operation that failed, e.g. "pwrite", "open", "read", "commit".
    public var operation: String
    /// The file the operation was about.
    public var path: String?
    public var offset: Int64?
    public var length: Int64?
    /// The system error number, for `.io` and some `.notFound` / `.locked` errors.
    public var errno: Int32?
    /// Free text naming the problem (which check failed, which argument was wrong).
    public var detail: String?
    /// For `.notPresent`: the missing byte ranges, half-open.
    public var missing: [Range<Int64>]
    /// For `.corruptData`: the damaged segment numbers.
    public var segments: [Int]
    /// The call that failed was fdatasync(2) or fsync(2): the pages it was to make durable
    /// cannot be trusted, so a resource poisons itself on it (``Code/needsReopen`` from then on).
    public var isSyncFailure = false

    public init(
        _ code: Code, operation: String, path: String? = nil, offset: Int64? = nil,
        length: Int64? = nil, errno: Int32? = nil, detail: String? = nil,
        missing: [Range<Int64>] = [], segments: [Int] = []
    ) {
        self.code = code
        self.operation = operation
        self.path = path
        self.offset = offset
        self.length = length
        self.errno = errno
        self.detail = detail
        self.missing = missing
        self.segments = segments
    }

    public var description: String {
        var text = "\(operation) failed"
        if let path { text += " for '\(path)'" }
        if let offset { text += " at offset \(offset)" }
        if let length { text += " (\(length) bytes)" }
        var reasons: [String] = []
        if let detail { reasons.append(detail) }
        if let errno { reasons.append("\(Self.errnoText(errno)) (errno \(errno))") }
        if code == .notPresent, !missing.isEmpty {
            reasons.append("missing " + ByteRanges.describe(missing))
        }
        if code == .corruptData, !segments.isEmpty {
            reasons.append("damaged segments " + segments.map(String.init).joined(separator: ", "))
        }
        if reasons.isEmpty { reasons.append(code.rawValue) }
        return text + ": " + reasons.joined(separator: "; ")
    }

    /// The C library's text for an error number.
    public static func errnoText(_ number: Int32) -> String {
        ErrnoText.describe(number)
    }
}
