import Foundation
import SparseCache

/// `sparsecache info <file> [--json]`
enum InfoCommand: Command {
    static let name = "info"
    static let abstract = "Show length, segment size, present ranges and metadata"
    static let overview = """
        Show a resource's length, segment size, present bytes and ranges, and metadata.

        Opens the resource read-only (no lock), so it works while another process writes.
        """
    static let positionals = [CLIArgument(name: "file", help: "The resource's data file")]
    static let json = CLIOption.json(
        "Print JSON: length, segmentSize, presentBytes, percentPresent, presentRanges (half-open [start, end) pairs), "
            + "complete, metadata")
    static let options = [json]

    struct Info: Codable {
        var path: String
        var length: Int64?
        var segmentSize: Int
        var segmentCount: Int
        var presentBytes: Int64
        var percentPresent: Double?
        var presentRanges: [[Int64]]
        var complete: Bool
        var metadata: ResourceMetadata
        var indexGeneration: UInt64
        var journalRecords: Int
    }

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let path = arguments.positionals[0]
        let info = try await withResource(path, mode: .readOnly) { file in
            Info(
                path: path, length: await file.length, segmentSize: file.segmentSize, segmentCount: await file.segmentCount,
                presentBytes: await file.presentBytes,
                percentPresent: await file.length == nil ? nil : ((await file.fractionPresent) * 10000).rounded() / 100,
                presentRanges: await file.presentRanges().map { [$0.lowerBound, $0.upperBound] },
                complete: await file.isComplete, metadata: await file.metadata,
                indexGeneration: file.recovery.generation, journalRecords: file.recovery.recordsReplayed)
        }
        if arguments.has(json) {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            Output.print(String(decoding: try encoder.encode(info), as: UTF8.self))
            return ExitStatus.ok
        }
        Output.print("resource:      \(path)")
        Output.print("index:         \(SparseFile.indexPath(for: path)) (generation \(info.indexGeneration), \(info.journalRecords) journal records)")
        if let length = info.length {
            Output.print("length:        \(length) bytes (\(SizeParser.describe(length)))")
        } else {
            Output.print("length:        unknown")
        }
        Output.print("segment size:  \(info.segmentSize) bytes (\(info.segmentCount) segments)")
        let share = info.length.map { " of \($0) (\(percent(info.presentBytes, of: $0)))" } ?? ""
        Output.print("present:       \(info.presentBytes) bytes\(share)\(info.complete ? ", complete" : "")")
        let ranges = info.presentRanges.map { $0[0]..<$0[1] }
        Output.print("ranges:        " + (ranges.isEmpty ? "none" : describe(ranges)))
        if let length = info.length, length > 0 {
            Output.print("map:           " + SegmentMap.render(present: ranges, length: length, width: 64))
        }
        let metadata = info.metadata
        if let key = metadata.key { Output.print("key:           \(key)") }
        if let type = metadata.contentType { Output.print("content type:  \(type)") }
        if let etag = metadata.etag { Output.print("etag:          \(etag)") }
        if let modified = metadata.lastModified { Output.print("last modified: \(modified)") }
        for (key, value) in metadata.user.sorted(by: { $0.key < $1.key }) { Output.print("user \(key): \(value)") }
        return ExitStatus.ok
    }
}

/// A one-line picture of which parts of a resource are present.
enum SegmentMap {
    /// Each cell covers length/width bytes: '█' all present, '▓' most, '▒' some, '·' none.
    static func render(present: [Range<Int64>], length: Int64, width: Int) -> String {
        guard length > 0 else { return "" }
        var cells = ""
        for cell in 0..<width {
            let start = length * Int64(cell) / Int64(width)
            let end = length * Int64(cell + 1) / Int64(width)
            guard end > start else { continue }
            var covered: Int64 = 0
            for range in present where range.upperBound > start && range.lowerBound < end {
                covered += min(range.upperBound, end) - max(range.lowerBound, start)
            }
            let share = Double(covered) / Double(end - start)
            cells += share >= 1 ? "█" : share >= 0.5 ? "▓" : share > 0 ? "▒" : "·"
        }
        return cells
    }
}
