/// A moment of wall-clock time: nanoseconds since 1970-01-01 00:00:00 UTC, as the store keeps
/// it (``StoreEntry/lastAccessTime``, persisted in the catalog across restarts). Comparable,
/// printed as ISO 8601 in UTC; `import SparseCache` adds ``date`` (a Foundation `Date`).
public struct WallClockTime: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var nanosecondsSince1970: Int64

    public init(nanosecondsSince1970: Int64) {
        self.nanosecondsSince1970 = nanosecondsSince1970
    }

    /// Seconds since 1970 with the fraction (for `Date(timeIntervalSince1970:)`).
    public var secondsSince1970: Double { Double(nanosecondsSince1970) / 1e9 }

    public static func < (lhs: WallClockTime, rhs: WallClockTime) -> Bool {
        lhs.nanosecondsSince1970 < rhs.nanosecondsSince1970
    }

    /// "2026-11-28T14:35:34.123Z".
    public var description: String {
        let (seconds, nanoseconds) = nanosecondsSince1970.quotientAndRemainder(dividingBy: 1_000_000_000)
        let (wholeSeconds, fraction) = nanoseconds < 0 ? (seconds - 1, nanoseconds + 1_000_000_000) : (seconds, nanoseconds)
        let (days, secondOfDay) =
            wholeSeconds < 0 && wholeSeconds % 86_400 != 0
            ? (wholeSeconds / 86_400 - 1, wholeSeconds % 86_400 + 86_400) : (wholeSeconds / 86_400, wholeSeconds % 86_400)
        let (year, month, day) = Self.civil(daysSince1970: days)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let milliseconds = fraction / 1_000_000
        let millisecondsText = milliseconds < 10 ? "00\(milliseconds)" : milliseconds < 100 ? "0\(milliseconds)" : "\(milliseconds)"
        return "\(year)-\(two(month))-\(two(day))T\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60))"
            + ".\(millisecondsText)Z"
    }

    /// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's
    /// civil_from_days).
    static func civil(daysSince1970: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = daysSince1970 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
