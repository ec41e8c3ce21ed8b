// The CLI's options are declared once and the parser, the help, the shell completions and the
// manual page are made from the declarations: these tests hold the four to each other.
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

@Suite("CLI option declarations: help, parser, completions, manual")
struct CLICompletionTests {
    /// The commands the top-level help lists.
    static func commands() async throws -> [String] {
        let top = try await CLI.run(["--help"])
        let lines = top.out.split(separator: "\n", omittingEmptySubsequences: false)
        let section = lines.drop { !$0.hasPrefix("COMMANDS:") }.dropFirst().prefix { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        return section.compactMap { $0.split(separator: " ").first.map(String.init) }
    }

    /// The option names a command's help lists under OPTIONS (without -h, --help).
    static func helpOptions(_ command: String) async throws -> Set<String> {
        let help = try await CLI.run([command, "--help"])
        let lines = help.out.split(separator: "\n", omittingEmptySubsequences: false)
        let section = lines.drop { !$0.hasPrefix("OPTIONS:") }.dropFirst().prefix { !$0.isEmpty }
        return Set(
            section.compactMap { line -> String? in
                guard line.hasPrefix("  --") else { return nil }
                return String(line.dropFirst(2).prefix { $0 != " " })
            })
    }

    @Test("each command's help lists exactly the options its parser knows")
    func helpMatchesParser() async throws {
        let commands = try await Self.commands()
        #expect(commands.count >= 11, "\(commands)")
        for command in commands {
            let listed = try await Self.helpOptions(command)
            let bogus = try await CLI.run([command, "--no-such-option"])
            #expect(bogus.status == 64, "\(bogus)")
            // "unknown option '--no-such-option' (known: --a, --b)"
            let known = bogus.err.components(separatedBy: "(known: ").dropFirst().first?.prefix { $0 != ")" } ?? ""
            let parsed = Set(known.components(separatedBy: ", ").filter { !$0.isEmpty })
            #expect(parsed == listed, "\(command): the parser knows \(parsed.sorted()), the help lists \(listed.sorted())")
        }
    }

    @Test("help shows each default once, from the declaration: serve's listen address and the library's limits")
    func defaultsInHelp() async throws {
        let help = try await CLI.run(["serve", "--help"])
        // The listen address's sentence-ending help gets a sentence.
        #expect(help.out.contains("Default: 127.0.0.1:8080."), "\(help)")
        for expected in ["(default: 256)", "(default: 128)", "(default: 64M)", "(default: 256G)", "(default: 86400)", "(default: text)"] {
            #expect(help.out.contains(expected), "missing \(expected)\n\(help)")
        }
        #expect(help.out.contains("[--allow-origin PATTERN]...") && help.out.contains("(repeatable)"), "\(help)")
        let write = try await CLI.run(["write", "--help"])
        #expect(write.out.contains("USAGE: sparsecache write <file> --offset N [--size TOTAL]"), "\(write)")
        #expect(write.out.contains("(required)") && write.out.contains("(default: 64K)"), "\(write)")
    }

    @Test("--generate-completion-script bash passes bash -n and completes commands, options and their values")
    func bashCompletion() async throws {
        let script = try await CLI.run(["--generate-completion-script", "bash"])
        #expect(script.status == 0 && script.stderr.isEmpty, "\(script)")
        let scratch = try CLIScratch("completion-bash")
        let path = scratch.file("sparsecache.bash")
        try Data(script.stdout).write(to: URL(fileURLWithPath: path))
        let syntax = try await ChildProcess.run("bash", ["-n", path])
        #expect(syntax.status == 0, "bash -n: \(syntax.errorText)")

        /// What the completion function offers for these words (the last is being typed).
        func complete(_ words: [String]) async throws -> Set<String> {
            let quoted = words.map { "'\($0)'" }.joined(separator: " ")
            let program =
                "source '\(path)'; COMP_WORDS=(sparsecache \(quoted)); COMP_CWORD=\(words.count); _sparsecache; printf '%s\\n' \"${COMPREPLY[@]}\""
            let result = try await ChildProcess.run("bash", ["-c", program])
            #expect(result.status == 0, "\(words): \(result.errorText)")
            return Set(result.text.split(separator: "\n").map(String.init))
        }
        #expect(try await complete(["se"]) == ["serve"])
        #expect(try await complete(["--generate-completion-script", ""]) == ["bash", "zsh", "fish"])
        #expect(try await complete(["serve", "--log-format", ""]) == ["text", "json"])
        #expect(try await complete(["verify", "--re"]) == ["--repair"])
        for command in try await Self.commands() {
            let offered = try await complete([command, "--"])
            let listed = try await Self.helpOptions(command)
            #expect(offered == listed.union(["--help"]), "\(command): completion offers \(offered.sorted()), help lists \(listed.sorted())")
        }
    }

    @Test("--generate-completion-script zsh and fish: made from the same declarations; they parse when the shell is installed")
    func zshAndFishCompletion() async throws {
        let zsh = try await CLI.run(["--generate-completion-script=zsh"])
        #expect(zsh.status == 0 && zsh.out.hasPrefix("#compdef sparsecache"), "\(zsh)")
        let fish = try await CLI.run(["--generate-completion-script", "fish"])
        #expect(fish.status == 0 && fish.out.contains("complete -c sparsecache"), "\(fish)")
        for option in try await Self.helpOptions("serve") {
            #expect(zsh.out.contains("'\(option)") || zsh.out.contains("'*\(option)"), "zsh lacks \(option)")
            #expect(fish.out.contains("-l \(option.dropFirst(2)) "), "fish lacks \(option)")
        }
        let scratch = try CLIScratch("completion-shells")
        for (shell, text) in [("zsh", zsh.stdout), ("fish", fish.stdout)] {
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/\(shell)") else { continue }
            let path = scratch.file("sparsecache.\(shell)")
            try Data(text).write(to: URL(fileURLWithPath: path))
            let syntax = try await ChildProcess.run(shell, ["-n", path])
            #expect(syntax.status == 0, "\(shell) -n: \(syntax.errorText)")
        }
        for bad in [["--generate-completion-script"], ["--generate-completion-script", "tcsh"]] {
            let result = try await CLI.run(bad)
            #expect(result.status == 64 && result.stdout.isEmpty && result.err.contains("bash, zsh, fish"), "\(result)")
        }
    }

    @Test("docs/sparsecache.1 is what --generate-manual prints")
    func manualIsCurrent() async throws {
        let manual = try await CLI.run(["--generate-manual"])
        #expect(manual.status == 0 && manual.out.hasPrefix(".TH SPARSECACHE 1"), "\(manual)")
        var root = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { root.deleteLastPathComponent() }
        let stored = try String(contentsOf: root.appendingPathComponent("docs/sparsecache.1"), encoding: .utf8)
        #expect(stored == manual.out, "docs/sparsecache.1 is stale: run 'sparsecache --generate-manual > docs/sparsecache.1'")
        for command in try await Self.commands() {
            #expect(manual.out.contains(".SS \"sparsecache \(command)\""), "the manual lacks \(command)")
        }
    }
}
