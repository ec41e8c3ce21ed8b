// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "sparsecache",
    products: [
        .library(name: "SparseCache", targets: ["SparseCache"]),
        .executable(name: "sparsecache", targets: ["SparseCacheCLI"]),
        .executable(name: "sparsecache-bench", targets: ["SparseCacheBench"]),
    ],
    targets: [
        // The only C in the project: syscalls Swift cannot call directly (_GNU_SOURCE functions,
        // macros), the CRC32C instruction, and the seam where fault injection sits.
        .target(name: "CShim", path: "CShim"),
        .target(name: "SparseCache", dependencies: ["CShim"], path: "Sources/SparseCache"),
        .executableTarget(name: "SparseCacheCLI", dependencies: ["SparseCache"], path: "Sources/SparseCacheCLI"),
        .executableTarget(name: "SparseCacheBench", dependencies: ["SparseCache", "CShim"], path: "Benchmarks/sparsecache-bench"),
        .testTarget(name: "SparseCacheTests", dependencies: ["SparseCache", "CShim"], path: "Tests/SparseCacheTests"),
    ],
    swiftLanguageModes: [.v6]
)
