// HTTP clients for the tests of every layer: curl as the client, and raw sockets for what
// curl will not send. Helpers, not tests: no assertions here.
import Foundation
import LoopbackOrigins

#if canImport(Glibc)
import Glibc
#endif

/// What curl received.
package struct CurlResult: Sendable, CustomStringConvertible {
    package var status: Int
    /// Header names lowercased; the last value of each.
    package var headers: [String: String]
    package var body: [UInt8]
    package var exitCode: Int32
    package var stderr: String
    /// Every field of the last head, in order, duplicates kept.
    package var fields: [(name: String, value: String)] = []

    /// The values of field `name` (any case), in order.
    package func values(_ name: String) -> [String] { fields.filter { $0.name.lowercased() == name.lowercased() }.map(\.value) }

    package var description: String {
        "curl exit \(exitCode), HTTP \(status), \(body.count) body bytes, headers \(headers.sorted { $0.key < $1.key }), stderr: \(stderr)"
    }
}

package enum Curl {
    package static let binary = ["/usr/bin/curl", "/usr/local/bin/curl"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Runs curl on `url` with `arguments` (e.g. ["-r", "0-99"]) and collects status, headers
    /// and body.
    package static func run(_ url: String, _ arguments: [String] = [], timeout: Int = 90) async throws -> CurlResult {
        guard let binary else { throw OriginFailure("curl is not installed (apt-get install curl; .ci/run does this)") }
        let work = try TemporaryDirectory("curl")
        defer { work.remove() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments =
            ["-s", "-S", "--max-time", String(timeout), "-D", work.file("headers"), "-o", work.file("body"), "-w", "%{http_code}"]
            + arguments + [url]
        let result = try await ChildProcess.run(process)
        let headerText = (try? String(contentsOfFile: work.file("headers"), encoding: .utf8)) ?? ""
        // With redirects or 100-continue there can be several heads: keep the last.
        let lastHead = headerText.components(separatedBy: "\r\n\r\n").filter { !$0.isEmpty }.last ?? ""
        var headers: [String: String] = [:]
        var fields: [(name: String, value: String)] = []
        for line in lastHead.components(separatedBy: "\r\n").dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[line[..<colon].lowercased()] = value
            fields.append((String(line[..<colon]), value))
        }
        let body = (try? [UInt8](Data(contentsOf: URL(fileURLWithPath: work.file("body"))))) ?? []
        return CurlResult(
            status: Int(String(decoding: result.stdout, as: UTF8.self)) ?? 0, headers: headers, body: body, exitCode: result.status,
            stderr: String(decoding: result.stderr, as: UTF8.self), fields: fields)
    }
}

/// A client that speaks raw bytes, for requests curl will not make (malformed, trickled,
/// pipelined). Blocking socket calls on a thread of their own, never on the test's task.
package enum RawHTTP {
    package struct Exchange: Sendable {
        package var received: [UInt8]
        /// The server closed the connection (EOF) before `timeout`.
        package var closedByServer: Bool
        package var text: String { String(decoding: received, as: UTF8.self) }
        /// Status codes of every response head received, in order.
        package var statuses: [Int] {
            text.components(separatedBy: "HTTP/1.1 ").dropFirst().compactMap { Int($0.prefix(3)) }
        }
    }

    /// Connects, sends `parts` with `pause` between them, then reads until the server closes
    /// or `timeout` passes.
    package static func exchange(port: Int, _ parts: [[UInt8]], pause: Duration = .zero, timeout: Duration = .seconds(5)) async -> Exchange {
        await withCheckedContinuation { (continuation: CheckedContinuation<Exchange, Never>) in
            // A thread of its own: the global dispatch queues run about one blocking job per
            // core, which would serialize clients that hold connections open.
            let thread = Thread(block: { @Sendable in
                continuation.resume(returning: blockingExchange(port: port, parts, pause: pause, timeout: timeout))
            })
            thread.start()
        }
    }

    package static func exchange(port: Int, _ text: String, timeout: Duration = .seconds(5)) async -> Exchange {
        await exchange(port: port, [Array(text.utf8)], timeout: timeout)
    }

    /// Connects the blocking TCP socket `fd` to 127.0.0.1:`port`; whether it worked.
    package static func connectLoopback(_ fd: Int32, port: Int) -> Bool {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return connected == 0
    }

    private static func blockingExchange(port: Int, _ parts: [[UInt8]], pause: Duration, timeout: Duration) -> Exchange {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return Exchange(received: [], closedByServer: false) }
        defer { close(fd) }
        guard connectLoopback(fd, port: port) else { return Exchange(received: [], closedByServer: true) }
        for (index, part) in parts.enumerated() {
            if index > 0, pause > .zero {
                usleep(UInt32(pause.components.seconds * 1_000_000 + pause.components.attoseconds / 1_000_000_000_000))
            }
            let sent = part.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 { break }
        }
        let deadline = ContinuousClock.now + timeout
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let left = deadline - ContinuousClock.now
            let milliseconds = Int32(max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            guard poll(&poller, 1, milliseconds) > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { return Exchange(received: received, closedByServer: true) }
            received += buffer[0..<count]
        }
        return Exchange(received: received, closedByServer: false)
    }
}

/// Byte equality by memcmp: comparing megabytes element by element is slow in debug builds.
package func sameBytes(_ bytes: [UInt8], _ expected: ArraySlice<UInt8>) -> Bool {
    guard bytes.count == expected.count else { return false }
    return bytes.withUnsafeBytes { a in
        expected.withUnsafeBytes { b in a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
    }
}
