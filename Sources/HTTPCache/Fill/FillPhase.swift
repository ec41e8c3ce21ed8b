/// The phase of one resource in a ``ProgressiveCache`` and the transitions between phases, as a
/// value. A transition changes the phase and says what the cache's actor is to do (the task to
/// wait for, the handle to release, the answer to cancel); it does none of it itself (no I/O, no
/// await), so every transition is tested alone, without files or sockets. ``FillResource``
/// holds one and changes it only through ``FillResource/update(_:)``.
///
/// | phase       | holds                                        | ends by                                         |
/// |:------------|:---------------------------------------------|:------------------------------------------------|
/// | `closed`    | an answer handed over for first contact      | ``attach(ownOpen:open:)`` → `opening`           |
/// | `opening`   | the task opening it, what it has learned     | ``endWork(generation:)`` → `open`/`held`/`closed`, ``retire(_:)`` |
/// | `open`      | handle, info, the opener's fetch             | ``close()`` → `closed`, ``retire(_:)`` → `replacing` |
/// | `held`      | handle only (an open failed after opening)   | ``attach(ownOpen:open:)`` → `opening`, ``close()``, ``retire(_:)`` |
/// | `replacing` | the task retiring the old version            | ``endWork(generation:)`` → `open`/`held`/`closed`, ``retire(_:)`` |
///
/// Generic over the handle so the tests can stand in any object for a resource's handle.
struct FillPhase<Handle: AnyObject> {
    enum Phase {
        /// Nothing is open. `handedOver`: the answer a small-object first contact received and
        /// found too large (or ranged), which the next open takes instead of asking again.
        case closed(handedOver: HandedOverAnswer?)
        /// A task opens the files and learns what the origin says of them (stored metadata or
        /// first contact). Readers that come meanwhile wait for it.
        case opening(Work)
        /// Readable: the handle (pinned in the store) and what the origin said.
        case open(Open)
        /// The files are open but nothing is known of their content: an open failed after it
        /// had the handle. The next reader's open starts from this handle; closing releases it.
        case held(Handle)
        /// The bytes were taken out of use (the origin changed, an invalidation, an answer of
        /// unknown length cut off, a refetch): a task stops the old version's fetches, releases
        /// its handle, then opens the new version or removes the files. The generation has moved
        /// on; readers wait for the task, as for an opening.
        case replacing(Work)
    }

    struct Open {
        var handle: Handle
        var info: ContentInfo
        /// The fetch first contact started with the answer to the opener's own request, holding
        /// one interest for the opener until the opener takes it (``takeOpenerFetch()``).
        var openerFetch: Int?
    }

    /// What an opening or a replacement runs, and what it has learned so far: the handle and the
    /// info once it has them (fetches the work starts read them before the work ends).
    struct Work {
        let task: Task<Void, Error>
        /// The generation it runs for: it moves the phase on only while that is current.
        let generation: Int
        var handle: Handle?
        var info: ContentInfo?
        var handedOver: HandedOverAnswer?
        var openerFetch: Int?
    }

    /// An answer of unknown length that was cut off, with the generation it filled.
    struct CutOff {
        let generation: Int
        let error: any Error
    }

    private(set) var phase = Phase.closed(handedOver: nil)
    /// Moves on with every retirement: bytes, fetches and readers of an older generation are of
    /// a version that is gone.
    private(set) var generation = 0
    /// The last answer of unknown length that was cut off: the reader whose own open brought it
    /// fails with its error (``attach(ownOpen:open:)``) instead of asking the origin again.
    /// Outlives the phases on purpose: it is looked at after the resource has closed.
    private(set) var cutOff: CutOff?
    /// Moves whenever ``handle`` or ``info`` changes: a quick hit stands for both as they were.
    private(set) var content = 0

    // MARK: What each phase holds

    /// The handle: the open one, the one held, or the one an opening has so far.
    var handle: Handle? {
        switch phase {
        case .open(let open): open.handle
        case .held(let handle): handle
        case .opening(let work), .replacing(let work): work.handle
        case .closed: nil
        }
    }

