import SparseCacheEngine
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child started with posix_spawn, its output in temporary files (a pipe could fill), its
/// signal mask cleared (dispatch threads block signals, and a child inherits the mask).
final class ChildSpawn: Sendable {
    let pid: pid_t
    private let directory: String
    private let killed = Atomic<Bool>(false)

    init(executable: String, arguments: [String], environment: [String: String]) throws {
        var template = Array("/tmp/sparsecache-child-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw SparseCacheError(.io, operation: "create directory", path: "/tmp/sparsecache-child-*", errno: errno)
        }
        directory = String(cString: made)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, directory + "/out", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, directory + "/err", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var merged: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "=") { merged[String(text[..<equals])] = String(text[text.index(after: equals)...]) }
            entry += 1
        }
        for (key, value) in environment { merged[key] = value }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            rmdir(directory)
            throw SparseCacheError(.io, operation: "start child", path: executable, errno: result)
        }
        self.pid = pid
    }

    /// Blocks until the child ends: its exit status (128 + signal when a signal ended it).
    func wait() -> (status: Int32, signal: Int32?) {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signal = status & 0x7f
        if signal != 0 { return (128 + signal, signal) }
        return ((status >> 8) & 0xff, nil)
    }

    func kill() {
        killed.store(true, ordering: .relaxed)
        _ = Glibc.kill(pid, SIGKILL)
    }

    var wasKilled: Bool { killed.load(ordering: .relaxed) }

    func readOutput() -> String { read(directory + "/out") }
    func readErrors() -> String { read(directory + "/err") }

    private func read(_ path: String) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes += chunk[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    func removeFiles() {
        unlink(directory + "/out")
        unlink(directory + "/err")
        rmdir(directory)
    }
}
