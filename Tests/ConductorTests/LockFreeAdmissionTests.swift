import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Tests for adding closures without the engine lock (`addJob(_:)` with a closure on a busy queue;
// see JobQueue+Admission.swift and Docs/Design.md): a pushed job is a member, in the order added,
// for everything that happens after its `addJob` returned, and no pushed job is ever left behind.
// The handshake that guarantees the last is also model-checked (Model/Admission.pml).
//
// A queue pushes while it is suspended, has no free slot, or has a worker about to run, and has
// unsettled jobs; so each test first makes the queue busy with a job added the ordinary way.
// `_hasPushedJobs` (package) shows that pushed jobs wait to be admitted, and `pushedWithoutLock`
// that a job really was pushed, whoever admitted it since: any thread's `explain()` or a stall
// watchdog, in a suite running beside these, admits the pushed jobs of every queue. Every other check
// uses public API.

/// How many closures `queue` took without the lock so far: debug builds count them. `nil` in release
/// builds, whose runs skip the checks that use it.
private func pushedWithoutLock(_ queue: JobQueue) -> Int? {
    #if DEBUG
        queue._pushedWithoutLockCount.load(ordering: .relaxed)
    #else
        nil
    #endif
}

/// Expects that `queue` has taken `expected` closures without the lock so far (debug builds).
private func expectPushed(_ queue: JobQueue, _ expected: Int, sourceLocation: SourceLocation = #_sourceLocation) {
    guard let pushed = pushedWithoutLock(queue) else { return }
    #expect(pushed == expected, sourceLocation: sourceLocation)
}

@Suite struct LockFreeAdmissionTests {
    @Test(
        "closures pushed onto a suspended queue are members, counted, described and cancelled at once",
        .hangLimit)
    func pushedJobsAreMembers() async {
        let queue = JobQueue(name: "pushed")
        queue.isSuspended = true
        let ran = Counter()
        queue.addJob { ran.increment() }  // Idle queue: admitted under the lock.
        #expect(!queue._hasPushedJobs)
        for _ in 0..<99 {
            queue.addJob { ran.increment() }
        }
        expectPushed(queue, 99)
        #expect(queue.jobCount == 100)
        #expect(!queue._hasPushedJobs)

        for _ in 0..<50 {
            queue.addJob { ran.increment() }
        }
        expectPushed(queue, 149)
        #expect(queue.jobs.count == 150)
        for _ in 0..<50 {
            queue.addJob { ran.increment() }
        }
        #expect(queue.description.hasSuffix("0 executing, 200 ready, 0 waiting, suspended"))
        #expect(queue.progress.totalUnitCount == 200)

        for _ in 0..<50 {
            queue.addJob { ran.increment() }
        }
        // With a progress object, every job is counted as it is added: nothing is pushed.
        #expect(!queue._hasPushedJobs)
        expectPushed(queue, 199)
        #expect(queue.progress.totalUnitCount == 250)

        queue.cancelAllJobs()
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 0)
        #expect(queue.jobCount == 0)
    }

    @Test(
        "cancelAllJobs cancels the closures not yet admitted, behind a barrier too; later closures run",
        .hangLimit)
    func cancelAllCancelsPushedJobs() async {
        let queue = JobQueue(name: "cancel-pushed")
        queue.isSuspended = true
        let ran = Counter()
        let barrierRan = Counter()
        queue.addJob { ran.increment() }  // Idle queue: admitted under the lock.
        for _ in 0..<99 {
            queue.addJob { ran.increment() }
        }
        queue.addBarrierBlock { barrierRan.increment() }
        for _ in 0..<100 {
            queue.addJob { ran.increment() }  // Held behind the barrier once admitted.
        }
        expectPushed(queue, 199)
        // Admits the pushed closures (not put in line) and cancels them in the same section.
        queue.cancelAllJobs()
        #expect(!queue._hasPushedJobs)
        // Every closure was cancelled: only the barrier, which keeps its place, is left.
        #expect(queue.jobCount == 1)

        queue.addJob { ran.increment() }
        queue.addJob { ran.increment() }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 2)
        #expect(barrierRan.value == 0)
        #expect(queue.jobCount == 0)
    }

    @Test(
        "pushed closures keep their place among jobs added under the lock, a barrier and a batch",
        .hangLimit)
    func pushedJobsKeepTheirPlace() async {
        let queue = JobQueue(name: "order", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let order = Log<String>()
        queue.addJob { order.append("a") }
        queue.addJob { order.append("b") }
        expectPushed(queue, 1)
        queue.addJob(BlockJob { order.append("c") })
        queue.addJob { order.append("d") }
        queue.addBarrierBlock { order.append("e") }
        queue.addJob { order.append("f") }
        queue.addJobs([BlockJob { order.append("g") }], waitUntilFinished: false)
        queue.addJob { order.append("h") }
        expectPushed(queue, 4)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(order.values == ["a", "b", "c", "d", "e", "f", "g", "h"])
    }

    @Test(
        "a closure pushed while the queue's only slot is held runs once the slot frees, with no wait to admit it",
        .hangLimit)
    func pushedWhileSaturatedRuns() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("saturated", limit: 1)
        let held = HeldJob(name: "held")
        queue.addJob(held)
        await held.started.wait()
        // The worker that started `held` has returned: nothing touches the queue until `finish()`.
        await drainSerialQueue(worker)
        let done = DispatchSemaphore(value: 0)
        queue.addJob { done.signal() }
        expectPushed(queue, 1)
        held.finish()
        // Nothing here admits the pushed job: the section where `held` finished must have.
        await waitForSignals(done)
        await queue.waitUntilAllJobsAreFinished()
        // Admitted before `held` left, so the queue was never idle, and its count has both jobs.
        #expect(queue.progress.totalUnitCount == 2)
    }

    @Test(
        "a closure pushed before a waiting job becomes ready runs first, and the queue's count keeps it",
        .hangLimit)
    func pushedJobsPrecedeLaterReadiness() async throws {
        let (queue, worker) = makeJobQueueOnSerialWorker("readiness", limit: 1)
        let held = HeldJob(name: "held")
        queue.addJob(held)
        await held.started.wait()
        await drainSerialQueue(worker)
        let order = Log<String>()
        let dependency = BlockJob {}
        let waiting = BlockJob { order.append("waiting") }
        try waiting.addDependency(dependency)
        queue.addJob(waiting)
        queue.addJob { order.append("pushed") }
        expectPushed(queue, 1)
        dependency.cancel()  // Finishes it: `waiting` becomes ready, after the pushed job was added.
        held.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(order.values == ["pushed", "waiting"])
        // One busy stretch: the queue was never idle, so its count includes every job.
        #expect(queue.progress.totalUnitCount == 3)
    }

    // A fraction of a second alone, but 28 to 42 s under ThreadSanitizer beside the whole suite in CI.
    @Test(
        "a wait that began before closures were pushed returns only after they ran (200 rounds)",
        .hangLimit)
    func waitCoversJobsPushedDuringIt() async {
        for round in 0..<200 {
            let queue = JobQueue(name: "wait-\(round)", maxConcurrentJobCount: 1)
            let held = HeldJob(name: "held")
            queue.addJob(held)
            await held.started.wait()
            let ran = Counter()
            let waited = DispatchSemaphore(value: 0)
            let ranWhenWaitReturned = Log<Int>()
            DispatchQueue(label: "LockFreeAdmissionTests.waiter").async {
                queue.waitUntilAllJobsAreFinished()
                ranWhenWaitReturned.append(ran.value)
                waited.signal()
            }
            // The waiter may register before, between or after these pushes; each returned
            // `addJob` must be waited for.
            for _ in 0..<3 {
                queue.addJob { ran.increment() }
            }
            held.finish()
            await waitForSignals(waited)
            #expect(ranWhenWaitReturned.values == [3], "round \(round)")
        }
    }

    @Test(
        "four threads pushing 5,000 closures each onto a limit-2 queue: each runs exactly once, none is left behind",
        .hangLimit)
    func producersLoseNothing() async {
        let queue = JobQueue(name: "producers", maxConcurrentJobCount: 2)
        let producers = 4
        let perProducer = 5_000
        let counts = (0..<producers * perProducer).map { _ in Counter() }
        let done = DispatchSemaphore(value: 0)
        for producer in 0..<producers {
            DispatchQueue(label: "LockFreeAdmissionTests.producer\(producer)").async {
                for index in 0..<perProducer {
                    let slot = counts[producer * perProducer + index]
                    // Each job signals: the test waits for the signals, not through the queue
                    // (whose calls admit pushed jobs), so a job left pushed would hang it.
                    queue.addJob {
                        slot.increment()
                        done.signal()
                    }
                }
            }
        }
        await waitForSignals(done, count: producers * perProducer)
        #expect(counts.allSatisfy { $0.value == 1 })
        await queue.waitUntilAllJobsAreFinished()
        #expect(queue.jobCount == 0)
    }
}
