import SparseCacheEngine

/// What a command accepts, generated from its declarations: option names that take a value,
/// flags, and positional names.
struct ArgumentSpec: Sendable {
    var positionals: [String] = []
    /// Positionals that may be left out (the last ones).
    var optionalPositionals = 0
    var options: Set<String> = []
    var flags: Set<String> = []

    init(positionals: [CLIArgument] = [], options declared: [CLIOption] = []) {
        self.positionals = positionals.map(\.name)
        optionalPositionals = positionals.filter(\.isOptional).count
        options = Set(declared.filter { !$0.isFlag }.map(\.name))
        flags = Set(declared.filter(\.isFlag).map(\.name))
    }
}

struct ParsedArguments {
    var positionals: [String] = []
    /// The last value of each option given, by name.
    var options: [String: String] = [:]
    /// Every value of each option, in order (for options that may be repeated).
    var repeated: [String: [String]] = [:]
    var flags: Set<String> = []

    /// Whether the flag was given.
    func has(_ flag: CLIOption) -> Bool { flags.contains(flag.name) }

    /// The option's value: the last one given, else its declared default.
    func value(_ option: CLIOption) -> String? { options[option.name] ?? option.defaultValue }

    /// The value given on the command line (or in a config file), ignoring the default.
    func given(_ option: CLIOption) -> String? { options[option.name] }

    /// Every value given of a repeatable option, in order.
    func values(_ option: CLIOption) -> [String] { repeated[option.name, default: []] }

    /// A size option ("64K", "1M", "4096"), or its default; nil when neither.
    func size(_ option: CLIOption) throws -> Int64? {
        guard let text = value(option) else { return nil }
        guard let value = SizeParser.parse(text) else {
            throw UsageError("invalid size '\(text)' for \(option.name): use a non-negative number with an optional K, M, G or T suffix")
        }
        return value
    }
}

struct UsageError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// A small hand-rolled parser: `--name value`, `--name=value`, flags, positionals, `--` ends
/// options.
enum ArgumentParser {
    static func parse(_ arguments: [String], spec: ArgumentSpec) throws -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        var onlyPositionals = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyPositionals || !argument.hasPrefix("-") || argument == "-" {
                parsed.positionals.append(argument)
                continue
            }
            if argument == "--" {
                onlyPositionals = true
                continue
            }
            var name = argument
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            if spec.flags.contains(name) {
                if inlineValue != nil { throw UsageError("\(name) takes no value") }
                parsed.flags.insert(name)
            } else if spec.options.contains(name) {
                if let inlineValue {
                    parsed.options[name] = inlineValue
                } else {
                    guard index < arguments.count else { throw UsageError("\(name) needs a value") }
                    parsed.options[name] = arguments[index]
                    index += 1
                }
                parsed.repeated[name, default: []].append(parsed.options[name]!)
            } else {
                let known = (spec.options.union(spec.flags)).sorted().joined(separator: ", ")
                throw UsageError("unknown option '\(name)'" + (known.isEmpty ? "" : " (known: \(known))"))
            }
        }
        let required = spec.positionals.count - spec.optionalPositionals
        if parsed.positionals.count < required {
            throw UsageError("missing <\(spec.positionals[parsed.positionals.count])>")
        }
        if parsed.positionals.count > spec.positionals.count {
            throw UsageError("unexpected argument '\(parsed.positionals[spec.positionals.count])'")
        }
        return parsed
    }
}

/// Sizes with binary suffixes: 4096, 64K, 1M, 2G, 1T (also KiB/MiB/GiB/TiB and KB-style).
enum SizeParser {
    static func parse(_ text: String) -> Int64? {
        var digits = text.uppercased()
        var multiplier: Int64 = 1
        for (suffixes, value) in [(["TIB", "TB", "T"], Int64(1) << 40), (["GIB", "GB", "G"], 1 << 30),
                                  (["MIB", "MB", "M"], 1 << 20), (["KIB", "KB", "K"], 1 << 10), (["B"], 1)] {
            if let suffix = suffixes.first(where: { digits.hasSuffix($0) }) {
                digits.removeLast(suffix.count)
                multiplier = value
                break
            }
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let number = Int64(digits), number >= 0 else { return nil }
        let (product, overflow) = number.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }

    /// The shortest form `parse` reads back exactly: 65536 -> "64K", 1000 -> "1000".
    static func shortForm(_ bytes: Int64) -> String {
        for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] where bytes != 0 && bytes % (Int64(1) << shift) == 0 {
            return "\(bytes >> shift)\(suffix)"
        }
        return "\(bytes)"
    }

    /// 1536 -> "1.5 KiB".
    static func describe(_ bytes: Int64) -> String { ByteCountText.describe(bytes) }
}
