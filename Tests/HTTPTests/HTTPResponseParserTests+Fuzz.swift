// The response parser and chunked decoder under fuzz: mutated heads and random chunkings.
// Part of the HTTPResponseParserTests suite (HTTPResponseParserTests.swift).
import Foundation
import SeededRandom
import Testing

@_spi(Locking) @testable import SparseCacheEngine
@testable import SparseHTTP
import TestSupport

extension HTTPResponseParserTests {
    // MARK: Fuzz

    @Test("fuzz: mutated and random response heads never trap; every acceptance re-checks and every refusal is final")
    func fuzzHeads() async throws {
        try await offPool("response-fuzz") { await self.fuzzHeadsOnItsThread() }
    }

    /// The body of ``fuzzHeads()``, on a thread of its own (OffPool.swift).
    private func fuzzHeadsOnItsThread() async {
        let seed = testSeed(0x5245_5350)
        let count = Self.fuzzCount
        var random = SplitMix64(seed: seed)
        let corpus = [
            "HTTP/1.1 206 Partial Content\r\nServer: nginx/1.24.0\r\nDate: Tue, 14 May 2024 10:00:00 GMT\r\nContent-Type: video/mp4\r\n"
                + "Content-Length: 1048576\r\nLast-Modified: Mon, 13 May 2024 09:00:00 GMT\r\nConnection: keep-alive\r\n"
                + "ETag: \"6641d6a0-3c00000\"\r\nContent-Range: bytes 0-1048575/62914560\r\n\r\n\u{0}\u{0}\u{0}\u{18}ftypmp42",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nTransfer-Encoding: chunked\r\nVary: Accept-Encoding\r\n\r\n"
                + "5\r\nhello\r\n0\r\n\r\n",
            "HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6 Python/3.12.3\r\nContent-type: video/mp4\r\nContent-Length: 3000\r\n\r\nbody",
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 304 Not Modified\nETag: W/\"x\"\nCache-Control: max-age=60\n\n",
        ].map(Self.bytes)
        // Lines that stress the framing rules when spliced in at a line start.
        let splices = [
            "Transfer-Encoding: chunked\r\n", "Content-Length: 12\r\n", "Content-Length: 12, 13\r\n", "Connection: close\r\n", " x\r\n",
            "\r\n",
        ]
        .map(Self.bytes)
        var accepted = 0, refused = 0, incomplete = 0, violations = 0
        var framings: [String: Int] = [:]
        for iteration in 0..<count {
            let input = iteration % 10 == 0 ? random.bytes(Int(random.next() % 300)) : Self.mutate(corpus, splices: splices, &random)
            func violation(_ what: String) {
                violations += 1
                // The first few are enough to replay; a broken parser would otherwise flood the log.
                guard violations <= 10 else { return }
                Issue.record(
                    "iteration \(iteration) (seed \(seed)): \(what): \(String(decoding: input.prefix(300), as: UTF8.self).debugDescription)"
                )
            }
            let result = HTTPResponseParser.parse(input)
            switch result {
            case .incomplete:
                incomplete += 1
                if input.count >= HTTPResponseParser.Limits().head { violation("incomplete with a full window") }
            case .invalid(let reason):
                refused += 1
                if reason.isEmpty { violation("refused without a reason") }
                // More bytes never rescue a refused head.
                if HTTPResponseParser.parse(input + random.bytes(Int(random.next() % 8))).reason == nil {
                    violation("a refusal was not final")
                }
            case .response(let head, let consumed):
                accepted += 1
                if let problem = Self.problem(with: head, consumed: consumed, in: input) { violation(problem) }
                let used = input.prefix(consumed)
                if HTTPResponseParser.parse(used) != result { violation("not stable on its own bytes") }
                if HTTPResponseParser.parse(used.prefix(Int(random.next() % UInt64(consumed)))) != .incomplete {
                    violation("a prefix was not incomplete")
                }
                framings[Self.name(of: head.framing), default: 0] += 1
            }
        }
        reportCounts(
            "HTTP response parser fuzz",
            [
                "inputs": count, "accepted": accepted, "refused": refused, "incomplete": incomplete, "length": framings["length"] ?? 0,
                "chunked": framings["chunked"] ?? 0, "untilClose": framings["untilClose"] ?? 0, "none": framings["none"] ?? 0,
                "violations": violations,
            ])
        #expect(accepted > 0 && refused > 0 && incomplete > 0)
        #expect(violations == 0, "replay with SPARSECACHE_TEST_SEED=\(seed)")
    }

    @Test("fuzz: random bodies in random chunkings and splits decode exactly; mutated encodings never trap or escape the input")
    func fuzzChunked() async throws {
        try await offPool("chunked-fuzz") { await self.fuzzChunkedOnItsThread() }
    }

    /// The body of ``fuzzChunked()``, on a thread of its own (OffPool.swift).
    private func fuzzChunkedOnItsThread() async {
        let seed = testSeed(0x4348_4E4B)
        let count = max(1, Self.fuzzCount / 10)
        var random = SplitMix64(seed: seed)
        var exact = 0, finished = 0, failed = 0, needMore = 0, violations = 0
        for iteration in 0..<count {
            let body = random.bytes(Int(random.next() % 2000))
            let encoded = Self.encodeChunked(body, &random)
            func violation(_ what: String, _ input: [UInt8]) {
                violations += 1
                guard violations <= 10 else { return }
                Issue.record(
                    "iteration \(iteration) (seed \(seed)): \(what): \(String(decoding: input.prefix(200), as: UTF8.self).debugDescription)"
                )
            }
            if iteration % 2 == 0 {
                // Valid, followed by the next response's first bytes, which must not be consumed.
                let input = encoded + Self.bytes("HTTP/1.1 200 OK\r\n")
                do {
                    let result = try Self.decode(Self.split(input, &random))
                    if result.body != body || result.consumed != encoded.count || !result.finished || !result.rangesInBounds {
                        violation(
                            "decoded \(result.body.count) of \(body.count) bytes, consumed \(result.consumed) of \(encoded.count)", input)
                    } else {
                        exact += 1
                    }
                } catch {
                    violation("a valid encoding failed: \(error.reason)", input)
                }
                continue
            }
            let input = Self.mutate([encoded], splices: [Self.bytes("\r\n"), Self.bytes("0\r\n"), Self.bytes("ffff\r\n")], &random)
            var decoder = ChunkedDecoder()
            var bodyBytes = 0
            var consumed = 0
            do {
                for piece in Self.split(input, &random) {
                    let (ranges, used) = try Self.feed(&decoder, piece)
                    if !Self.rangesAreSane(ranges, within: used) || used > piece.count {
                        violation("ranges \(ranges) outside \(used) of \(piece.count)", input)
                    }
                    bodyBytes += ranges.reduce(0) { $0 + $1.count }
                    consumed += used
                }
                if decoder.isFinished { finished += 1 } else { needMore += 1 }
            } catch {
                failed += 1
                if error.reason.isEmpty { violation("failed without a reason", input) }
            }
            if bodyBytes > consumed || consumed > input.count {
                violation("body \(bodyBytes), consumed \(consumed) of \(input.count)", input)
            }
        }
        reportCounts(
            "chunked decoder fuzz",
            [
                "inputs": count, "exact": exact, "finished": finished, "failed": failed, "needMore": needMore, "violations": violations,
            ])
        #expect(exact > 0 && finished > 0 && failed > 0 && needMore > 0)
        #expect(violations == 0, "replay with SPARSECACHE_TEST_SEED=\(seed)")
    }
}
