import CShim
import SparseCacheBase

#if canImport(Glibc)
import Glibc
#endif

/// Answers a request on the event loop's thread, synchronously, before the server hands it
/// to its handler: no task, no await. Returns true when it answered through `reply`; false
/// leaves the request to the handler, so it must decide before it sends anything.
///
/// For answers that need no I/O that could wait (a cached hit whose bytes are in the page
/// cache, say); see ``HTTPServer/start(options:log:quick:handler:)``.
package typealias QuickHandler = @Sendable (_ request: HTTPRequestHead, _ reply: inout QuickReply) -> Bool

/// The response of a ``QuickHandler``: one head and a body of known length, sent as the
/// handler has it, without waiting. What the client's window does not take now is kept and
/// sent by the server after the handler returns, as for any response.
package struct QuickReply: ~Copyable {
    let request: HTTPRequestHead
    let connection: TCPConnection
    let loop: SocketReactor
    /// The connection closes after this response.
    package private(set) var closes: Bool
    private(set) var status = 0
    private(set) var bodyBytes: Int64 = 0
    private var announced: Int64 = 0
    private(set) var sent = false
    /// What the client's window did not take; the server sends it next.
    private(set) var rest: [UInt8] = []
    private(set) var cacheHitBytes: Int64 = 0
    private(set) var cacheOutcome: String?
    /// Set when sending failed: the connection is unusable.
    private(set) var failed = false
    /// Set by ``abandon()``: what is in ``rest`` goes out, then the connection closes.
    private(set) var cut = false
    /// The body and head buffers of a reply made off its loop's thread.
    private var owned: UnsafeMutableRawBufferPointer?
    private var ownedHead: UnsafeMutableRawBufferPointer?

    init(request: HTTPRequestHead, connection: TCPConnection, closes: Bool) {
        self.request = request
        self.connection = connection
        self.loop = connection.loop
        self.closes = closes || !request.keepAlive
    }

    /// A buffer of at least `count` bytes for the body, valid until the reply ends: on the
    /// loop's thread the loop's own (reused by every request it answers), else one of the
    /// reply's.
    package mutating func scratch(_ count: Int) -> UnsafeMutableRawBufferPointer {
        if loop.ownsCurrentThread { return loop.scratch.buffer(count) }
        owned?.deallocate()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        owned = buffer
        return buffer
    }

    /// A buffer of at least `count` bytes for the head, apart from ``scratch(_:)``'s and valid
    /// as long: the loop's own on its thread, else the reply's.
    package mutating func headScratch(_ count: Int) -> UnsafeMutableRawBufferPointer {
        if loop.ownsCurrentThread { return loop.headScratch.buffer(count) }
        ownedHead?.deallocate()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        ownedHead = buffer
        return buffer
    }

    deinit {
        owned?.deallocate()
        ownedHead?.deallocate()
    }

    /// What a cache made of the request and the body bytes it had stored, for the log.
    package mutating func noteCache(outcome: String, hitBytes: Int64) {
        cacheOutcome = outcome
        cacheHitBytes = hitBytes
    }

    /// Whether the whole response went out or is in ``rest``: a reply cut short (a failed
    /// send, ``abandon()``, a body shorter than announced) closes the connection.
    var isComplete: Bool {
        sent && !failed && !cut && (request.method == .head || bodyBytes == announced)
    }

    /// Sends the head (with `Date`, `Server`, `Content-Length` and `Connection` added as
    /// ``HTTPResponseWriter/writeHead(status:headers:contentLength:withFirstBody:)`` adds them)
    /// announcing `contentLength` body bytes, and with it `body`, the first of them (nothing
    /// for a HEAD request), in one `sendmsg`, without waiting. Call it once; the rest of the
    /// body follows with ``sendBody(_:)``.
    package mutating func send(status: Int, headers: [(String, String)], contentLength: Int64, body: UnsafeRawBufferPointer) {
        let head = HTTPResponseWriter.encodedHead(status: status, headers: headers, contentLength: contentLength, chunked: false, closes: closes)
        head.withUnsafeBytes { head in
            send(status: status, encodedHead: head, contentLength: contentLength, body: body)
        }
    }

    /// ``send(status:headers:contentLength:body:)`` with a head the caller encoded whole (status
    /// line, every field including `Content-Length` and `Connection` as ``closes`` says, the
    /// empty line): a head written into ``headScratch(_:)`` costs no allocation.
    package mutating func send(status: Int, encodedHead head: UnsafeRawBufferPointer, contentLength: Int64, body: UnsafeRawBufferPointer) {
        precondition(!sent, "a quick reply sends one response")
        sent = true
        self.status = status
        announced = contentLength
        start(head, request.method == .head ? UnsafeRawBufferPointer(start: nil, count: 0) : body)
    }

    /// Sends more of the body announced by ``send(status:headers:contentLength:body:)``, without
    /// waiting (nothing for a HEAD request).
    package mutating func sendBody(_ body: UnsafeRawBufferPointer) {
        precondition(sent, "the head goes first")
        guard request.method != .head, !failed, !cut else { return }
        precondition(bodyBytes + Int64(body.count) <= announced, "body bytes past the announced length")
        transmit(UnsafeRawBufferPointer(start: nil, count: 0), body)
    }

    /// Ends the reply short of its announced length (the body could not be read): what was
    /// sent or is waiting in ``rest`` goes out, then the connection closes, so the client sees
    /// the answer was cut.
    package mutating func abandon() {
        cut = true
    }

    /// A body up to this size leaves in one `sendmsg` with the head; a longer one after it.
    static let bodyWithHeadLimit = 16 << 10

    /// Sends the head and the body's first bytes: in one `sendmsg` when the body is short, else
    /// the head alone first. On loopback a send is one packet of up to 64 KiB, which the client
    /// sees only once all of it is copied: a head alone reaches it earlier (as nginx's head
    /// goes before its sendfile), at the cost of one more call for a long answer.
    private mutating func start(_ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) {
        if body.count <= Self.bodyWithHeadLimit {
            transmit(head, body)
        } else {
            transmit(head, UnsafeRawBufferPointer(start: nil, count: 0))
            transmit(UnsafeRawBufferPointer(start: nil, count: 0), body)
        }
    }

    /// `first` then `second` in one `sendmsg` while the client's window takes them; what it
    /// does not take now goes to ``rest``, and once anything is there everything after it
    /// does too, in order.
    private mutating func transmit(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) {
        bodyBytes += Int64(second.count)
        let total = first.count + second.count
        var done = 0
        while rest.isEmpty, done < total {
            let offset = done
            let result = connection.descriptor.use { fd -> (count: Int, errno: Int32) in
                let count =
                    offset < first.count
                    ? sc_send2(fd, first.baseAddress! + offset, first.count - offset, second.baseAddress, second.count)
                    : sc_send(fd, second.baseAddress! + (offset - first.count), total - offset)
                return (count, count > 0 ? 0 : errno)
            }
            guard let result else {
                failed = true
                return
            }
            if result.count > 0 {
                done += result.count
                continue
            }
            if result.errno == EINTR { continue }
            if result.errno == EAGAIN || result.errno == EWOULDBLOCK { break }
            failed = true
            return
        }
        if done < total {
            // The client's window is full: the rest goes out as any response's does, waiting.
            rest.reserveCapacity(rest.count + total - done)
            if done < first.count { rest += UnsafeRawBufferPointer(rebasing: first[done...]) }
            let from = max(0, done - first.count)
            if from < second.count { rest += UnsafeRawBufferPointer(rebasing: second[from...]) }
        }
    }
}

/// A growing buffer one event loop reuses for the bodies its quick replies read: used only on
/// the loop's own thread, one request at a time.
final class LoopScratch: @unchecked Sendable {
    // @unchecked: touched only by the thread of the loop that owns it (QuickReply checks).
    private var buffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)

    /// At least `count` bytes, valid until the next call.
    func buffer(_ count: Int) -> UnsafeMutableRawBufferPointer {
        if buffer.count < count {
            buffer.deallocate()
            buffer = .allocate(byteCount: max(count, 64 * 1024), alignment: 4096)
        }
        return UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
    }

    deinit { buffer.deallocate() }
}
