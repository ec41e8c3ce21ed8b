// The layering of docs/ARCHITECTURE.md, checked against the package as built: the target graph
// SwiftPM reports, the imports in every source file, and where HTTP wire handling lives.
import Foundation
import LoopbackOrigins
import Testing
import TestSupport

@Suite("architecture: the layers of docs/ARCHITECTURE.md")
struct ArchitectureTests {
    static let root: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// Targets beside the stack: test support, the benchmark, the crash writer and the tests. No
    /// layer may use them; the test targets are held to their layer by ``testTargetLayers``.
    static let besideTheStack = Set([
        "SeededRandom", "LoopbackOrigins", "TestSupport", "StoreTestSupport", "SparseCacheBench", "SparseCacheStress", "SparseCacheCrashWorker",
    ]).union(testTargetLayers.keys)

    /// The layer each test target tests: it may depend on that layer, the layers that layer
    /// depends on, the testing product and the support targets, and on nothing above.
    static let testTargetLayers: [String: String] = [
        "EngineTests": "SparseCacheEngine", "StoreTests": "SparseCacheStore", "HTTPTests": "SparseHTTP", "CacheTests": "HTTPCache",
        "IntegrationTests": "SparseCacheCLI",
    ]

    /// The layer each shared test-support target sits at: a test target may use those at its
    /// layer or below.
    static let testSupportLayers: [String: String] = ["TestSupport": "SparseCacheEngine", "StoreTestSupport": "SparseCacheStore"]

    /// Tools beside the stack any test or support target may use.
    static let testTools: Set = ["SeededRandom", "LoopbackOrigins"]

    /// The module names between the layer markers of docs/ARCHITECTURE.md, bottom first.
    static func documentedLayers() throws -> [String] {
        let text = try String(contentsOfFile: root + "/docs/ARCHITECTURE.md", encoding: .utf8)
        guard let begin = text.range(of: "<!-- layers:begin -->"), let end = text.range(of: "<!-- layers:end -->") else {
            throw LoopbackError("docs/ARCHITECTURE.md has no layers:begin / layers:end markers")
        }
        return text[begin.upperBound..<end.lowerBound].split(separator: "\n").compactMap { line in
            guard let first = line.first, first.isLetter else { return nil }
            return line.split(separator: " ").first.map(String.init)
        }
    }

