/// Plain-text tables for the terminal and for docs/BENCHMARKS.md (the output is valid
/// Markdown: pipes and a header rule).
enum Table {
    static func render(header: [String], rows: [[String]], leftAligned: Set<Int> = [0, 1]) -> String {
        var widths = header.map(\.count)
        for row in rows {
            for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            let padded = cells.enumerated().map { column, cell in
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                return leftAligned.contains(column) ? cell + padding : padding + cell
            }
            return "| " + padded.joined(separator: " | ") + " |"
        }
        let rule = "|" + widths.enumerated().map { column, width in
            leftAligned.contains(column) ? ":" + String(repeating: "-", count: width + 1)
                : String(repeating: "-", count: width + 1) + ":"
        }.joined(separator: "|") + "|"
        return ([line(header), rule] + rows.map(line)).joined(separator: "\n")
    }

    /// The measurements of one scenario, one row each.
    static func render(_ measurements: [Measurement]) -> String {
        let showLatency = measurements.contains { $0.p50Microseconds != nil }
        var header = ["workload", "contender", "median", "min", "max", "unit"]
        if showLatency { header += ["p50 µs", "p99 µs"] }
        header.append("ratio")
        let rows = measurements.map { m -> [String] in
            var row = [m.workload, m.contender, format(m.median), format(m.min), format(m.max), m.unit]
            if showLatency { row += [m.p50Microseconds.map(format) ?? "", m.p99Microseconds.map(format) ?? ""] }
            row.append(m.ratio.map { format($0, decimals: 2) + "x" } ?? (m.baseline == nil ? "" : "n/a"))
            return row
        }
        return render(header: header, rows: rows)
    }

    static func render(_ targets: [TargetCheck]) -> String {
        render(
            header: ["target", "goal", "measured", "met"],
            rows: targets.map { [$0.name, $0.target, $0.measured, $0.met ? "yes" : "NO"] }, leftAligned: [0, 1, 2, 3])
    }

    /// Three significant digits for small values, none after the point for large ones.
    static func format(_ value: Double) -> String {
        let magnitude = abs(value)
        if magnitude >= 100 || value == value.rounded() && magnitude >= 10 { return format(value, decimals: 0) }
        if magnitude >= 10 { return format(value, decimals: 1) }
        if magnitude >= 1 { return format(value, decimals: 2) }
        return format(value, decimals: 3)
    }

    static func format(_ value: Double, decimals: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let rounded = (abs(value) * scale).rounded()
        let whole = Int64(rounded / scale)
        var text = String(whole)
        if decimals > 0 {
            let fraction = String(Int64(rounded) - whole * Int64(scale))
            text += "." + String(repeating: "0", count: decimals - fraction.count) + fraction
        }
        return value < 0 && rounded != 0 ? "-" + text : text
    }
}
