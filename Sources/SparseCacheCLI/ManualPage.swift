import Foundation

/// The manual page, sparsecache(1) in roff, generated from the same declarations as the help
/// (`sparsecache --generate-manual`; docs/sparsecache.1 is its output, and a test keeps the
/// two equal).
enum ManualPage {
    static func render(commands: [CommandEntry] = SparseCacheTool.commands) -> String {
        var page = """
            .TH SPARSECACHE 1 "" "sparsecache 0.1.0" "User Commands"
            .SH NAME
            sparsecache \\- a crash\\-safe cache for large resources that arrive in pieces
            .SH SYNOPSIS
            .B sparsecache
            .I command
            .RI [ options ]
            .SH DESCRIPTION
            Each resource is a sparse data file plus an index beside it (\\fIfile\\fR.scidx) holding a
            segment bitmap with a CRC32C per segment. A byte is served once its segment is durable.
            .SH OPTIONS

            """
        page += entry("-h, --help", "Show help; 'sparsecache <command> --help' for a command")
        for option in SparseCacheTool.options { page += entry(option.synopsis, option.fullHelp) }
        page += ".SH COMMANDS\n"
        for command in commands {
            page += ".SS \"\(escape("sparsecache " + command.name))\"\n"
            for line in command.usage { page += ".PP\n.B \(escape("sparsecache " + line))\n" }
            page += paragraphs(command.overview)
            for positional in command.positionals { page += entry("<\(positional.name)>", positional.help) }
            for option in command.options { page += entry(option.synopsis, option.fullHelp) }
            if !command.notes.isEmpty { page += paragraphs(command.notes) }
        }
        page += ".SH EXIT STATUS\n" + paragraphs(ExitStatus.helpText)
        page += """
            .SH SEE ALSO
            The manual in the project's docs/ directory: CLI.md, LIBRARY.md, DURABILITY.md, HTTP\\-CACHING.md.

            """
        return page
    }

    /// An option or argument as a tagged paragraph.
    private static func entry(_ label: String, _ text: String) -> String {
        ".TP\n.B \(escape(label))\n\(escape(text))\n"
    }

    /// Help text as roff paragraphs: a paragraph whose lines are indented keeps its lines
    /// (a table), the others are filled.
    private static func paragraphs(_ text: String) -> String {
        var out = ""
        for paragraph in text.components(separatedBy: "\n\n") where !paragraph.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            let lines = paragraph.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
            if lines.dropFirst().contains(where: { $0.hasPrefix(" ") }) {
                out += ".PP\n.nf\n" + lines.map(escape).joined(separator: "\n") + "\n.fi\n"
            } else {
                out += ".PP\n" + lines.map { escape($0.trimmingCharacters(in: .whitespaces)) }.joined(separator: "\n") + "\n"
            }
        }
        return out
    }

    /// Text safe in roff: backslashes and hyphens escaped, and a line that would start with a
    /// control character guarded.
    static func escape(_ text: String) -> String {
        let escaped = text.replacingOccurrences(of: "\\", with: "\\e").replacingOccurrences(of: "-", with: "\\-")
            .replacingOccurrences(of: "\u{A0}", with: "\\ ")
        return escaped.hasPrefix(".") || escaped.hasPrefix("'") ? "\\&" + escaped : escaped
    }
}
