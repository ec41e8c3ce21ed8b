// Comparing index states by what they mean, for the format, index and fuzz suites.
@testable import SparseCacheEngine

extension IndexState {
    /// Equality of what the index means: segment size, length, metadata, the present set and
    /// the checksum of every present segment. (The derived `==` also compares how checksum
    /// pages happen to be allocated, which differs between equal states built differently.)
    func sameContent(as other: IndexState) -> Bool {
        guard segmentShift == other.segmentShift, length == other.length, metadata == other.metadata,
            present == other.present
        else { return false }
        for run in present.setRuns {
            for segment in run where checksums[segment] != other.checksums[segment] { return false }
        }
        return true
    }

    /// A one-line summary for failure messages.
    var summary: String {
        "shift \(segmentShift), length \(length.map(String.init) ?? "nil"), \(present.setCount)/\(present.count) present, runs \(present.setRuns), metadata \(metadata)"
    }
}
