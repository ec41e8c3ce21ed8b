import SparseCache

extension BlockingExecutor {
    /// The CLI's own file and pipe I/O (`--input`, `--output`, standard input and output) runs
    /// here, never on the cooperative pool: a full pipe or a slow disk must not hold one of the
    /// pool's threads (two on a two-core machine) while the engine needs them.
    static let cliIO = BlockingExecutor(label: "sparsecache.cli.io")
}
