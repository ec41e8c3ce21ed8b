// swift-tools-version: 6.0
// An app's use of sparsecache and its fault-injection tests, depending on the project by path
// as any other package would (docs/TESTING.md). The project's tests build and run these tests.
import Foundation
import PackageDescription

// SwiftPM names a path dependency after its directory: this example names the project by the
// directory it sits in (`sparsecache` in a clone of that name). A package of yours writes
// `.package(path: "../sparsecache")` or `.package(url: ..., from: ...)` and `package: "sparsecache"`.
let project = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().lastPathComponent.lowercased()

let package = Package(
    name: "FaultInjectionExample",
    dependencies: [.package(path: "../..")],
    targets: [
        // The app: a log of fixed-size notes, one per segment, each committed when appended.
        .target(name: "NoteLog", dependencies: [.product(name: "SparseCache", package: project)]),
        // The crash harness's child: runs the app's workload with the faults the test names.
        .executableTarget(
            name: "note-crash-worker",
            dependencies: ["NoteLog", .product(name: "SparseCacheTesting", package: project)]),
        .testTarget(
            name: "NoteLogTests",
            dependencies: ["NoteLog", .product(name: "SparseCacheTesting", package: project)]),
    ],
    swiftLanguageModes: [.v6]
)
