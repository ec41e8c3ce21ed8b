// The fill's phases and transitions (FillPhase), as values: no store, no file, no socket. A
// plain object stands in for a resource's handle, and tasks that do nothing for the work.
import Testing
import TestSupport

@testable import HTTPCache

@Suite("Fill phases and transitions")
struct FillPhaseTests {
    /// Stands in for a resource's handle: only its identity matters to the phases.
    final class Handle {}

    typealias Phase = FillPhase<Handle>

    static let info = ContentInfo(length: 1000, validator: ContentValidator(etag: "\"v1\""))

    /// An opening task that does nothing (the phase never runs it; the actor does).
    static func idle() -> Task<Void, Error> { Task {} }

    /// A closed phase's first reader: it starts the opening (the generation it runs for is
    /// returned too).
    static func opening(_ phase: inout Phase) -> (task: Task<Void, Error>, generation: Int) {
        var given: Int?
        guard
            case .opened(let task) = phase.attach(
                ownOpen: nil,
                open: { generation in
                    given = generation
                    return idle()
                })
        else {
            Issue.record("a closed resource's first reader did not start the opening")
            return (idle(), -1)
        }
        return (task, given ?? -1)
    }

    /// An open phase: opened, with a handle and info.
    static func open(_ handle: Handle = Handle()) -> Phase {
        var phase = Phase()
        let (_, generation) = opening(&phase)
        phase.opened(handle)
        phase.adopt(info)
        _ = phase.endWork(generation: generation)
        return phase
    }

    static func answer() -> HandedOverAnswer {
        HandedOverAnswer(
            response: RangeResponse(info: info, offset: 0, body: AsyncThrowingStream { $0.finish() }, cancel: {}), asked: 0..<4096,
            promotion: nil)
    }

    struct Failed: Error, Equatable { let name: String }

    @Test("closed: the first reader starts one opening; a reader meanwhile joins it instead of opening again")
    func secondOpenSharesTheFirst() {
        var phase = Phase()
        #expect(phase.handle == nil && phase.info == nil && phase.running == nil)
        let (task, generation) = Self.opening(&phase)
        #expect(generation == 0)
        guard case .opening(let work) = phase.phase else {
            Issue.record("not opening: \(phase.phase)")
            return
        }
        #expect(work.task == task)
        var made = 0
        let second = phase.attach(ownOpen: nil) { _ in
            made += 1
            return Self.idle()
        }
        guard case .join(let joined) = second else {
            Issue.record("a second reader while opening did not join: \(second)")
            return
        }
        #expect(joined == task)
        #expect(made == 0, "a second opening was made")
        #expect(phase.running == task)
    }

    @Test("opening → open once the work has a handle and info; readers are then ready")
    func openingEndsOpen() {
        var phase = Phase()
        let handle = Handle()
        let (_, generation) = Self.opening(&phase)
        let tookHandle = phase.opened(handle)
        #expect(tookHandle)
        // Fetches the work starts see what it has so far.
        #expect(phase.handle === handle && phase.info == nil)
        let tookInfo = phase.adopt(Self.info)
        #expect(tookInfo)
        #expect(phase.info == Self.info)
        let unused = phase.endWork(generation: generation)
        #expect(unused == nil)
        #expect(phase.isOpen && phase.running == nil && phase.handle === handle && phase.info == Self.info)
        guard case .ready = phase.attach(ownOpen: nil, open: { _ in Self.idle() }) else {
            Issue.record("a reader of an open resource was not ready")
            return
        }
    }

    @Test("opening → held when it had only the handle; the next reader's opening starts from that handle")
    func openingEndsHeld() {
        var phase = Phase()
        let handle = Handle()
        let (_, generation) = Self.opening(&phase)
        phase.opened(handle)
        _ = phase.endWork(generation: generation)
        guard case .held(let held) = phase.phase else {
            Issue.record("not held: \(phase.phase)")
            return
        }
        #expect(held === handle && phase.info == nil && phase.isSettledWithHandle)
        let (_, again) = Self.opening(&phase)
        #expect(again == generation)
        #expect(phase.handle === handle, "the new opening lost the handle held")
    }

    @Test("a failed opening: its readers get the error from its task; the phase is closed, and the next reader opens anew")
    func failureReachesEveryReader() async {
        var phase = Phase()
        let failing = Task<Void, Error> { throw Failed(name: "origin down") }
        guard case .opened(let task) = phase.attach(ownOpen: nil, open: { _ in failing }) else {
            Issue.record("no opening")
            return
        }
        guard case .join(let joined) = phase.attach(ownOpen: nil, open: { _ in Self.idle() }) else {
            Issue.record("the second reader did not join")
            return
        }
        for waiting in [task, joined] {
            await #expect(throws: Failed(name: "origin down")) { try await waiting.value }
        }
        _ = phase.endWork(generation: 0)
        guard case .closed(nil) = phase.phase else {
            Issue.record("not closed after a failed opening: \(phase.phase)")
            return
        }
        // Nothing was cut off: a reader whose open failed asks again.
        guard case .opened = phase.attach(ownOpen: 0, open: { _ in Self.idle() }) else {
            Issue.record("the next reader did not open anew")
            return
        }
    }

