import Foundation

/// Builds a command's help from its declarations: OVERVIEW, USAGE, ARGUMENTS and OPTIONS, then
/// the command's notes.
enum HelpFormatter {
    /// Lines are wrapped to this many columns.
    static let width = 100
    /// Where the description column starts in ARGUMENTS and OPTIONS.
    static let column = 26

    static func help(for command: CommandEntry) -> String {
        var text = "OVERVIEW: " + command.overview + "\n\n"
        text +=
            command.usage.enumerated().map { index, line in
                (index == 0 ? "USAGE: " : "       ")
                    + wrap(keepingGroups("sparsecache " + line), indent: 7 + "sparsecache \(command.name) ".count, first: 7)
                    .replacingOccurrences(of: "\u{A0}", with: " ")
            }.joined(separator: "\n") + "\n"
        if !command.positionals.isEmpty {
            text += "\nARGUMENTS:\n"
            text += command.positionals.map { entry("<\($0.name)>", $0.help) }.joined()
        }
        text += "\nOPTIONS:\n"
        text += command.options.map { entry($0.synopsis, $0.fullHelp) }.joined()
        text += entry("-h, --help", "Show this help")
        if !command.notes.isEmpty { text += "\n" + command.notes + "\n" }
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    /// `name <file> [--option VALUE]... [--flag]`: every declaration, required ones without
    /// brackets, repeatable ones with an ellipsis.
    static func usage(name: String, positionals: [CLIArgument], options: [CLIOption]) -> String {
        var parts = [name]
        parts += positionals.map { $0.isOptional ? "[<\($0.name)>]" : "<\($0.name)>" }
        parts += options.map { option in
            (option.isRequired ? option.synopsis : "[\(option.synopsis)]") + (option.repeatable ? "..." : "")
        }
        return parts.joined(separator: " ")
    }

    /// A usage line with the spaces inside brackets and parentheses made unbreakable (U+00A0),
    /// so `[--listen ADDR:PORT]` is never split across lines.
    static func keepingGroups(_ line: String) -> String {
        var depth = 0
        return String(
            line.map { character -> Character in
                if character == "[" || character == "(" { depth += 1 }
                if character == "]" || character == ")" { depth -= 1 }
                return character == " " && depth > 0 ? "\u{A0}" : character
            })
    }

    /// One entry of ARGUMENTS or OPTIONS: the label in the left column, the description
    /// wrapped in the right one (on the next line when the label is too wide).
    static func entry(_ label: String, _ description: String) -> String {
        let left = "  " + label
        let indent = String(repeating: " ", count: column)
        let body = wrap(description, indent: column, first: column).replacingOccurrences(of: "\u{A0}", with: " ")
        if left.count <= column - 2 {
            return left + String(repeating: " ", count: column - left.count) + body + "\n"
        }
        return left + "\n" + indent + body + "\n"
    }

    /// Wraps `text` at word boundaries to ``width`` columns: the first line as if it started
    /// at column `first` (its prefix is the caller's, and not part of the result), the
    /// following ones indented by `indent`.
    static func wrap(_ text: String, indent: Int, first: Int) -> String {
        var lines: [String] = []
        var line = ""
        var start = first
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            if !line.isEmpty, start + line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
                start = indent
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        lines.append(line)
        let pad = String(repeating: " ", count: indent)
        return lines.enumerated().map { $0.offset == 0 ? $0.element : pad + $0.element }.joined(separator: "\n")
    }
}
