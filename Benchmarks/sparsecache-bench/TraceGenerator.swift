import Foundation
import SeededRandom

/// Synthetic video-on-demand traces: a catalog of videos released over time whose
/// popularity follows a Zipf law and decays with age, one-hit wonders (videos viewed once),
/// viewers who leave early and viewers who seek. Each view asks for consecutive ranges of
/// `chunk` bytes, as a player does. Fully determined by its parameters and seed.
struct TraceGenerator: Sendable {
    var seed: UInt64 = 1
    var views = 1500
    var videos = 400
    /// Zipf exponent of popularity by rank.
    var zipf = 0.9
    /// Popularity halves every `halfLife` views after a video's release (0: no aging).
    var halfLife = 300.0
    /// The share of views that go to a video no other view asks for.
    var oneHitWonders = 0.3
    /// Median video size; sizes are log-normal around it.
    var medianSize: Int64 = 16 << 20
    /// The mean share of a video a viewer watches (exponential: most leave early); a tenth
    /// of the viewers watch to the end.
    var meanWatched = 0.2
    /// The share of views with one seek to a random point.
    var seeks = 0.2
    var chunk: Int64 = 1 << 20

    struct UsageError: Error, CustomStringConvertible {
        var description: String
    }

    /// Reads `--name value` pairs from `arguments` into the parameters.
    mutating func apply(_ arguments: [String]) throws -> [String] {
        var rest: [String] = []
        var index = 0
        while index < arguments.count {
            let name = arguments[index]
            let known = ["--seed", "--views", "--videos", "--zipf", "--half-life", "--one-hit", "--median-size", "--watched", "--seeks"]
            guard known.contains(name) else {
                rest.append(name)
                index += 1
                continue
            }
            guard index + 1 < arguments.count, let value = Double(arguments[index + 1]), value >= 0 else {
                throw UsageError(description: "\(name) needs a non-negative number")
            }
            switch name {
            case "--seed": seed = UInt64(value)
            case "--views": views = max(1, Int(value))
            case "--videos": videos = max(1, Int(value))
            case "--zipf": zipf = value
            case "--half-life": halfLife = value
            case "--one-hit": oneHitWonders = min(1, value)
            case "--median-size": medianSize = max(chunk, Int64(value))
            case "--watched": meanWatched = min(1, max(0.001, value))
            default: seeks = min(1, value)
            }
            index += 2
        }
        return rest
    }

    var summary: String {
        "seed \(seed), \(views) views, \(videos) videos, zipf \(zipf), half-life \(halfLife == 0 ? "none" : "\(Int(halfLife)) views"), "
            + "one-hit \(oneHitWonders), median \(medianSize >> 20) MiB, watched \(meanWatched), seeks \(seeks)"
    }

    func generate() -> Trace {
        var random = SplitMix64(seed: seed)
        func uniform() -> Double { Double(random.next() >> 11) / Double(1 << 53) }
        func normal() -> Double { sqrt(-2 * log(max(uniform(), 1e-12))) * cos(2 * Double.pi * uniform()) }
        func size() -> Int64 {
            let bytes = Double(medianSize) * exp(0.8 * normal())
            return max(chunk, min(Int64(bytes), 40 * medianSize))
        }
        // Videos are released through the trace; rank is shuffled so the popular ones come
        // at every moment.
        let sizes = (0..<videos).map { _ in size() }
        let releases = (0..<videos).map { index in index < videos / 4 ? 0 : uniform() * Double(views) }
        var ranks = Array(1...videos)
        for index in stride(from: videos - 1, to: 0, by: -1) { ranks.swapAt(index, Int(random.next() % UInt64(index + 1))) }
        var trace = Trace()
        var time = 0.0
        var wonders = 0
        for view in 0..<views {
            time += 1 + uniform()
            let key: String
            let length: Int64
            if uniform() < oneHitWonders {
                wonders += 1
                key = "w\(wonders)"
                length = size()
            } else {
                var weights = [Double](repeating: 0, count: videos)
                var total = 0.0
                for index in 0..<videos where releases[index] <= Double(view) {
                    let age = Double(view) - releases[index]
                    let weight = pow(Double(ranks[index]), -zipf) * (halfLife > 0 ? pow(0.5, age / halfLife) : 1)
                    weights[index] = weight
                    total += weight
                }
                var pick = uniform() * total
                var chosen = 0
                for index in 0..<videos where weights[index] > 0 {
                    chosen = index
                    pick -= weights[index]
                    if pick <= 0 { break }
                }
                key = "v\(chosen)"
                length = sizes[chosen]
            }
            let pieces = (length + chunk - 1) / chunk
            func watched() -> Int64 {
                if uniform() < 0.1 { return pieces }
                return max(1, min(pieces, Int64((-log(max(uniform(), 1e-12)) * meanWatched * Double(pieces)).rounded(.up))))
            }
            var segments: [Range<Int64>] = [0..<watched()]
            if uniform() < seeks {
                let start = Int64(uniform() * Double(pieces))
                segments = [0..<min(segments[0].upperBound, max(1, start / 4)), start..<min(pieces, start + watched())]
            }
            for run in segments {
                for piece in run {
                    let first = piece * chunk
                    trace.requests.append(
                        Trace.Request(time: time, key: key, size: length, range: first..<min(length, first + chunk)))
                    time += 0.001
                }
            }
        }
        return trace
    }
}
