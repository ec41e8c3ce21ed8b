// Shared by the test suite and the benchmark suite: ports on 127.0.0.1 and an nginx that
// serves one directory as a single process the caller starts and kills.
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Loopback sockets, the least a local origin needs.
public enum Loopback {
    /// A port nobody uses now, below the kernel's ephemeral range and never handed out twice
    /// in this process.
    ///
    /// Not the kernel's pick for port 0: that comes from the ephemeral range, where any client
    /// connection (curl, wrk, the proxy's own fetches) may take it as its source port between
    /// this check and the server's bind, and the server then fails with "address in use" (a CI
    /// run lost a `sparsecache serve` start that way).
    public static func freePort() throws -> Int {
        let below = ephemeralRangeStart()
        for _ in 0..<500 {
            let port = Int.random(in: 10_000..<below)
            guard handedOut.withLock({ $0.insert(port).inserted }), canBind(port: port) else { continue }
            return port
        }
        throw LoopbackError("no free port between 10000 and \(below)")
    }

    private static let handedOut = Mutex<Set<Int>>([])

    /// The first port the kernel gives to outgoing connections (32768 unless configured).
    private static func ephemeralRangeStart() -> Int {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let first = text.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32768
        return max(first, 10_001)
    }

    private static func canBind(port: Int) -> Bool {
        withSocket(to: port) { fd, address, length in bind(fd, address, length) } == 0
    }

    /// Whether something accepts connections on `port`.
    public static func canConnect(port: Int) -> Bool {
        withSocket(to: port) { fd, address, length in connect(fd, address, length) } == 0
    }

    /// Calls `body` with a new TCP socket and the address 127.0.0.1:`port`, then closes the
    /// socket; -1 when no socket could be made.
    private static func withSocket(
        to port: Int, _ body: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32
    ) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -1 }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// Waits up to `timeout` for `port` to accept connections while `process` runs. Generous:
    /// in the suite's first minute every test starts its servers at once on two cores, next to
    /// the crash suites and the soak test, and a start has taken over 30 s; a server that is
    /// merely slow must not fail its test.
    public static func waitUntilListening(port: Int, process: Process, timeout: Duration = .seconds(90)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, process.isRunning {
            if canConnect(port: port) { return }
            try await Task.sleep(for: .milliseconds(25))  // (this module is below TestSupport's eventually)
        }
        let name = process.executableURL?.lastPathComponent ?? "server"
        if !process.isRunning {
            throw LoopbackError("\(name) exited with status \(process.terminationStatus) before listening on port \(port)")
        }
        throw LoopbackError("\(name) did not listen on port \(port) within \(timeout)")
    }

    /// SIGKILL and wait. A child spawned from a dispatch thread inherits that thread's blocked
    /// signals, so SIGTERM may never reach a server that does not reset its mask (Python's
    /// does not).
    public static func kill(_ process: Process) {
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return address
    }
}

/// nginx (Debian's nginx-light) as a one-process server of a directory.
public enum NginxServer {
    /// The binary, when installed.
    public static let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Writes a configuration under `work` and returns the process, not yet started. With
    /// `accessLog`, every request is logged as `METHOD URI STATUS BODY_BYTES "RANGE" CONNECTION`
    /// (nginx's connection serial number: requests on one connection share it).
    ///
    /// `locations` go into the server block, `http` before it (an `upstream`, say).
    public static func process(
        root: String, work: String, port: Int, accessLog: String?, locations: String = "", http: String = ""
    ) throws -> Process {
        guard let binary else { throw LoopbackError("nginx is not installed (apt-get install nginx-light; .ci/run does this)") }
        for folder in ["tmp", "logs"] { try FileManager.default.createDirectory(atPath: work + "/" + folder, withIntermediateDirectories: true) }
        let logging = accessLog.map { "log_format bytes '$request_method $uri $status $body_bytes_sent \"$http_range\" $connection';\n    access_log \($0) bytes;" }
            ?? "access_log off;"
        let config = """
            worker_processes 1;
            daemon off;
            master_process off;
            pid \(work)/nginx.pid;
            error_log \(work)/logs/error.log warn;
            events { worker_connections 512; }
            http {
                \(logging)
                client_body_temp_path \(work)/tmp/body;
                proxy_temp_path \(work)/tmp/proxy;
                fastcgi_temp_path \(work)/tmp/fastcgi;
                uwsgi_temp_path \(work)/tmp/uwsgi;
                scgi_temp_path \(work)/tmp/scgi;
                types { video/mp4 mp4; application/octet-stream bin; }
                default_type application/octet-stream;
                sendfile on;
                keepalive_requests 100000;
                \(http)
                server {
                    listen 127.0.0.1:\(port);
                    root \(root);
                    \(locations)
                }
            }
            """
        try config.write(toFile: work + "/nginx.conf", atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["-c", work + "/nginx.conf", "-p", work, "-e", work + "/logs/error.log"]
        return process
    }
}

public struct LoopbackError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
