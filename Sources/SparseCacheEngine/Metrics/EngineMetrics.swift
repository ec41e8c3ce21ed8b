/// What the engine measures about itself, for every resource of the process: the numbers an
/// operator watches to see a disk slow down or go bad (exposed by `sparsecache serve`'s
/// metrics endpoint).
package enum EngineMetrics {
    /// One commit: data fdatasync, journal record, index sync.
    package static let commitSeconds = Histogram()
    /// One fdatasync(2) of a data or index file.
    package static let dataSyncSeconds = Histogram()
    /// Present segments whose bytes did not match their CRC32C when read (then dropped).
    package static let corruptSegments = Counter()
}
