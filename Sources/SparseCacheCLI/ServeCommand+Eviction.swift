import SparseCache

extension ServeCommand {
    /// `--eviction lru|sfifo` (default ``EvictionPolicy/defaultPolicy``).
    static func evictionPolicy(_ arguments: ParsedArguments) throws -> EvictionPolicy {
        guard let text = arguments.value(ServeOptions.eviction) else { return .defaultPolicy }
        do {
            return try EvictionPolicy(parsing: text)
        } catch {
            throw UsageError("invalid --eviction '\(text)': \(error.detail ?? "unknown policy")")
        }
    }
}
