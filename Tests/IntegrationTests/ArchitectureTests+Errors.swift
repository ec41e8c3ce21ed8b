// The error layering as the sources show it: SparseHTTP imports nothing of the engine, and no
// code decides by an error's text (docs/ARCHITECTURE.md, "Errors"). The conversions between the
// layers' errors are tested in CacheTests' ErrorLayerTests.
import Foundation
import Testing
import TestSupport

extension ArchitectureTests {
    @Test("SparseHTTP imports no engine module, in its sources or in the package graph")
    func httpImportsNoEngine() async throws {
        let engine: Set = ["SparseCacheEngine", "SparseCacheStore"]
        var found: [String] = []
        for (module, path) in try ArchitectureTests.sourceFiles() where module == "SparseHTTP" {
            for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
                let words = line.split(separator: " ")
                guard let keyword = words.firstIndex(of: "import"), keyword + 1 < words.count, words[..<keyword].allSatisfy({ $0.hasPrefix("@") })
                else { continue }
                if engine.contains(String(words[keyword + 1])) { found.append("\(path.split(separator: "/").last!): \(line)") }
            }
        }
        #expect(found.isEmpty, "\(found)")
        let graph = try await ArchitectureTests.describedTargets()
        var below: Set<String> = []
        var next = graph["SparseHTTP"] ?? []
        while let target = next.popLast() {
            if below.insert(target).inserted { next += graph[target] ?? [] }
        }
        #expect(below.isDisjoint(with: engine), "SparseHTTP depends on \(below.sorted())")
        #expect(below.contains("SparseCacheBase"))
    }

    @Test("no error is matched by its text: no source reads an error's detail or description to decide")
    func noTextMatching() throws {
        // Reading the text (`detail.hasPrefix(...)`) or comparing it, or the operation's name,
        // with a literal (`error.operation == "fsync"`).
        let matching = try Regex(
            #"(^|[^A-Za-z0-9_])((detail|description|localizedDescription)\??\s*\.\s*(hasPrefix|hasSuffix|contains|starts)\s*\(|(detail|operation|description)\??\s*(==|!=)\s*")"#)
        var found: [String] = []
        for (_, path) in try ArchitectureTests.sourceFiles() {
            for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
                let code = line.trimmingCharacters(in: .whitespaces)
                if code.hasPrefix("//") { continue }
                if code.contains(matching) { found.append("\(path.split(separator: "/").suffix(2).joined(separator: "/")): \(code)") }
            }
        }
        #expect(found.isEmpty, "\(found)")
    }
}
