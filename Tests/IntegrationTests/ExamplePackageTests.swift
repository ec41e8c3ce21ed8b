// The example package (Examples/FaultInjectionExample): an app's own tests using the testing
// product from another package, built against this one by path and run as its user would.
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

/// Whether `swift` is on PATH (the example is built with it).
let swiftOnPath: Bool = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").contains {
    FileManager.default.isExecutableFile(atPath: "\($0)/swift")
}

@Suite("the example package: fault injection from another package", .tags(.slow), .unlessSkippingSlow)
struct ExamplePackageTests {
    /// Removes the example's scratch directory when a source file of the project was added or
    /// removed since its last build: SwiftPM keeps the plan of a path dependency there and does
    /// not see a new file in it (the build then fails with "cannot find ... in scope").
    static func forgetScratchIfFilesChanged(root: String, scratch: String) throws {
        let files = (FileManager.default.enumerator(atPath: root + "/Sources")?.allObjects as? [String] ?? [])
            .filter { $0.hasSuffix(".swift") || $0.hasSuffix(".c") || $0.hasSuffix(".h") }.sorted()
        let cshim = (FileManager.default.enumerator(atPath: root + "/CShim")?.allObjects as? [String] ?? []).sorted()
        let list = (files + ["--"] + cshim).joined(separator: "\n")
        let stamp = scratch + "/project-files"
        if (try? String(contentsOfFile: stamp, encoding: .utf8)) != list {
            try? FileManager.default.removeItem(atPath: scratch)
            try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
            try list.write(toFile: stamp, atomically: true, encoding: .utf8)
        }
    }

    @Test(
        "Examples/FaultInjectionExample builds against the project by path and its torn-write, sync-error and crash tests pass",
        .enabled(if: swiftOnPath, "skipped: `swift` is not on PATH, so the example package cannot be built"),
        .timeLimit(.minutes(20)))
    func examplePackagePasses() async throws {
        let root = ArchitectureTests.root
        // A scratch path under .build: ignored by git, kept between runs so a second run only
        // rebuilds what changed. One compile job: the build runs beside the other suites, whose
        // servers and clients need the second core.
        try Self.forgetScratchIfFilesChanged(root: root, scratch: root + "/.build/examples")
        let result = try await ChildProcess.run(
            "swift",
            [
                "test", "--package-path", root + "/Examples/FaultInjectionExample", "--scratch-path", root + "/.build/examples",
                "--jobs", "1",
            ])
        let output = result.text + result.errorText
        #expect(result.status == 0, "swift test of the example failed (\(result.status)):\n\(output.suffix(4000))")
        let lines = output.split(separator: "\n")
        for test in ["a torn write of the log's data", "EIO at a commit's fdatasync", "a crash after the 6th sync, in a child"] {
            #expect(
                lines.contains { $0.contains("Test \"\(test)") && $0.contains("passed after") },
                "the example's test \"\(test)...\" did not run and pass:\n\(output.suffix(4000))")
        }
        #expect(!output.contains("warning:"), "the example builds with warnings:\n\(output.suffix(4000))")
    }
}
