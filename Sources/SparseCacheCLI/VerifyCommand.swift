import Foundation
import SparseCache

/// `sparsecache verify <file> [--repair] [--json]`
enum VerifyCommand: Command {
    static let name = "verify"
    static let spec = ArgumentSpec(positionals: ["file"], flags: ["--repair", "--json"])
    static let help = """
        OVERVIEW: Check a resource after a crash.

        Checks every index checksum (both superblock copies, the checkpoint, each journal
        record), every present segment's CRC32C against the bytes on disk, and that the data
        file agrees with the index (long enough, no hole under a present segment). Each damaged
        segment is named, and so is each one that cannot be read (EIO): verify goes on past it.
        A torn last journal record left by a crash is normal and only noted.

        USAGE: sparsecache verify <file> [--repair] [--json]

        ARGUMENTS:
          <file>        The resource's data file

        OPTIONS:
          --repair      Drop damaged segments from the index and punch their holes, fold a torn
                        or damaged journal into a fresh checkpoint, and rewrite an invalid
                        superblock copy. The resource stays usable; dropped segments are
                        simply missing. Takes the resource's write lock.
          --json        Print the report as JSON
          -h, --help    Show this help

        EXIT STATUS: 0 clean, 65 damage found (repaired or not) or no usable index,
                     74 I/O error, 75 locked (--repair while another process writes).
        """

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let path = arguments.positionals[0]
        let json = arguments.has("--json")
        let showProgress = !json && Output.isTerminal(2)
        let report = try await Verifier.verify(path: path, repair: arguments.has("--repair")) { checked, total in
            if showProgress {
                Output.status("verify: \(percent(checked, of: total)) (\(SizeParser.describe(checked)) of \(SizeParser.describe(total)))")
            }
        }
        if showProgress { Output.status("") }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            var object = try JSONSerialization.jsonObject(with: try encoder.encode(report)) as? [String: Any] ?? [:]
            object["clean"] = report.isClean
            let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
            Output.print(String(decoding: data, as: UTF8.self))
        } else {
            printReport(report)
        }
        return report.isClean ? ExitStatus.ok : ExitStatus.dataError
    }

    private static func printReport(_ report: VerifyReport) {
        Output.print("verify '\(report.path)'")
        Output.print(
            "  index: \(report.superblocksValid) of 2 superblock copies valid, generation \(report.generation), \(report.journalRecords) journal records"
        )
        Output.print(
            "  data:  \(report.segmentsChecked) present segments checked (\(report.bytesChecked) bytes), data file \(report.dataFileSize) bytes"
        )
        for note in report.notes { Output.print("  note: \(note)") }
        for damage in report.indexDamage { Output.print("  index damage: \(damage)") }
        for segment in report.damaged {
            Output.print("  damaged segment \(segment.segment) [\(segment.start), \(segment.end)): \(segment.reason)")
        }
        if report.lostSegments > 0 {
            Output.print(
                "  lost: at least \(report.lostSegments) segment(s) (about \(report.lostBytes) bytes) were present in the newest "
                    + "committed state and are not any more (its checkpoint is damaged); they must be fetched or written again")
        }
        if report.reclaimedBytes > 0 {
            Output.print("  reclaimed: \(report.reclaimedBytes) bytes of disk held by segments written but never committed")
        }
        if report.repaired {
            let intact = report.lostSegments == 0 && report.indexDamage.isEmpty ? "; the rest is intact" : ""
            Output.print("  repaired: dropped \(report.damaged.count) segment(s) from the index\(intact)")
        }
        if report.isClean {
            Output.print("clean")
        } else {
            let count = report.damaged.count + report.indexDamage.count + (report.lostSegments > 0 ? 1 : 0)
            let advice = report.damaged.isEmpty ? "" : "; run with --repair to drop them"
            Output.print("DAMAGED: \(count) problem(s)" + (report.repaired ? " (repaired)" : advice))
        }
    }
}
