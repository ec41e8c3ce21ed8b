#if canImport(Glibc)
import Glibc
#endif

/// Text to stdout and stderr, raw bytes to a descriptor.
enum Output {
    static func print(_ text: String) {
        write(text + "\n", to: 1)
    }

    static func error(_ text: String) {
        write(text + "\n", to: 2)
    }

    /// Rewrites the current stderr line (progress on a terminal).
    static func status(_ text: String) {
        write("\r\u{1B}[K" + text, to: 2)
    }

    static func write(_ text: String, to fd: Int32) {
        var text = text
        _ = text.withUTF8 { writeAll(UnsafeRawBufferPointer($0), to: fd) }
    }

    /// Writes every byte, retrying short writes and EINTR. Returns false on error (EPIPE...).
    @discardableResult
    static func writeAll(_ buffer: UnsafeRawBufferPointer, to fd: Int32) -> Bool {
        var done = 0
        while done < buffer.count {
            let n = Glibc.write(fd, buffer.baseAddress! + done, buffer.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            done += n
        }
        return true
    }

    static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }
}
