import Foundation
import SparseCache

#if canImport(Glibc)
import Glibc
#endif

/// The `sparsecache` command: dispatches to one verb per file.
enum SparseCacheTool {
    static let commands: [CommandEntry] = [
        CommandEntry(WriteCommand.self), CommandEntry(ReadCommand.self), CommandEntry(VerifyCommand.self),
        CommandEntry(InfoCommand.self), CommandEntry(DemoCommand.self), CommandEntry(ListCommand.self),
        CommandEntry(EvictCommand.self), CommandEntry(ClearCommand.self), CommandEntry(FetchCommand.self), CommandEntry(ServeCommand.self),
        CommandEntry(StatsCommand.self),
    ]

    /// The top-level options (each command declares its own).
    static let version = CLIOption.flag("--version", help: "Print the version and the index format")
    static let completionScript = CLIOption.value(
        "--generate-completion-script", "SHELL", completion: .words(CompletionScript.Shell.allCases.map(\.rawValue)),
        help: "Print a completion script for bash, zsh or fish, made from every command's options (docs/CLI.md says where to put it)")
    static let manual = CLIOption.flag("--generate-manual", help: "Print the manual page (roff), made from the same declarations as this help")
    static let options = [version, completionScript, manual]

    static var help: String {
        let width = commands.map(\.name.count).max() ?? 0
        return """
            OVERVIEW: sparsecache - a crash-safe cache for large resources that arrive in pieces

            Each resource is a sparse data file plus an index beside it ('<file>.scidx') holding a
            segment bitmap with a CRC32C per segment. A byte is served once its segment is durable.

            USAGE: sparsecache <command> [options]

            COMMANDS:

            """ + commands.map { "  " + $0.name.padding(toLength: width + 4, withPad: " ", startingAt: 0) + $0.abstract + "\n" }.joined()
            + "\nOPTIONS:\n" + HelpFormatter.entry("-h, --help", "Show help; 'sparsecache <command> --help' for a command")
            + options.map { HelpFormatter.entry($0.synopsis, $0.fullHelp) }.joined() + "\n" + ExitStatus.helpText
    }

    static func run(_ arguments: [String]) async -> Int32 {
        guard let name = arguments.first else {
            Output.error(help)
            return ExitStatus.usage
        }
        if name == "-h" || name == "--help" || name == "help" {
            Output.print(help)
            return ExitStatus.ok
        }
        if name == version.name {
            Output.print("sparsecache 0.1.0 (index format 1)")
            return ExitStatus.ok
        }
        if name == manual.name {
            Output.print(ManualPage.render())
            return ExitStatus.ok
        }
        if name == completionScript.name || name.hasPrefix(completionScript.name + "=") {
            let value = name.contains("=") ? String(name.drop { $0 != "=" }.dropFirst()) : arguments.dropFirst().first
            guard let value, let shell = CompletionScript.Shell(rawValue: value) else {
                Output.error("sparsecache: \(completionScript.name) needs one of: bash, zsh, fish")
                return ExitStatus.usage
            }
            Output.write(CompletionScript.render(for: shell), to: 1)
            return ExitStatus.ok
        }
        guard let command = commands.first(where: { $0.name == name }) else {
            Output.error("sparsecache: unknown command '\(name)'. Commands: \(commands.map(\.name).joined(separator: ", ")). See 'sparsecache --help'.")
            return ExitStatus.usage
        }
        let rest = Array(arguments.dropFirst())
        if rest.contains("-h") || rest.contains("--help") {
            Output.print(command.help)
            return ExitStatus.ok
        }
        // With --json, an error is a JSON object on stdout as well (the report's place), with
        // the same exit status; the sentence still goes to stderr.
        let json = command.options.contains { $0.name == "--json" } && rest.contains("--json")
        do {
            let parsed = try ArgumentParser.parse(rest, spec: command.spec)
            return try await command.run(parsed)
        } catch let error as UsageError {
            return fail(name, error.message, code: "usage", status: ExitStatus.usage, json: json, hint: "\nSee 'sparsecache \(name) --help'.")
        } catch let error as SparseCacheError {
            // An unusable index met by another verb: verify says what can be recovered.
            let hint =
                error.code == .corruptIndex && name != VerifyCommand.name
                ? "\n'sparsecache verify <file>' says what can be recovered; 'verify --repair' recovers it." : ""
            return fail(name, "\(error)", code: error.code.rawValue, status: ExitStatus.of(error), json: json, hint: hint)
        } catch let error as OriginError {
            let (code, status) = ExitStatus.of(error)
            return fail(name, "\(error)", code: code, status: status, json: json)
        } catch let error as HTTPError {
            let (code, status) = ExitStatus.of(error)
            return fail(name, "\(error)", code: code, status: status, json: json)
        } catch {
            return fail(name, "\(error)", code: "software", status: ExitStatus.software, json: json)
        }
    }

    /// Reports a failed command on stderr and, with `--json`, as `{"error", "code", "status"}` on
    /// stdout; returns the exit status.
    static func fail(_ command: String, _ message: String, code: String, status: Int32, json: Bool, hint: String = "") -> Int32 {
        Output.error("sparsecache \(command): \(message)\(hint)")
        if json {
            let object: [String: Any] = ["error": message, "code": code, "status": Int(status), "command": command]
            if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
                Output.print(String(decoding: data, as: UTF8.self))
            }
        }
        return status
    }
}

