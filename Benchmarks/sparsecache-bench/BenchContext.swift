/// What every scenario gets: the options, the sizes, the scratch directory and the resource
/// prepared for the read scenarios.
struct BenchContext: Sendable {
    var options: BenchOptions
    var scratch: Scratch
    /// A complete, committed SparseFile resource for scenarios 3, 4 and 6 (nil when none of
    /// them runs).
    var readResource: ReadResource?

    var sizes: Sizes { options.sizes }
    var repetitions: Int { options.repetitions }
}
