// One call into a nonisolated entry point: DispatchIO handlers must never be created in
// main-actor code (libdispatch on Linux traps on them at run time).
exitProcess(await SparseCacheTool.run(Array(CommandLine.arguments.dropFirst())))
