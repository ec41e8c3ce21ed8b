#if canImport(Glibc)
import Glibc
#endif

// One call into a nonisolated entry point (see DESIGN.md, "Concurrency facts").
exit(await StressWriter.main(Array(CommandLine.arguments.dropFirst())))
