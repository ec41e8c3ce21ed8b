import Foundation
import SparseCache

/// `serve --config FILE`: the options of `serve`, one per line, without their dashes
/// (`max-size 20G`, `log-format json`, `allow-origin *.example.com`, `quiet`); `#` starts a
/// comment. The command line wins over the file. SIGHUP reads the file again and applies what
/// can change while serving: the budget (`max-size`), the log (`log-format`, `access-log`,
/// `quiet`); an option that changed and needs a restart is named on stderr.
enum ServeConfig {
    /// The file's options as arguments of `spec`. Throws a usage error naming the line.
    static func load(_ path: String, spec: ArgumentSpec) throws -> ParsedArguments {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw UsageError("cannot read --config '\(path)': \(error.localizedDescription)")
        }
        var arguments: [String] = []
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first?
                .trimmingCharacters(in: .whitespaces) ?? ""
            if line.isEmpty { continue }
            let parts = line.split(separator: " ", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            let name = "--" + parts[0]
            guard name != "--config" else { throw UsageError("\(path):\(number + 1): a config file cannot name another") }
            guard spec.options.contains(name) || spec.flags.contains(name) else {
                throw UsageError("\(path):\(number + 1): unknown option '\(parts[0])'")
            }
            arguments.append(name)
            if spec.options.contains(name) {
                guard parts.count == 2, !parts[1].isEmpty else { throw UsageError("\(path):\(number + 1): '\(parts[0])' needs a value") }
                arguments.append(parts[1])
            } else if parts.count == 2 {
                throw UsageError("\(path):\(number + 1): '\(parts[0])' takes no value")
            }
        }
        return try ArgumentParser.parse(arguments, spec: spec)
    }

    /// The file's options under the command line's: an option or flag given on the command
    /// line wins; repeatable options come from the command line when it has any.
    static func merged(_ commandLine: ParsedArguments, over file: ParsedArguments) -> ParsedArguments {
        var merged = file
        merged.positionals = commandLine.positionals
        for (name, value) in commandLine.options { merged.options[name] = value }
        for (name, values) in commandLine.repeated { merged.repeated[name] = values }
        merged.flags.formUnion(commandLine.flags)
        return merged
    }
}
