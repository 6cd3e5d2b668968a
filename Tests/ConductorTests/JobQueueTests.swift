import Conductor
import ConductorTestSupport
import Dispatch
import Synchronization
import Testing

// Tests for JobQueue: order, the concurrency limit, batches, suspension, barriers, cancellation,
// `current`, `underlyingQueue`, lifetime, `jobs`/`jobCount` and re-entrancy.
//
// Synchronization notes (house rules: no sleeps, no timed assertions, never block the two
// cooperative-pool threads):
// - `waitForSignals(_:count:)` (ConductorTestSupport) blocks a thread of a fresh *serial*
//   DispatchQueue (Dispatch gives those their own "overcommit" thread at once) and resumes the
//   test's task when the semaphore is signalled.
// - On Linux, Swift tasks run on the default-QoS global Dispatch pool (one thread per core, two
//   here, growing by only one thread per second once all are blocked). Job bodies that block on
//   gates therefore run on `.utility` workers (`blockingQueue(_:limit:)`, `makeWorkers(_:)`), a
//   separate pool, and a test never blocks more than two of them at once. Jobs that must hold a
//   slot for a long time are `AsyncBlockJob`s that the test finishes: they hold their slot
//   without holding a thread.
// - To prove that something did NOT start, a test runs the queue on its own concurrent
//   `underlyingQueue` and drains it with a barrier block (`drainConcurrentQueue(_:)`): the engine
//   dispatches its workers to that queue synchronously from the call that made work startable, so
//   once a barrier submitted afterwards has run, every worker that could have started the job has
//   run to completion.
//   (Only done when no job body is blocked on that queue, or the barrier would wait forever.)
// - A worker that finishes a plain (synchronous) job claims the next job in the same critical
//   section in which it finishes the first, before that job's waiters are woken; so right after
//   `await job.waitUntilFinished()` the queue's decision about the next start is already visible.

// MARK: - Helpers

/// A concurrent Dispatch queue for a JobQueue's workers, so that the test can drain it with
/// `drainConcurrentQueue(_:)`. Its quality of service is `.utility`; see `blockingQueue(_:limit:)`.
private func makeWorkers(_ label: String) -> DispatchQueue {
    DispatchQueue(label: "JobQueueTests.workers.\(label)", qos: .utility, attributes: .concurrent)
}

/// A queue whose job bodies (or callbacks) may block.
///
/// On Linux, Swift concurrency's tasks run on the default-QoS global Dispatch pool, which has one
/// thread per core (two here) and grows by only one thread per second once all are blocked. Job
/// bodies that block on gates therefore run on `.utility` workers, a separate pool, so that they
/// never starve the test's own task.
private func blockingQueue(_ name: String, limit: Int = JobQueue.defaultMaxConcurrentJobCount) -> JobQueue {
    let queue = JobQueue(name: name, maxConcurrentJobCount: limit)
    queue.qualityOfService = .utility
    return queue
}

/// A synchronous job that signals `started`, blocks until `gate` is opened, then records whether
/// it had been cancelled meanwhile. Blocks a Dispatch thread while gated.
// @unchecked Sendable: semaphores, an atomic and an immutable `InFlight` reference; the rest is `Job`'s.
private final class GatedJob: Job, @unchecked Sendable {
    let started = DispatchSemaphore(value: 0)
    let gate = DispatchSemaphore(value: 0)
    private let cancelledAfterGate = Atomic<Bool>(false)
    private let tracker: InFlight?

    init(tracker: InFlight? = nil) {
        self.tracker = tracker
        super.init()
    }

    override func execute() {
        tracker?.enter()
        started.signal()
        gate.wait()
        cancelledAfterGate.store(isCancelled, ordering: .sequentiallyConsistent)
        tracker?.leave()
    }

    func open() { gate.signal() }
    var sawCancelled: Bool { cancelledAfterGate.load(ordering: .sequentiallyConsistent) }
}

/// An asynchronous job that signals `started` and then holds its slot, without holding a thread,
/// until the test calls `finish()`.
private func makeHolder(
    _ started: DispatchSemaphore, tracker: InFlight? = nil, log: Log<String>? = nil, name: String = "holder"
) -> AsyncBlockJob {
    AsyncBlockJob { _ in
        tracker?.enter()
        log?.append(name)
        started.signal()
    }
}

private func recordingJob(_ name: String, _ log: Log<String>, priority: JobPriority = .normal) -> BlockJob {
    let job = BlockJob { log.append(name) }
    job.queuePriority = priority
    job.name = name
    return job
}

private func isSameQueue(_ a: JobQueue?, _ b: JobQueue) -> Bool {
    guard let a else { return false }
    return a === b
}

private let specificKey = DispatchSpecificKey<String>()

// MARK: - Tests

@Suite(.serialized) struct JobQueueTests {

    // MARK: Order

    @Test func runsByPriorityThenFIFO() async {
        let queue = JobQueue(name: "order", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let log = Log<String>()
        let spec: [(String, JobPriority)] = [
            ("n1", .normal), ("l1", .low), ("h1", .high), ("n2", .normal), ("vl1", .veryLow),
            ("vh1", .veryHigh), ("h2", .high), ("l2", .low), ("n3", .normal), ("vh2", .veryHigh), ("vl2", .veryLow),
        ]
        for (name, priority) in spec {
            queue.addJob(recordingJob(name, log, priority: priority))
        }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["vh1", "vh2", "h1", "h2", "n1", "n2", "n3", "l1", "l2", "vl1", "vl2"])
    }

    @Test func changingPriorityOfAQueuedJobTakesEffect() async {
        let queue = JobQueue(name: "reprioritize", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let log = Log<String>()
        let a = recordingJob("a", log)
        let b = recordingJob("b", log)
        let c = recordingJob("c", log)
        let d = recordingJob("d", log)
        let e = recordingJob("e", log, priority: .low)
        for job in [a, b, c, d, e] { queue.addJob(job) }

        b.queuePriority = .high  // jumps ahead of everything
        d.queuePriority = .low  // back of the low level: after e
        c.queuePriority = .normal  // unchanged: keeps its place
        a.queuePriority = .veryLow  // down and back up: now at the back of normal, after c
        a.queuePriority = .normal
        #expect(b.queuePriority == .high)
        #expect(d.queuePriority == .low)

        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["b", "c", "a", "e", "d"])
    }

