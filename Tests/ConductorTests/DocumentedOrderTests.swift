import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// The ordering and delivery guarantees of Docs/Concepts.md and Docs/Composition.md that no other
// test checked exactly as written. Each test quotes the line it checks.
//
// Waiters are resumed by the thread that finishes a job, and a resumed task runs wherever its
// executor puts it, so the order of two resumptions cannot be seen from the cooperative pool. The
// tests that check it run the waiting tasks on `SerialTaskExecutor`, a task executor over one
// serial Dispatch queue: each resumption enqueues its task there, so the order in which the tasks
// run afterwards is the order in which they were resumed. Nothing here sleeps or times anything.

// MARK: - Helpers

/// A task executor that runs every job on one serial Dispatch queue, first in, first out. Tasks
/// created with it as their preference run their nonisolated code there, so the order in which the
/// engine resumes them is the order in which they log.
private final class SerialTaskExecutor: TaskExecutor {
    let queue: DispatchQueue

    init(_ label: String) {
        queue = DispatchQueue(label: "DocumentedOrderTests.\(label)")
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Returns once everything enqueued before this call has run.
    func drain() async {
        await drainSerialQueue(queue)
    }
}

/// A job whose `cancel()` override logs its name, whether it saw itself cancelled, and whether every
/// job in `peers` was already cancelled.
// @unchecked Sendable: immutable references to Sendable objects; the rest is `Job`'s.
private final class LogsItsCancel: Job, @unchecked Sendable {
    let log: Log<String>
    let peers: Locked<[Job]>

    init(_ name: String, _ priority: JobPriority, log: Log<String>, peers: Locked<[Job]>) {
        self.log = log
        self.peers = peers
        super.init()
        self.name = name
        queuePriority = priority
    }

    override func cancel() {
        let allCancelled = peers.withLock { $0 }.allSatisfy(\.isCancelled)
        log.append("\(name ?? "?") self \(isCancelled) all \(allCancelled)")
        super.cancel()
    }
}

private let mainMarker = DispatchSpecificKey<String>()

/// "main" on the main queue, else "elsewhere".
private func whereAmI() -> String {
    DispatchQueue.getSpecific(key: mainMarker) ?? "elsewhere"
}

// MARK: - Tests

@Suite struct DocumentedOrderTests {
    // MARK: When a job finishes

    /// Concepts.md:293-294 ("The job's state becomes `finished`, its slot is freed, it leaves
    /// `jobs`, and its dependents are released"), before step 2 (observers) and step 3 (completion
    /// block); Concepts.md:116-119 (the outcome is set before observers are told `.finished`);
    /// Concepts.md:325-327 ("step 1 also completes the job's progress and every progress above it
    /// ... so whoever sees the job finished (an observer, a waiter) reads those counts complete").
    @Test func aFinishedObserverAndTheCompletionBlockFindStepOneDone() async throws {
        let queue = JobQueue(name: "step-one")
        let queueProgress = queue.progress
        let parked = JobQueue(name: "step-one-parked")
        parked.isSuspended = true
        let job = BlockJob {}
        let jobProgress = job.progress
        let dependent = BlockJob {}
        try dependent.addDependency(job)
        parked.addJob(dependent)
        let seen = Log<String>()
        @Sendable func snapshot(_ who: String) {
            let listed = queue.jobs.contains { $0 === job }
            seen.append(
                "\(who): \(job.state) outcome \(job.outcome != nil) listed \(listed) dependent \(dependent.state) "
                    + "progress \(jobProgress.fractionCompleted) queue \(queueProgress.fractionCompleted)")
        }
        job.observe { if $0 == .finished { snapshot("observer") } }
        job.completionBlock = { snapshot("completion") }
        queue.addJob(job)
        await job.waitUntilFinished()
        let expected = "finished outcome true listed false dependent ready progress 1.0 queue 1.0"
        #expect(seen.values == ["observer: \(expected)", "completion: \(expected)"])
        parked.isSuspended = false
        await parked.waitUntilAllJobsAreFinished()
    }

