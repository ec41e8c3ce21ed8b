/// Command-line options of `sparsecache-bench` and the sizes each mode uses.
struct BenchOptions: Sendable {
    enum Mode: String, Sendable, Codable {
        case full, quick, smoke
    }

    var mode = Mode.full
    var jsonPath: String?
    /// Parent directory for the scratch directory (default: /var/tmp, or ./.bench-tmp when
    /// /var/tmp is a tmpfs).
    var directory: String?
    /// Scenario numbers to run (default: all).
    var only: Set<Int>?
    var repetitionsOverride: Int?
    var keep = false
    /// Scenario 14: also measure 10^6 (and every power of ten up to this) small objects.
    var scaleMaximum: Int?
    /// Scenario 16: views in the trace replayed through the proxy (default 300; 30 in smoke mode).
    var traceViews: Int?

    static let usage = """
        OVERVIEW: sparsecache side by side with raw syscalls and the designs it replaces.

        Every scenario runs sparsecache and its baselines in one process, interleaved, and
        reports min / median / max over the repetitions and the ratio to the raw baseline.

        USAGE: sparsecache-bench [--quick | --smoke] [--json PATH] [--dir PATH] [--only N,...] [--scale-max N]
                                 [--trace-views N]

        OPTIONS:
          --quick         Smaller sizes, 7 repetitions (about 2 minutes)
          --smoke         Tiny sizes, 1 repetition: checks every scenario runs (seconds)
          (default)       1 GiB fills and reads, 9 repetitions
          --json PATH     Write every result as JSON to PATH
          --dir PATH      Parent of the scratch directory (default /var/tmp; never a tmpfs
                          unless you ask for one). The scratch directory is removed at the end.
          --only N,...    Run only these scenarios (1-16)
          --scale-max N   Scenario 14 also at 10^6 small objects (and each power of ten up
                          to N): about 4.4 GB of logs and a few minutes per 10^6
          --trace-views N Scenario 16 replays a trace of N views through the proxy (default
                          300, about 2 GiB asked; 1500 is about 9 GiB)
          --reps N        Override the repetition count (at least 1)
          --keep          Keep the scratch directory
          -h, --help      Show this help

        SCENARIOS:
          1  durable sequential fill       4  verify and CRC32C throughput
          2  seek-heavy (random) fill      5  scale: open time, memory, index bytes per commit
          3  cached reads                  6  cooperative pool: worst ticker gap under slow I/O
                                           7  cache directory: start-up with 10,000 resources, eviction
                                           8  fault-injection hooks: cost when off
                                           9  fill-through from nginx vs curl; time to first byte
                                          10  local proxy vs nginx: cached throughput, request rate, first byte
                                          11  seek while prefetch fills the per-origin limit vs no prefetch
                                          12  against nginx proxy_cache slice 1m: first byte, downloads, random
                                              ranges, origin bytes of seek sessions, a 16-client herd
                                          13  many small answers against nginx proxy_cache
                                          14  small-object catalog: restart to first hit and memory
                                              per object at 10^4, 10^5 (10^6 with --scale-max)
                                          15  cached hits against nginx: warm first byte, CPU per
                                              1 KiB hit, 2,000 4 KiB objects under wrk
                                          16  eviction on video traces: LRU, sfifo and Belady's
                                              MIN simulated, and a real replay per policy
          (sparsecache-bench trace --help: the simulator alone, on any trace)
        """

    struct UsageError: Error, CustomStringConvertible {
        var description: String
    }

