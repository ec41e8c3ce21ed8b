/// A positional argument of a command.
struct CLIArgument: Sendable, Hashable {
    /// Without brackets: "file".
    let name: String
    let help: String
    /// Whether it may be left out (only the last ones may).
    var isOptional = false
    var completion: CLIOption.Completion = .file
}