    @Test("an answer of unknown length cut off fails the reader whose own open brought it; others open anew")
    func cutOffFailsItsOpener() {
        var phase = Self.open()
        let task = phase.retire { _, _ in Self.idle() }
        _ = task
        phase.noteCutOff(generation: 0, error: Failed(name: "cut"))
        _ = phase.endWork(generation: 1)
        guard case .fail(let error) = phase.attach(ownOpen: 0, open: { _ in Self.idle() }) else {
            Issue.record("the opener of the cut-off answer did not fail")
            return
        }
        #expect(error as? Failed == Failed(name: "cut"))
        // The reader that only joined someone else's opening, and one whose open ran for
        // another generation, open anew.
        var other = phase
        guard case .opened = other.attach(ownOpen: 1, open: { _ in Self.idle() }) else {
            Issue.record("a reader of another generation failed")
            return
        }
        guard case .opened = phase.attach(ownOpen: nil, open: { _ in Self.idle() }) else {
            Issue.record("a reader with no open of its own failed")
            return
        }
    }

    @Test("open → replacing: the generation moves on, the old handle goes to the retirement, readers attached meanwhile wait for it")
    func retireWhileReadersAttached() {
        let old = Handle()
        var phase = Self.open(old)
        let content = phase.content
        var released: Handle?
        var given: Int?
        let task = phase.retire { handle, generation in
            released = handle
            given = generation
            return Self.idle()
        }
        #expect(released === old)
        #expect(given == 1 && phase.generation == 1)
        #expect(phase.handle == nil && phase.info == nil, "the old version is still readable")
        #expect(phase.content != content, "a quick hit of the old version would stay")
        guard case .replacing = phase.phase else {
            Issue.record("not replacing: \(phase.phase)")
            return
        }
        guard case .join(let joined) = phase.attach(ownOpen: nil, open: { _ in Self.idle() }) else {
            Issue.record("a reader during the replacement did not wait for it")
            return
        }
        #expect(joined == task)
        // The new version: opened and adopted by the retirement's work.
        let new = Handle()
        phase.opened(new)
        phase.adopt(ContentInfo(length: 2000))
        _ = phase.endWork(generation: 1)
        #expect(phase.isOpen && phase.handle === new && phase.info?.length == 2000)
    }

    @Test("replacing → closed when the retirement only removed the files (an invalidation)")
    func retireEndsClosed() {
        var phase = Self.open()
        _ = phase.retire { _, _ in Self.idle() }
        _ = phase.endWork(generation: 1)
        guard case .closed(nil) = phase.phase else {
            Issue.record("not closed: \(phase.phase)")
            return
        }
    }

    @Test("a retirement while one runs supersedes it: the older work's end changes nothing")
    func duplicateRetirement() {
        var phase = Self.open()
        let first = phase.retire { _, _ in Self.idle() }
        let halfway = Handle()
        phase.opened(halfway)
        var released: Handle?
        let second = phase.retire { handle, _ in
            released = handle
            return Self.idle()
        }
        #expect(second != first && phase.generation == 2)
        #expect(released === halfway, "the handle the superseded work had is not released")
        // The first retirement's task ends late: it must not end the second's phase.
        _ = phase.endWork(generation: 1)
        #expect(phase.running == second)
        _ = phase.endWork(generation: 2)
        #expect(phase.running == nil)
    }

    @Test("an opening that a retirement superseded ends without moving the phase")
    func staleOpeningEnd() {
        var phase = Phase()
        let (_, generation) = Self.opening(&phase)
        phase.opened(Handle())
        let retirement = phase.retire { _, _ in Self.idle() }
        _ = phase.endWork(generation: generation)
        #expect(phase.running == retirement)
    }

    @Test("close: open and held release their handle; closing while a task runs, or twice, does nothing")
    func close() {
        let handle = Handle()
        var phase = Self.open(handle)
        let released = phase.close()
        #expect(released === handle)
        #expect(phase.handle == nil && phase.info == nil)
        let releasedAgain = phase.close()
        #expect(releasedAgain == nil)

        var opening = Phase()
        let (task, _) = Self.opening(&opening)
        opening.opened(handle)
        let closedOpening = opening.close()
        #expect(closedOpening == nil, "an opening was closed under its task")
        #expect(opening.running == task && opening.handle === handle)

        var retiring = Self.open()
        _ = retiring.retire { _, _ in Self.idle() }
        let closedRetiring = retiring.close()
        #expect(closedRetiring == nil)
        #expect(retiring.running != nil)

        var held = Phase()
        let (_, generation) = Self.opening(&held)
        held.opened(handle)
        _ = held.endWork(generation: generation)
        let releasedHeld = held.close()
        #expect(releasedHeld === handle)
        guard case .closed(nil) = held.phase else {
            Issue.record("not closed: \(held.phase)")
            return
        }
    }

