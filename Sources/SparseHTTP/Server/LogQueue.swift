import Dispatch
@_spi(Locking) import SparseCacheBase

/// Log lines written in order on a serial queue of their own, at most ``capacity`` waiting.
///
/// A request must never wait for the log (nor block the cooperative pool), so lines are handed
/// to a dispatch queue. When the reader of stdout stops reading, that queue would grow by a
/// line per request for as long as the server runs; past ``capacity`` lines waiting, new lines
/// are dropped and counted instead, and the next line written says how many went missing.
package final class LogQueue: Sendable {
    package let capacity: Int
    private let queue: DispatchQueue
    private let write: @Sendable (String) -> Void
    private let state = Lock<(waiting: Int, dropped: Int, droppedTotal: Int)>((0, 0, 0))

    /// - Parameter write: writes one line; may block (it runs on the queue).
    package init(label: String, capacity: Int = 10_000, write: @escaping @Sendable (String) -> Void) {
        self.capacity = max(1, capacity)
        queue = DispatchQueue(label: label)
        self.write = write
    }

    /// Queues `line`, or drops it when ``capacity`` lines are waiting.
    package func enqueue(_ line: String) {
        let dropped = state.withLock { state -> Int? in
            guard state.waiting < capacity else {
                state.dropped += 1
                state.droppedTotal += 1
                return nil
            }
            state.waiting += 1
            defer { state.dropped = 0 }
            return state.dropped
        }
        guard let dropped else { return }
        queue.async(execute: { @Sendable [self] in
            if dropped > 0 { write("(\(dropped) log line\(dropped == 1 ? "" : "s") dropped: the log was not read fast enough)") }
            write(line)
            state.withLock { $0.waiting -= 1 }
        })
    }

    /// Lines dropped so far.
    package var droppedLines: Int { state.withLock { $0.droppedTotal } }

    /// Waits until every queued line is written (for tests and shutdown).
    package func drain() {
        queue.sync {}
    }

    /// Runs `work` on the queue, in order with the lines, and waits for it (not counted).
    package func sync(execute work: () -> Void) {
        queue.sync(execute: work)
    }

    /// Runs `work` on the queue, in order with the lines (not counted: for rare work such as
    /// reopening a file or a problem report).
    package func async(execute work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }
}
