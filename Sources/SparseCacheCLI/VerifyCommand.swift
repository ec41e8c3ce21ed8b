import Foundation
import SparseCache

/// `sparsecache verify (<file> | --cache-dir DIR) [--repair] [--json]`
enum VerifyCommand: Command {
    static let name = "verify"
    static let abstract = "Check every checksum and the data file after a crash; --repair fixes"
    static let overview = """
        Check a resource, or a whole cache directory, after a crash.

        Checks every index checksum (both superblock copies, the checkpoint, each journal
        record), every present segment's CRC32C against the bytes on disk, and that the data
        file agrees with the index (long enough, no hole under a present segment). Each damaged
        segment is named, and so is each one that cannot be read (EIO): verify goes on past it.
        A torn last journal record left by a crash is normal and only noted.

        With --cache-dir, checks every resource of the directory that way (one line each), the
        catalog against the indexes (which are the truth: the catalog lags them after a crash),
        and the files no resource accounts for: data files without an index and temporary
        files (what a crash leaves; noted), indexes without their data file (damage). Then
        totals. Without --repair it takes no lock and changes nothing, so it can run beside a
        'serve' of the same directory: each resource is checked as committed when it is
        reached, and catalog lag and temporary files are then expected.
        """
    static let usage = ["verify <file> [--repair] [--json]", "verify --cache-dir DIR [--repair] [--json]"]
    static let positionals = [CLIArgument(name: "file", help: "The resource's data file", isOptional: true)]