    /// What the origin said: the open one, or what an opening has learned so far.
    var info: ContentInfo? {
        switch phase {
        case .open(let open): open.info
        case .opening(let work), .replacing(let work): work.info
        case .closed, .held: nil
        }
    }

    /// The task of an opening or a replacement.
    var running: Task<Void, Error>? {
        switch phase {
        case .opening(let work), .replacing(let work): work.task
        case .closed, .open, .held: nil
        }
    }

    var isOpen: Bool {
        if case .open = phase { return true }
        return false
    }

    /// Open or held: something to close, and nothing runs.
    var isSettledWithHandle: Bool {
        switch phase {
        case .open, .held: true
        case .closed, .opening, .replacing: false
        }
    }

    /// Whether an answer waits for first contact (handed over, not yet taken).
    var hasHandedOver: Bool {
        switch phase {
        case .closed(let answer): answer != nil
        case .opening(let work), .replacing(let work): work.handedOver != nil
        case .open, .held: false
        }
    }

    // MARK: Readers

    enum AttachAction {
        /// Open: the reader reads.
        case ready
        /// An opening or a replacement runs: the reader waits for its task, then asks again.
        case join(Task<Void, Error>)
        /// This reader's call started the opening (its task): it waits for it, then asks again.
        case opened(Task<Void, Error>)
        /// The answer of unknown length this reader's own open brought was cut off: the reader
        /// fails with its error.
        case fail(any Error)
    }

    /// A reader wants the resource open. `ownOpen`: the generation this reader's own open ran
    /// for, once it ran. When nothing runs and nothing is open, `open` makes the task that
    /// opens it for the generation given, and the phase becomes `opening`: one opening for
    /// any number of readers.
    mutating func attach(ownOpen: Int?, open: (_ generation: Int) -> Task<Void, Error>) -> AttachAction {
        switch phase {
        case .open:
            return .ready
        case .opening(let work), .replacing(let work):
            return .join(work.task)
        case .closed(let handedOver):
            if let failed = failure(ownOpen: ownOpen) { return .fail(failed) }
            let task = open(generation)
            phase = .opening(Work(task: task, generation: generation, handedOver: handedOver))
            return .opened(task)
        case .held(let handle):
            if let failed = failure(ownOpen: ownOpen) { return .fail(failed) }
            let task = open(generation)
            phase = .opening(Work(task: task, generation: generation, handle: handle))
            return .opened(task)
        }
    }

    private func failure(ownOpen: Int?) -> (any Error)? {
        guard let ownOpen, let cutOff, cutOff.generation == ownOpen else { return nil }
        return cutOff.error
    }

    /// Takes the fetch first contact started for the opener (nil when there is none, or it
    /// was taken).
    mutating func takeOpenerFetch() -> Int? {
        guard case .open(var open) = phase, let id = open.openerFetch else { return nil }
        open.openerFetch = nil
        phase = .open(open)
        return id
    }

    // MARK: What an opening or a replacement learns

    /// The work has the resource's handle. False (nothing changes) outside an opening or a
    /// replacement.
    @discardableResult
    mutating func opened(_ handle: Handle) -> Bool {
        guard var work = work else { return false }
        work.handle = handle
        setWork(work)
        content += 1
        return true
    }

    /// The work lets its handle go (first contact starts the files again, or learned nothing):
    /// returns it for the caller to release, when there was one.
    mutating func dropHandle() -> Handle? {
        guard var work = work, let handle = work.handle else { return nil }
        work.handle = nil
        setWork(work)
        content += 1
        return handle
    }

    /// What the origin said (the length, validators, head), learned by the work or, when open,
    /// learned anew. False (nothing changes) when there is no handle to go with it.
    @discardableResult
    mutating func adopt(_ info: ContentInfo) -> Bool {
        switch phase {
        case .open(var open):
            open.info = info
            phase = .open(open)
        case .opening(var work), .replacing(var work):
            guard work.handle != nil else { return false }
            work.info = info
            setWork(work)
        case .closed, .held:
            return false
        }
        content += 1
        return true
    }