    /// The ready line's ring starts with 16 slots. Ten jobs run first, so the next ones start at
    /// slot 10, wrap past the end, and the seventeenth makes the ring grow while wrapped, with a
    /// stale entry (a job re-prioritized) and a cancelled one among them. The order must survive.
    /// (The first job of each burst waits in the line's front slot until the second arrives, and
    /// then moves to the ring, where it would have been.)
    @Test func orderSurvivesTheReadyLineWrappingAndGrowing() async {
        let queue = JobQueue(name: "wrap", maxConcurrentJobCount: 1)
        let log = Log<String>()
        queue.isSuspended = true
        for index in 0..<10 {
            queue.addJob(recordingJob("a\(index)", log))
        }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()

        queue.isSuspended = true
        let jobs = (0..<17).map { recordingJob("b\($0)", log) }
        for job in jobs {
            queue.addJob(job)
        }
        jobs[3].queuePriority = .high
        jobs[5].cancel()
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()

        let expected =
            (0..<10).map { "a\($0)" } + ["b3"] + (0..<17).filter { $0 != 3 && $0 != 5 }.map { "b\($0)" }
        #expect(log.values == expected)
    }

    /// The job that entered an empty line (in its front slot) runs before the jobs that came after
    /// it at its own priority or lower, but after those that came after it at a higher one; and
    /// once it is out of line (re-prioritized or cancelled), it no longer holds the front.
    @Test func jobAtTheFrontOfAnEmptyLineKeepsPriorityOrder() async {
        let queue = JobQueue(name: "front", maxConcurrentJobCount: 1)
        let log = Log<String>()
        queue.isSuspended = true
        queue.addJob(recordingJob("first", log, priority: .low))
        queue.addJob(recordingJob("same-level", log, priority: .low))
        queue.addJob(recordingJob("higher", log, priority: .high))
        queue.addJob(recordingJob("lower", log, priority: .veryLow))
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["higher", "first", "same-level", "lower"])

        let movedLog = Log<String>()
        queue.isSuspended = true
        let moved = recordingJob("moved", movedLog)
        queue.addJob(moved)
        moved.queuePriority = .low  // out of the front slot, to the back of the low level
        queue.addJob(recordingJob("next", movedLog))
        queue.addJob(recordingJob("behind", movedLog, priority: .low))
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(movedLog.values == ["next", "moved", "behind"])

