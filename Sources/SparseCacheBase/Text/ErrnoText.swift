#if canImport(Glibc)
import Glibc
#endif

/// The C library's text for an error number, for every layer's error descriptions.
package enum ErrnoText {
    /// `strerror(number)`, e.g. "No space left on device"; "errno N" when it has none.
    package static func describe(_ number: Int32) -> String {
        guard let text = strerror(number) else { return "errno \(number)" }
        return String(cString: text)
    }
}
