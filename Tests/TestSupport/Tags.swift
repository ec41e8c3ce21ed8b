// The tags of the suite, and the switches that leave tagged suites out of a run. This
// toolchain's `swift test` selects by test identifier only (`--filter` and `--skip` take
// regular expressions; `--filter tag:NAME` is not understood), so a tagged suite also carries
// a condition read from the environment: SPARSECACHE_SKIP_EXTERNAL=1 and SPARSECACHE_SKIP_SLOW=1
// skip them, each with a message (docs/TESTING.md).
import Foundation
import Testing

extension Tag {
    /// Starts a program that is not part of the toolchain: nginx, curl, wrk, ffmpeg/ffprobe,
    /// chromium, or python3 (the scripted and faulty origins). `.ci/run` installs them.
    @Tag package static var external: Self

    /// Runs for tens of seconds or more on the two-core CI machine: crash and power-loss
    /// sweeps, fuzzing, soak, the example package's build, the benchmark smoke run, players.
    @Tag package static var slow: Self
}

/// Which tagged suites this run leaves out, from the environment.
package enum TestSelection {
    /// False under `SPARSECACHE_SKIP_EXTERNAL=1`.
    package static let external = ProcessInfo.processInfo.environment["SPARSECACHE_SKIP_EXTERNAL"] != "1"
    /// False under `SPARSECACHE_SKIP_SLOW=1`.
    package static let slow = ProcessInfo.processInfo.environment["SPARSECACHE_SKIP_SLOW"] != "1"
}

extension Trait where Self == ConditionTrait {
    /// Goes with `.tags(.external), .unlessSkippingExternal`: skipped under `SPARSECACHE_SKIP_EXTERNAL=1`.
    package static var unlessSkippingExternal: Self {
        .enabled(if: TestSelection.external, "SPARSECACHE_SKIP_EXTERNAL=1: this suite starts nginx, curl, ffmpeg, chromium or python3")
    }

    /// Goes with `.tags(.slow), .unlessSkippingSlow`: skipped under `SPARSECACHE_SKIP_SLOW=1`.
    package static var unlessSkippingSlow: Self {
        .enabled(if: TestSelection.slow, "SPARSECACHE_SKIP_SLOW=1: this suite is one of the long ones")
    }
}
