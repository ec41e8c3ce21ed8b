/// One reader's read-ahead (``ProgressiveCache``'s walk for a reader): how far ahead of the
/// reader fetches should run, growing with what it has read in a row, as Linux's readahead
/// window grows while a file is read sequentially.
struct ReadAhead {
    /// Where the reader started (its range's start, or where its read left the cached part).
    let start: Int64
    /// Fetches run (or bytes are present) up to here, as far as this reader made sure.
    var covered: Int64

    init(start: Int64) {
        self.start = start
        covered = start
    }

    /// How far ahead of `position` fetches should run: ``FillOptions/readAheadMinimum`` at
    /// first, then a ``FillOptions/readAheadFraction`` of what the reader has read since
    /// ``start``, at most ``FillOptions/maximumFetch``. A reader that hangs up leaves at most
    /// twice this distance fetched past its position.
    func distance(at position: Int64, options: FillOptions) -> Int64 {
        let read = max(0, position - start)
        return min(options.maximumFetch, max(options.readAheadMinimum, read / max(1, options.readAheadFraction)))
    }

    /// The span, in segments of `1 << shift` bytes, of a fetch the reader starts at `position`:
    /// twice the distance (one ``FillOptions/maximumFetch`` span without read-ahead).
    func window(at position: Int64, options: FillOptions, shift: Int64) -> Int {
        let bytes = options.readAhead ? 2 * distance(at: position, options: options) : options.maximumFetch
        return max(1, Int((bytes + (Int64(1) << shift) - 1) >> shift))
    }
}
