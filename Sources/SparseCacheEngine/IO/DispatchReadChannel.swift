import CShim
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Reads a file through a random-access DispatchIO channel: libdispatch issues the preads on its
/// own threads and the awaiting task is resumed when the bytes are in, so reads never block the
/// cooperative pool.
///
/// The channel owns its own read-only descriptor and closes it in the cleanup handler.
final class DispatchReadChannel: @unchecked Sendable {
    // @unchecked: DispatchIO and DispatchQueue are thread-safe objects; the stored properties
    // are immutable after init.
    private let channel: DispatchIO
    private let queue: DispatchQueue
    /// The channel's descriptor, for the fault hook (the channel closes it).
    private let rawDescriptor: Int32
    let path: String

    init(path: String) throws {
        let fd = try FileDescriptor.open(path, access: .readOnly)
        let queue = DispatchQueue(label: "sparsecache.read")
        self.queue = queue
        self.path = path
        self.rawDescriptor = fd.rawValue
        self.channel = Self.makeChannel(fd: fd.rawValue, queue: queue)
    }

    private static func makeChannel(fd: Int32, queue: DispatchQueue) -> DispatchIO {
        DispatchIO(
            type: .random, fileDescriptor: fd, queue: queue,
            cleanupHandler: { @Sendable _ in _ = sc_close(fd) })
    }

    /// Reads exactly `length` bytes at `offset`; fewer only when the file ends first.
    func read(offset: Int64, length: Int) async throws -> [UInt8] {
        if length == 0 { return [] }
        let accumulator = ReadAccumulator(capacity: length)
        let channel = self.channel
        let queue = self.queue
        let path = self.path
        let descriptor = rawDescriptor
        let faultsArmed = sc_faults_is_armed() != 0
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8], Error>) in
            if faultsArmed {
                // libdispatch issues its own preads, which the shim never sees: the fault table is
                // consulted here instead, on the channel's queue (a delay rule then takes that
                // queue's thread, as a slow device would, never a cooperative one).
                queue.async { @Sendable in
                    let injected = sc_fault_check_read(descriptor, offset, Int64(length))
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
        channel.close(flags: .stop)
    }
}

/// Collects the chunks one read delivers. The handler runs on one serial queue, so the chunks
/// of a read arrive one at a time; the mutex makes that explicit rather than assumed.
private final class ReadAccumulator: Sendable {
    private let bytes: Mutex<[UInt8]>

    init(capacity: Int) {
        var initial: [UInt8] = []
        initial.reserveCapacity(capacity)
        bytes = Mutex(initial)
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
