import NoteLog
import SparseCacheTesting

/// `append <path> <count>`: appends notes 0..<count, acknowledging each one that returned.
CrashWorker.register("append") { arguments in
    let log = try await NoteLog.open(arguments[0])
    for index in 0..<(Int(arguments[1]) ?? 8) {
        try await log.append("note \(index)", at: index)
        CrashWorker.acknowledge("\(index)")
    }
    try await log.close()
}

await CrashWorker.main()