    @Test("an answer handed over: only while closed and none waits; the opening takes it once; unused, it comes back to be cancelled")
    func handOver() {
        var phase = Phase()
        let handedOver = phase.handOver(Self.answer())
        #expect(handedOver)
        let handedTwice = phase.handOver(Self.answer())
        #expect(!handedTwice, "a second answer replaced the first")
        #expect(phase.hasHandedOver)
        let (_, generation) = Self.opening(&phase)
        #expect(phase.hasHandedOver, "the opening lost the answer handed over")
        let handedWhileOpening = phase.handOver(Self.answer())
        #expect(!handedWhileOpening, "an answer was handed over to a running opening")
        let taken = phase.takeHandedOver()
        #expect(taken?.asked == 0..<4096)
        let takenAgain = phase.takeHandedOver()
        #expect(takenAgain == nil)
        _ = phase.endWork(generation: generation)

        // Not taken, and the opening ends open: the answer comes back to be cancelled.
        var unused = Phase()
        _ = unused.handOver(Self.answer())
        let (_, started) = Self.opening(&unused)
        unused.opened(Handle())
        unused.adopt(Self.info)
        let left = unused.endWork(generation: started)
        #expect(left != nil)
        #expect(!unused.hasHandedOver)

        // Not taken, and the opening ends closed: the next opening gets it.
        var kept = Phase()
        _ = kept.handOver(Self.answer())
        let (_, began) = Self.opening(&kept)
        let keptAnswer = kept.endWork(generation: began)
        #expect(keptAnswer == nil)
        #expect(kept.hasHandedOver)

        #expect(!Self.open().hasHandedOver)
        var open = Self.open()
        let handedWhileOpen = open.handOver(Self.answer())
        #expect(!handedWhileOpen, "an answer was handed over to an open resource")
    }

    @Test("the opener's fetch: recorded by the work, carried into open, taken once")
    func openerFetch() {
        var phase = Phase()
        let (_, generation) = Self.opening(&phase)
        phase.opened(Handle())
        phase.adopt(Self.info)
        let recorded = phase.startedOpenerFetch(7)
        #expect(recorded)
        let early = phase.takeOpenerFetch()
        #expect(early == nil, "taken before the opening ended")
        _ = phase.endWork(generation: generation)
        let taken = phase.takeOpenerFetch()
        #expect(taken == 7)
        let takenAgain = phase.takeOpenerFetch()
        #expect(takenAgain == nil, "taken twice")
        let recordedLate = phase.startedOpenerFetch(8)
        #expect(!recordedLate, "a fetch recorded outside an opening")
    }

    @Test("what only a running work may learn: a handle, and info only with a handle")
    func learnOnlyWhileWorking() {
        var closed = Phase()
        let tookHandle = closed.opened(Handle())
        #expect(!tookHandle)
        let tookInfo = closed.adopt(Self.info)
        #expect(!tookInfo)
        #expect(!closed.updateInfo { $0.length = 1 })
        #expect(closed.handle == nil && closed.info == nil)

        var opening = Phase()
        _ = Self.opening(&opening)
        let tookInfoWithoutHandle = opening.adopt(Self.info)
        #expect(!tookInfoWithoutHandle, "info adopted without a handle")
        let handle = Handle()
        opening.opened(handle)
        let dropped = opening.dropHandle()
        #expect(dropped === handle)
        let droppedAgain = opening.dropHandle()
        #expect(droppedAgain == nil)
        #expect(opening.handle == nil)
    }

    @Test("the content stamp moves with the handle or the info, not with readers coming and going")
    func contentStamp() {
        var phase = Self.open()
        let before = phase.content
        _ = phase.attach(ownOpen: nil) { _ in Self.idle() }
        _ = phase.takeOpenerFetch()
        #expect(phase.content == before, "a reader's attach would drop the quick hit")
        #expect(
            phase.updateInfo {
                $0.stored = nil; $0.length = 1000
            })
        #expect(phase.content != before)
        let updated = phase.content
        #expect(phase.updateInfo { $0.length = 3000 })
        #expect(phase.info?.length == 3000 && phase.content != updated)
        let adopted = phase.content
        _ = phase.close()
        #expect(phase.content != adopted)
    }
}
