import Foundation
@_spi(Locking) import SparseCacheBase

/// IMF-fixdate, the date format HTTP sends (RFC 9110, section 5.6.7):
/// `Sun, 06 Nov 1994 08:49:37 GMT`.
package enum HTTPDate {
    /// The current time, formatted once per second rather than per response.
    package static func now() -> String {
        let second = time(nil)
        return cache.withLock { cache in
            if cache.second != second { cache = (second, format(Date(timeIntervalSince1970: Double(second)))) }
            return cache.text
        }
    }

    private static let cache = Lock<(second: time_t, text: String)>((0, ""))

    package static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
}
