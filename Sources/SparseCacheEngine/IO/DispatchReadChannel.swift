import CShim
@_spi(Locking) import SparseCacheBase
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// Reads a file through a random-access DispatchIO channel: libdispatch issues the preads on its
/// own threads and the awaiting task is resumed when the bytes are in, so reads never block the
/// cooperative pool.
///
/// The channel is made at the first read, on a duplicate of the data file's descriptor (which
/// the channel owns and closes in its cleanup handler). Most reads of a cached resource come
/// from the page cache on the caller's task and never need it: opening a resource then costs
/// no third descriptor, no second open(2) of the data file and no channel set-up (two
/// descriptor calls on the opening thread and a hop to libdispatch's). A duplicate rather than
/// a new open by path: the path may name another file by then (a resource replaced under the
/// same name), the open file never does. The data file stays open while a read is in flight
/// (``SparseFile`` closes it only after its reads drain), so the duplicate is taken safely.
final class DispatchReadChannel: @unchecked Sendable {
    // @unchecked: DispatchIO and DispatchQueue are thread-safe objects; the channel is made
    // once, under `made`, and never replaced.
    private let queue: DispatchQueue
    /// The data file's descriptor (owned by the resource): duplicated for the channel, and
    /// named to the fault hook (the same file, so the same rules apply).
    private let source: Int32
    private let made = Lock<Made>(Made())
    let path: String

    private struct Made: ~Copyable {
        var channel: DispatchIO?
        var closed = false
    }

    init(duplicating file: FileDescriptor) {
        queue = DispatchQueue(label: "sparsecache.read")
        source = file.rawValue
        path = file.path
    }

    private static func makeChannel(fd: Int32, queue: DispatchQueue) -> DispatchIO {
        DispatchIO(
            type: .random, fileDescriptor: fd, queue: queue,
            cleanupHandler: { @Sendable _ in _ = sc_close(fd) })
    }

    /// The channel, made at the first call. Throws after ``close()``, or when the descriptor
    /// cannot be duplicated (out of descriptors).
    private func channel() throws -> DispatchIO {
        let outcome = made.withLock { made -> Result<DispatchIO, SparseCacheError> in
            if made.closed { return .failure(SparseCacheError(.closed, operation: "read", path: path, detail: "the resource is closed")) }
            if let channel = made.channel { return .success(channel) }
            let fd = sc_dup(source)
            guard fd >= 0 else { return .failure(SparseCacheError(.io, operation: "dup", path: path, errno: errno)) }
            let channel = Self.makeChannel(fd: fd, queue: queue)
            made.channel = channel
            return .success(channel)
        }
        return try outcome.get()
    }

    /// Reads exactly `length` bytes at `offset`; fewer only when the file ends first.
    func read(offset: Int64, length: Int) async throws -> [UInt8] {
        if length == 0 { return [] }
        let channel = try channel()
        let accumulator = ReadAccumulator(capacity: length)
        let queue = self.queue
        let path = self.path
        let descriptor = source
        let faultsArmed = sc_faults_is_armed() != 0
        let scope = FaultScopeBinding.toCarry
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8], Error>) in
            if faultsArmed {
                // libdispatch issues its own preads, which the shim never sees: the fault table is
                // consulted here instead, on the channel's queue (a delay rule then takes that
                // queue's thread, as a slow device would, never a cooperative one).
                queue.async { @Sendable in
                    let injected = FaultScopeBinding.$current.withValue(scope) {
                        sc_fault_check_read(descriptor, offset, Int64(length))
                    }
                    if injected != 0 {
                        continuation.resume(throwing: SparseCacheError(
                            .io, operation: "read", path: path, offset: offset, length: Int64(length), errno: injected))
                    } else {
                        Self.read(channel, offset: offset, length: length, queue: queue, path: path, into: accumulator, continuation)
                    }
                }
                return
            }
            Self.read(channel, offset: offset, length: length, queue: queue, path: path, into: accumulator, continuation)
        }
    }

    private static func read(
        _ channel: DispatchIO, offset: Int64, length: Int, queue: DispatchQueue, path: String, into accumulator: ReadAccumulator,
        _ continuation: CheckedContinuation<[UInt8], Error>
    ) {
        channel.read(
            offset: off_t(offset), length: length, queue: queue,
            ioHandler: { @Sendable done, data, error in
                if let data, !data.isEmpty { accumulator.append(data) }
                guard done else { return }
                if error != 0 {
                    continuation.resume(throwing: SparseCacheError(
                        .io, operation: "read", path: path, offset: offset, length: Int64(length),
                        errno: error))
                } else {
                    continuation.resume(returning: accumulator.take())
                }
            })
    }

    /// Stops the channel; the descriptor is closed once libdispatch is done with it.
    func close() {
        let channel = made.withLock { made -> DispatchIO? in
            made.closed = true
            return made.channel
        }
        channel?.close(flags: .stop)
    }
}

/// Collects the chunks one read delivers. The handler runs on one serial queue, so the chunks
/// of a read arrive one at a time; the mutex makes that explicit rather than assumed.
private final class ReadAccumulator: Sendable {
    private let bytes: Lock<[UInt8]>

    init(capacity: Int) {
        var initial: [UInt8] = []
        initial.reserveCapacity(capacity)
        bytes = Lock(initial)
    }

    func append(_ data: DispatchData) {
        bytes.withLock { bytes in
            data.enumerateBytes { chunk, _, _ in bytes.append(contentsOf: chunk) }
        }
    }

    func take() -> [UInt8] {
        bytes.withLock { bytes in
            let result = bytes
            bytes = []
            return result
        }
    }
}
