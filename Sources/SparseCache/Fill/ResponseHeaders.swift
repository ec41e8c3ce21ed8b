import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Response headers with case-insensitive names.
struct ResponseHeaders {
    private var values: [String: String] = [:]

    init(_ response: HTTPURLResponse) {
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { values[name.lowercased()] = value }
        }
    }

    /// The first value of each name.
    init(_ head: HTTPResponseHead) {
        for field in head.headers where values[field.name.lowercased()] == nil { values[field.name.lowercased()] = field.value }
    }

    subscript(name: String) -> String? { values[name] }
}
