// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "sparsecache",
    products: [
        // Everything through one import.
        .library(name: "SparseCache", targets: ["SparseCache"]),
        // One layer each, for a program that needs only that much (docs/LIBRARY.md, "Products"):
        // each brings the layers below it, never those above.
        .library(name: "SparseCacheEngine", targets: ["SparseCacheEngine"]),
        .library(name: "SparseCacheStore", targets: ["SparseCacheStore"]),
        .library(name: "SparseHTTP", targets: ["SparseHTTP"]),
        .library(name: "HTTPCache", targets: ["HTTPCache"]),
        // Fault injection, power-loss snapshots and the crash harness, for users' own tests.
        .library(name: "SparseCacheTesting", targets: ["SparseCacheTesting"]),
        .executable(name: "sparsecache", targets: ["SparseCacheCLI"]),
        .executable(name: "sparsecache-bench", targets: ["SparseCacheBench"]),
        .executable(name: "sparsecache-stress", targets: ["SparseCacheStress"]),
    ],
    targets: [
        // The only C in the project: syscalls Swift cannot call directly (_GNU_SOURCE functions,
        // macros), the CRC32C instruction, and the seam where fault injection sits.
        .target(name: "CShim", path: "CShim"),
        // What every layer above shares and that is not storage: the lock, the blocking-work
        // bridge, the event loop and fault scope task-locals, JSON text for log lines.
        .target(name: "SparseCacheBase", dependencies: ["CShim"], path: "Sources/SparseCacheBase"),
        // The library, one module per layer; each depends only on the layers below it, in the
        // order docs/ARCHITECTURE.md gives (ArchitectureTests checks the graph against it).
        // The engine: one resource, its index format, commit protocol, I/O, verify, faults.
        .target(name: "SparseCacheEngine", dependencies: ["SparseCacheBase", "CShim"], path: "Sources/SparseCacheEngine"),
        // A directory of resources under a byte budget.
        .target(name: "SparseCacheStore", dependencies: ["SparseCacheEngine"], path: "Sources/SparseCacheStore"),
        // HTTP/1.1 that knows nothing of caching: messages, parsers, chunked codec, ranges,
        // sockets, the server loop and the origin client with its connection pool.
        .target(name: "SparseHTTP", dependencies: ["SparseCacheBase", "CShim"], path: "Sources/SparseHTTP"),
        // The cache over HTTP: fill-through from origins and the caching proxy.
        .target(name: "HTTPCache", dependencies: ["SparseCacheStore", "SparseHTTP", "SparseCacheBase"], path: "Sources/HTTPCache"),
        // One import for library users: re-exports every layer.
        .target(
            name: "SparseCache", dependencies: ["HTTPCache", "SparseHTTP", "SparseCacheStore", "SparseCacheEngine"],
            path: "Sources/SparseCache"),
        // The test hooks' public face: fault rules (scoped to a test), power-loss snapshots,
        // the crash harness. The engine keeps the seam (`package`), the main product none of it.
        .target(name: "SparseCacheTesting", dependencies: ["SparseCacheEngine", "CShim"], path: "Sources/SparseCacheTesting"),
        .executableTarget(name: "SparseCacheCLI", dependencies: ["SparseCache"], path: "Sources/SparseCacheCLI"),
        .executableTarget(
            name: "SparseCacheBench", dependencies: ["SparseCache", "SparseCacheTesting", "CShim", "LoopbackOrigins", "SeededRandom"],
            path: "Benchmarks/sparsecache-bench"),
        // Writes and commits forever, printing an acknowledgement per commit: the crash tests
        // SIGKILL it at random moments (Tests/StoreTests/CrashKillTests.swift).
        .executableTarget(name: "SparseCacheStress", dependencies: ["SparseCache", "SeededRandom"], path: "Sources/sparsecache-stress"),
        // Local origins on 127.0.0.1 (ports, an nginx of our own) and a runner for client
        // processes (curl, wrk, ffmpeg), shared by tests and benchmarks.
        .target(name: "LoopbackOrigins", path: "Tests/LoopbackOrigins"),
        // The seeded generator every workload replays from (tests, benchmarks, stress writer).
        .target(name: "SeededRandom", path: "Tests/SeededRandom"),
        // Runs CrashWorker closures in a child process for the crash harness tests.
        .executableTarget(
            name: "SparseCacheCrashWorker", dependencies: ["SparseCache", "SparseCacheTesting"], path: "Tests/crash-worker"),
        // Helpers every test target shares: temporary directories, raw file surgery, hang guards,
        // the test depth, polling with a deadline, the crash model, the CLI process runner,
        // loopback origins and HTTP clients (curl, raw sockets). Engine level and below.
        .target(
            name: "TestSupport", dependencies: ["SparseCacheEngine", "CShim", "SeededRandom", "LoopbackOrigins"],
            path: "Tests/TestSupport"),
        // Store fixtures (keyed content, the usual store options) for the store's and the cache's tests.
        .target(
            name: "StoreTestSupport", dependencies: ["TestSupport", "SparseCacheStore", "SparseCacheEngine", "SeededRandom"],
            path: "Tests/StoreTestSupport"),
        // One test target per layer, each depending on its layer and those below (ArchitectureTests
        // checks it); docs/TESTING.md says which target a test belongs in.
        // The engine: format, index, sparse file, verify, CRC, faults, crashes. No HTTP, no nginx.
        .testTarget(
            name: "EngineTests",
            dependencies: ["TestSupport", "SparseCacheEngine", "SparseCacheTesting", "CShim", "SeededRandom", "LoopbackOrigins"],
            path: "Tests/EngineTests"),
        // The store: budgets, eviction, small objects, the store's crash tests.
        .testTarget(
            name: "StoreTests",
            dependencies: [
                "TestSupport", "StoreTestSupport", "SparseCacheStore", "SparseCacheEngine", "SparseCacheTesting", "CShim", "SeededRandom",
                "LoopbackOrigins",
            ],
            path: "Tests/StoreTests"),
        // HTTP/1.1: messages, parsers, sockets, the server loop.
        .testTarget(
            name: "HTTPTests", dependencies: ["TestSupport", "SparseHTTP", "SparseCacheEngine", "CShim", "SeededRandom"],
            path: "Tests/HTTPTests"),
        // The cache over HTTP: policy, fill, proxy, streaming, playlists, origins, transports.
        .testTarget(
            name: "CacheTests",
            dependencies: [
                "TestSupport", "StoreTestSupport", "HTTPCache", "SparseHTTP", "SparseCacheStore", "SparseCacheEngine", "SparseCacheTesting", "CShim",
                "SeededRandom", "LoopbackOrigins",
            ],
            path: "Tests/CacheTests"),
        // The built programs and the package as a whole: CLI processes, cluster, browser, bench
        // smoke, the example package, soak, the architecture check.
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "TestSupport", "SparseCache", "HTTPCache", "SparseHTTP", "SparseCacheStore", "SparseCacheEngine", "SparseCacheTesting",
                "CShim", "SeededRandom", "LoopbackOrigins",
            ],
            path: "Tests/IntegrationTests"),
    ],
    swiftLanguageModes: [.v6]
)
