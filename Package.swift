// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "sparsecache",
    products: [
        .library(name: "SparseCache", targets: ["SparseCache"]),
        .executable(name: "sparsecache", targets: ["SparseCacheCLI"]),
        .executable(name: "sparsecache-bench", targets: ["SparseCacheBench"]),
        .executable(name: "sparsecache-stress", targets: ["SparseCacheStress"]),
    ],
    targets: [
        // The only C in the project: syscalls Swift cannot call directly (_GNU_SOURCE functions,
        // macros), the CRC32C instruction, and the seam where fault injection sits.
        .target(name: "CShim", path: "CShim"),
        .target(name: "SparseCache", dependencies: ["CShim"], path: "Sources/SparseCache"),
        .executableTarget(name: "SparseCacheCLI", dependencies: ["SparseCache"], path: "Sources/SparseCacheCLI"),
        .executableTarget(
            name: "SparseCacheBench", dependencies: ["SparseCache", "CShim", "LoopbackOrigins", "SeededRandom"],
            path: "Benchmarks/sparsecache-bench"),
        // Writes and commits forever, printing an acknowledgement per commit: the crash tests
        // SIGKILL it at random moments (Tests/SparseCacheTests/CrashKillTests.swift).
        .executableTarget(name: "SparseCacheStress", dependencies: ["SparseCache", "SeededRandom"], path: "Sources/sparsecache-stress"),
        // Local origins on 127.0.0.1 (ports, an nginx of our own) and a runner for client
        // processes (curl, wrk, ffmpeg), shared by tests and benchmarks.
        .target(name: "LoopbackOrigins", path: "Tests/LoopbackOrigins"),
        // The seeded generator every workload replays from (tests, benchmarks, stress writer).
        .target(name: "SeededRandom", path: "Tests/SeededRandom"),
        .testTarget(
            name: "SparseCacheTests", dependencies: ["SparseCache", "CShim", "LoopbackOrigins", "SeededRandom"],
            path: "Tests/SparseCacheTests"),
    ],
    swiftLanguageModes: [.v6]
)
