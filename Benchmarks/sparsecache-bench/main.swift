// One call into a nonisolated entry point: DispatchIO and dispatch handlers must never be
// created in main-actor code (libdispatch on Linux traps on them at run time).
import Foundation

exit(await BenchMain.run(Array(CommandLine.arguments.dropFirst())))
