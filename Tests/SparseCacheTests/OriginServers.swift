// Real HTTP origins on 127.0.0.1, started and stopped by the tests: nginx (Debian's package,
// installed by .ci/run), Python's http.server (which ignores Range), and a small origin of our
// own, in Python, that can cut connections and slow down.
import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct OriginFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A server process serving `root` on a loopback port.
final class OriginServer: @unchecked Sendable {
    // @unchecked: the process handle is only touched by start and stop, from one test.
    let root: String
    let port: Int
    let work: TemporaryDirectory
    private let process: Process
    private let logPath: String?

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }
    func url(_ name: String) -> URL { baseURL.appendingPathComponent(name) }

    private init(root: String, port: Int, work: TemporaryDirectory, process: Process, logPath: String?) {
        self.root = root
        self.port = port
        self.work = work
        self.process = process
        self.logPath = logPath
    }

    deinit { stop() }

    static let nginxBinary = ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// nginx serving `root`, logging every request's body bytes.
    static func nginx(root: String, locations: String = "") async throws -> OriginServer {
        guard let binary = nginxBinary else {
            throw OriginFailure("nginx is not installed (apt-get install nginx-light; .ci/run does this)")
        }
        let work = try TemporaryDirectory("nginx")
        let port = try freePort()
        for folder in ["tmp", "logs"] { try FileManager.default.createDirectory(atPath: work.file(folder), withIntermediateDirectories: true) }
        let log = work.file("logs/access.log")
        let config = """
            worker_processes 1;
            daemon off;
            master_process off;
            pid \(work.file("nginx.pid"));
            error_log \(work.file("logs/error.log")) warn;
            events { worker_connections 512; }
            http {
                log_format bytes '$request_method $uri $status $body_bytes_sent "$http_range"';
                access_log \(log) bytes;
                client_body_temp_path \(work.file("tmp/body"));
                proxy_temp_path \(work.file("tmp/proxy"));
                fastcgi_temp_path \(work.file("tmp/fastcgi"));
                uwsgi_temp_path \(work.file("tmp/uwsgi"));
                scgi_temp_path \(work.file("tmp/scgi"));
                types { video/mp4 mp4; application/octet-stream bin; }
                default_type application/octet-stream;
                sendfile on;
                keepalive_requests 10000;
                server {
                    listen 127.0.0.1:\(port);
                    root \(root);
                    \(locations)
                }
            }
            """
        try config.write(toFile: work.file("nginx.conf"), atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["-c", work.file("nginx.conf"), "-p", work.path, "-e", work.file("logs/error.log")]
        return try await launch(process, root: root, port: port, work: work, log: log)
    }

    /// Python's http.server: answers every GET with 200 and the whole file, whatever the Range.
    static func pythonStatic(root: String) async throws -> OriginServer {
        let work = try TemporaryDirectory("pyhttp")
        let port = try freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", root, String(port)]
        return try await launch(process, root: root, port: port, work: work, log: nil)
    }

    /// Our own origin: Range and ETag support, plus faults set per file by writing
    /// `<root>/<name>.faults` as "cut=BYTES times=N delay_ms=MS" (cut the connection after
    /// BYTES body bytes for the next N requests; sleep MS between 16 KiB chunks) or
    /// "status=503 times=N" (answer the next N requests with that status) or "stall_ms=MS"
    /// (wait before answering at all). Logs like nginx.
    static func faulty(root: String) async throws -> OriginServer {
        let work = try TemporaryDirectory("faulty")
        let port = try freePort()
        try faultyOriginScript.write(toFile: work.file("origin.py"), atomically: true, encoding: .utf8)
        let log = work.file("access.log")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", work.file("origin.py"), root, String(port), log]
        return try await launch(process, root: root, port: port, work: work, log: log)
    }

    private static func launch(_ process: Process, root: String, port: Int, work: TemporaryDirectory, log: String?) async throws -> OriginServer {
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: try touch(work.file("stdout"))))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: try touch(work.file("stderr"))))
        try process.run()
        let server = OriginServer(root: root, port: port, work: work, process: process, logPath: log)
        // Up when it accepts a connection; give up after 10 s.
        for _ in 0..<400 {
            if canConnect(port: port) { return server }
            if !process.isRunning { break }
            try await Task.sleep(for: .milliseconds(25))
        }
        let errors = (try? String(contentsOfFile: work.file("stderr"), encoding: .utf8)) ?? ""
        server.stop()
        throw OriginFailure("\(process.executableURL?.path ?? "server") did not start on port \(port): \(errors)")
    }

    private static func touch(_ path: String) throws -> String {
        guard FileManager.default.createFile(atPath: path, contents: nil) else { throw OriginFailure("cannot create '\(path)'") }
        return path
    }

    /// Kills the server. SIGKILL, because a child spawned from a dispatch thread inherits
    /// that thread's blocked signals, so SIGTERM may never reach a server that does not reset
    /// its signal mask (Python does not); nginx runs as one process here (master_process off),
    /// so nothing is left behind.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Requests logged so far: method, path, status, body bytes sent, Range header.
    func requests() -> [(path: String, status: Int, bytes: Int64, range: String)] {
        guard let logPath, let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", maxSplits: 4)
            guard fields.count >= 4, let status = Int(fields[2]), let bytes = Int64(fields[3]) else { return nil }
            let range = fields.count > 4 ? String(fields[4]).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) : ""
            return (String(fields[1]), status, bytes, range)
        }
    }

    /// Body bytes the origin sent for `name` (waits briefly for the log to catch up).
    func bytesSent(_ name: String) async -> Int64 {
        var last: Int64 = -1
        for _ in 0..<20 {
            let total = requests().filter { $0.path == "/" + name }.reduce(0) { $0 + $1.bytes }
            if total == last { return total }
            last = total
            try? await Task.sleep(for: .milliseconds(50))
        }
        return last
    }

    /// A port nobody listens on now (the kernel's pick for port 0).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw OriginFailure("socket: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw OriginFailure("bind: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}