    /// Changes the info there is (a freshened head, the length an answer of unknown length
    /// turned out to have). False when there is none.
    @discardableResult
    mutating func updateInfo(_ change: (inout ContentInfo) -> Void) -> Bool {
        guard var info = info else { return false }
        change(&info)
        return adopt(info)
    }

    /// Takes the answer handed over for first contact (nil when none waits).
    mutating func takeHandedOver() -> HandedOverAnswer? {
        switch phase {
        case .closed(let answer):
            phase = .closed(handedOver: nil)
            return answer
        case .opening(var work), .replacing(var work):
            guard let answer = work.handedOver else { return nil }
            work.handedOver = nil
            setWork(work)
            return answer
        case .open, .held:
            return nil
        }
    }

    /// Leaves a first contact's answer for the next opening. Only while closed with none
    /// waiting: false otherwise, and the caller cancels the answer (another first contact is
    /// under way, or the resource is open).
    mutating func handOver(_ answer: HandedOverAnswer) -> Bool {
        guard case .closed(nil) = phase else { return false }
        phase = .closed(handedOver: answer)
        return true
    }

    /// First contact started the fetch `id` for the opener. False outside an opening or a
    /// replacement.
    @discardableResult
    mutating func startedOpenerFetch(_ id: Int) -> Bool {
        guard var work = work else { return false }
        work.openerFetch = id
        setWork(work)
        return true
    }

    /// The work of `generation` has ended (its task returns or throws): with a handle and info
    /// the resource is open, with a handle only held, else closed. A work no longer current (a
    /// retirement superseded it) changes nothing. Returns an answer handed over that nothing
    /// took, for the caller to cancel (a closed resource keeps it for the next opening).
    mutating func endWork(generation ended: Int) -> HandedOverAnswer? {
        guard let work = work, work.generation == ended else { return nil }
        switch (work.handle, work.info) {
        case (let handle?, let info?):
            phase = .open(Open(handle: handle, info: info, openerFetch: work.openerFetch))
            return work.handedOver
        case (let handle?, nil):
            phase = .held(handle)
            return work.handedOver
        case (nil, _):
            phase = .closed(handedOver: work.handedOver)
            return nil
        }
    }

    // MARK: Closing and retiring

    /// Closes an open or held resource: returns the handle to release. Nil, and nothing
    /// changes, while closed or while a task runs (it must end first).
    mutating func close() -> Handle? {
        let handle: Handle
        switch phase {
        case .open(let open): handle = open.handle
        case .held(let held): handle = held
        case .closed, .opening, .replacing: return nil
        }
        phase = .closed(handedOver: nil)
        content += 1
        return handle
    }

    /// Takes the resource's bytes out of use at once: the generation moves on and `replace`
    /// makes the task that finishes the retirement, given the handle to release (the open one,
    /// the one held, or the one a superseded work had) and the new generation. The phase is
    /// `replacing` from here until that task ends (``endWork(generation:)``). Returns the task.
    mutating func retire(_ replace: (_ old: Handle?, _ generation: Int) -> Task<Void, Error>) -> Task<Void, Error> {
        let old = handle
        var handedOver: HandedOverAnswer?
        switch phase {
        case .closed(let answer): handedOver = answer
        case .opening(let work), .replacing(let work): handedOver = work.handedOver
        case .open, .held: break
        }
        generation += 1
        let task = replace(old, generation)
        phase = .replacing(Work(task: task, generation: generation, handedOver: handedOver))
        content += 1
        return task
    }

    /// An answer of unknown length that filled `generation` was cut off with `error`.
    mutating func noteCutOff(generation: Int, error: any Error) {
        cutOff = CutOff(generation: generation, error: error)
    }

    // MARK: Helpers

    private var work: Work? {
        switch phase {
        case .opening(let work), .replacing(let work): work
        case .closed, .open, .held: nil
        }
    }

    private mutating func setWork(_ work: Work) {
        if case .replacing = phase { phase = .replacing(work) } else { phase = .opening(work) }
    }
}
