import CShim
@_spi(Locking) import SparseCacheBase

#if canImport(Glibc)
import Glibc
#endif

/// SIGINT and SIGTERM (and, for a server that asks, SIGHUP) as events a task can await: a
/// signal handler writes the signal's number to a pipe, and the pipe is read like a socket. (A
/// dispatch signal source needs the signal blocked in every thread to see it; a handler does
/// not.)
package enum ShutdownSignals {
    private static let pipe = Lock<(fd: Int32, watch: SocketWatch?)>((-1, nil))

    /// From now on SIGINT and SIGTERM (and SIGHUP with `hangup`) no longer end the process;
    /// ``next()`` returns them. The first call decides which signals are caught.
    package static func install(hangup: Bool = false) throws {
        _ = try installed(hangup: hangup)
    }

    /// The next signal caught (installing the handlers for SIGINT and SIGTERM on first use).
    package static func next() async throws -> Int32 {
        let (fd, readable) = try installed()
        var byte: UInt8 = 0
        while true {
            let count = read(fd, &byte, 1)
            if count == 1 { return Int32(byte) }
            if count < 0, errno != EAGAIN, errno != EINTR {
                throw HTTPError(.io, operation: "read signal pipe", errno: errno)
            }
            try await readable.wait()
        }
    }

    private static func installed(hangup: Bool = false) throws -> (Int32, Readiness) {
        try pipe.withLock { pipe -> (Int32, Readiness) in
            if let watch = pipe.watch { return (pipe.fd, watch.readable) }
            let signals: [Int32] = hangup ? [SIGINT, SIGTERM, SIGHUP] : [SIGINT, SIGTERM]
            let fd = sc_signal_pipe(signals, Int32(signals.count))
            guard fd >= 0 else { throw HTTPError(.io, operation: "install signal handlers", errno: errno) }
            let watch = SocketWatch(fd: fd, cancelled: {})
            pipe = (fd, watch)
            return (fd, watch.readable)
        }
    }
}
