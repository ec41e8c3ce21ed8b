import SparseCacheEngine

/// One open descriptor of a log file, shared by whoever uses it: it closes when the last
/// holder lets go, so an eviction from ``SmallObjectLogDescriptors`` never closes a descriptor
/// under a read (its number could name another file by then).
final class OpenLogFile: Sendable {
    let descriptor: FileDescriptor

    init(_ descriptor: FileDescriptor) {
        self.descriptor = descriptor
    }

    deinit {
        descriptor.close()
    }
}