/// A command's declarations and entry point as plain values (calling static members through
/// an existential metatype crashes the Swift 6.3 compiler in SILGen).
struct CommandEntry: Sendable {
    let name: String
    let abstract: String
    let overview: String
    let usage: [String]
    let positionals: [CLIArgument]
    let options: [CLIOption]
    let notes: String
    let run: @Sendable (ParsedArguments) async throws -> Int32

    init<C: Command>(_: C.Type) {
        name = C.name
        abstract = C.abstract
        overview = C.overview
        usage = C.usage
        positionals = C.positionals
        options = C.options
        notes = C.notes
        run = { try await C.run($0) }
    }

    var spec: ArgumentSpec { ArgumentSpec(positionals: positionals, options: options) }
    var help: String { HelpFormatter.help(for: self) }
}

/// A verb of the CLI. Its options are declared once, in ``options``; the parser's spec, its
/// help, the completions and the manual page come from them.
protocol Command: SendableMetatype {
    static var name: String { get }
    /// One line for the list of commands.
    static var abstract: String { get }
    /// The help's OVERVIEW: a first line, then paragraphs.
    static var overview: String { get }
    /// USAGE lines, each after "sparsecache "; generated from the declarations unless a
    /// command has alternatives to show.
    static var usage: [String] { get }
    static var positionals: [CLIArgument] { get }
    static var options: [CLIOption] { get }
    /// What the help says after OPTIONS (notes, EXIT STATUS).
    static var notes: String { get }
    static func run(_ arguments: ParsedArguments) async throws -> Int32
}

extension Command {
    static var usage: [String] { [HelpFormatter.usage(name: name, positionals: positionals, options: options)] }
    static var positionals: [CLIArgument] { [] }
    static var notes: String { "" }
    /// The parser's spec, from the declarations.
    static var spec: ArgumentSpec { ArgumentSpec(positionals: positionals, options: options) }
}

/// Exit statuses, from sysexits(3), the same in every verb.
enum ExitStatus {
    static let ok: Int32 = 0
    /// `read`: the range is not (fully) present. An answer, not a failure.
    static let notPresent: Int32 = 1
    /// `verify --repair`: damage was found and repaired (fsck's "errors corrected"), so
    /// `verify --repair && next` goes on.
    static let corrected: Int32 = 1
    /// EX_USAGE: a malformed command line or an argument that does not fit the resource.
    static let usage: Int32 = 64
    /// EX_DATAERR: bad data. A damaged segment or index, no usable index state, an index
    /// from a newer format; `verify` found damage.
    static let dataError: Int32 = 65
    /// EX_NOINPUT: a missing file, resource, key or cache directory.
    static let noInput: Int32 = 66
    /// EX_UNAVAILABLE: the origin could not be reached.
    static let originUnavailable: Int32 = 69
    /// EX_SOFTWARE: a bug.
    static let software: Int32 = 70
    /// EX_CANTCREAT: an output that must not be overwritten already exists.
    static let cannotCreate: Int32 = 73
    /// EX_IOERR.
    static let ioError: Int32 = 74
    /// EX_TEMPFAIL: locked by another process, or the resource changed on its origin.
    static let locked: Int32 = 75
    /// EX_PROTOCOL: the origin answered with an error.
    static let originError: Int32 = 76
    /// EX_NOPERM: permission denied.
    static let noPermission: Int32 = 77

    /// The lines of `EXIT STATUS:` shared by every help text.
    static let helpText = """
        EXIT STATUS (sysexits, the same for every command): 0 ok, 1 'read': not present,
          'verify --repair': damage repaired, 64 usage error, 65 bad data (damage found, unusable index), 66 no such file,
          resource, key or cache directory, 69 origin unreachable, 73 would overwrite a file,
          74 I/O error, 75 locked by another process (or the resource changed on its
          origin), 76 the origin answered with an error, 77 permission denied.
        """

    static func of(_ error: SparseCacheError) -> Int32 {
        switch error.code {
        case .notPresent: notPresent
        case .corruptData, .corruptIndex, .unsupportedVersion: dataError
        case .invalidArgument: usage
        case .notFound: noInput
        case .io where error.errno == EACCES || error.errno == EPERM: noPermission
        case .io, .needsReopen, .closed: ioError
        case .locked: locked
        }
    }

    /// The `--json` code and the exit status of an origin's error. The codes are the ones
    /// scripts read (`origin`, `originUnavailable`, `originChanged`), whichever layer failed.
    static func of(_ error: OriginError) -> (code: String, status: Int32) {
        switch error.kind {
        case .badAnswer, .notAllowed: ("origin", originError)
        case .unavailable, .timedOut: ("originUnavailable", originUnavailable)
        case .changed: ("originChanged", locked)
        }
    }

    /// The `--json` code and the exit status of an HTTP error (a running server's admin
    /// listener, a port to listen on): a peer that cannot be reached is `originUnavailable`,
    /// one that answers garbage `origin`, a socket call that failed `io`.
    static func of(_ error: HTTPError) -> (code: String, status: Int32) {
        switch error.kind {
        case .timedOut, .connectFailed, .unresolved, .connectionLost: ("originUnavailable", originUnavailable)
        case .malformed, .notAllowed: ("origin", originError)
        case .closed: ("closed", ioError)
        case .io where error.errno == EACCES || error.errno == EPERM: ("io", noPermission)
        case .io: ("io", ioError)
        case .invalidArgument: ("invalidArgument", usage)
        }
    }
}

func exitProcess(_ status: Int32) -> Never {
    exit(status)
}
