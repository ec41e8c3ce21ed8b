import Foundation

/// One option of a command, declared once: its name, the name of its value, its default and
/// its help. The parser's spec, the help's OPTIONS section, the shell completions and the
/// manual page are all generated from the declarations (``HelpFormatter``,
/// ``CompletionScript``, ``ManualPage``), and commands look values up by the declaration,
/// never by a string.
struct CLIOption: Sendable, Hashable {
    /// What a shell offers for the option's value.
    enum Completion: Sendable, Hashable {
        case none
        case file
        case directory
        /// One of these words.
        case words([String])
    }

    /// With its dashes: "--listen".
    let name: String
    /// "ADDR:PORT"; nil for a flag, which takes no value.
    let valueName: String?
    /// The value a command uses when the option is not given; shown in help.
    let defaultValue: String?
    /// How help describes a default computed at run time (`defaultValue` is nil then).
    let defaultDescription: String?
    /// Whether the command needs it (shown in usage and help; the command checks).
    let isRequired: Bool
    /// Whether every value given counts (``ParsedArguments/values(_:)``), not only the last.
    let repeatable: Bool
    /// What the option does, as sentences; wrapped by the help formatter.
    let help: String
    let completion: Completion

    var isFlag: Bool { valueName == nil }

    /// An option that takes a value.
    static func value(
        _ name: String, _ valueName: String, default defaultValue: String? = nil, defaultDescription: String? = nil,
        required: Bool = false, repeatable: Bool = false, completion: Completion = .none, help: String
    ) -> CLIOption {
        CLIOption(
            name: name, valueName: valueName, defaultValue: defaultValue, defaultDescription: defaultDescription,
            isRequired: required, repeatable: repeatable, help: help, completion: completion)
    }

    /// A flag: present or not.
    static func flag(_ name: String, help: String) -> CLIOption {
        CLIOption(
            name: name, valueName: nil, defaultValue: nil, defaultDescription: nil, isRequired: false, repeatable: false, help: help,
            completion: .none)
    }

    /// The help text with "(required)", "repeatable" and the default appended. Each note's
    /// spaces are U+00A0, so wrapping never splits one; formatters print them as spaces.
    var fullHelp: String {
        // After a full stop, whole sentences; after a phrase, parentheses.
        let sentences = help.hasSuffix(".")
        var text = help
        var notes: [String] = []
        if isRequired { notes.append("required") }
        if repeatable { notes.append("repeatable") }
        if let shown = defaultValue ?? defaultDescription { notes.append("default: \(shown)") }
        for note in notes.map({ $0.replacingOccurrences(of: " ", with: "\u{A0}") }) {
            text += sentences ? " " + note.prefix(1).uppercased() + note.dropFirst() + "." : " (\(note))"
        }
        return text
    }

    /// How usage shows it: "--listen ADDR:PORT", "--quiet".
    var synopsis: String { valueName.map { "\(name) \($0)" } ?? name }

    /// `--cache-dir`, shared by every command that works on a cache directory.
    static let cacheDirectory = CLIOption.value(
        "--cache-dir", "DIR", defaultDescription: "$XDG_CACHE_HOME/sparsecache, or ~/.cache/sparsecache", completion: .directory,
        help: "The cache directory")

    /// `--json`, for the commands that print a report.
    static func json(_ help: String) -> CLIOption { .flag("--json", help: help) }
}
