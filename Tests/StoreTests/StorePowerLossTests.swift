// The store's crash and power-loss suite: its tests are in the files that extend it
// (StoreCrashTests, CreateRetryCrashTests, SmallObjectCrashTests). Power-loss recording is
// process-wide, so it runs alone among the suites that record (the engine's included).
import Testing
import TestSupport

@Suite("Store: crash and power-loss simulation", .tags(.slow), .unlessSkippingSlow, .serialized, .powerLossRecording)
struct StorePowerLossTests {}