    /// Concepts.md:325-327: step 1 completes "every progress above it (its group's, its queue's)",
    /// so a child's `.finished` observer reads its group's progress with the child counted.
    @Test func aChildsFinishedObserverReadsItsGroupsProgressWithTheChildCounted() async {
        let queue = JobQueue(name: "step-one-group")
        let first = BlockJob {}
        let held = HeldJob(name: "held child")
        let group = GroupJob(name: "step-one-group", maxConcurrentJobCount: 2, jobs: [first, held])
        let groupProgress = group.progress
        let seen = Log<String>()
        first.observe { event in
            guard event == .finished else { return }
            seen.append("\(groupProgress.completedUnitCount) of \(groupProgress.totalUnitCount)")
        }
        queue.addJob(group)
        await first.waitUntilFinished()
        #expect(seen.values == ["1 of 2"])
        await held.started.wait()
        held.finish()
        await group.waitUntilFinished()
    }

    /// Concepts.md:301-302: "4. Threads and tasks in `job.waitUntilFinished()` resume. 5. The queue
    /// counts the job as settled; when none is left, `waitUntilAllJobsAreFinished()` resumes."
    /// (JobTests' `finishOrdering` checks steps 2 to 4 but puts the queue's waiter among the job's.)
    /// A job with callbacks settles after delivering them; one with only waiters settles in the
    /// critical section that finishes it: both paths.
    @Test(arguments: [false, true])
    func jobWaitersResumeBeforeQueueWaiters(withCallbacks: Bool) async throws {
        let executor = SerialTaskExecutor("steps-4-5")
        let queue = JobQueue(name: "steps-4-5")
        let job = HeldJob(name: "held")
        if withCallbacks { job.completionBlock = {} }
        queue.addJob(job)
        await job.started.wait()
        let log = Log<String>()
        // The queue's waiter registers first, so registration order cannot explain the result.
        let queueWaiter = Task(executorPreference: executor) {
            log.append("queue waits")
            await queue.waitUntilAllJobsAreFinished()
            log.append("queue waiter")
        }
        let jobWaiter = Task(executorPreference: executor) {
            log.append("job waits")
            await job.waitUntilFinished()
            log.append("job waiter")
        }
        await executor.drain()
        try #require(log.values == ["queue waits", "job waits"], "both wait before the job finishes")
        job.finish()
        await queueWaiter.value
        await jobWaiter.value
        #expect(log.values == ["queue waits", "job waits", "job waiter", "queue waiter"])
    }

    /// Concepts.md:313-318: "A `GroupJob`'s child ... counts its group down once steps 1 to 4 are
    /// done ... When it was the group's last unfinished child ..., the group then finishes on that
    /// thread. So whoever waits for the group ... finds every child's observers, completion block
    /// and waiters run". Composition.md:190-193 says the same. GroupJobTests checks the child's
    /// observers and completion block; this checks its waiters, and the group's steps 2 and 4.
    @Test(arguments: [false, true])
    func aChildsWaitersResumeBeforeItsGroupFinishes(childHasCallbacks: Bool) async throws {
        let executor = SerialTaskExecutor("group-steps")
        let queue = JobQueue(name: "group-steps")
        let child = HeldJob(name: "last child")
        if childHasCallbacks { child.completionBlock = {} }
        let group = GroupJob(name: "group-steps", jobs: [child])
        queue.addJob(group)
        await child.started.wait()
        let log = Log<String>()
        // The group's observer runs on the thread that ends the group; it logs through the
        // executor's queue, so its place among the resumed tasks shows when it ran.
        group.observe { event in
            if event == .finished { executor.queue.async { log.append("group .finished observer") } }
        }
        let groupWaiter = Task(executorPreference: executor) {
            await group.waitUntilFinished()
            log.append("group waiter")
        }
        let childWaiter = Task(executorPreference: executor) {
            await child.waitUntilFinished()
            log.append("child waiter")
        }
        await executor.drain()
        try #require(log.values.isEmpty && !group.isFinished)
        child.finish()
        await groupWaiter.value
        await childWaiter.value
        await executor.drain()
        #expect(log.values == ["child waiter", "group .finished observer", "group waiter"])
    }

    // MARK: Delivery rules

    /// Concepts.md:282-285: "a job's events arrive in lifecycle order. A job's events are delivered
    /// one at a time, never concurrently: on the thread that caused them, or on the thread already
    /// delivering an earlier event of the same job." A `.cancelled` caused by the first observer of
    /// `.started` waits until every observer has had `.started`.
    @Test func anEventCausedInsideADeliveryWaitsUntilEveryObserverHadTheEarlierOne() {
        let log = Log<String>()
        let job = BlockJob {}
        job.observe { [unowned job] event in
            log.append("first \(event)")
            if event == .started { job.cancel() }
        }
        job.observe { log.append("second \($0)") }
        job.start()
        #expect(
            log.values == [
                "first ready", "second ready", "first started", "second started",
                "first cancelled", "second cancelled", "first finished", "second finished",
            ])
    }

