// Real HTTP origins on 127.0.0.1, started and stopped by the tests: nginx (Debian's package,
// installed by .ci/run), Python's http.server (which ignores Range), and a small origin of our
// own, in Python, that can cut connections and slow down, and a scripted one that answers each
// path as a JSON file the test writes says (the HTTP caching tests).
import Foundation
import LoopbackOrigins

#if canImport(Glibc)
import Glibc
#endif

package struct OriginFailure: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}

/// A server process serving `root` on a loopback port.
package final class OriginServer: @unchecked Sendable {
    // @unchecked: the process handle is only touched by start and stop, from one test.
    package let root: String
    package let port: Int
    package let work: TemporaryDirectory
    private let process: Process
    private let logPath: String?

    package var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }
    package func url(_ name: String) -> URL { baseURL.appendingPathComponent(name) }

    private init(root: String, port: Int, work: TemporaryDirectory, process: Process, logPath: String?) {
        self.root = root
        self.port = port
        self.work = work
        self.process = process
        self.logPath = logPath
    }

    deinit { stop() }

    /// nginx serving `root`, logging every request's body bytes.
    package static func nginx(root: String, locations: String = "") async throws -> OriginServer {
        let work = try TemporaryDirectory("nginx")
        let port = try Loopback.freePort()
        let log = work.file("logs/access.log")
        let process = try NginxServer.process(root: root, work: work.path, port: port, accessLog: log, locations: locations)
        return try await launch(process, root: root, port: port, work: work, log: log)
    }

    /// Python's http.server: answers every GET with 200 and the whole file, whatever the Range.
    package static func pythonStatic(root: String) async throws -> OriginServer {
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
    /// (wait before answering at all). Logs like nginx, and each request as it arrives
    /// (``arrived(_:)``).
    package static func faulty(root: String) async throws -> OriginServer {
        let work = try TemporaryDirectory("faulty")
        let port = try Loopback.freePort()
        try faultyOriginScript.write(toFile: work.file("origin.py"), atomically: true, encoding: .utf8)
        let log = work.file("access.log")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", work.file("origin.py"), root, String(port), log]
        return try await launch(process, root: root, port: port, work: work, log: log)
    }

    /// A scripted origin for the HTTP caching tests: `<METHOD> /<name>` is answered as
    /// `<root>/<name>.json` says (an ``OriginScript``, written by the test; rewrite it to change
    /// the answer for the next request). It serves `Range: bytes=` on 200 answers (206 with
    /// Content-Range, 416) and `If-Range` (strong comparison); with `"conditional": true` it
    /// answers If-None-Match (weak comparison with its ETag) and If-Modified-Since (against
    /// its Last-Modified) with a 304 carrying the same header fields, no Content-Length. No
    /// script is a 404. Every request goes to a JSON-lines log before it is answered (see
    /// ``requestLog()``), its header fields with their names as received. With `"lenient":
    /// true` it reads a request's body framing as CGI/WSGI-style gateways do, taking
    /// `Transfer_Encoding` and `Content_Length` for `Transfer-Encoding` and `Content-Length`:
    /// bytes left after a body it reads that way are the next request on the connection.
    package static func scripted(root: String) async throws -> OriginServer {
        let work = try TemporaryDirectory("scripted")
        let port = try Loopback.freePort()
        try scriptedOriginScript.write(toFile: work.file("origin.py"), atomically: true, encoding: .utf8)
        let log = work.file("requests.jsonl")
        guard FileManager.default.createFile(atPath: log, contents: nil) else { throw OriginFailure("cannot create '\(log)'") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", work.file("origin.py"), root, String(port), log]
        return try await launch(process, root: root, port: port, work: work, log: log)
    }

    package static func launch(_ process: Process, root: String, port: Int, work: TemporaryDirectory, log: String?) async throws -> OriginServer {
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: try touch(work.file("stdout"))))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: try touch(work.file("stderr"))))
        try await ProcessLaunch.run(process)
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

    package func stop() {
        Loopback.kill(process)
    }

    /// Requests logged so far: method, path, status, body bytes sent, Range header.
    /// Every request logged: path, status, body bytes sent, the Range header, and which
    /// connection carried it (requests on one connection share the value).
    package func requests() -> [(path: String, status: Int, bytes: Int64, range: String, connection: String)] {
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

    /// The Range headers of the requests for `/<name>` the faulty origin has received so far,
    /// logged as each arrives, before any stall (``requests()`` has a request once answered).
    package func arrived(_ name: String) -> [String] {
        guard let logPath, let text = try? String(contentsOfFile: logPath + ".arrived", encoding: .utf8) else { return [] }
        let complete = text.hasSuffix("\n") ? text[...] : text[..<(text.lastIndex(of: "\n") ?? text.startIndex)]
        return complete.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", maxSplits: 1)
            guard fields.first.map(String.init) == "/" + name else { return nil }
            return fields.count > 1 ? fields[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"")) : ""
        }
    }

    /// One request the scripted origin received, as it logged it before answering.
    package struct LoggedRequest: Decodable, Sendable, CustomStringConvertible {
        package var method: String
        /// The request target, query included.
        package var path: String
        package var status: Int
        /// Request header fields as received, in order, duplicates kept.
        package var headers: [[String]]
        /// Response header fields the origin sent (Content-Length aside).
        package var responseHeaders: [[String]]
        /// Body bytes in the answer.
        package var bytes: Int
        /// The request's body: its length, whether it came chunked, and its text (up to 4 KiB).
        package var requestBytes: Int?
        package var requestChunked: Bool?
        package var requestBody: String?

        package enum CodingKeys: String, CodingKey {
            case method, path, status, headers, bytes
            case responseHeaders = "response_headers"
            case requestBytes = "request_bytes"
            case requestChunked = "request_chunked"
            case requestBody = "request_body"
        }

        /// The first value of request field `name` (any case), or nil.
        package func header(_ name: String) -> String? {
            headers.first { $0.first?.lowercased() == name.lowercased() }.flatMap { $0.count > 1 ? $0[1] : nil }
        }

        /// The first value of response field `name` (any case), or nil.
        package func responseHeader(_ name: String) -> String? {
            responseHeaders.first { $0.first?.lowercased() == name.lowercased() }.flatMap { $0.count > 1 ? $0[1] : nil }
        }

        package var description: String { "\(method) \(path) -> \(status) (\(bytes) bytes) \(headers.map { $0.joined(separator: ": ") })" }
    }

    /// Every request the scripted origin received so far, oldest first. The origin writes a
    /// line before it answers, so any request whose answer a client has seen is here; a line
    /// still being written (no newline yet) is left for the next call.
    package func requestLog() -> [LoggedRequest] {
        guard let logPath, let data = FileManager.default.contents(atPath: logPath) else { return [] }
        let complete = data.lastIndex(of: UInt8(ascii: "\n")).map { data[...$0] } ?? Data()
        let decoder = JSONDecoder()
        return complete.split(separator: UInt8(ascii: "\n")).compactMap { try? decoder.decode(LoggedRequest.self, from: Data($0)) }
    }

    /// Body bytes the origin sent for `name` (waits briefly for the log to catch up).
    package func bytesSent(_ name: String) async -> Int64 {
        var last: Int64 = -1
        for _ in 0..<20 {
            let total = requests().filter { $0.path == "/" + name }.reduce(0) { $0 + $1.bytes }
            if total == last { return total }
            last = total
            try? await Task.sleep(for: .milliseconds(50))  // settled: the same total 50 ms apart
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
        with lock, open(log_path + ".arrived", "a") as log:
            log.write('%s "%s"\n' % (self.path, self.headers.get("Range", "")))
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

/// The scripted origin (see ``OriginServer/scripted(root:)`` and ``OriginScript``).
private let scriptedOriginScript = #"""
import os, sys, json, time, gzip, threading, email.utils
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

root, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()

def pattern(size, seed):
    # Deterministic bytes; OriginScript.pattern in Swift computes the same.
    return bytes(((i * 131 + seed * 17 + (i >> 8)) & 0xFF) for i in range(size))

def load(name):
    # The script and when it was written. Tests replace it by rename, so one open sees one version.
    try:
        with open(os.path.join(root, name + ".json")) as f:
            return json.load(f), os.fstat(f.fileno()).st_mtime
    except FileNotFoundError:
        return None, None

def tokens(value):
    return [part.split(";")[0].strip().lower() for part in value.split(",") if part.strip()]

def opaque(tag):
    # Weak comparison (RFC 9110 8.8.3.2): W/ does not count.
    tag = tag.strip()
    return tag[2:] if tag.startswith("W/") else tag

def seconds(value):
    parsed = email.utils.parsedate_tz(value) if value else None
    return email.utils.mktime_tz(parsed) if parsed else None

def field(headers, name):
    for key, value in headers:
        if key.lower() == name.lower():
            return value
    return None

def byte_range(header, size):
    # One range of bytes=a-b, a- or -n: (start, end) with end exclusive; "unsatisfiable";
    # or None to ignore the header (several ranges, other units, nonsense).
    if not header.startswith("bytes=") or "," in header:
        return None
    first, dash, last = header[6:].strip().partition("-")
    try:
        if not dash:
            return None
        if first == "":
            count = int(last)
            return (max(0, size - count), size) if count > 0 and size > 0 else "unsatisfiable"
        start = int(first)
        end = min(size, int(last) + 1) if last else size
        if last and int(last) < start:
            return None
        return (start, end) if start < size else "unsatisfiable"
    except ValueError:
        return None

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self):
        method = self.command
        name = self.path.split("?")[0].lstrip("/")
        spec, written = load(name)
        self.spec = spec or {}
        if spec is not None and spec.get("ignore_body"):
            # Answers without reading the body, then closes: an origin refusing an upload early.
            self.body, self.body_chunked = b"", False
            self.close_connection = True
        else:
            self.body, self.body_chunked = self.read_body()
        if spec is None:
            self.reply(404, [("Content-Type", "text/plain")], b"no script for /%s\n" % name.encode())
            return
        accepted = tokens(self.headers.get("Accept-Encoding", ""))
        for key, override in spec.get("variants", {}).items():
            if key.lower() in accepted:
                spec = override
                break
        status = spec.get("status", 200)
        headers = [(key, value) for key, value in spec.get("headers", []) if key.lower() != "content-length"]
        # Date moves with the clock; Last-Modified and Expires are fixed when the script is
        # written (its mtime), so a revalidation sees the same validator.
        for header, key, base in (
            ("Date", "date_offset", time.time()), ("Last-Modified", "last_modified_offset", written),
            ("Expires", "expires_offset", written)):
            if field(headers, header) is None and (key in spec or header == "Date"):
                headers.append((header, email.utils.formatdate(int(base) + spec.get(key, 0), usegmt=True)))
        if "body_file" in spec:
            with open(os.path.join(root, spec["body_file"]), "rb") as f:
                body = f.read()
        elif "body_size" in spec:
            body = pattern(spec["body_size"], spec.get("body_seed", 0))
        else:
            body = spec.get("body", "").encode()
        if spec.get("echo"):
            # The request as the origin got it: method and framing in fields, the body as the body.
            headers += [("X-Echo-Method", method), ("X-Echo-Framing", "chunked" if self.body_chunked else "length")]
            body = self.body
        if spec.get("gzip"):
            body = gzip.compress(body, mtime=0)
            if field(headers, "Content-Encoding") is None:
                headers.append(("Content-Encoding", "gzip"))
        etag, last_modified = field(headers, "ETag"), field(headers, "Last-Modified")
        if status != 200 or method not in ("GET", "HEAD"):
            self.reply(status, headers, body)
            return
        if spec.get("conditional"):
            # RFC 9110 13.2.2: If-None-Match first; If-Modified-Since only without it.
            match = self.headers.get("If-None-Match")
            since = self.headers.get("If-Modified-Since")
            if match is not None:
                tags = [opaque(tag) for tag in match.split(",")]
                fresh = "*" in tags or (etag is not None and opaque(etag) in tags)
            else:
                stamp, modified = seconds(since), seconds(last_modified)
                fresh = stamp is not None and modified is not None and modified <= stamp
            if fresh:
                self.reply(304, headers, b"")
                return
        header = self.headers.get("Range")
        # An answer without a length (a dynamic page) ignores Range, as such origins do.
        if header and spec.get("framing", "length") == "length":
            condition = self.headers.get("If-Range")
            applies = True
            if condition is not None:
                condition = condition.strip()
                if condition.startswith('"') or condition.startswith("W/"):
                    # Strong comparison only.
                    applies = etag is not None and condition == etag and not etag.startswith("W/")
                else:
                    applies = last_modified is not None and condition == last_modified
            found = byte_range(header, len(body)) if applies else None
            if found == "unsatisfiable":
                self.reply(416, headers + [("Content-Range", "bytes */%d" % len(body))], b"")
                return
            if found is not None:
                start, end = found
                self.reply(206, headers + [("Content-Range", "bytes %d-%d/%d" % (start, end - 1, len(body)))], body[start:end])
                return
        self.reply(200, headers, body)

    def framing_field(self, name):
        # "lenient": a field whose name has '_' counts as the one with '-', as CGI and WSGI
        # gateways read them (both become HTTP_TRANSFER_ENCODING); the first one sent wins.
        if self.spec.get("lenient"):
            for key, value in self.headers.items():
                if key.replace("_", "-").lower() == name.lower():
                    return value
            return None
        return self.headers.get(name)

    def read_body(self):
        # Both framings (RFC 9112 6.3, 7.1); chunk extensions and trailers skipped.
        if "chunked" in (self.framing_field("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return data, True
                data += self.rfile.read(size)
                self.rfile.readline(65537)
        length = int(self.framing_field("Content-Length") or 0)
        return (self.rfile.read(length) if length > 0 else b""), False

    def reply(self, status, headers, body):
        bodyless = self.command == "HEAD" or status in (204, 304) or status < 200
        sent = 0 if bodyless else len(body)
        # Logged before the answer goes out: a request whose answer anyone saw is in the log.
        entry = {
            "method": self.command, "path": self.path, "status": status,
            "headers": [[key, value] for key, value in self.headers.items()],
            "response_headers": [[key, value] for key, value in headers], "bytes": sent,
            "request_bytes": len(self.body), "request_chunked": self.body_chunked,
            "request_body": self.body.decode("latin-1") if len(self.body) <= 4096 else "",
        }
        with lock, open(log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")
        # "framing": "length" (Content-Length), "chunked", or "close" (the body ends when the
        # connection closes); "chunk_size" bytes per write, "chunk_delay_ms" between writes;
        # "cut_after": close the connection after that many body bytes (a chunked body then
        # lacks its last chunk). A body with a length is written at once unless it trickles.
        framing = self.spec.get("framing", "length") if status >= 200 and status not in (204, 304) else "length"
        size = self.spec.get("chunk_size") or max(1, len(body))
        delay = self.spec.get("chunk_delay_ms", 0) / 1000.0
        cut = self.spec.get("cut_after")
        try:
            # "interim": informational responses sent before the final one, in order.
            for interim in self.spec.get("interim", []):
                lines = ["HTTP/1.1 %d Interim" % interim["status"]] + ["%s: %s" % (k, v) for k, v in interim["headers"]]
                self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            self.send_response_only(status)
            for key, value in headers:
                self.send_header(key, value)
            if framing == "chunked":
                self.send_header("Transfer-Encoding", "chunked")
            elif framing == "close":
                self.send_header("Connection", "close")
                self.close_connection = True
            elif status not in (204, 304) and status >= 200:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if framing == "length" and cut is None and not self.spec.get("chunk_delay_ms"):
                if sent:
                    self.wfile.write(body)
                return
            position = 0
            while position < sent:
                if cut is not None and position >= cut:
                    self.wfile.flush()
                    self.close_connection = True
                    return
                piece = body[position:position + size]
                if cut is not None:
                    piece = piece[:cut - position]
                position += len(piece)
                if framing == "chunked":
                    self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                else:
                    self.wfile.write(piece)
                self.wfile.flush()
                if delay and position < sent:
                    time.sleep(delay)
            if cut is not None and position >= cut:
                self.close_connection = True
                return
            if framing == "chunked" and not bodyless:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_PURGE = do_FROB = answer

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""#
