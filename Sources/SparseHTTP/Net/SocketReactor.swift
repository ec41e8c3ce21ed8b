import CShim
import Foundation
@_spi(Locking) import SparseCacheBase
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The sockets' event loops: one per processor, each an epoll instance and a thread of its own
/// that waits in `epoll_wait`, and also a task executor that runs the jobs of the tasks that
/// prefer it.
///
/// A connection's task prefers the loop its socket is registered with (see
/// ``HTTPServer``), so when its socket becomes ready the loop's thread resumes the task and
/// runs it at once: no hand-over to the cooperative pool, whose thread would have to wake up
/// for every request. Default actors the task calls run on the same thread (SE-0417) unless
/// another loop's task holds the actor, whose thread then runs the call (the task comes back
/// to its loop after it). Work that blocks never runs here: file I/O goes to the engine's
/// ``BlockingExecutor`` threads, whose completions come back as jobs.
///
/// A readiness event therefore costs one wake-up, of the loop's own thread: not a wake-up of
/// libdispatch's event thread, then of a source's queue, then of the cooperative pool, as
/// dispatch sources per connection would cost. Descriptors are registered once,
/// edge-triggered for both directions (see ``Readiness`` for why no edge is lost).
final class SocketReactor: TaskExecutor, Sendable {
    /// One loop per processor the process may use.
    static let loops: [SocketReactor] = (0..<max(1, ProcessInfo.processInfo.activeProcessorCount)).map { SocketReactor(number: $0) }
    private static let turn = Atomic<Int>(0)

    /// The loop a new socket registers with: the loop of the current task's connection
    /// (`LoopExecutor.current`: an origin connection a request opens stays on its loop), else
    /// the next in turn.
    static func forNewSocket() -> SocketReactor {
        (LoopExecutor.current as? SocketReactor) ?? loops[turn.add(1, ordering: .relaxed).oldValue % loops.count]
    }

    /// The loop that serves a client the loop `accepting` has just accepted: that loop itself,
    /// so the request that follows needs no other thread, unless another loop serves fewer
    /// clients (then the one serving the fewest, so a burst of new clients spreads over the
    /// processors). Measured on a warm range from a new connection each time, on an idle
    /// machine: p50 to the first byte 184-247 µs when clients went to the loops in turn,
    /// 145-171 µs served where accepted.
    static func forAccepted(by accepting: SocketReactor) -> SocketReactor {
        let index = loops.firstIndex { $0 === accepting } ?? 0
        return loops[loopForClient(acceptedBy: index, clients: loops.map { $0.clients.load(ordering: .relaxed) })]
    }

    /// The rule of ``forAccepted(by:)`` over the loops' client counts: `accepting` unless
    /// another serves fewer; among those serving the fewest, the first.
    static func loopForClient(acceptedBy accepting: Int, clients: [Int]) -> Int {
        guard let fewest = clients.min(), clients[accepting] > fewest else { return accepting }
        return clients.firstIndex(of: fewest)!
    }

    /// Accepted clients whose sockets are registered here (see ``forAccepted(by:)``).
    let clients = Atomic<Int>(0)

    /// The body buffer of the quick replies this loop's thread makes (``QuickReply``).
    let scratch = LoopScratch()
    /// The head buffer of those replies.
    let headScratch = LoopScratch()

    /// Whether the calling thread is this loop's.
    var ownsCurrentThread: Bool { thread.load(ordering: .relaxed) == Self.threadID() }

    private static func threadID() -> UInt { UInt(bitPattern: Int(bitPattern: pthread_self())) }

    private let epoll: Int32
    /// The eventfd that wakes the loop from `epoll_wait` when a job comes from another thread.
    private let wake: Int32
    /// Registered watches by token (0 is the wake descriptor's). Tokens are never reused, so an
    /// event that raced a removal finds nothing rather than another descriptor's watch.
    private let watches = Lock<[UInt64: SocketWatch]>([:])
    private let nextToken = Atomic<UInt64>(1)
    /// The loop thread's `pthread_self()`, once it runs.
    private let thread = Atomic<UInt>(0)

    private struct Jobs {
        var queue: [UnownedJob] = []
        /// The loop found no job and waits in (or is about to enter) `epoll_wait` without a
        /// time limit: the next job must wake it.
        var sleeping = false
    }

    private let jobs = Lock(Jobs())