    /// Concepts.md:283-284, the other thread's case: `cancel()` called on another thread while
    /// `.started` is being delivered returns without delivering, and the delivering thread delivers
    /// `.cancelled` once the `.started` handler has returned.
    @Test(.hangLimit)
    func anEventCausedOnAnotherThreadIsDeliveredByTheThreadAlreadyDelivering() async {
        let (queue, _) = makeJobQueueOnSerialWorker("deliverer")
        let inStarted = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let log = Log<String>()
        let job = AsyncBlockJob { _ in }  // executing until the test calls finish()
        job.observe { event in
            guard event == .started else {
                log.append("\(event)")
                return
            }
            log.append("started begins")
            inStarted.signal()
            release.wait()
            log.append("started ends")
        }
        // Added from a thread of its own: whichever thread delivers `.started` blocks in the
        // handler, and it must not be one of the cooperative pool's.
        DispatchQueue(label: "DocumentedOrderTests.adder").async { queue.addJob(job) }
        await waitForSignals(inStarted)
        await runOnDispatchThread {
            job.cancel()
            log.append("cancel returned")
        }
        release.signal()
        job.finish()
        await job.waitUntilFinished()
        #expect(
            log.values == ["ready", "started begins", "cancel returned", "started ends", "cancelled", "finished"])
    }

    /// Concepts.md:259-261 ("`JobQueue.current` ... elsewhere it is `nil`, including inside
    /// observers and completion blocks, even when they run on a worker's thread") and 322-323.
    /// CallbackTests checks `.finished` and completion blocks; here every event, each caused from
    /// inside some job's work: `.ready` by a dependency finishing on another queue's worker,
    /// `.started` on the worker, `.cancelled` and `.finished` by the job's own work.
    @Test func everyCallbackRunsWithNoCurrentQueue() async throws {
        let first = JobQueue(name: "context-first")
        let second = JobQueue(name: "context-second")
        let inWork = Log<String>()
        let inCallbacks = Log<String>()
        @Sendable func record(_ label: String, _ log: Log<String>) {
            let current = JobQueue.current
            log.append("\(label): \(current === second ? "second" : current === first ? "first" : "nil")")
        }
        let dependency = BlockJob {}
        let job = AsyncBlockJob { job in
            record("work", inWork)
            job.cancel()
            job.finish()
        }
        try job.addDependency(dependency)
        job.observe { record("\($0)", inCallbacks) }
        job.completionBlock = { record("completion", inCallbacks) }
        second.addJob(job)
        first.addJob(dependency)
        await job.waitUntilFinished()
        #expect(inWork.values == ["work: second"])
        #expect(
            inCallbacks.values == [
                "ready: nil", "started: nil", "cancelled: nil", "finished: nil", "completion: nil",
            ])
    }

    /// Concepts.md:270-271 ("registers a handler for the events that happen after the call") and
    /// 288 ("Observing a finished job registers nothing").
    @Test func anObserverAddedLateGetsOnlyLaterEventsAndNoneOnceTheJobFinished() async {
        let queue = JobQueue(name: "late-observer")
        let startedDelivered = Signal()
        let job = AsyncBlockJob { _ in }
        job.observe { if $0 == .started { startedDelivered.fire() } }
        queue.addJob(job)
        // `.started` is being delivered: the snapshot of observers it goes to is taken.
        await startedDelivered.wait()
        let late = Log<JobEvent>()
        job.observe { late.append($0) }
        job.cancel()
        job.finish()
        await job.waitUntilFinished()
        #expect(late.values == [.cancelled, .finished])

        final class Captured: Sendable {}
        var captured: Captured? = Captured()
        let weakCaptured = WeakReference(captured)
        let calls = Counter()
        job.observe { [captured] _ in
            _ = captured
            calls.increment()
        }
        captured = nil
        #expect(weakCaptured.object == nil, "an observer of a finished job is not kept")
        job.cancel()
        #expect(calls.value == 0)
    }

    /// Concepts.md, "Observers, completion blocks and waiters": `observe(_:)` registers a handler
    /// for the events *delivered* after the call, and an event that happened while another thread
    /// was still delivering an earlier one of the same job is delivered later, by that thread. So
    /// an observer that the `.ready` handler adds after the job has started (its state is
    /// `executing`) still gets `.started` (Job+Observation.swift, `_deliverEvents()`).
    @Test(.hangLimit)
    func anObserverAddedAfterAnEventHappenedButBeforeItWasDeliveredGetsIt() async {
        let queue = JobQueue(name: "late-observer-pending")
        queue.qualityOfService = .utility
        let begun = DispatchSemaphore(value: 0)
        let registered = Signal()
        let late = Log<String>()
        let job = AsyncBlockJob { _ in begun.signal() }
        job.observe { [unowned job] event in
            guard event == .ready else { return }
            // On the adding (Dispatch) thread: wait until the work has begun, so `.started` has
            // happened and waits to be delivered by this thread.
            begun.wait()
            late.append("registered while \(job.state)")
            job.observe { late.append("\($0)") }
            registered.fire()
        }
        DispatchQueue(label: "DocumentedOrderTests.adder").async { queue.addJob(job) }
        await registered.wait()
        job.finish()
        await job.waitUntilFinished()
        #expect(late.values == ["registered while executing", "started", "finished"])
    }

    /// Concepts.md:275: `.ready` comes, for a job that waited on dependencies, "when the last one
    /// finished or was removed". DependencyTests checks the state; this checks the event, delivered
    /// on the thread that removed the dependency before `removeDependency` returns.
    @Test func readyIsDeliveredWhenTheLastDependencyIsRemoved() throws {
        let first = BlockJob {}
        let second = BlockJob {}
        let job = BlockJob {}
        try job.addDependency(first)
        try job.addDependency(second)
        let events = Log<JobEvent>()
        job.observe { events.append($0) }
        job.removeDependency(first)
        #expect(events.values.isEmpty)
        job.removeDependency(second)
        #expect(events.values == [.ready])
        job.start()
        #expect(events.values == [.ready, .started, .finished])
        first.cancel()
        second.cancel()
    }

    // MARK: The queue

    /// Concepts.md:68-74: `cancelAllJobs()` cancels every job "in one step ... Only then does it
    /// call each job's `cancel()`, in the order the jobs were added ... An override sees
    /// `isCancelled` already `true`." The jobs' priorities differ from the order they were added.
    @Test func cancelAllJobsCancelsEveryJobThenCallsTheOverridesInTheOrderAdded() async {
        let queue = JobQueue(name: "cancel-all-order")
        queue.isSuspended = true
        let log = Log<String>()
        let peers = Locked<[Job]>([])
        let jobs = [
            LogsItsCancel("a", .low, log: log, peers: peers),
            LogsItsCancel("b", .veryHigh, log: log, peers: peers),
            LogsItsCancel("c", .normal, log: log, peers: peers),
            LogsItsCancel("d", .high, log: log, peers: peers),
        ]
        peers.withLock { $0 = jobs }
        queue.addJob(jobs[0])
        queue.addJobs([jobs[1], jobs[2]], waitUntilFinished: false)
        queue.addJob(jobs[3])
        queue.cancelAllJobs()
        #expect(
            log.values == [
                "a self true all true", "b self true all true", "c self true all true", "d self true all true",
            ])
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        peers.withLock { $0 = [] }
    }

    /// Concepts.md:245: "A barrier appears in `jobs` until it finishes."
    @Test func aBarrierIsListedInJobsUntilItFinishes() async {
        let queue = JobQueue(name: "barrier-listed")
        let held = HeldJob(name: "before")
        queue.addJob(held)
        await held.started.wait()
        let seenInBlock = Log<Int>()
        queue.addBarrierBlock { seenInBlock.append(queue.jobCount) }
        let after = BlockJob {}
        queue.addJob(after)
        let listed = queue.jobs
        #expect(listed.count == 3)
        #expect(listed.first === held && listed.last === after)
        let barrier = listed[1]
        #expect(!barrier.isFinished)
        held.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(seenInBlock.values == [2], "inside its block, the barrier and the job held behind it are listed")
        #expect(barrier.isFinished && queue.jobs.isEmpty)
    }

    /// Concepts.md:237-238: "A suspended queue starts no job ... Cancelled jobs still finish at
    /// once": before `cancel()` returns, with their completion block run, and waiters return.
    @Test func jobsCancelledOnASuspendedQueueFinishAtOnce() async {
        let queue = JobQueue(name: "suspended-cancel")
        queue.isSuspended = true
        let ran = Counter()
        let completed = Counter()
        let job = BlockJob { ran.increment() }
        job.completionBlock = { completed.increment() }
        let kept = BlockJob { ran.increment() }
        queue.addJobs([job, kept], waitUntilFinished: false)
        job.cancel()
        #expect(job.isFinished && completed.value == 1)
        #expect(queue.jobs.count == 1 && queue.jobs.first === kept)
        await job.waitUntilFinished()
        #expect(ran.value == 0 && queue.isSuspended)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 1)
    }

    /// Concepts.md:254-255: "`waitUntilAllJobsAreFinished()` returns once every job added so far has
    /// finished ... Jobs added while waiting are waited for too."
    @Test func jobsAddedWhileWaitingAreWaitedForToo() async throws {
        let executor = SerialTaskExecutor("added-while-waiting")
        let queue = JobQueue(name: "added-while-waiting")
        let first = HeldJob(name: "first")
        queue.addJob(first)
        await first.started.wait()
        let returned = Flag()
        let waiter = Task(executorPreference: executor) {
            await queue.waitUntilAllJobsAreFinished()
            returned.set()
        }
        await executor.drain()  // the waiter is registered
        let second = HeldJob(name: "second")
        queue.addJob(second)
        await second.started.wait()
        // `first` settles on the executor's queue, so anything its finish resumes is enqueued there
        // before the second drain's block: had it resumed the waiter, the flag would be set.
        executor.queue.async { first.finish() }
        await executor.drain()
        await executor.drain()
        #expect(first.isFinished)
        #expect(!returned.value, "the queue's waiter returned while a job added during its wait was unfinished")
        second.finish()
        await waiter.value
        #expect(returned.value)
    }

    // MARK: Composition

    /// Composition.md:288-290 (after attempt *n* fails, another attempt if *n* is below
    /// `maxAttempts` and `shouldRetry(error)` returns `true`) and 308-311 (`makeAttempt` and
    /// `shouldRetry` run one at a time; the next attempt starts after the previous one).
    @Test func attemptsAndShouldRetryAlternateOneAtATime() async {
        struct Failed: Error {}
        let queue = JobQueue(name: "retry-order")
        let order = Log<String>()
        let retry = RetryJob(
            maxAttempts: 3,
            shouldRetry: { _ in
                order.append("shouldRetry")
                return true
            }
        ) { number in
            order.append("make \(number)")
            return ProbeJob { _ in
                order.append("run \(number)")
                throw Failed()
            }
        }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        #expect(
            order.values == [
                "make 1", "run 1", "shouldRetry", "make 2", "run 2", "shouldRetry", "make 3", "run 3",
            ])
        #expect(retry.attemptCount == 3)
    }

    /// Composition.md:254-256 says `JobQueue.main`'s "jobs, observers and completion blocks run on
    /// the main queue". Concepts.md:283-284 is the rule the engine follows: a callback runs on the
    /// thread that caused its event. So a job's `.started` and `.finished` observers and completion
    /// block run on main when its work ends there, but `.ready` runs on the thread that added the
    /// job (and an asynchronous job's `.finished` on the thread that called `finish()`).
    @Test func callbacksOfAJobOnTheMainQueueRunWhereTheirEventHappened() async {
        DispatchQueue.main.setSpecific(key: mainMarker, value: "main")
        let log = Log<String>()
        let job = BlockJob { log.append("work \(whereAmI())") }
        job.observe { log.append("\($0) \(whereAmI())") }
        job.completionBlock = { log.append("completion \(whereAmI())") }
        // The main queue runs nothing until `addJob(_:)`, which delivers `.ready`, has returned:
        // otherwise `.started` could go to the adding thread, still delivering `.ready`.
        let mainHeld = DispatchSemaphore(value: 0)
        let added = DispatchSemaphore(value: 0)
        DispatchQueue.main.async {
            mainHeld.signal()
            added.wait()
        }
        await waitForSignals(mainHeld)
        await runOnDispatchThread {
            JobQueue.main.addJob(job)
            added.signal()
        }
        await job.waitUntilFinished()
        #expect(
            log.values == [
                "ready elsewhere", "started main", "work main", "finished main", "completion main",
            ])
    }
}