    /// Parses the arguments; nil means help was asked for.
    static func parse(_ arguments: [String]) throws -> BenchOptions? {
        var options = BenchOptions()
        var index = 0
        func value(_ name: String) throws -> String {
            index += 1
            guard index < arguments.count else { throw UsageError(description: "\(name) needs a value") }
            return arguments[index]
        }
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "-h", "--help": return nil
            case "--quick": options.mode = .quick
            case "--smoke": options.mode = .smoke
            case "--full": options.mode = .full
            case "--json": options.jsonPath = try value(argument)
            case "--dir": options.directory = try value(argument)
            case "--keep": options.keep = true
            case "--scale-max":
                guard let count = Int(try value(argument)), count >= 1_000_000 else {
                    throw UsageError(description: "--scale-max needs a number of objects of at least 1000000")
                }
                options.scaleMaximum = count
            case "--trace-views":
                guard let count = Int(try value(argument)), count >= 1 else {
                    throw UsageError(description: "--trace-views needs a positive integer")
                }
                options.traceViews = count
            case "--reps":
                guard let count = Int(try value(argument)), count >= 1 else {
                    throw UsageError(description: "--reps needs a positive integer")
                }
                options.repetitionsOverride = count
            case "--only":
                let numbers = try value(argument).split(separator: ",").map { Int($0) }
                guard !numbers.isEmpty, numbers.allSatisfy({ $0.map { (1...16).contains($0) } ?? false }) else {
                    throw UsageError(description: "--only takes scenario numbers from 1 to 16, e.g. --only 1,3")
                }
                options.only = Set(numbers.compactMap { $0 })
            default:
                throw UsageError(description: "unknown argument '\(argument)'")
            }
            index += 1
        }
        return options
    }

    func runs(_ scenario: Int) -> Bool { only?.contains(scenario) ?? true }

    var repetitions: Int {
        if let repetitionsOverride { return repetitionsOverride }
        switch mode {
        case .full: return 9
        case .quick: return 7
        case .smoke: return 1
        }
    }

    var sizes: Sizes { Sizes(mode) }
}

/// Workload sizes per mode.
struct Sizes: Sendable {
    /// Scenario 1: bytes filled sequentially.
    var sequentialFill: Int64
    /// Scenario 2: bytes filled in random order.
    var randomFill: Int64
    /// Both fills: bytes written between commits.
    var commitEvery: Int64
    /// Scenarios 3, 4 and 6: the resource read back.
    var readResource: Int64
    /// Scenario 3: random 64 KiB reads per cell.
    var randomReads: Int
    /// Scenario 4: bytes checksummed per CRC32C sample, hardware and software path.
    var crcHardwareBytes: Int
    var crcSoftwareBytes: Int
    /// Scenario 5: one-segment commits per resource size.
    var scaleCommits: Int
    /// Scenario 6: the length of each of the 64 slow reads.
    var slowReadLength: Int
    /// Scenario 7: resources in the cache directory, and how many each eviction sample evicts.
    var storeResources: Int
    var storeEvictions: Int
    /// Scenario 8: 4 KiB calls per sample.
    var hookCalls: Int
    /// Scenarios 9 and 10: the resource filled through from nginx, and served by the proxy.
    var fillThrough: Int64

    init(_ mode: BenchOptions.Mode) {
        switch mode {
        case .full:
            sequentialFill = 1 << 30
            randomFill = 256 << 20
            commitEvery = 8 << 20
            readResource = 1 << 30
            randomReads = 8192
            crcHardwareBytes = 2 << 30
            crcSoftwareBytes = 512 << 20
            scaleCommits = 300
            slowReadLength = 4 << 20
            storeResources = 10_000
            storeEvictions = 500
            hookCalls = 1_000_000
            fillThrough = 1 << 30
        case .quick:
            sequentialFill = 256 << 20
            randomFill = 64 << 20
            commitEvery = 8 << 20
            readResource = 128 << 20
            randomReads = 2048
            crcHardwareBytes = 1 << 30
            crcSoftwareBytes = 256 << 20
            scaleCommits = 300
            slowReadLength = 2 << 20
            storeResources = 10_000
            storeEvictions = 500
            hookCalls = 1_000_000
            fillThrough = 256 << 20
        case .smoke:
            sequentialFill = 8 << 20
            randomFill = 2 << 20
            commitEvery = 1 << 20
            readResource = 8 << 20
            randomReads = 64
            crcHardwareBytes = 16 << 20
            crcSoftwareBytes = 4 << 20
            scaleCommits = 3
            slowReadLength = 128 << 10
            storeResources = 200
            storeEvictions = 20
            hookCalls = 10_000
            fillThrough = 4 << 20
        }
    }
}
