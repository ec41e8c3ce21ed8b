// The size of the library's public API (docs/LIBRARY.md, "Products"), counted from the sources
// of every library module: it stays within a budget, so what users do not call stays `package`
// or internal.
import Foundation
import Testing
import TestSupport

@Suite("public API: the library modules stay within their budget of public declarations")
struct PublicAPITests {
    /// At most this many public declarations across the library modules.
    static let budget = 500

    static let root: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// Directories of Sources/ that build executables, not library modules.
    static let executables: Set = ["SparseCacheCLI", "sparsecache-stress"]

    /// Public declarations per library module (every directory of Sources/ but the executables).
    static func countsByModule() throws -> [String: Int] {
        let sources = root + "/Sources"
        var counts: [String: Int] = [:]
        for module in try FileManager.default.contentsOfDirectory(atPath: sources) where !executables.contains(module) {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: sources + "/" + module, isDirectory: &isDirectory), isDirectory.boolValue
            else { continue }
            let files = FileManager.default.enumerator(atPath: sources + "/" + module)?.compactMap { $0 as? String } ?? []
            counts[module] = try files.filter { $0.hasSuffix(".swift") }.reduce(0) { total, file in
                total + PublicDeclarations.count(in: try String(contentsOfFile: "\(sources)/\(module)/\(file)", encoding: .utf8))
            }
        }
        return counts
    }

    @Test("the library modules declare at most 500 public symbols")
    func withinBudget() throws {
        let counts = try Self.countsByModule()
        let total = counts.values.reduce(0, +)
        let table = counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        #expect(counts.count >= 5, "library modules found: \(table)")
        #expect(total <= Self.budget, "\(total) public declarations (\(table)); the budget is \(Self.budget)")
    }

    @Test("the counter counts declarations, enum cases and protocol requirements, not SPI or comments")
    func counter() {
        let source = """
            /// public var notCounted
            public struct Options: Sendable {
                public var host = "{"
                package var hidden = 0
                @TaskLocal public static var current = 1
                nonisolated(nonsending) public func write() async {}
                public init() {}
            }
            public enum Kind: String {
                case one, two(Int, String)
                indirect case three
                func helper() {}
            }
            public protocol Source {
                var key: String { get }
                func fetch() async throws
                associatedtype Item
            }
            enum Internal { case a, b }
            @_spi(Locking) public struct Hidden {
                public init() {}
            }
            """
        // Options, host, current, write, init; Kind and its three cases; Source and its three
        // requirements.
        #expect(PublicDeclarations.count(in: source) == 13)
    }
}

/// Counts what the compiler's symbol graph lists at `public` access from one source file,
/// without building it: each `public` or `open` declaration, each case of a public enum, each
/// requirement of a public protocol. SPI (`@_spi`) is not public API; synthesized members
/// (Equatable's `==`, memberwise initializers) are not declared, so not counted.
enum PublicDeclarations {
    static func count(in source: String) -> Int {
        let declaration = #/^\s*(@[A-Za-z_]+(\([^)]*\))?\s+)*((nonisolated|final|override|convenience|static|mutating|required)(\([^)]*\))?\s+)*(public|open)\s/#
        let enumCase = #/^\s*(indirect\s+)?case\s/#
        let requirement = #/^\s*(static\s+|mutating\s+)*(func|var|init|subscript|associatedtype)\b/#
        var count = 0
        var depth = 0
        // The depth inside a public enum or protocol whose direct members count, and which.
        var scopes: [(depth: Int, isProtocol: Bool)] = []
        // The depth inside an SPI type, where nothing counts.
        var spiDepth: Int?
        for rawLine in source.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = stripped(rawLine)
            let trimmed = line.drop { $0 == " " }
            if trimmed.hasPrefix("//") { continue }
            if let spi = spiDepth, depth >= spi {
                for character in line {
                    if character == "{" { depth += 1 }
                    if character == "}" { depth -= 1 }
                }
                if depth < spi { spiDepth = nil }
                continue
            }
            if let scope = scopes.last, depth == scope.depth {
                if !scope.isProtocol, line.contains(enumCase) {
                    count += caseCount(line)
                } else if scope.isProtocol, line.contains(requirement) {
                    count += 1
                }
            }
            if line.contains("@_spi("), line.contains(#/\b(struct|class|enum|actor|extension)\s/#) {
                spiDepth = depth + 1
            } else if line.contains(declaration), !line.contains("@_spi(") {
                count += 1
                if line.contains(#/\b(enum|protocol)\s/#) {
                    scopes.append((depth + 1, line.contains(#/\bprotocol\s/#)))
                }
            }
            for character in line {
                if character == "{" { depth += 1 }
                if character == "}" {
                    depth -= 1
                    if let scope = scopes.last, depth < scope.depth { scopes.removeLast() }
                }
            }
        }
        return count
    }

    /// The line without its string literals and trailing comment, so their braces and words do
    /// not count.
    static func stripped(_ line: Substring) -> String {
        var result = ""
        var inString = false
        var escaped = false
        var previous: Character = " "
        for character in line {
            if inString {
                if escaped { escaped = false } else if character == "\\" { escaped = true } else if character == "\"" { inString = false }
                continue
            }
            if character == "/", previous == "/" {
                result.removeLast()
                break
            }
            if character == "\"" { inString = true } else { result.append(character) }
            previous = character
        }
        return result
    }

    /// `case a, b(Int, String)` declares two cases: the commas outside parentheses, plus one.
    static func caseCount(_ line: String) -> Int {
        var parentheses = 0
        var cases = 1
        for character in line {
            if character == "(" { parentheses += 1 }
            if character == ")" { parentheses -= 1 }
            if character == ",", parentheses == 0 { cases += 1 }
        }
        return cases
    }
}
