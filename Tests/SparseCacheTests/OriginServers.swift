// Real HTTP origins on 127.0.0.1, started and stopped by the tests: nginx (Debian's package,
// installed by .ci/run), Python's http.server (which ignores Range), and a small origin of our
// own, in Python, that can cut connections and slow down.
import Foundation
import LoopbackOrigins

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

    /// nginx serving `root`, logging every request's body bytes.
    static func nginx(root: String, locations: String = "") async throws -> OriginServer {
        let work = try TemporaryDirectory("nginx")
        let port = try Loopback.freePort()
        let log = work.file("logs/access.log")
        let process = try NginxServer.process(root: root, work: work.path, port: port, accessLog: log, locations: locations)
        return try await launch(process, root: root, port: port, work: work, log: log)
    }

    /// Python's http.server: answers every GET with 200 and the whole file, whatever the Range.
    static func pythonStatic(root: String) async throws -> OriginServer {
        let work = try TemporaryDirectory("pyhttp")
        let port = try Loopback.freePort()
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
        let port = try Loopback.freePort()
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
        do {
            try await Loopback.waitUntilListening(port: port, process: process)
        } catch {
            let errors = (try? String(contentsOfFile: work.file("stderr"), encoding: .utf8)) ?? ""
            server.stop()
            throw OriginFailure("\(error): \(errors)")
        }
        return server
    }

    private static func touch(_ path: String) throws -> String {
        guard FileManager.default.createFile(atPath: path, contents: nil) else { throw OriginFailure("cannot create '\(path)'") }
        return path
    }

    func stop() {
        Loopback.kill(process)
    }

    /// Requests logged so far: method, path, status, body bytes sent, Range header.
    /// Every request logged: path, status, body bytes sent, the Range header, and which
    /// connection carried it (requests on one connection share the value).
    func requests() -> [(path: String, status: Int, bytes: Int64, range: String, connection: String)] {
        guard let logPath, let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", maxSplits: 4)
            guard fields.count >= 4, let status = Int(fields[2]), let bytes = Int64(fields[3]) else { return nil }
            // The rest is `"RANGE" CONNECTION`; the range may hold spaces, the connection not.
            let rest = fields.count > 4 ? fields[4] : ""
            let quoteEnd = rest.lastIndex(of: "\"") ?? rest.startIndex
            let range = rest[..<quoteEnd].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            let connection = rest[quoteEnd...].dropFirst().trimmingCharacters(in: .whitespaces)
            return (String(fields[1]), status, bytes, range, connection)
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
            log.write('GET %s %d %d "%s" %d\n' % (self.path, status, sent, self.headers.get("Range", ""), self.client_address[1]))

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