    /// What every target depends on, from `swift package describe --type json` (run with a
    /// scratch path of its own, so it never waits for the build this test runs in).
    static func describedTargets() async throws -> [String: [String]] {
        let scratch = NSTemporaryDirectory() + "sparsecache-describe-\(getpid())-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let result = try await ChildProcess.run(
            "swift", ["package", "--package-path", root, "--scratch-path", scratch, "describe", "--type", "json"])
        guard result.status == 0 else { throw LoopbackError("swift package describe failed (\(result.status)): \(result.errorText)") }
        guard let package = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any],
            let targets = package["targets"] as? [[String: Any]]
        else { throw LoopbackError("swift package describe printed no targets") }
        var graph: [String: [String]] = [:]
        for target in targets {
            guard let name = target["name"] as? String else { continue }
            graph[name] = target["target_dependencies"] as? [String] ?? []
        }
        return graph
    }

    /// Every target depends only on layers below it (docs/ARCHITECTURE.md: imports only go down), and
    /// every target is either a documented layer or beside the stack.
    static func layeringProblems(graph: [String: [String]], layers: [String]) -> [String] {
        var problems: [String] = []
        for (target, dependencies) in graph.sorted(by: { $0.key < $1.key }) {
            if besideTheStack.contains(target) {
                continue
            }
            guard let level = layers.firstIndex(of: target) else {
                problems.append("target \(target) is not a layer of docs/ARCHITECTURE.md")
                continue
            }
            for dependency in dependencies {
                if besideTheStack.contains(dependency) {
                    problems.append("\(target) depends on \(dependency), which is test or tool support")
                } else if let below = layers.firstIndex(of: dependency), below >= level {
                    problems.append("\(target) depends on \(dependency), which is not below it")
                }
            }
        }
        return problems
    }

    @Test("the package's target graph only goes down the documented layers")
    func targetGraph() async throws {
        let layers = try Self.documentedLayers()
        #expect(
            layers == [
                "CShim", "SparseCacheBase", "SparseCacheEngine", "SparseCacheStore", "SparseHTTP", "HTTPCache", "SparseCache",
                "SparseCacheTesting", "SparseCacheCLI",
            ])
        let graph = try await Self.describedTargets()
        #expect(Set(layers).isSubset(of: graph.keys), "every documented layer is a target: \(graph.keys.sorted())")
        let problems = Self.layeringProblems(graph: graph, layers: layers)
        #expect(problems.isEmpty, "\(problems)")
        #expect(Self.testLayeringProblems(graph: graph).isEmpty, "\(Self.testLayeringProblems(graph: graph))")
        let testTargets = graph.keys.filter { $0.hasSuffix("Tests") }
        #expect(Set(testTargets) == Set(Self.testTargetLayers.keys), "every test target has a layer: \(testTargets.sorted())")
    }

    /// Everything `target` reaches through its dependencies, itself excluded.
    static func reachable(from target: String, graph: [String: [String]]) -> Set<String> {
        var seen: Set<String> = []
        var work = graph[target] ?? []
        while let next = work.popLast() {
            if seen.insert(next).inserted { work += graph[next] ?? [] }
        }
        return seen
    }

    /// Test targets reach only their layer and what it stands on (beside the testing product,
    /// the test tools and the support targets of that level): the engine's tests build without
    /// HTTP, the HTTP tests without the cache. Support targets are held to their own level.
    static func testLayeringProblems(graph: [String: [String]]) -> [String] {
        var problems: [String] = []
        func allowed(atOrBelow layer: String) -> Set<String> {
            var layers = reachable(from: layer, graph: graph).union([layer])
            layers.formUnion(reachable(from: "SparseCacheTesting", graph: graph).union(["SparseCacheTesting"]))
            layers.formUnion(testTools)
            for (support, level) in testSupportLayers where layers.contains(level) || reachable(from: layer, graph: graph).contains(level) {
                layers.insert(support)
            }
            return layers
        }
        let held = testTargetLayers.merging(testSupportLayers) { $1 }
        for (target, layer) in held.sorted(by: { $0.key < $1.key }) {
            guard graph[target] != nil else { continue }
            let permitted = allowed(atOrBelow: layer)
            for reached in reachable(from: target, graph: graph).sorted() where !permitted.contains(reached) {
                problems.append("\(target) reaches \(reached), which is above \(layer)")
            }
        }
        return problems
    }

    @Test("the check itself: a dependency on a layer above, or on test support, is caught")
    func checkCatchesUpwardDependencies() throws {
        let layers = ["CShim", "SparseCacheEngine", "SparseCacheStore", "SparseHTTP", "HTTPCache"]
        let good = ["SparseCacheEngine": ["CShim"], "SparseHTTP": ["SparseCacheEngine", "CShim"], "CacheTests": ["HTTPCache"]]
        #expect(Self.layeringProblems(graph: good, layers: layers).isEmpty)
        #expect(
            Self.layeringProblems(graph: ["SparseCacheStore": ["SparseHTTP"]], layers: layers) == [
                "SparseCacheStore depends on SparseHTTP, which is not below it"
            ])
        #expect(Self.layeringProblems(graph: ["SparseHTTP": ["SparseHTTP"]], layers: layers).count == 1)
        #expect(
            Self.layeringProblems(graph: ["HTTPCache": ["SeededRandom"]], layers: layers) == [
                "HTTPCache depends on SeededRandom, which is test or tool support"
            ])
        #expect(
            Self.layeringProblems(graph: ["Playlists": []], layers: layers) == ["target Playlists is not a layer of docs/ARCHITECTURE.md"])
        let stack = ["SparseCacheEngine": ["CShim"], "SparseHTTP": ["SparseCacheEngine"], "HTTPCache": ["SparseHTTP"], "TestSupport": ["CShim"]]
        #expect(Self.testLayeringProblems(graph: stack.merging(["EngineTests": ["TestSupport", "SparseCacheEngine"]]) { $1 }).isEmpty)
        #expect(
            Self.testLayeringProblems(graph: stack.merging(["EngineTests": ["TestSupport", "HTTPCache"]]) { $1 }) == [
                "EngineTests reaches HTTPCache, which is above SparseCacheEngine",
                "EngineTests reaches SparseHTTP, which is above SparseCacheEngine",
            ])
        #expect(
            Self.testLayeringProblems(graph: stack.merging(["TestSupport": ["SparseHTTP"]]) { $1 }) == [
                "TestSupport reaches SparseHTTP, which is above SparseCacheEngine"
            ])
    }

    /// Source files of each module under Sources/, by module folder.
    static func sourceFiles() throws -> [(module: String, path: String)] {
        let sources = root + "/Sources"
        var files: [(String, String)] = []
        for module in try FileManager.default.contentsOfDirectory(atPath: sources) {
            guard let walker = FileManager.default.enumerator(atPath: sources + "/" + module) else { continue }
            for case let relative as String in walker where relative.hasSuffix(".swift") {
                files.append((module, sources + "/" + module + "/" + relative))
            }
        }
        return files
    }

    @Test("imports in every source file only go down the layers (SwiftPM can let an undeclared import through)")
    func importsGoDown() throws {
        let layers = try Self.documentedLayers()
        var problems: [String] = []
        let files = try Self.sourceFiles()
        #expect(files.count > 50)
        for (module, path) in files {
            guard let level = layers.firstIndex(of: module) else { continue }
            for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
                let words = line.split(separator: " ")
                guard let keyword = words.firstIndex(where: { $0 == "import" }), keyword + 1 < words.count,
                    words[..<keyword].allSatisfy({ $0.hasPrefix("@") })
                else { continue }
                let imported = String(words[keyword + 1])
                if let below = layers.firstIndex(of: imported), below >= level {
                    problems.append("\(path.dropFirst(Self.root.count + 1)) (\(module)) imports \(imported)")
                }
            }
        }
        #expect(problems.isEmpty, "\(problems)")
    }

    @Test("the test hooks are public only in SparseCacheTesting: `import SparseCache` does not bring them")
    func testHooksOnlyInTheTestingProduct() throws {
        let hooks = try Regex(#"public\s+(final\s+)?(enum|struct|class|func)\s+(FaultInjection|FaultRule|FaultOperation|PowerLoss|FaultScope|CrashHarness|CrashWorker|withFaultScope)\b"#)
        var leaked: [String] = []
        var declared: Set<String> = []
        for (module, path) in try Self.sourceFiles() {
            let text = try String(contentsOfFile: path, encoding: .utf8)
            guard text.contains(hooks) else { continue }
            if module == "SparseCacheTesting" { declared.insert(String(path.split(separator: "/").last!)) } else { leaked.append(String(path.dropFirst(Self.root.count + 1))) }
        }
        #expect(leaked.isEmpty, "public test hooks outside SparseCacheTesting: \(leaked)")
        #expect(declared.isSuperset(of: ["FaultInjection.swift", "FaultRule.swift", "PowerLoss.swift", "FaultScope.swift", "CrashHarness.swift"]))
        let umbrella = try String(contentsOfFile: Self.root + "/Sources/SparseCache/SparseCache.swift", encoding: .utf8)
        #expect(!umbrella.contains("SparseCacheTesting"), "the umbrella module re-exports the testing product")
    }

    @Test("HTTP wire handling (CRLF framing, header-field syntax) lives only in SparseHTTP")
    func wireHandlingOnlyInTheHTTPModule() throws {
        // What wire code looks like in Swift source: CRLF in a literal, or the CR and LF bytes.
        let signs = ["\\r\\n", "0x0D", "0x0d", "13, 10", "UInt8(ascii: \"\\r\")", "UInt8(ascii: \":\")"]
        var found: [String] = []
        for (module, path) in try Self.sourceFiles() where module != "SparseHTTP" {
            let text = try String(contentsOfFile: path, encoding: .utf8)
            for sign in signs where text.contains(sign) {
                found.append("\(path.dropFirst(Self.root.count + 1)): \(sign)")
            }
        }
        #expect(found.isEmpty, "\(found)")
        // The signs are real: the HTTP module has them.
        let http = try Self.sourceFiles().filter { $0.module == "SparseHTTP" }.map { try String(contentsOfFile: $0.path, encoding: .utf8) }
        #expect(http.contains { $0.contains("\\r\\n") } && http.contains { $0.contains("UInt8(ascii: \":\")") })
    }

    @Test("every lock is a Lock, which tells ThreadSanitizer the order it makes: a bare Mutex shows up as false races in a sanitized run")
    func locksAreVisibleToThreadSanitizer() throws {
        let tests = Self.root + "/Tests"
        let testFiles = (FileManager.default.enumerator(atPath: tests)?.allObjects as? [String] ?? [])
            .filter { $0.hasSuffix(".swift") && !$0.hasPrefix("LoopbackOrigins/") && !$0.hasPrefix("SeededRandom/") }
            .map { tests + "/" + $0 }  // the two tool targets stand on no layer, so Lock is not theirs to use
        #expect(testFiles.count > 80)
        let files = try Self.sourceFiles().map(\.path) + testFiles
        let made = try Regex(#"\bMutex\s*[<(]"#)
        var bare: [String] = []
        for path in files where !path.hasSuffix("/IO/Lock.swift") {
            if try String(contentsOfFile: path, encoding: .utf8).contains(made) { bare.append(String(path.dropFirst(Self.root.count + 1))) }
        }
        #expect(bare.isEmpty, "Mutex made directly in \(bare): use Lock")
        // The pattern is real: Lock itself makes one.
        let lock = try String(contentsOfFile: Self.root + "/Sources/SparseCacheBase/IO/Lock.swift", encoding: .utf8)
        #expect(lock.contains(made))
    }
}