/// The fault-injecting origin (see ``OriginServer/faulty(root:)``).
private let faultyOriginScript = #"""
import os, sys, time, threading, email.utils
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

root, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lock = threading.RLock()

def faults(name):
    path = os.path.join(root, name + ".faults")
    try:
        with open(path) as f:
            spec = dict(item.split("=") for item in f.read().split())
    except FileNotFoundError:
        return None, path
    return spec, path

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self, status, sent):
        with lock, open(log_path, "a") as log:
            log.write('GET %s %d %d "%s"\n' % (self.path, status, sent, self.headers.get("Range", "")))

    def do_GET(self):
        name = self.path.lstrip("/")
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); self.record(404, 0); return
        stat = os.stat(path)
        size = stat.st_size
        etag = '"%x-%x"' % (int(stat.st_mtime_ns), size)
        start, end, status = 0, size, 200
        header = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if header and header.startswith("bytes=") and (if_range is None or if_range == etag):
            first, _, last = header[6:].partition("-")
            start = int(first)
            end = min(size, int(last) + 1) if last else size
            if start >= size:
                self.send_response(416); self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0"); self.end_headers(); self.record(416, 0); return
            status = 206
        spec, spec_path = faults(name)
        cut, delay = None, 0.0
        if spec and "stall_ms" in spec:
            time.sleep(int(spec["stall_ms"]) / 1000.0)
        with lock:
            if spec and "status" in spec and int(spec.get("times", "1")) > 0:
                spec["times"] = str(int(spec.get("times", "1")) - 1)
                with open(spec_path, "w") as f:
                    f.write(" ".join("%s=%s" % kv for kv in spec.items()))
                code = int(spec["status"])
                self.send_response(code); self.send_header("Content-Length", "0"); self.end_headers(); self.record(code, 0); return
            if spec:
                times = int(spec.get("times", "1"))
                if times > 0 and "cut" in spec:
                    cut = int(spec["cut"])
                    spec["times"] = str(times - 1)
                    with open(spec_path, "w") as f:
                        f.write(" ".join("%s=%s" % kv for kv in spec.items()))
                delay = int(spec.get("delay_ms", "0")) / 1000.0
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size))
        self.end_headers()
        sent = 0
        with open(path, "rb") as f:
            f.seek(start)
            position = start
            try:
                while position < end:
                    chunk = f.read(min(16384, end - position))
                    if cut is not None and sent + len(chunk) > cut:
                        chunk = chunk[: max(0, cut - sent)]
                        self.wfile.write(chunk); sent += len(chunk); self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    position += len(chunk)
                    if delay:
                        self.wfile.flush(); time.sleep(delay)
            except (BrokenPipeError, ConnectionResetError):
                pass
        self.record(status, sent)

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""#
