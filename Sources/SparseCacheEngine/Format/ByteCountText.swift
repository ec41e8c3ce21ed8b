/// Byte counts as people read them: 1536 -> "1.5 KiB", 1023 -> "1023 B" (binary units, one
/// decimal). What the CLI prints and the status page shows.
package enum ByteCountText {
    package static func describe(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(bytes) B" }
        let rounded = (value * 10).rounded() / 10
        return "\(rounded) \(units[unit])"
    }
}
