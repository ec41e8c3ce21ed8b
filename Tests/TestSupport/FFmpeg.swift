// ffmpeg as the maker of test streams and as a player, for the streaming, proxy and browser
// suites. Throws a clear error when ffmpeg or ffprobe is not installed.
import Foundation
import LoopbackOrigins

package enum FFmpeg {
    /// Throws unless ffmpeg and ffprobe are installed.
    package static func require() throws {
        for tool in ["ffmpeg", "ffprobe"]
        where !["/usr/bin/", "/usr/local/bin/"].contains(where: { FileManager.default.isExecutableFile(atPath: $0 + tool) }) {
            throw OriginFailure("\(tool) is not installed (apt-get install ffmpeg; .ci/run does this)")
        }
    }

    /// Encodes a short test picture (25 fps, a key frame every second) and writes it with
    /// ffmpeg's `muxer` arguments into `directory`.
    package static func makeStream(_ directory: String, seconds: Int = 4, audio: Bool = false, _ muxer: [String]) async throws {
        try require()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let sound = audio ? ["-f", "lavfi", "-i", "sine=frequency=440:duration=\(seconds)", "-c:a", "aac"] : []
        let made = try await ChildProcess.run(
            "ffmpeg",
            [
                "-v", "error", "-nostdin", "-f", "lavfi", "-i", "testsrc=duration=\(seconds):size=320x180:rate=25"] + sound + ["-c:v", "libx264",
                "-preset", "ultrafast", "-g", "25", "-keyint_min", "25", "-sc_threshold", "0",
            ] + muxer)
        if made.status != 0 { throw OriginFailure("ffmpeg could not make the stream: \(made.errorText)") }
    }

    package static func hls(_ directory: String, fmp4: Bool, seconds: Int = 4, live: Bool = false) async throws {
        var muxer = ["-f", "hls", "-hls_time", "1", "-hls_list_size", "0"]
        if !live { muxer += ["-hls_playlist_type", "vod"] }
        if fmp4 {
            muxer += ["-hls_segment_type", "fmp4", "-hls_fmp4_init_filename", "init.mp4", "-hls_segment_filename", directory + "/seg%d.m4s"]
        } else {
            muxer += ["-hls_segment_filename", directory + "/seg%d.ts"]
        }
        try await makeStream(directory, seconds: seconds, muxer + [directory + "/index.m3u8"])
    }

    /// Frame hashes of a whole play (ffmpeg as the player), with a deadline: a stalled live
    /// play fails instead of hanging.
    package static func play(_ url: String, seconds: Int = 90, input: [String] = []) async throws -> ChildProcess.Result {
        try await ChildProcess.run(
            "/usr/bin/timeout", [String(seconds), "ffmpeg", "-v", "error", "-nostdin"] + input + ["-i", url, "-f", "framemd5", "-"])
    }
}