        let cancelledLog = Log<String>()
        queue.isSuspended = true
        let cancelled = recordingJob("cancelled", cancelledLog)
        queue.addJob(cancelled)
        cancelled.cancel()  // the line's only entry leaves it
        queue.addJob(recordingJob("after", cancelledLog))
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(cancelledLog.values == ["after"])
        #expect(cancelled.isCancelled)
    }

    @Test func fifoFollowsTheOrderJobsBecameReady() async throws {
        let queue = JobQueue(name: "ready-order", maxConcurrentJobCount: 1)
        let parking = JobQueue(name: "parking")
        parking.isSuspended = true
        queue.isSuspended = true
        let log = Log<String>()
        let blocker = recordingJob("blocker", log)
        let late = recordingJob("late", log)  // added first, but ready only later
        try late.addDependency(blocker)
        let early = recordingJob("early", log)
        queue.addJob(late)
        queue.addJob(early)
        parking.addJob(blocker)
        parking.isSuspended = false
        await blocker.waitUntilFinished()
        #expect(late.isReady)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["blocker", "early", "late"])
    }

    // MARK: The concurrency limit

    @Test func limitIsNeverExceededByBlockingJobs() async {
        let queue = blockingQueue("limit-sync", limit: 2)
        let tracker = InFlight()
        let started = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let total = 8
        for _ in 0..<total {
            queue.addJob {
                tracker.enter()
                started.signal()
                gate.wait()
                tracker.leave()
            }
        }
        await waitForSignals(started, count: 2)
        #expect(tracker.now == 2)
        // Release one job at a time; each release lets exactly one more start.
        for _ in 0..<(total - 2) {
            gate.signal()
            await waitForSignals(started)
        }
        gate.signal()
        gate.signal()
        await queue.waitUntilAllJobsAreFinished()
        #expect(tracker.starts == total)
        #expect(tracker.maximum == 2)
    }

    @Test func limitIsExactForAsynchronousJobs() async {
        let workers = makeWorkers("limit-async")
        let queue = JobQueue(name: "limit-async", maxConcurrentJobCount: 3)
        queue.underlyingQueue = workers
        let tracker = InFlight()
        let started = DispatchSemaphore(value: 0)
        let startedJobs = Log<AsyncBlockJob>()
        let total = 10
        for _ in 0..<total {
            queue.addJob(
                AsyncBlockJob { job in
                    tracker.enter()
                    startedJobs.append(job)
                    started.signal()
                })
        }
        await waitForSignals(started, count: 3)
        await drainConcurrentQueue(workers)
        // execute() has returned for all three, yet they hold their slots until finish().
        #expect(startedJobs.count == 3)
        for finished in 0..<(total - 3) {
            let job = startedJobs.values[finished]
            tracker.leave()
            job.finish()
            await waitForSignals(started)
            await drainConcurrentQueue(workers)
            #expect(startedJobs.count == 3 + finished + 1)
        }
        for job in startedJobs.values[(total - 3)...] {
            tracker.leave()
            job.finish()
        }
        await queue.waitUntilAllJobsAreFinished()
        #expect(tracker.starts == total)
        #expect(tracker.maximum == 3)
    }

    @Test func asynchronousJobHoldsItsSlotUntilFinish() async {
        let workers = makeWorkers("async-slot")
        let queue = JobQueue(name: "async-slot", maxConcurrentJobCount: 1)
        queue.underlyingQueue = workers
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started)
        let sawHolderFinished = Flag()
        let next = BlockJob { sawHolderFinished.set(holder.isFinished) }
        queue.addJob(holder)
        queue.addJob(next)
        await waitForSignals(started)
        await drainConcurrentQueue(workers)
        #expect(holder.isExecuting)
        #expect(next.state == .ready)
        holder.finish()
        await next.waitUntilFinished()
        #expect(sawHolderFinished.value)
    }

    @Test func raisingTheLimitStartsWaitingJobsAtOnce() async {
        let queue = blockingQueue("raise", limit: 1)
        let first = GatedJob()
        let secondStarted = DispatchSemaphore(value: 0)
        let firstWasRunning = Flag()
        let second = BlockJob {
            firstWasRunning.set(first.isExecuting)
            secondStarted.signal()
        }
        queue.addJob(first)
        queue.addJob(second)
        await waitForSignals(first.started)
        queue.maxConcurrentJobCount = 2
        #expect(queue.maxConcurrentJobCount == 2)
        // If raising the limit did not start the waiting job, this would never return.
        await waitForSignals(secondStarted)
        #expect(firstWasRunning.value)
        #expect(first.isExecuting)
        first.open()
        await queue.waitUntilAllJobsAreFinished()
        #expect(first.isFinished && second.isFinished)
    }

    @Test func loweringTheLimitStopsNewStartsUntilBelowIt() async {
        let queue = blockingQueue("lower-sync", limit: 2)
        let first = GatedJob()
        let second = GatedJob()
        let log = Log<String>()
        let sawSecondFinished = Flag()
        let third = BlockJob {
            sawSecondFinished.set(second.isFinished)
            log.append("third")
        }
        queue.addJob(first)
        queue.addJob(second)
        queue.addJob(third)
        await waitForSignals(first.started)
        await waitForSignals(second.started)
        queue.maxConcurrentJobCount = 1
        first.open()
        await first.waitUntilFinished()
        // One job still runs and the limit is 1: the worker that finished `first` started nothing.
        #expect(third.state == .ready)
        second.open()
        await queue.waitUntilAllJobsAreFinished()
        #expect(sawSecondFinished.value)
        #expect(log.values == ["third"])
    }

    @Test func loweringTheLimitWithAsynchronousJobs() async {
        let workers = makeWorkers("lower-async")
        let queue = JobQueue(name: "lower-async", maxConcurrentJobCount: 3)
        queue.underlyingQueue = workers
        let tracker = InFlight()
        let started = DispatchSemaphore(value: 0)
        let holders = (0..<3).map { _ in makeHolder(started, tracker: tracker) }
        let after = InFlight()
        let waiting = (0..<3).map { _ in
            BlockJob {
                after.enter(); after.leave()
            }
        }
        for job in holders { queue.addJob(job) }
        for job in waiting { queue.addJob(job) }
        await waitForSignals(started, count: 3)
        queue.maxConcurrentJobCount = 1

        tracker.leave()
        holders[0].finish()
        await drainConcurrentQueue(workers)
        #expect(waiting.allSatisfy { $0.state == .ready })  // 2 running, limit 1

        tracker.leave()
        holders[1].finish()
        await drainConcurrentQueue(workers)
        #expect(waiting.allSatisfy { $0.state == .ready })  // 1 running, limit 1

        tracker.leave()
        holders[2].finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(after.starts == 3)
        #expect(after.maximum == 1)
        #expect(tracker.maximum == 3)
    }

    @Test func limitZeroStartsNothingUntilRaised() async {
        let workers = makeWorkers("zero")
        let queue = JobQueue(name: "zero", maxConcurrentJobCount: 0)
        queue.underlyingQueue = workers
        let log = Log<String>()
        let jobs = ["a", "b", "c"].map { recordingJob($0, log) }
        for job in jobs { queue.addJob(job) }
        await drainConcurrentQueue(workers)
        #expect(log.count == 0)
        #expect(jobs.allSatisfy { $0.state == .ready })
        #expect(queue.jobCount == 3)

        queue.maxConcurrentJobCount = 1
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["a", "b", "c"])

        // Setting 0 while a job runs: it goes on, but nothing new starts.
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started)
        let next = recordingJob("next", log)
        queue.addJob(holder)
        queue.addJob(next)
        await waitForSignals(started)
        queue.maxConcurrentJobCount = 0
        holder.finish()
        await drainConcurrentQueue(workers)
        #expect(holder.isFinished)
        #expect(next.state == .ready)
        queue.maxConcurrentJobCount = 2
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["a", "b", "c", "next"])
    }

    // MARK: Helpers standing by

    /// Thousands of empty jobs first: one worker keeps pace with them, so a helper sent meanwhile
    /// may stand by instead of joining. Then a job (or its completion block) blocks its worker
    /// until a job added after it has run. That job can only run if a helper joins once the running
    /// worker stops claiming; a helper that kept standing by would leave the test hanging.
    @Test(
        "a worker stuck in a job or its callbacks after a run of short jobs gets a helper",
        .hangLimit,
        arguments: [false, true])
    func stuckWorkerGetsAHelper(blockInCompletion: Bool) async {
        let queue = blockingQueue("helper", limit: 2)
        let ran = Counter()
        for _ in 0..<20_000 {
            queue.addJob { ran.increment() }
        }
        let released = DispatchSemaphore(value: 0)
        let stuck = BlockJob { if !blockInCompletion { released.wait() } }
        if blockInCompletion {
            stuck.completionBlock = { released.wait() }
        }
        queue.addJob(stuck)
        queue.addJob { released.signal() }
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 20_000)
        #expect(stuck.state == .finished)
    }

    // MARK: Batches

    @Test func addJobsAppliesPrioritiesAcrossTheBatch() async {
        let queue = JobQueue(name: "batch", maxConcurrentJobCount: 1)
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started)
        queue.addJob(holder)
        await waitForSignals(started)
        let log = Log<String>()
        let batch = [
            recordingJob("low", log, priority: .low),
            recordingJob("n1", log),
            recordingJob("vh", log, priority: .veryHigh),
            recordingJob("h", log, priority: .high),
            recordingJob("vl", log, priority: .veryLow),
            recordingJob("n2", log),
        ]
        queue.addJobs(batch, waitUntilFinished: false)
        #expect(log.count == 0)
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["vh", "h", "n1", "n2", "low", "vl"])
    }

    @Test func cancellingMostQueuedJobsKeepsTheRestInOrder() async {
        // 300 ready jobs over two priorities; cancelling two of every three leaves stale entries
        // that outnumber the live ones, so the ready buckets are compacted (in place) on the way.
        let queue = JobQueue(name: "compacted", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let log = Log<String>()
        let jobs = (0..<300).map { index in
            recordingJob("\(index)", log, priority: index.isMultiple(of: 2) ? .high : .normal)
        }
        queue.addJobs(jobs, waitUntilFinished: false)
        for (index, job) in jobs.enumerated() where !index.isMultiple(of: 3) {
            job.cancel()
        }
        // Added after the compaction: they must follow the survivors of their priority.
        let late = [recordingJob("late-normal", log), recordingJob("late-high", log, priority: .high)]
        queue.addJobs(late, waitUntilFinished: false)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        let survivors = (0..<300).filter { $0.isMultiple(of: 3) }
        let high = survivors.filter { $0.isMultiple(of: 2) }.map { "\($0)" }
        let normal = survivors.filter { !$0.isMultiple(of: 2) }.map { "\($0)" }
        #expect(log.values == high + ["late-high"] + normal + ["late-normal"])
    }

    /// Adds `count` closures to `queue` (suspended), cancels those `cancels` picks, and returns
    /// weak references to every job; the caller keeps no strong reference.
    private static func addAndCancel(
        _ count: Int, on queue: JobQueue, cancels: (Int) -> Bool
    ) -> [WeakReference<Job>] {
        let jobs = (0..<count).map { _ in BlockJob {} }
        queue.addJobs(jobs, waitUntilFinished: false)
        for (index, job) in jobs.enumerated() where cancels(index) {
            job.cancel()
        }
        return jobs.map { WeakReference($0) }
    }

    @Test func jobsCancelledInTheReadyLineAreFreed() async {
        // Each way a cancelled job's entry leaves the ready line must let the job go. Two of every
        // three cancelled: once the stale entries outnumber the live ones (at the 151st),
        // compaction drops them while the queue is still suspended; the rest go when the line
        // empties. One in fifty: each is dropped when a pop skips it.
        let (queue, worker) = makeJobQueueOnSerialWorker("cancelled-in-line", limit: 1)
        queue.isSuspended = true
        let compacted = Self.addAndCancel(300, on: queue) { !$0.isMultiple(of: 3) }
        let cancelled = compacted.enumerated().filter { !$0.offset.isMultiple(of: 3) }
        let freed = cancelled.filter { $0.element.object == nil }.count
        #expect(freed >= 151, "\(freed) of 200 cancelled jobs freed before the queue ran")
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)  // the worker that finished the last job has let go of it
        #expect(compacted.allSatisfy { $0.object == nil })

        queue.isSuspended = true
        let skipped = Self.addAndCancel(300, on: queue) { $0.isMultiple(of: 50) }
        #expect(skipped.enumerated().filter { $0.offset.isMultiple(of: 50) }.allSatisfy { $0.element.object != nil })
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(skipped.allSatisfy { $0.object == nil })

        // The front slot: the line's only entry, cancelled, empties the line.
        queue.isSuspended = true
        let single = Self.addAndCancel(1, on: queue) { _ in true }
        #expect(single[0].object == nil)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test func compactingAWrappedReadyRingKeepsTheOrder() async {
        // The first 101 of 200 jobs run, and the 101st suspends the queue: the ring's head is now
        // past its start. 150 more wrap around the end of the 256-slot ring; cancelling two of every
        // three waiting jobs then compacts entries on both sides of the wrap.
        let queue = JobQueue(name: "wrapped", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let log = Log<String>()
        let suspended = DispatchSemaphore(value: 0)
        let first = (0..<200).map { index in
            index == 100
                ? BlockJob {
                    log.append("100")
                    queue.isSuspended = true
                    suspended.signal()
                }
                : recordingJob("\(index)", log)
        }
        queue.addJobs(first, waitUntilFinished: false)
        queue.isSuspended = false
        await waitForSignals(suspended)
        let second = (200..<350).map { recordingJob("\($0)", log) }
        queue.addJobs(second, waitUntilFinished: false)
        let waiting = Array((first + second)[101...])
        for (offset, job) in waiting.enumerated() where !offset.isMultiple(of: 3) {
            job.cancel()
        }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        let survivors = (101..<350).filter { ($0 - 101).isMultiple(of: 3) }
        #expect(log.values == (0...100).map { "\($0)" } + survivors.map { "\($0)" })
    }

    @Test func addJobsIsAtomicOnAnIdleQueue() async {
        let queue = JobQueue(name: "batch-idle", maxConcurrentJobCount: 1)
        let log = Log<String>()
        var batch: [Job] = (0..<200).map { recordingJob("low\($0)", log, priority: .low) }
        let veryHigh = recordingJob("vh", log, priority: .veryHigh)
        batch.append(veryHigh)
        batch.append(recordingJob("h", log, priority: .high))

        // Deterministic part: events are never delivered under the engine lock, so when the
        // first job's `.ready` (posted when the queue admits it) reaches its observer, the lock has
        // been released; an atomic batch must by then have admitted its last jobs too. Added job by
        // job, `veryHigh` would not even be on the queue yet.
        let lastWasAdmitted = Log<Bool>()
        batch[0].observe { event in
            guard event == .ready else { return }
            // Membership first: a job missing from `jobs` is either not added yet or already
            // finished, and a finished one is no longer `.ready` when its state is read next.
            lastWasAdmitted.append(queue.jobs.contains { $0 === veryHigh } || veryHigh.state != .ready)
        }

        queue.addJobs(batch, waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(lastWasAdmitted.values == [true])
        // Scheduling part: a job-by-job addition would usually have let a worker start one of the
        // low-priority jobs before the high-priority ones arrived.
        let items = log.values
        #expect(items.count == 202)
        #expect(Array(items.prefix(3)) == ["vh", "h", "low0"])
    }

    @Test func addJobsWaitUntilFinishedReturnsAfterAllFinished() async {
        let queue = blockingQueue("batch-wait", limit: 2)
        let started = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let completions = Counter()
        let batch: [Job] = (0..<6).map { _ in
            let job = BlockJob {
                started.signal()
                gate.wait()
            }
            job.completionBlock = { completions.increment() }
            return job
        }
        let returned = Flag()
        async let observedAtReturn: (allFinished: Bool, completions: Int) = runOnDispatchThread {
            queue.addJobs(batch, waitUntilFinished: true)
            returned.set()
            return (batch.allSatisfy { $0.isFinished }, completions.value)
        }
        await waitForSignals(started)
        // The first job is blocked on the gate, so the call cannot have returned.
        #expect(!returned.value)
        for _ in batch { gate.signal() }
        let result = await observedAtReturn
        #expect(result.allFinished)
        #expect(result.completions == batch.count)
        #expect(returned.value)
    }

    // MARK: Suspension

    @Test func suspensionStopsNewStartsWhileRunningJobsGoOn() async {
        let workers = makeWorkers("suspend")
        let queue = JobQueue(name: "suspend")
        queue.underlyingQueue = workers
        let log = Log<String>()
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started)
        let gated = GatedJob()
        queue.addJob(holder)
        queue.addJob(gated)
        await waitForSignals(started)
        await waitForSignals(gated.started)

        queue.isSuspended = true
        #expect(queue.isSuspended)
        let waiting = ["a", "b"].map { recordingJob($0, log) }
        for job in waiting { queue.addJob(job) }

        // Running jobs go on and finish while suspended.
        gated.open()
        await gated.waitUntilFinished()
        holder.finish()
        await holder.waitUntilFinished()
        await drainConcurrentQueue(workers)
        #expect(log.count == 0)
        #expect(waiting.allSatisfy { $0.state == .ready })

        // A cancelled job still finishes at once while suspended.
        let cancelled = recordingJob("cancelled", log)
        queue.addJob(cancelled)
        cancelled.cancel()
        #expect(cancelled.isFinished)
        #expect(queue.jobCount == 2)

        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.count == 2)
        #expect(Set(log.values) == ["a", "b"])  // the queue is wide: any order
    }

    // MARK: Barriers

    @Test func barrierWaitsForEarlierJobsRunsAloneAndHoldsLaterOnes() async {
        let workers = makeWorkers("barrier")
        let queue = JobQueue(name: "barrier")
        queue.underlyingQueue = workers
        let tracker = InFlight()
        let log = Log<String>()
        let inBarrier = Flag()
        let barrierDone = Flag()
        let violations = Log<String>()

        let early = BlockJob {
            tracker.enter()
            log.append("early")
            tracker.leave()
        }
        let startedA = DispatchSemaphore(value: 0)
        let startedB = DispatchSemaphore(value: 0)
        let holderA = makeHolder(startedA, tracker: tracker, log: log, name: "holderA")
        let holderB = makeHolder(startedB, tracker: tracker, log: log, name: "holderB")
        queue.addJob(early)
        queue.addJob(holderA)
        queue.addJob(holderB)
        await waitForSignals(startedA)
        await waitForSignals(startedB)

        let barrierStarted = DispatchSemaphore(value: 0)
        let barrierGate = DispatchSemaphore(value: 0)
        queue.addBarrierBlock {
            inBarrier.set()
            if tracker.now != 0 { violations.append("barrier ran with \(tracker.now) jobs in flight") }
            let earlierFinished = early.isFinished && holderA.isFinished && holderB.isFinished
            if !earlierFinished { violations.append("barrier ran before earlier jobs finished") }
            log.append("barrier")
            barrierStarted.signal()
            // Block (so that held jobs get a chance to start wrongly) only when running at the
            // right time: a barrier that ran too early must not block the worker queue that the
            // test drains, or the test would hang instead of failing.
            if earlierFinished { barrierGate.wait() }
            inBarrier.set(false)
            barrierDone.set()
        }
        let late1 = BlockJob {
            if inBarrier.value || !barrierDone.value { violations.append("late1 ran before the barrier finished") }
            log.append("late1")
        }
        let late2 = AsyncBlockJob { job in
            if inBarrier.value || !barrierDone.value { violations.append("late2 ran before the barrier finished") }
            log.append("late2")
            job.finish()
        }
        queue.addJob(late1)
        queue.addJob(late2)

        await drainConcurrentQueue(workers)
        #expect(!log.values.contains("barrier"))
        #expect(late1.state == .ready && late2.state == .ready)

        tracker.leave()
        holderA.finish()
        await drainConcurrentQueue(workers)
        // holderB (asynchronous) still runs: the barrier must keep waiting.
        #expect(!log.values.contains("barrier"))
        #expect(late1.state == .ready && late2.state == .ready)

        tracker.leave()
        holderB.finish()
        await waitForSignals(barrierStarted)
        #expect(late1.state == .ready && late2.state == .ready)
        barrierGate.signal()
        await queue.waitUntilAllJobsAreFinished()

        #expect(violations.values == [])
        let items = log.values
        #expect(items.count == 6)
        #expect(Set(items.prefix(3)) == ["early", "holderA", "holderB"])
        #expect(items[3] == "barrier")
        #expect(Set(items.suffix(2)) == ["late1", "late2"])
    }

    @Test func severalBarriersInARow() async {
        let workers = makeWorkers("barriers")
        let queue = JobQueue(name: "barriers")
        queue.underlyingQueue = workers
        let log = Log<String>()
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started, log: log, name: "j1a")
        queue.addJob(holder)
        queue.addJob(recordingJob("j1b", log))
        queue.addBarrierBlock { log.append("b1") }
        queue.addBarrierBlock { log.append("b2") }
        queue.addJob(recordingJob("j2a", log))
        queue.addJob(recordingJob("j2b", log, priority: .veryHigh))
        queue.addBarrierBlock { log.append("b3") }
        queue.addJob(recordingJob("j3", log, priority: .veryHigh))

        await waitForSignals(started)
        await drainConcurrentQueue(workers)
        #expect(Set(log.values) == ["j1a", "j1b"])
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()

        let items = log.values
        #expect(items.count == 8)
        func position(_ name: String) -> Int { items.firstIndex(of: name) ?? -1 }
        #expect(max(position("j1a"), position("j1b")) < position("b1"))
        #expect(position("b1") < position("b2"))
        #expect(position("b2") < min(position("j2a"), position("j2b")))
        #expect(max(position("j2a"), position("j2b")) < position("b3"))
        #expect(position("b3") < position("j3"))
    }

    @Test func barrierOnAnEmptyQueueRuns() async throws {
        let workers = makeWorkers("empty-barrier")
        let queue = JobQueue(name: "empty-barrier")
        queue.underlyingQueue = workers
        let log = Log<String>()
        queue.addBarrierBlock { log.append("barrier") }
        await drainConcurrentQueue(workers)
        // Checked before waiting, so that a barrier that never runs fails instead of hanging.
        try #require(log.values == ["barrier"])
        await queue.waitUntilAllJobsAreFinished()
        queue.addJob(recordingJob("after", log))
        queue.addBarrierBlock { log.append("barrier2") }
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["barrier", "after", "barrier2"])
    }

    @Test func barrierRespectsSuspension() async {
        let workers = makeWorkers("barrier-suspend")
        let queue = JobQueue(name: "barrier-suspend")
        queue.underlyingQueue = workers
        let log = Log<String>()

        // On an empty suspended queue.
        queue.isSuspended = true
        queue.addBarrierBlock { log.append("b1") }
        queue.addJob(recordingJob("j1", log))
        await drainConcurrentQueue(workers)
        #expect(log.count == 0)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["b1", "j1"])

        // Suspended while the barrier waits for an earlier job.
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started)
        queue.addJob(holder)
        await waitForSignals(started)
        queue.addBarrierBlock { log.append("b2") }
        queue.addJob(recordingJob("j2", log))
        queue.isSuspended = true
        holder.finish()
        await holder.waitUntilFinished()
        await drainConcurrentQueue(workers)
        #expect(log.values == ["b1", "j1"])
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["b1", "j1", "b2", "j2"])
    }

    @Test func cancelledBarrierKeepsItsPlace() async {
        let workers = makeWorkers("barrier-cancel")
        let queue = JobQueue(name: "barrier-cancel")
        queue.underlyingQueue = workers
        let log = Log<String>()
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started)
        queue.addJob(holder)
        await waitForSignals(started)
        queue.addBarrierBlock { log.append("barrier") }
        queue.cancelAllJobs()
        #expect(holder.isCancelled && holder.isExecuting)
        let sawHolderFinished = Flag()
        let later = BlockJob {
            sawHolderFinished.set(holder.isFinished)
            log.append("later")
        }
        queue.addJob(later)
        await drainConcurrentQueue(workers)
        #expect(later.state == .ready)
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["later"])
        #expect(sawHolderFinished.value)
    }

    // MARK: Cancellation

    @Test func cancelAllJobsCancelsUnstartedAndMarksRunningJobs() async throws {
        let queue = blockingQueue("cancel-all", limit: 1)
        let running = GatedJob()
        let ran = Counter()
        let plain = BlockJob { ran.increment() }
        let asynchronous = AsyncBlockJob { job in
            ran.increment(); job.finish()
        }
        let pending = BlockJob { ran.increment() }
        try pending.addDependency(plain)
        let events = Log<JobEvent>()
        plain.observe { events.append($0) }
        let completed = Counter()
        plain.completionBlock = { completed.increment() }

        queue.addJob(running)
        queue.addJob(plain)
        queue.addJob(asynchronous)
        queue.addJob(pending)
        await waitForSignals(running.started)
        #expect(queue.jobCount == 4)

        queue.cancelAllJobs()
        for job in [plain, asynchronous, pending] {
            #expect(job.isFinished)
            #expect(job.isCancelled)
        }
        #expect(running.isCancelled)
        #expect(running.isExecuting)
        #expect(queue.jobCount == 1)

        // Jobs added afterwards are not affected.
        let after = BlockJob { ran.increment() }
        queue.addJob(after)
        #expect(!after.isCancelled)

        running.open()
        await queue.waitUntilAllJobsAreFinished()
        #expect(running.sawCancelled)
        #expect(running.isFinished)
        #expect(ran.value == 1)  // only `after`
        #expect(after.isFinished && !after.isCancelled)
        #expect(events.values == [.ready, .cancelled, .finished])
        #expect(completed.value == 1)
    }

    // MARK: Context

    @Test func currentIsTheQueueInsideJobsAndNilOutside() async {
        let queue = JobQueue(name: "current")
        let other = JobQueue(name: "current-other")
        #expect(JobQueue.current == nil)
        let seen = Log<String>()
        queue.addJob { seen.append(isSameQueue(JobQueue.current, queue) ? "block" : "block:wrong") }
        queue.addJob(
            AsyncBlockJob { job in
                seen.append(isSameQueue(JobQueue.current, queue) ? "async" : "async:wrong")
                job.finish()
            })
        queue.addJob(
            TaskJob {
                await Task.yield()
                seen.append(isSameQueue(JobQueue.current, queue) ? "task" : "task:wrong")
            })
        other.addJob { seen.append(isSameQueue(JobQueue.current, other) ? "other" : "other:wrong") }
        await queue.waitUntilAllJobsAreFinished()
        await other.waitUntilAllJobsAreFinished()
        #expect(Set(seen.values) == ["block", "async", "task", "other"])
        #expect(seen.count == 4)

        // Not on a plain Dispatch thread, nor in a job started without a queue.
        let onDispatch = await runOnDispatchThread { JobQueue.current == nil }
        #expect(onDispatch)
        let inStartedJob = Flag()
        let unqueued = BlockJob { inStartedJob.set(JobQueue.current == nil) }
        unqueued.start()
        #expect(inStartedJob.value)
        #expect(JobQueue.current == nil)
    }

    @Test func jobsRunOnTheUnderlyingQueue() async {
        let serial = DispatchQueue(label: "JobQueueTests.underlying.serial")
        serial.setSpecific(key: specificKey, value: "serial")
        let concurrent = DispatchQueue(label: "JobQueueTests.underlying.concurrent", attributes: .concurrent)
        concurrent.setSpecific(key: specificKey, value: "concurrent")

        let onSerial = JobQueue(name: "underlying-serial", maxConcurrentJobCount: 4)
        #expect(onSerial.underlyingQueue == nil)
        onSerial.underlyingQueue = serial
        #expect(onSerial.underlyingQueue === serial)
        let seenSerial = Log<String>()
        for _ in 0..<5 { onSerial.addJob { seenSerial.append(DispatchQueue.getSpecific(key: specificKey) ?? "none") } }
        await onSerial.waitUntilAllJobsAreFinished()
        #expect(seenSerial.values == Array(repeating: "serial", count: 5))

        let onConcurrent = JobQueue(name: "underlying-concurrent", maxConcurrentJobCount: 4)
        onConcurrent.underlyingQueue = concurrent
        let seenConcurrent = Log<String>()
        for _ in 0..<5 {
            onConcurrent.addJob { seenConcurrent.append(DispatchQueue.getSpecific(key: specificKey) ?? "none") }
        }
        onConcurrent.addJob(
            AsyncBlockJob { job in
                seenConcurrent.append(DispatchQueue.getSpecific(key: specificKey) ?? "none")
                job.finish()
            })
        await onConcurrent.waitUntilAllJobsAreFinished()
        #expect(seenConcurrent.values == Array(repeating: "concurrent", count: 6))

        let onDefault = JobQueue(name: "underlying-default")
        let seenDefault = Log<String>()
        onDefault.addJob { seenDefault.append(DispatchQueue.getSpecific(key: specificKey) ?? "none") }
        await onDefault.waitUntilAllJobsAreFinished()
        #expect(seenDefault.values == ["none"])
    }

    /// Workers dispatched to the old underlying queue that have not run yet still count as idle
    /// workers, so a job added after the change gets no worker on the new queue; it waits for, and
    /// then runs on, the old one (forever, if the old queue stays busy).
    @Test func jobAddedAfterChangingTheUnderlyingQueueRunsOnTheNewOne() async {
        let oldTarget = DispatchQueue(label: "JobQueueTests.underlying.old")
        oldTarget.setSpecific(key: specificKey, value: "old")
        let newTarget = makeWorkers("underlying-new")
        newTarget.setSpecific(key: specificKey, value: "new")
        let queue = JobQueue(name: "underlying-change", maxConcurrentJobCount: 2)
        queue.underlyingQueue = oldTarget

        // Keep the old (serial) target busy, so that the workers dispatched to it wait.
        let plugged = DispatchSemaphore(value: 0)
        let unplug = DispatchSemaphore(value: 0)
        oldTarget.async {
            plugged.signal()
            unplug.wait()
        }
        await waitForSignals(plugged)
        let ranEarly = Counter()
        let early = [BlockJob { ranEarly.increment() }, BlockJob { ranEarly.increment() }]
        for job in early { queue.addJob(job) }
        for job in early { job.cancel() }
        await queue.waitUntilAllJobsAreFinished()
        #expect(queue.jobCount == 0)

        // The queue is empty. From now on its workers should run on `newTarget`.
        queue.underlyingQueue = newTarget
        let seen = Log<String>()
        let job = BlockJob { seen.append(DispatchQueue.getSpecific(key: specificKey) ?? "none") }
        queue.addJob(job)
        await drainConcurrentQueue(newTarget)
        #expect(job.isFinished, "a job added after the change waits for the old underlying queue")

        unplug.signal()
        await job.waitUntilFinished()
        #expect(seen.values == ["new"])
        #expect(ranEarly.value == 0)
    }

    // MARK: Lifetime

    /// Builds a queue, adds `jobs` and drops every reference to it except a weak one.
    private static func addToDroppedQueue(_ jobs: [Job], workers: DispatchQueue) -> WeakReference<JobQueue> {
        let queue = JobQueue(name: "dropped", maxConcurrentJobCount: 1)
        queue.underlyingQueue = workers
        for job in jobs { queue.addJob(job) }
        return WeakReference(queue)
    }

    @Test func droppedQueueFinishesItsJobsAndIsThenFreed() async {
        let workers = makeWorkers("dropped")
        let started = DispatchSemaphore(value: 0)
        let holder = makeHolder(started)
        let ran = Counter()
        // The jobs hold no reference to the queue.
        let tail = (0..<5).map { _ in BlockJob { ran.increment() } }
        let weak = Self.addToDroppedQueue([holder] + tail, workers: workers)

        await waitForSignals(started)
        // Nobody but its unfinished jobs references the queue, and it is still alive.
        #expect(weak.object != nil)

        holder.finish()
        for job in tail { await job.waitUntilFinished() }
        #expect(ran.value == 5)
        // The last references to the queue are the worker blocks on `workers`, which may still be
        // returning after they woke our waiters. A barrier block runs only once every block
        // submitted before it has returned and been released, and no worker can be submitted
        // after the last job finished (nothing is left to start), so after the drain nothing
        // but a leak could keep the queue alive.
        await drainConcurrentQueue(workers)
        #expect(weak.object == nil)
    }

    /// Builds a queue holding a job that waits for `blocker`, then a barrier, then a job held behind
    /// it; keeps only weak references to the queue and its jobs. Every callback signals `done`.
    private static func addDependentWorkToDroppedQueue(
        blocker: Job, workers: DispatchQueue, log: Log<String>, done: DispatchSemaphore
    ) throws -> (queue: WeakReference<JobQueue>, pending: WeakReference<Job>, held: WeakReference<Job>) {
        let queue = JobQueue(name: "dropped-pending", maxConcurrentJobCount: 1)
        queue.underlyingQueue = workers
        let pending = BlockJob { log.append("pending") }
        try pending.addDependency(blocker)
        pending.completionBlock = { done.signal() }
        let held = BlockJob { log.append("held") }
        held.completionBlock = { done.signal() }
        queue.addJob(pending)
        queue.addBarrierBlock { log.append("barrier") }
        queue.addJob(held)
        return (WeakReference(queue), WeakReference(pending), WeakReference(held))
    }

    @Test func droppedQueueWithPendingAndHeldJobsRunsThemAndFreesEverything() async throws {
        let workers = makeWorkers("dropped-pending")
        let parkingWorkers = makeWorkers("dropped-pending-parking")
        let parking = JobQueue(name: "dropped-pending-parking")
        parking.underlyingQueue = parkingWorkers
        parking.isSuspended = true
        let log = Log<String>()
        let done = DispatchSemaphore(value: 0)
        let blocker = BlockJob { log.append("blocker") }
        parking.addJob(blocker)
        let weak = try Self.addDependentWorkToDroppedQueue(
            blocker: blocker, workers: workers, log: log, done: done)

        await drainConcurrentQueue(workers)
        #expect(log.count == 0)
        #expect(weak.queue.object != nil)  // alive: it has unfinished jobs
        #expect(weak.pending.object != nil && weak.held.object != nil)

        parking.isSuspended = false
        await waitForSignals(done, count: 2)  // both completion blocks ran
        // As above: the last references are held by blocks on the two worker queues.
        await drainConcurrentQueue(parkingWorkers)
        await drainConcurrentQueue(workers)
        #expect(log.values == ["blocker", "pending", "barrier", "held"])
        #expect(weak.queue.object == nil)
        #expect(weak.pending.object == nil)
        #expect(weak.held.object == nil)
    }

    // MARK: jobs / jobCount

    @Test func jobsListsUnfinishedJobsInInsertionOrder() async throws {
        let queue = JobQueue(name: "jobs-list", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        #expect(queue.jobs.isEmpty)
        #expect(queue.jobCount == 0)
        let priorities: [JobPriority] = [.low, .veryHigh, .normal, .high, .veryLow, .normal]
        var added: [Job] = priorities.map { priority in
            let job = BlockJob {}
            job.queuePriority = priority
            return job
        }
        let asynchronous = AsyncBlockJob { $0.finish() }
        added.append(asynchronous)
        let pending = BlockJob {}
        try pending.addDependency(added[0])
        added.append(pending)
        queue.addJobs(Array(added.prefix(3)), waitUntilFinished: false)
        for job in added.dropFirst(3) { queue.addJob(job) }

        #expect(queue.jobs.map(\.id) == added.map(\.id))
        #expect(queue.jobCount == added.count)

        added[2].cancel()
        let remaining = added.enumerated().filter { $0.offset != 2 }.map(\.element)
        #expect(queue.jobs.map(\.id) == remaining.map(\.id))
        #expect(queue.jobCount == remaining.count)

        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(queue.jobs.isEmpty)
        #expect(queue.jobCount == 0)
    }

    @Test func finishedJobsLeaveJobsBeforeTheirCallbacksAndBeforeWaitersWake() async {
        let queue = blockingQueue("jobs-drop", limit: 1)
        let first = GatedJob()
        let firstID = first.id
        let inListDuringCallbacks = Log<Bool>()
        first.observe { event in
            if event == .finished { inListDuringCallbacks.append(queue.jobs.contains { $0.id == firstID }) }
        }
        first.completionBlock = {
            inListDuringCallbacks.append(queue.jobs.contains { $0.id == firstID })
        }
        let second = GatedJob()
        queue.addJob(first)
        queue.addJob(second)
        await waitForSignals(first.started)
        #expect(queue.jobCount == 2)
        first.open()
        await first.waitUntilFinished()
        #expect(inListDuringCallbacks.values == [false, false])
        #expect(queue.jobs.map(\.id) == [second.id])
        #expect(queue.jobCount == 1)
        await waitForSignals(second.started)
        second.open()
        await queue.waitUntilAllJobsAreFinished()
        #expect(queue.jobs.isEmpty)
        #expect(queue.jobCount == 0)
    }

    @Test func manyJobsAreAllDroppedWhenWaitReturns() async {
        let queue = JobQueue(name: "jobs-many")
        let ran = Counter()
        for index in 0..<500 {
            let job = BlockJob { ran.increment() }
            if index % 3 == 0 { job.completionBlock = {} }
            queue.addJob(job)
        }
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 500)
        #expect(queue.jobCount == 0)
        #expect(queue.jobs.isEmpty)
    }

    // MARK: Re-entrancy

    @Test func jobBodiesMayUseTheEngine() async throws {
        let queue = blockingQueue("reentrant-body", limit: 1)
        let other = JobQueue(name: "reentrant-other")
        let parking = JobQueue(name: "reentrant-parking")
        other.isSuspended = true
        parking.isSuspended = true
        let log = Log<String>()
        let observations = Log<String>()

        let blocker = recordingJob("blocker", log)
        parking.addJob(blocker)
        let victim = recordingJob("victim", log)
        try victim.addDependency(blocker)
        queue.addJob(victim)
        let otherJob = recordingJob("other", log)
        other.addJob(otherJob)
        let child1 = recordingJob("child1", log)
        let child2 = recordingJob("child2", log, priority: .veryHigh)

        let parent = BlockJob {
            let current = queue
            observations.append("current: \(isSameQueue(JobQueue.current, queue))")
            do {
                try child2.addDependency(child1)
            } catch {
                observations.append("addDependency threw \(error)")
            }
            current.addJob(child2)
            current.addJob(child1)
            victim.cancel()
            current.maxConcurrentJobCount = 2
            other.isSuspended = false
            other.waitUntilAllJobsAreFinished()
            observations.append("victim cancelled: \(victim.isFinished && victim.isCancelled)")
            observations.append("other finished: \(otherJob.isFinished)")
            observations.append("limit: \(current.maxConcurrentJobCount)")
        }
        queue.addJob(parent)
        await queue.waitUntilAllJobsAreFinished()

        #expect(observations.values == ["current: true", "victim cancelled: true", "other finished: true", "limit: 2"])
        let items = log.values
        #expect(items.count == 3)
        #expect(Set(items) == ["other", "child1", "child2"])
        #expect((items.firstIndex(of: "child1") ?? 99) < (items.firstIndex(of: "child2") ?? -1))
        #expect(queue.maxConcurrentJobCount == 2)
        blocker.cancel()
        await parking.waitUntilAllJobsAreFinished()
    }

    @Test func jobBodyMayCancelAllJobsOfItsOwnQueue() async {
        let queue = JobQueue(name: "reentrant-cancel-all", maxConcurrentJobCount: 1)
        let ran = Counter()
        let sawSelfCancelled = Flag()
        let box = Log<Job>()
        let canceller = BlockJob {
            JobQueue.current?.cancelAllJobs()
            sawSelfCancelled.set(box.values.first?.isCancelled ?? false)
        }
        box.append(canceller)
        queue.isSuspended = true  // so that all jobs are queued before the canceller runs
        queue.addJob(canceller)
        for _ in 0..<5 { queue.addJob { ran.increment() } }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(sawSelfCancelled.value)
        #expect(ran.value == 0)
    }

    @Test func observersMayUseTheEngine() async throws {
        let queue = blockingQueue("reentrant-observer", limit: 1)
        let other = JobQueue(name: "reentrant-observer-other")
        let parking = JobQueue(name: "reentrant-observer-parking")
        other.isSuspended = true
        parking.isSuspended = true
        let log = Log<String>()
        let observations = Log<String>()

        // The victims wait for a parked job, so only cancellation can finish them.
        let blocker = recordingJob("blocker", log)
        parking.addJob(blocker)
        let victim = recordingJob("victim", log, priority: .veryLow)
        try victim.addDependency(blocker)
        let otherJob = recordingJob("other", log)
        other.addJob(otherJob)
        let fromStarted = recordingJob("fromStarted", log)
        let late1 = recordingJob("late1", log)
        let late2 = recordingJob("late2", log, priority: .veryHigh)
        let cascade = recordingJob("cascade", log, priority: .veryLow)
        try cascade.addDependency(blocker)

        let subject = recordingJob("subject", log)
        subject.observe { event in
            switch event {
            case .started:
                queue.addJob(fromStarted)
            case .finished:
                victim.cancel()
                queue.maxConcurrentJobCount = 3
                do {
                    try late2.addDependency(late1)
                } catch {
                    observations.append("addDependency threw \(error)")
                }
                queue.addJob(late2)
                queue.addJob(late1)
                other.isSuspended = false
                other.waitUntilAllJobsAreFinished()
                observations.append("other finished: \(otherJob.isFinished)")
            default:
                break
            }
        }
        // An observer of one cancellation that cancels another job.
        victim.observe { event in
            if event == .cancelled { cascade.cancel() }
        }
        queue.addJob(subject)
        queue.addJob(victim)
        queue.addJob(cascade)
        await subject.waitUntilFinished()
        await queue.waitUntilAllJobsAreFinished()

        #expect(observations.values == ["other finished: true"])
        #expect(victim.isCancelled && cascade.isCancelled)
        #expect(queue.maxConcurrentJobCount == 3)
        let items = log.values
        #expect(items.first == "subject")
        #expect(Set(items) == ["subject", "fromStarted", "other", "late1", "late2"])
        #expect((items.firstIndex(of: "late1") ?? 99) < (items.firstIndex(of: "late2") ?? -1))
        blocker.cancel()
        await parking.waitUntilAllJobsAreFinished()
    }

    @Test func completionBlocksMayUseTheEngine() async throws {
        let queue = blockingQueue("reentrant-completion", limit: 1)
        let other = JobQueue(name: "reentrant-completion-other")
        let parking = JobQueue(name: "reentrant-completion-parking")
        other.isSuspended = true
        parking.isSuspended = true
        let log = Log<String>()
        let observations = Log<String>()

        let blocker = recordingJob("blocker", log)
        parking.addJob(blocker)
        let victim = recordingJob("victim", log, priority: .veryLow)
        try victim.addDependency(blocker)
        let otherJob = recordingJob("other", log)
        other.addJob(otherJob)
        let late1 = recordingJob("late1", log)
        let late2 = recordingJob("late2", log, priority: .veryHigh)

        let subject = recordingJob("subject", log)
        subject.completionBlock = {
            victim.cancel()
            queue.maxConcurrentJobCount = 2
            do {
                try late2.addDependency(late1)
            } catch {
                observations.append("addDependency threw \(error)")
            }
            queue.addJobs([late2, late1], waitUntilFinished: false)
            other.isSuspended = false
            other.waitUntilAllJobsAreFinished()
            otherJob.waitUntilFinished()
            observations.append("other finished: \(otherJob.isFinished)")
        }
        queue.addJob(subject)
        queue.addJob(victim)
        await subject.waitUntilFinished()
        // The completion block has run before waitUntilFinished returned.
        #expect(observations.values == ["other finished: true"])
        await queue.waitUntilAllJobsAreFinished()

        #expect(victim.isFinished && victim.isCancelled)
        #expect(queue.maxConcurrentJobCount == 2)
        let items = log.values
        #expect(items.count == 4)
        #expect(items.first == "subject")
        #expect(Set(items) == ["subject", "other", "late1", "late2"])
        #expect((items.firstIndex(of: "late1") ?? 99) < (items.firstIndex(of: "late2") ?? -1))
        blocker.cancel()
        await parking.waitUntilAllJobsAreFinished()
    }
}
