import Foundation
import SparseCache

/// The default cache directory: `$XDG_CACHE_HOME/sparsecache`, else `~/.cache/sparsecache`.
func defaultCacheDirectory() -> String {
    let environment = ProcessInfo.processInfo.environment
    if let xdg = environment["XDG_CACHE_HOME"], !xdg.isEmpty { return xdg + "/sparsecache" }
    return (environment["HOME"] ?? NSHomeDirectory()) + "/.cache/sparsecache"
}

/// Opens a store for a maintenance command: no budget enforcement on open. The directory
/// must already be a cache directory: a mistyped `--cache-dir` is an error (exit 66), never
/// a new empty cache.
func withStore<T>(_ directory: String, _ body: (SparseStore) async throws -> T) async throws -> T {
    try SparseStore.requireCacheDirectory(directory, operation: "open cache directory")
    let store = try await SparseStore.open(directory: directory, options: StoreOptions(budget: .max))
    do {
        let result = try await body(store)
        try await store.close()
        return result
    } catch {
        try? await store.close()
        throw error
    }
}

/// For the commands that fill a cache (fetch, serve), which create a missing cache
/// directory: says so on stderr, so a mistyped `--cache-dir` does not pass unnoticed.
func noteIfNewCacheDirectory(_ directory: String, command: String) {
    if (try? FileSystem.exists(directory)) == false {
        Output.error("sparsecache \(command): creating the cache directory '\(directory)' (it did not exist)")
    }
}

/// `sparsecache ls [--cache-dir DIR] [--json]`
enum ListCommand: Command {
    static let name = "ls"
    static let abstract = "List the resources of a cache directory"
    static let overview = """
        List the resources in a cache directory, each printed as it is read.

        While `sparsecache serve` runs on the directory, the list comes from the server (its
        admin listener, GET /resources): last accesses as of now. Otherwise the directory is
        read without taking its lock: lengths and present bytes from each resource's index
        (the truth, also after a crash), the last access from the catalog; small objects
        from their logs' hint files. FILE is the data file in DIR/resources (its index is
        FILE.scidx), or objects/LOG@OFFSET for a small object. The order is the store's (sparse
        resources, then small objects), not by age.
        """
    static let json = CLIOption.json(
        "Print JSON, one entry per line as read: directory, budget, entries (key, name, length, presentBytes, "
            + "allocatedBytes, lastAccess in ns since 1970, pinnedPrefix, isOpen), then allocatedBytes, presentBytes")
    static let options = [CLIOption.cacheDirectory, json]

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let directory = arguments.value(.cacheDirectory) ?? defaultCacheDirectory()
        let printer = ListPrinter(directory: directory, json: arguments.has(json))
        if let admin = RunningServer.address(in: directory, file: RunningServer.adminFile) {
            let name = "\(admin.host):\(admin.port)"
            do {
                try await RunningServer.stream("/resources", at: admin) { bytes in
                    if !printer.started { printer.begin(server: name) }
                    try printer.addServerBytes(bytes)
                }
                printer.finish()
                return ExitStatus.ok
            } catch where !printer.started {
                Output.error("sparsecache ls: the server at \(name) did not answer (\(error)); reading the directory instead")
            }
        }
        // Entries are printed as they are read: a million resources never sit in memory as a list.
        try await BlockingExecutor.cliIO.run {
            try SparseStore.requireCacheDirectory(directory, operation: "inspect store")
            printer.begin(server: nil)
            try SparseStore.forEachEntry(directory: directory) { printer.add($0) }
            printer.finish()
        }
        return ExitStatus.ok
    }
}

