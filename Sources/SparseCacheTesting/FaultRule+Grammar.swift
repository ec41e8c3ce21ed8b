import CShim
import SparseCacheEngine

#if canImport(Glibc)
    import Glibc
#endif

/// The one grammar of rules: the text `SPARSECACHE_FAULTS` takes is parsed by the same C
/// parser here, and `description` writes a rule back in it.
extension FaultRule {
    /// Parses one rule of `SPARSECACHE_FAULTS` syntax, e.g. `"fdatasync:path=movie:nth=2:errno=EIO"`.
    ///
    /// - Throws: `.invalidArgument` whose detail names the token that does not parse (an
    ///   unknown operation or field, a bad value, two triggers, no effect).
    public init(parsing text: String) throws {
        var raw = sc_fault_rule_default()
        let size = Int(SC_FAULT_TEXT_MAX)
        var path = [CChar](repeating: 0, count: size)
        var prefix = [CChar](repeating: 0, count: size)
        var directory = [CChar](repeating: 0, count: size)
        var message = [CChar](repeating: 0, count: 512)
        let result = sc_faults_parse_rule(text, &raw, &path, &prefix, &directory, &message, message.count)
        guard result == 0 else {
            throw SparseCacheError(.invalidArgument, operation: "parse fault rule", detail: "\(Self.string(message)) in '\(text)'")
        }
        func optional(_ buffer: [CChar]) -> String? {
            let text = Self.string(buffer)
            return text.isEmpty ? nil : text
        }
        let operations = Set(FaultOperation.allCases.filter { raw.ops & (1 << UInt32($0.rawValue)) != 0 })
        var trigger = Trigger.every
        var seed: UInt64? = raw.seed == 0 ? nil : raw.seed
        switch Int(raw.trigger) {
        case Int(SC_TRIGGER_NTH): trigger = .nth(Int(raw.n))
        case Int(SC_TRIGGER_PROBABILITY):
            trigger = .probability(raw.probability, seed: raw.seed)
            seed = nil
        default: trigger = raw.n == 0 ? .every : .after(Int(raw.n))
        }
        let snapshot = optional(directory)
        self.init(
            operations, pathContains: optional(path), pathPrefix: optional(prefix), trigger: trigger,
            maxFires: raw.max_fires > 0 ? Int(raw.max_fires) : nil, error: raw.error != 0 ? raw.error : nil,
            shortBytes: raw.short_bytes >= 0 ? Int(raw.short_bytes) : nil, tornBytes: raw.torn_bytes >= 0 ? Int(raw.torn_bytes) : nil,
            delay: raw.delay_us > 0 ? .microseconds(raw.delay_us) : nil,
            crashStatus: raw.crash != 0 ? (raw.exit_status != 0 ? raw.exit_status : FaultInjection.crashStatus) : nil,
            snapshot: snapshot, variants: snapshot == nil ? 1 : Int(raw.snapshot_variants), seed: seed)
    }

    /// Parses `;`-separated rules.
    ///
    /// - Throws: `.invalidArgument` naming the rule (from 1) and the token that does not parse.
    public static func parseAll(_ spec: String) throws -> [FaultRule] {
        var rules: [FaultRule] = []
        for (index, text) in spec.split(separator: ";").enumerated() where !text.allSatisfy(\.isWhitespace) {
            do {
                rules.append(try FaultRule(parsing: String(text)))
            } catch var error as SparseCacheError {
                error.detail = "rule \(index + 1): " + (error.detail ?? "")
                throw error
            }
        }
        return rules
    }

    /// The rule in `SPARSECACHE_FAULTS` syntax; `FaultRule(parsing:)` of it is this rule.
    public var description: String {
        let names = Self.operationNames(operations)
        var fields = [names]
        if let pathContains { fields.append("path=\(pathContains)") }
        if let pathPrefix { fields.append("prefix=\(pathPrefix)") }
        switch trigger {
        case .every: break
        case .after(0): break
        case .nth(let n): fields.append("nth=\(n)")
        case .after(let n): fields.append("after=\(n)")
        case .probability(let p, let seed): fields.append("prob=\(p):seed=\(seed)")
        }
        if case .probability = trigger {} else if let seed { fields.append("seed=\(seed)") }
        if let maxFires { fields.append("times=\(maxFires)") }
        if let error { fields.append("errno=\(Self.errnoName(error))") }
        if let shortBytes { fields.append("short=\(shortBytes)") }
        if let tornBytes { fields.append("torn=\(tornBytes)") }
        if let delay {
            let (seconds, attoseconds) = delay.components
            let micros = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
            fields.append(micros % 1000 == 0 ? "delay=\(micros / 1000)" : "delay_us=\(micros)")
        }
        if let crashStatus { fields.append(crashStatus == FaultInjection.crashStatus ? "crash" : "crash=\(crashStatus)") }
        if let snapshot {
            fields.append("snapshot=\(snapshot)")
            if variants != 1 { fields.append("variants=\(variants)") }
        }
        return fields.joined(separator: ":")
    }

    /// The errno names the grammar knows (a number is accepted for any other).
    static let errnoNames: [(String, Int32)] = [
        ("EIO", EIO), ("ENOSPC", ENOSPC), ("EINTR", EINTR), ("EOPNOTSUPP", EOPNOTSUPP), ("EDQUOT", EDQUOT),
        ("EROFS", EROFS), ("EAGAIN", EAGAIN), ("EBADF", EBADF), ("EACCES", EACCES), ("EPERM", EPERM),
        ("ENOENT", ENOENT), ("EFBIG", EFBIG), ("ENOMEM", ENOMEM), ("EINVAL", EINVAL),
    ]

    static func errnoName(_ value: Int32) -> String {
        errnoNames.first { $0.1 == value }?.0 ?? String(value)
    }

    static func operationNames(_ operations: Set<FaultOperation>) -> String {
        if operations == Set(FaultOperation.allCases) { return "any" }
        if operations == FaultOperation.mutating { return "mutating" }
        return FaultOperation.allCases.filter(operations.contains).map(\.description).joined(separator: ",")
    }

    private static func string(_ buffer: [CChar]) -> String {
        buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
