import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// `cancelAllJobs()` cancels the queue's jobs in one step before calling their `cancel()`
// overrides; jobs cancelled behind a barrier are freed while it waits; the error for a dependency
// added to a cancelled job says what happened.

/// An asynchronous job that finishes as soon as it is cancelled, from its `cancel()` override.
private final class FinishesWhenCancelled: AsynchronousJob, @unchecked Sendable {
    // @unchecked Sendable: `started` is a Signal, itself Sendable; nothing else is stored.
    let started = Signal()

    override func execute() { started.fire() }

    override func cancel() {
        super.cancel()
        finish()
    }
}

/// A job that counts the calls of its `cancel()` override.
private final class CountsCancels: Job, @unchecked Sendable {
    // @unchecked Sendable: `cancels` is a Counter, itself Sendable; nothing else is stored.
    let cancels = Counter()
    override func cancel() {
        cancels.increment()
        super.cancel()
    }
}

@Suite struct CancellationTests {
    @Test(.hangLimit)
    func cancelAllJobsCancelsDependentsBeforeAnOverrideCanReleaseThem() async throws {
        // `running` finishes from its `cancel()` override. Its dependent must be cancelled by then,
        // never released to run. If it were released, its `.ready` handler (on the cancelling
        // thread) would block until its body ran, so the failure would be certain, not a race.
        let queue = JobQueue(name: "cancel-all-atomic")
        let running = FinishesWhenCancelled()
        let dependentRan = DispatchSemaphore(value: 0)
        let ranCount = Counter()
        let dependent = BlockJob {
            ranCount.increment()
            dependentRan.signal()
        }
        try dependent.addDependency(running)
        dependent.observe { event in
            if event == .ready { dependentRan.wait() }
        }
        queue.addJobs([running, dependent], waitUntilFinished: false)
        await running.started.wait()
        await runOnDispatchThread { queue.cancelAllJobs() }
        await queue.waitUntilAllJobsAreFinished()
        #expect(ranCount.value == 0)
        #expect(dependent.isCancelled && dependent.isFinished)
        #expect(running.isCancelled && running.isFinished)
    }

    @Test func cancelAllJobsRunsACascadedMembersOverrideOnce() async throws {
        // `dependent` is cancelled by the cascade of `first`'s cancellation before the loop reaches
        // it; its override must run once, not once for the cascade and once for the loop.
        let queue = JobQueue(name: "cancel-all-once")
        queue.isSuspended = true
        let first = BlockJob {}
        let dependent = CountsCancels()
        try dependent.addDependency(first, policy: .requireSuccess)
        queue.addJobs([first, dependent], waitUntilFinished: false)
        queue.cancelAllJobs()
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(dependent.cancels.value == 1)
        #expect(dependent.cancellationReason?.code == .dependencyCancelled)
    }

    @Test func cancelAllJobsCallsEachOverride() async {
        let queue = JobQueue(name: "cancel-all-overrides")
        let jobs = (0..<3).map { _ in FinishesWhenCancelled() }
        queue.addJobs(jobs, waitUntilFinished: false)
        for job in jobs { await job.started.wait() }
        queue.cancelAllJobs()
        // Each override called finish(); otherwise this would never return.
        await queue.waitUntilAllJobsAreFinished()
        #expect(jobs.allSatisfy { $0.isCancelled && $0.isFinished })
    }

    /// Adds `count` jobs behind a barrier that waits for a blocked job, cancels them and returns
    /// weak references to them; the caller keeps no strong reference.
    private static func cancelJobsHeldBehindABarrier(
        _ count: Int, on queue: JobQueue
    ) -> [WeakReference<Job>] {
        var references: [WeakReference<Job>] = []
        for _ in 0..<count {
            let job = BlockJob {}
            queue.addJob(job)
            references.append(WeakReference(job))
            job.cancel()
        }
        return references
    }

    @Test func jobsCancelledBehindAWaitingBarrierAreFreedBeforeItRuns() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("held-cancelled")
        let gate = DispatchSemaphore(value: 0)
        let blocker = BlockJob { gate.wait() }
        queue.addJob(blocker)
        queue.addBarrierBlock {}
        let references = Self.cancelJobsHeldBehindABarrier(1_000, on: queue)
        let alive = references.filter { $0.object != nil }.count
        gate.signal()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)  // the worker that finished the barrier has let go of what it dropped
        // Compaction runs once the cancelled ones are 16 or more and half the list, so at most
        // 16 + the live entries' count may remain: here, fewer than 32 of 1,000.
        #expect(alive < 32, "\(alive) of 1,000 cancelled held jobs still alive while the barrier waits")
        #expect(references.allSatisfy { $0.object == nil })
    }

    @Test func heldJobsStillRunAfterTheBarrierWhenOthersWereCancelled() async {
        let queue = JobQueue(name: "held-mixed")
        let gate = DispatchSemaphore(value: 0)
        queue.addJob(BlockJob { gate.wait() })
        queue.addBarrierBlock {}
        let ran = Counter()
        var kept: [BlockJob] = []
        for index in 0..<300 {
            let job = BlockJob { ran.increment() }
            queue.addJob(job)
            if index % 3 == 0 { kept.append(job) } else { job.cancel() }
        }
        gate.signal()
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 100)
        #expect(kept.allSatisfy { $0.isFinished && !$0.isCancelled })
    }

    @Test func alreadyStartedSaysWhatHappenedToTheJob() throws {
        let other = BlockJob {}
        other.name = "other"
        let cancelled = BlockJob {}
        cancelled.name = "cancelled-job"
        cancelled.cancel()
        let error = #expect(throws: JobError.self) { try cancelled.addDependency(other) }
        #expect(error?.code == .alreadyStarted)
        #expect(error?.description.contains("'cancelled-job' was cancelled before it started") == true)

        let finished = BlockJob {}
        finished.name = "finished-job"
        finished.start()
        let finishedError = #expect(throws: JobError.self) { try finished.addDependency(other) }
        #expect(finishedError?.description.contains("'finished-job' has already finished") == true)
    }
}