/// `sparsecache evict [--cache-dir DIR] (--key K | --to-size SIZE)`
enum EvictCommand: Command {
    static let name = "evict"
    static let abstract = "Evict resources from a cache directory (by key or down to a size)"
    static let overview = """
        Evict resources from a cache directory.

        With --key, removes that resource. With --to-size, removes least-recently-used
        resources (keeping pinned prefixes first) until the directory takes at most SIZE on
        disk. Takes the directory's lock: fails with exit 75 while another process owns it,
        except while `sparsecache serve` runs on the directory: the server is asked to drop
        the key (a PURGE over loopback) or to evict (its admin listener), with the same effect
        while it keeps serving. A key ending in `*` drops every key with that prefix (through
        the server only).
        An unknown key or a directory that is not a cache directory is an error (exit 66).
        """
    static let usage = ["evict [--cache-dir DIR] (--key K | --to-size SIZE)"]
    static let key = CLIOption.value("--key", "K", help: "Remove the resource with this key")
    static let toSize = CLIOption.value("--to-size", "SIZE", help: "Evict down to SIZE bytes on disk (K, M, G, T suffixes)")
    static let options = [CLIOption.cacheDirectory, key, toSize]

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let directory = arguments.value(.cacheDirectory) ?? defaultCacheDirectory()
        let key = arguments.value(Self.key)
        let size = try arguments.size(toSize)
        guard (key == nil) != (size == nil) else { throw UsageError("give exactly one of \(Self.key.name) and \(toSize.name)") }
        let evicted: [String]
        do {
            evicted = try await withStore(directory) { store in
                if let key {
                    try await store.remove(key: key)
                    return [key]
                }
                return try await store.evict(toSize: size!)
            }
        } catch let error as SparseCacheError where error.code == .locked && key == nil {
            // A running `serve` owns the directory: its admin listener evicts.
            guard let size, let admin = RunningServer.address(in: directory, file: RunningServer.adminFile) else { throw error }
            let body = try await RunningServer.post("/evict?bytes=\(size)", at: admin)
            let answer = try JSONDecoder().decode(AdminService.Evicted.self, from: Data(body))
            for key in answer.evicted { Output.print("evicted: \(key)") }
            Output.print(
                "\(answer.evicted.count) evicted through the running server; \(answer.resources) resources remain, "
                    + "\(SizeParser.describe(answer.allocatedBytes)) on disk")
            return ExitStatus.ok
        } catch let error as SparseCacheError where error.code == .locked && key != nil {
            // A running `serve` owns the directory: it drops the key itself (PURGE).
            guard let key, let address = RunningServer.address(in: directory) else { throw error }
            let server = address.host.contains(":") ? "[\(address.host)]:\(address.port)" : "\(address.host):\(address.port)"
            let (status, message) = try await RunningServer.purge(key, at: address)
            guard (200...299).contains(status) else {
                throw SparseCacheError(
                    status == 404 ? .notFound : .io, operation: "evict", path: directory,
                    detail: "the server at \(server) answered \(status): \(message)")
            }
            Output.print("evicted through the running server at \(server): \(message)")
            return ExitStatus.ok
        }
        let remaining = try await SparseStore.inspect(directory: directory)
        for key in evicted { Output.print("evicted: \(key)") }
        Output.print(
            "\(evicted.count) evicted; \(remaining.entries.count) resources remain, \(SizeParser.describe(remaining.allocatedBytes)) on disk"
        )
        return ExitStatus.ok
    }
}

/// `sparsecache clear [--cache-dir DIR]`
enum ClearCommand: Command {
    static let name = "clear"
    static let abstract = "Remove every resource from a cache directory"
    static let overview = """
        Remove every resource from a cache directory.

        Takes the directory's lock: fails with exit 75 while a cache or proxy owns it. Files in
        the directory that sparsecache did not make are left alone. A directory that is not a
        cache directory is an error (exit 66).
        """
    static let options = [CLIOption.cacheDirectory]

    static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let directory = arguments.value(.cacheDirectory) ?? defaultCacheDirectory()
        let removed = try await withStore(directory) { try await $0.clear() }
        Output.print("removed \(removed.count) resources from \(directory)")
        return ExitStatus.ok
    }
}