    private init(number: Int) {
        epoll = sc_epoll_create()
        precondition(epoll >= 0, "epoll_create1 failed: errno \(errno)")
        wake = sc_wake_create()
        precondition(wake >= 0, "eventfd failed: errno \(errno)")
        precondition(sc_epoll_watch_input(epoll, wake, 0) == 0, "epoll_ctl of the wake descriptor failed: errno \(errno)")
        // Named from the thread itself: Foundation's `Thread.name` does not reach the system on
        // Linux, which left the loops named after the dispatch thread that started them in
        // `top -H`, `perf` and /proc/PID/task/*/comm.
        let name = "sc-loop-\(number)"
        let thread = Thread { [self] in
            _ = sc_thread_set_name(name)
            run()
        }
        thread.name = name
        thread.start()
    }

    /// Registers `watch` for `fd` (a listening socket every loop watches when `listener`);
    /// returns its token, or the errno of a refusal.
    func add(_ watch: SocketWatch, fd: Int32, listener: Bool = false) -> Result<UInt64, HTTPError> {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        watches.withLock { $0[token] = watch }
        guard (listener ? sc_epoll_watch_listener(epoll, fd, token) : sc_epoll_watch(epoll, fd, token)) == 0 else {
            let number = errno
            watches.withLock { $0[token] = nil }
            return .failure(HTTPError(.io, operation: "epoll_ctl", peer: "descriptor \(fd)", errno: number))
        }
        return .success(token)
    }

    /// Stops watching `fd`. When this returns, epoll no longer holds the descriptor, so the
    /// caller may close it.
    func remove(token: UInt64, fd: Int32) {
        _ = sc_epoll_unwatch(epoll, fd)
        watches.withLock { $0[token] = nil }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let wakeUp = jobs.withLock { jobs -> Bool in
            jobs.queue.append(job)
            defer { jobs.sleeping = false }
            return jobs.sleeping
        }
        if wakeUp { sc_wake_signal(wake) }
    }

    /// Jobs the loop runs at most between two looks at the sockets.
    static let jobsPerLook = 256

    /// The loop of the reactor's thread: never on the cooperative pool. Runs the jobs queued,
    /// and those they queue, until none is left or ``jobsPerLook`` ran; then takes the sockets'
    /// events (without waiting when jobs are left), and so on: a job that queues another
    /// cannot keep the sockets from being looked at. (Looking after every batch cost a request
    /// a dozen `epoll_wait` calls: each hop between a task and an actor is a batch of one.)
    private func run() {
        thread.store(Self.threadID(), ordering: .relaxed)
        let executor = asUnownedTaskExecutor()
        let capacity = 64
        var tokens = [UInt64](repeating: 0, count: capacity)
        var directions = [UInt32](repeating: 0, count: capacity)
        var batch: [UnownedJob] = []
        // Reused for every wake-up (a fresh array per `epoll_wait` was two allocations a request).
        var ready: [(SocketWatch, UInt32)] = []
        ready.reserveCapacity(capacity)
        while true {
            var ran = 0
            var idle = false
            repeat {
                jobs.withLock { jobs in
                    swap(&batch, &jobs.queue)
                    jobs.sleeping = batch.isEmpty
                }
                for job in batch { job.runSynchronously(on: executor) }
                ran += batch.count
                idle = batch.isEmpty
                batch.removeAll(keepingCapacity: true)
            } while !idle && ran < Self.jobsPerLook
            // Idle: no job is queued, and `sleeping` tells the next one to wake the wait.
            let count = sc_epoll_wait(epoll, &tokens, &directions, Int32(capacity), idle ? -1 : 0)
            if idle { jobs.withLock { $0.sleeping = false } }
            if count < 0 {
                // Only a signal may interrupt the wait; anything else would spin here for ever.
                let number = errno
                precondition(number == EINTR, "epoll_wait of an event loop failed: errno \(number)")
                continue
            }
            guard count > 0 else { continue }
            watches.withLock { watches in
                for index in 0..<Int(count) {
                    if let watch = watches[tokens[index]] { ready.append((watch, directions[index])) }
                }
            }
            if (0..<Int(count)).contains(where: { tokens[$0] == 0 }) { sc_wake_drain(wake) }
            for (watch, direction) in ready { watch.signal(direction) }
            ready.removeAll(keepingCapacity: true)
        }
    }
}