    static let cacheDirectory = CLIOption.value(
        "--cache-dir", "DIR", completion: .directory, help: "Check every resource of this cache directory instead")
    static let repair = CLIOption.flag(
        "--repair",
        help: "Drop damaged segments from the index and punch their holes, fold a torn or damaged journal into a fresh "
            + "checkpoint, and rewrite an invalid superblock copy. The resource stays usable; dropped segments are simply "
            + "missing. Takes the resource's write lock. With --cache-dir, also removes resources whose index is unusable "
            + "and the leftover files, and rewrites the catalog from the indexes; takes the directory's lock, so stop a "
            + "'serve' of it first (exit 75).")
    static let json = CLIOption.json("Print the report as JSON")
    static let options = [cacheDirectory, repair, json]
    static let notes = """
        Progress goes to stderr when it is a terminal.

        With --json, an error is printed as {"error": ..., "code": ..., "status": ...} on stdout
        too, with the same exit status.

        EXIT STATUS (as fsck's: 'verify --repair && next' goes on once the damage is repaired):
          0 clean (leftovers of a crash, such as a torn last journal record or bytes written but
            never committed, are noted and, with --repair, cleaned: still 0)
          1 --repair: damage was found and repaired; the resource or directory is consistent
            now (dropped segments are missing and get fetched or written again)
          65 damage found and left (without --repair), or an index nothing can be read from
          66 no such file or cache directory, 74 I/O error, 75 locked (--repair while another
          process writes the resource or owns the directory), 77 permission denied.
        """

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let directory = arguments.value(Self.cacheDirectory)
        switch (arguments.positionals.first, directory) {
        case (nil, nil): throw UsageError("missing <file> (or --cache-dir DIR)")
        case (.some, .some): throw UsageError("give a <file> or --cache-dir, not both")
        case (nil, let directory?): return try await verifyDirectory(directory, arguments: arguments)
        case (let path?, nil): return try await verifyFile(path, arguments: arguments)
        }
    }

    private static func verifyFile(_ path: String, arguments: ParsedArguments) async throws -> Int32 {
        let json = arguments.has(Self.json)
        let showProgress = !json && Output.isTerminal(2)
        try await BlockingExecutor.cliIO.run { try checkNotADirectory(path) }
        let report = try await Verifier.verify(path: path, repair: arguments.has(repair)) { checked, total in
            if showProgress {
                Output.status("verify: \(percent(checked, of: total)) (\(SizeParser.describe(checked)) of \(SizeParser.describe(total)))")
            }
        }
        if showProgress { Output.status("") }
        if json {
            Output.print(try jsonText(report, clean: report.isClean))
        } else {
            printReport(report)
        }
        return status(clean: report.isClean, repaired: report.repaired)
    }

    private static func verifyDirectory(_ directory: String, arguments: ParsedArguments) async throws -> Int32 {
        let json = arguments.has(Self.json)
        let showProgress = Output.isTerminal(2)
        let report = try await StoreVerifier.verify(directory: directory, repair: arguments.has(repair)) {
            resource, resources, checked, total in
            if showProgress {
                Output.status(
                    "verify: resource \(resource) of \(resources), \(percent(checked, of: total)) of its \(SizeParser.describe(total))")
            }
        }
        if showProgress { Output.status("") }
        if json {
            Output.print(try jsonText(report, clean: report.isClean))
        } else {
            printDirectoryReport(report)
        }
        return status(clean: report.isClean, repaired: report.repaired)
    }

    /// A directory given as the file: says whether it is a cache directory, which is checked
    /// with --cache-dir.
    private static func checkNotADirectory(_ path: String) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue,
            !FileManager.default.fileExists(atPath: SparseFile.indexPath(for: path))
        else { return }
        let isCache = (try? SparseStore.requireCacheDirectory(path, operation: "verify")) != nil
        throw SparseCacheError(
            .notFound, operation: "verify", path: path,
            detail: isCache
                ? "is a cache directory, not a resource: check it with 'sparsecache verify --cache-dir \(path)'"
                : "is a directory, not a resource's data file (a cache directory is checked with --cache-dir DIR)")
    }

    /// fsck's convention: 0 clean, 1 damage repaired, an error status for damage left.
    static func status(clean: Bool, repaired: Bool) -> Int32 {
        clean ? ExitStatus.ok : repaired ? ExitStatus.corrected : ExitStatus.dataError
    }

    /// The report as sorted, pretty JSON with "clean" added.
    private static func jsonText(_ report: some Encodable, clean: Bool) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        var object = try JSONSerialization.jsonObject(with: try encoder.encode(report)) as? [String: Any] ?? [:]
        object["clean"] = clean
        let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    private static func printDirectoryReport(_ report: StoreVerifyReport) {
        Output.print("verify cache directory '\(report.directory)'")
        if report.inUse {
            Output.print(
                "  in use by another process (a serve?): checked read-only; a lagging catalog and temporary files are expected")
        }
        for resource in report.resources {
            let size = "\(SizeParser.describe(resource.presentBytes)) of \(resource.length.map(SizeParser.describe) ?? "unknown length")"
            let status = resource.status.uppercased() == "CLEAN" ? "clean" : resource.status.uppercased()
            Output.print("  " + pad(status, 10) + pad("resources/" + resource.name, 30) + pad(size, 26) + (resource.key ?? "?"))
            if let problem = resource.problem { Output.print("      \(problem)") }
            if resource.removed { Output.print("      removed (repair): the next fetch starts it again") }
            guard let verify = resource.report else { continue }
            for note in verify.notes { Output.print("      note: \(note)") }
            for damage in verify.indexDamage { Output.print("      index damage: \(damage)") }
            for segment in verify.damaged {
                Output.print("      damaged segment \(segment.segment) [\(segment.start), \(segment.end)): \(segment.reason)")
            }
            if verify.lostSegments > 0 {
                Output.print("      lost: \(verify.lostSegments) segment(s) (\(verify.lostBytes) bytes) of committed state")
            }
            if verify.reclaimedBytes > 0 { Output.print("      reclaimed: \(verify.reclaimedBytes) bytes never committed") }
            if verify.freedLostBytes > 0 { Output.print("      freed: \(verify.freedLostBytes) bytes of the lost segments' data") }
            if verify.repaired { Output.print("      repaired: dropped \(verify.damaged.count) segment(s) from the index") }
        }
        for log in report.smallObjectLogs {
            let status = log.status == "clean" ? "clean" : log.status.uppercased()
            Output.print("  " + pad(status, 10) + pad(log.name, 30) + "\(log.records) records, \(SizeParser.describe(log.size))")
            if let problem = log.problem { Output.print("      \(problem)") }
        }
        if let problem = report.catalogProblem { Output.print("  catalog: \(problem) (rebuilt from the indexes by --repair or the next open)") }
        if !report.catalogDifferences.isEmpty {
            Output.print(
                "  catalog: \(report.catalogDifferences.count) difference(s) from the indexes (the indexes hold the truth; "
                    + (report.catalogRewritten ? "rewritten from them)" : "normal after a crash; --repair rewrites it)"))
            for line in report.catalogDifferences { Output.print("    \(line)") }
        } else if report.catalogRewritten {
            Output.print("  catalog: rewritten from the indexes")
        }
        for leftover in report.leftovers {
            Output.print(
                "  leftover: \(leftover.path): \(leftover.kind), \(SizeParser.describe(leftover.allocatedBytes)) on disk"
                    + (leftover.removed ? " (removed)" : ""))
        }
        if report.foreignFiles > 0 { Output.print("  \(report.foreignFiles) file(s) in resources/ not made by sparsecache, left alone") }
        let clean = report.resources.filter { $0.status == "clean" }.count
        Output.print(
            "totals: \(report.resources.count) resources (\(clean) clean, \(report.damagedResources) damaged), "
                + "\(report.segmentsChecked) segments and \(SizeParser.describe(report.bytesChecked)) checked, "
                + "\(SizeParser.describe(report.presentBytes)) present, \(SizeParser.describe(report.allocatedBytes)) on disk, "
                + "\(report.leftovers.count) leftover file(s)")
        if report.isClean {
            Output.print("clean")
        } else {
            let advice = report.repaired ? " (repaired)" : "; run with --repair (after stopping any serve of it) to fix"
            Output.print(
                "DAMAGED: \(report.damagedResources) resource(s), \(report.orphanedIndexes) index(es) without data, "
                    + "\(report.damagedSmallObjectLogs) small-object log(s)\(advice)")
        }
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
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
                "  lost: \(report.lostSegments) segment(s) (\(report.lostBytes) bytes) of committed state are not in the state in use "
                    + "(the index damage above says how they were counted); they must be fetched or written again")
        }
        if report.reclaimedBytes > 0 {
            Output.print("  reclaimed: \(report.reclaimedBytes) bytes of disk held by segments written but never committed")
        }
        if report.freedLostBytes > 0 {
            Output.print("  freed: \(report.freedLostBytes) bytes of disk held by the lost segments' data, which no intact record names")
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
