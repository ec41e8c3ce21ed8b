// `sparsecache serve` as a child process on a free loopback port, for the suites of every
// layer that test the built program.
import Foundation
import LoopbackOrigins

package enum ServeProcess {
    /// Starts `sparsecache serve` on a free port and waits until it listens.
    package static func start(cacheDir: String, origin: URL?, extra: [String] = []) async throws -> (RunningCLI, String) {
        let port = try Loopback.freePort()
        var arguments = ["serve", "--cache-dir", cacheDir, "--listen", "127.0.0.1:\(port)"] + extra
        if let origin { arguments += ["--origin", origin.absoluteString] }
        let running = try await CLI.start(arguments)
        do {
            try await Loopback.waitUntilListening(port: port, process: running.process)
        } catch {
            // What the server wrote names the problem; the status alone did not (a start that
            // failed once in a full run with 74, "cannot listen or I/O error").
            running.kill()
            let said = (try? await running.finish()).map { String(decoding: $0.stderr, as: UTF8.self) } ?? "(not read)"
            throw CLIFailure("\(error); the server's standard error: \(said)")
        }
        return (running, "http://127.0.0.1:\(port)")
    }

    /// VmRSS of `pid` in KiB (0 if unreadable).
    package static func residentKiB(_ pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
}
