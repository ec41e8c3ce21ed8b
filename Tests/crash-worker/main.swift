// The child of the crash harness tests (CrashHarnessTests): each closure does I/O through the
// engine and acknowledges what returned durable.
import SparseCache
import SparseCacheTesting

/// `fill <path> <segments>`: writes and commits one 4 KiB segment at a time, acknowledging each
/// commit that returned.
CrashWorker.register("fill") { arguments in
    var options = SparseFileOptions()
    options.segmentSize = 4096
    let segments = Int(arguments[1]) ?? 8
    options.length = Int64(segments * 4096)
    options.commitPolicy = .manual
    let file = try await SparseFile.open(arguments[0], options: options)
    for segment in 0..<segments {
        _ = try await file.write([UInt8](repeating: UInt8(segment + 1), count: 4096), at: Int64(segment * 4096))
        try await file.commit()
        CrashWorker.acknowledge("\(segment)")
    }
    try await file.close()
}

/// `fail`: throws, for the harness's own test of a closure's error.
CrashWorker.register("fail") { _ in
    throw SparseCacheError(.invalidArgument, operation: "crash worker", detail: "asked to fail")
}

await CrashWorker.main()
