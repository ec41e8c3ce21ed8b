#if canImport(Glibc)
    import Glibc
#endif

extension HTTPDate {
    /// Seconds since 1970 of an HTTP-date (RFC 9110, section 5.6.7), or nil when `text` is not
    /// one. All three forms a recipient must accept: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37
    /// GMT`), the obsolete RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`, a two-digit year
    /// more than 50 years ahead taken as the past century) and asctime (`Sun Nov  6 08:49:37
    /// 1994`). The day name is not checked against the date, as the RFC allows. Words are
    /// separated by exactly one space (asctime's one-digit day by two): `Thu, 18  Aug  2050`
    /// is no date, and an `Expires` of it means stale. Month names and `GMT` are taken in any
    /// case, as most caches do (RFC 9110 lets a recipient be lenient there).
    package static func parse(_ text: String) -> Int64? {
        imfFixdate(text) ?? parseWords(text)
    }

    /// ``parse(_:)`` word by word: every form.
    static func parseWords(_ text: String) -> Int64? {
        var words = text.utf8.split(separator: HTTPSyntax.space, omittingEmptySubsequences: false).map {
            String(decoding: $0, as: UTF8.self)
        }
        // asctime's `Nov  6`: the double space before a one-digit day is part of the form.
        if words.count == 6, !words[0].hasSuffix(","), words[2].isEmpty, words[3].utf8.count == 1 { words.remove(at: 2) }
        guard !words.contains(where: \.isEmpty) else { return nil }
        let zone = words.last?.uppercased()
        switch words.count {
        case 6 where words[0].hasSuffix(",") && zone == "GMT":
            // IMF-fixdate: day-name "," SP DD SP Mon SP YYYY SP hh:mm:ss SP GMT
            guard words[1].utf8.count == 2, words[3].utf8.count == 4 else { return nil }
            return seconds(day: words[1], month: words[2], year: words[3], time: words[4])
        case 4 where words[0].hasSuffix(",") && zone == "GMT":
            // RFC 850: day-name "," SP DD-Mon-YY SP hh:mm:ss SP GMT
            let parts = words[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, parts[0].utf8.count == 2, parts[2].utf8.count == 2, let short = Int(parts[2]) else { return nil }
            let thisYear = Int(Double(Int64(time(nil))) / 31_556_952) + 1970
            var year = 1900 + short
            while year < thisYear - 49 { year += 100 }
            return seconds(day: parts[0], month: parts[1], year: String(year), time: words[2])
        case 5:
            // asctime: day-name SP Mon SP (DD | SP D) SP hh:mm:ss SP YYYY
            guard (1...2).contains(words[2].utf8.count), words[4].utf8.count == 4 else { return nil }
            return seconds(day: words[2], month: words[1], year: words[4], time: words[3])
        default:
            return nil
        }
    }

    /// The usual form, read in place: a well-formed IMF-fixdate of 29 bytes, or nil for
    /// anything else (which ``parseWords(_:)`` then reads, to the same result as it gives for
    /// these inputs). Every stored head and its policy parse `Date` and `Expires`: splitting them into
    /// strings showed in the profile of a miss.
    static func imfFixdate(_ text: String) -> Int64? {
        var text = text
        return text.withUTF8 { bytes -> Int64? in
            guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"),
                [4, 7, 11, 16, 25].allSatisfy({ bytes[$0] == HTTPSyntax.space }), !bytes[0..<3].contains(HTTPSyntax.space)
            else { return nil }
            @inline(__always) func folded(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
            guard folded(bytes[26]) == UInt8(ascii: "g"), folded(bytes[27]) == UInt8(ascii: "m"), folded(bytes[28]) == UInt8(ascii: "t")
            else { return nil }
            func number(_ range: Range<Int>) -> Int? {
                var value = 0
                for index in range {
                    let digit = bytes[index] &- UInt8(ascii: "0")
                    guard digit < 10 else { return nil }
                    value = value * 10 + Int(digit)
                }
                return value
            }
            let month = months.firstIndex { name in
                zip(name.utf8, bytes[8..<11]).allSatisfy { folded($0) == folded($1) }
            }
            guard let day = number(5..<7), let year = number(12..<16), let hour = number(17..<19), let minute = number(20..<22),
                let second = number(23..<25), let month
            else { return nil }
            return seconds(day: day, month: month, year: year, hour: hour, minute: minute, second: second)
        }
    }

    private static func seconds(day: String, month: String, year: String, time: String) -> Int64? {
        guard let day = digits(day), let year = digits(year),
            let month = months.firstIndex(where: { $0.uppercased() == month.uppercased() })
        else { return nil }
        let clock = time.split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, clock.allSatisfy({ $0.utf8.count == 2 }), let hour = digits(String(clock[0])),
            let minute = digits(String(clock[1])), let second = digits(String(clock[2]))
        else { return nil }
        return seconds(day: day, month: month, year: year, hour: hour, minute: minute, second: second)
    }

    /// `month` from 0; nil for a time or day out of range, or a year before 1900.
    private static func seconds(day: Int, month: Int, year: Int, hour: Int, minute: Int, second: Int) -> Int64? {
        guard hour < 24, minute < 60, second < 61, (1...daysIn(month: month + 1, year: year)).contains(day), year >= 1900 else { return nil }
        let days = daysSince1970(year: year, month: month + 1, day: day)
        return days * 86_400 + Int64(hour * 3600 + minute * 60 + min(second, 59))
    }

    private static func digits(_ text: String) -> Int? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int(text)
    }

    private static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to a civil date (Howard Hinnant's days_from_civil).
    private static func daysSince1970(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = Int64((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1)
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
