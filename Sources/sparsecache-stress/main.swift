#if canImport(Glibc)
import Glibc
#endif

// One call into a nonisolated entry point (see docs/ARCHITECTURE.md, "Threads").
exit(await StressWriter.main(Array(CommandLine.arguments.dropFirst())))
