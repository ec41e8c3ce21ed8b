import Foundation

/// A request trace: one request a line, `time key size first-last` (a byte range as HTTP
/// writes it, both ends included), or `time key size` for the whole object (the common form
/// of external CDN traces). Blank lines and lines starting with `#` are skipped.
struct Trace: Sendable {
    struct Request: Sendable, Equatable {
        var time: Double
        var key: String
        var size: Int64
        /// The bytes asked for, end excluded.
        var range: Range<Int64>
    }

    var requests: [Request] = []

    struct ParseError: Error, CustomStringConvertible {
        var line: Int
        var problem: String
        var description: String { "trace line \(line): \(problem)" }
    }

    /// Parses the text of a trace; the first malformed line is named in the error.
    static func parse(_ text: String) throws -> Trace {
        var trace = Trace()
        var number = 0
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," })
            if fields.isEmpty || fields[0].hasPrefix("#") { continue }
            guard fields.count == 3 || fields.count == 4 else {
                throw ParseError(line: number, problem: "expected 'time key size [first-last]', found \(fields.count) fields")
            }
            guard let time = Double(fields[0]) else { throw ParseError(line: number, problem: "time '\(fields[0])' is not a number") }
            guard let size = Int64(fields[2]), size > 0 else {
                throw ParseError(line: number, problem: "size '\(fields[2])' is not a positive integer")
            }
            var range: Range<Int64> = 0..<size
            if fields.count == 4 {
                let ends = fields[3].split(separator: "-", omittingEmptySubsequences: false)
                guard ends.count == 2, let first = Int64(ends[0]), let last = Int64(ends[1]), first >= 0, first <= last, last < size else {
                    throw ParseError(line: number, problem: "range '\(fields[3])' is not first-last within the size \(size)")
                }
                range = first..<(last + 1)
            }
            trace.requests.append(Request(time: time, key: String(fields[1]), size: size, range: range))
        }
        return trace
    }

    static func load(path: String) throws -> Trace {
        try parse(String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self))
    }

    /// The trace in its text form (ranges always written).
    var text: String {
        var out = "# time key size first-last\n"
        for request in requests {
            out += "\(String(format: "%.3f", request.time)) \(request.key) \(request.size) \(request.range.lowerBound)-\(request.range.upperBound - 1)\n"
        }
        return out
    }

    /// Bytes asked for, and the distinct bytes asked for in `unit`-sized pieces (what a
    /// cache that kept everything would hold).
    func totals(unit: Int64) -> (asked: Int64, distinct: Int64) {
        var asked: Int64 = 0
        var seen: [String: Set<Int64>] = [:]
        var distinct: Int64 = 0
        for request in requests {
            asked += Int64(request.range.count)
            for piece in (request.range.lowerBound / unit)...((request.range.upperBound - 1) / unit)
            where seen[request.key, default: []].insert(piece).inserted {
                distinct += min(unit, request.size - piece * unit)
            }
        }
        return (asked, distinct)
    }
}
