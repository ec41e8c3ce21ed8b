import Foundation

/// What a request's `Range` header asks of a resource of known length (RFC 9110, section 14).
public enum RangeRequest: Sendable, Equatable {
    /// No Range header, or one this server ignores (another unit, an empty byte-range set):
    /// send it all, 200.
    case whole
    /// One satisfiable range, clamped to the resource: 206.
    case single(Range<Int64>)
    /// Several satisfiable ranges, in the order asked.
    case multiple([Range<Int64>])
    /// No range overlaps the resource, or the byte ranges are malformed (`bytes=9-0`,
    /// `bytes=a-b`): 416 with `Content-Range: bytes */length`, as RFC 9110 (section 14.2)
    /// recommends and nginx does.
    case unsatisfiable

    /// Interprets `header` for a resource of `length` bytes. All three forms: `a-b`, `a-`, `-n`.
    public static func parse(_ header: String?, length: Int64) -> RangeRequest {
        guard let header else { return .whole }
        let trimmed = header.trimmingCharacters(in: [" ", "\t"])
        guard trimmed.lowercased().hasPrefix("bytes=") else { return .whole }
        var ranges: [Range<Int64>] = []
        var sawSpec = false
        for part in trimmed.dropFirst(6).split(separator: ",", omittingEmptySubsequences: false) {
            let spec = part.trimmingCharacters(in: [" ", "\t"])
            if spec.isEmpty { continue }
            sawSpec = true
            let bounds = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
            guard bounds.count == 2 else { return .unsatisfiable }
            let first = bounds[0], last = bounds[1]
            guard first.allSatisfy(\.isASCIIDigit), last.allSatisfy(\.isASCIIDigit), !(first.isEmpty && last.isEmpty) else {
                return .unsatisfiable
            }
            if first.isEmpty {
                // Suffix: the last n bytes.
                guard let count = Int64(last) else { return .unsatisfiable }
                if count > 0, length > 0 { ranges.append(max(0, length - count)..<length) }
                continue
            }
            guard let start = Int64(first) else { return .unsatisfiable }
            if last.isEmpty {
                if start < length { ranges.append(start..<length) }
                continue
            }
            guard let end = Int64(last), end >= start else { return .unsatisfiable }
            if start < length { ranges.append(start..<(min(end, length - 1) + 1)) }
        }
        guard sawSpec else { return .whole }
        switch ranges.count {
        case 0: return .unsatisfiable
        case 1: return .single(ranges[0])
        default: return .multiple(ranges)
        }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
