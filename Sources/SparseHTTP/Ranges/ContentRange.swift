import Foundation
import SparseCacheBase

/// `Content-Range: bytes a-b/total`, `bytes a-b/*` or `bytes */total`.
package struct ContentRange: Equatable {
    /// The bytes sent, half-open (nil for `*`).
    package var range: Range<Int64>?
    package var total: Int64?

    package init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        if parts[1] == "*" {
            total = nil
        } else {
            guard let value = Int64(parts[1]), value >= 0 else { return nil }
            total = value
        }
        if parts[0] == "*" {
            guard total != nil else { return nil }
            range = nil
        } else {
            let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, last >= first,
                last < Int64.max
            else { return nil }
            if let total, last >= total { return nil }
            range = first..<(last + 1)
        }
    }
}
