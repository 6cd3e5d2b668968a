import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// `addJobs(_:waitUntilFinished: true)` waits for the whole batch with one waiter that wakes once,
// when the last job of the batch has settled (finished and run its completion block).

@Suite struct BatchWaitTests {
    @Test func everyJobOfTheBatchCountsInOneWaitBeforeAnyOfThemRuns() async throws {
        // Registration happens in the critical section that enqueues the batch, so the first job's
        // body already sees every job counted (a wait that went job by job would not have reached
        // the later ones yet).
        let queue = JobQueue(name: "batch-registration")
        let jobs = Locked<[Job]>([])
        let allCountedWhenTheFirstRan = Locked<Bool?>(nil)
        let first = BlockJob {
            let counted = jobs.withLock { $0 }.allSatisfy(\._countsInABatchWait)
            allCountedWhenTheFirstRan.withLock { $0 = counted }
        }
        var chain: [Job] = [first]
        for _ in 0..<50 {
            let next = BlockJob {}
            try next.addDependency(chain.last!)
            chain.append(next)
        }
        jobs.withLock { $0 = chain }
        let batch = chain
        await runOnDispatchThread { queue.addJobs(batch, waitUntilFinished: true) }
        #expect(allCountedWhenTheFirstRan.withLock { $0 } == true)
        #expect(chain.allSatisfy { $0.isFinished && !$0._countsInABatchWait })
    }

    @Test func jobsThatGainDetailsWhileTheBatchWaitsStillCount() async {
        // A job of a waiting batch keeps the batch in its side slot, allocating nothing, until it
        // needs details (a name, a failure's error); then the batch moves into them. Each of these
        // jobs must still count down the batch, or the wait would never return.
        struct Failure: Error {}
        let queue = JobQueue(name: "batch-details", maxConcurrentJobCount: 1)
        let renamed = BlockJob {}
        let first = BlockJob { renamed.name = "renamed while its batch waited" }
        let failing = ProbeJob { _ in throw Failure() }
        let named = BlockJob {}
        named.name = "named before it joined"
        let batch: [Job] = [first, renamed, failing, named]
        await runOnDispatchThread { queue.addJobs(batch, waitUntilFinished: true) }
        #expect(batch.allSatisfy { $0.isFinished && !$0._countsInABatchWait })
        #expect(renamed.name == "renamed while its batch waited")
        #expect(named.name == "named before it joined")
        guard case .failed(let error)? = failing.outcome else {
            Issue.record("outcome \(String(describing: failing.outcome))")
            return
        }
        #expect(error is Failure)
    }

    @Test func returnsOnlyAfterEveryCompletionBlockRan() async {
        let queue = JobQueue(name: "batch-completions", maxConcurrentJobCount: 2)
        let completions = Counter()
        let jobs: [Job] = (0..<200).map { _ in
            let job = BlockJob {}
            job.completionBlock = { completions.increment() }
            return job
        }
        let countWhenReturned = await runOnDispatchThread {
            queue.addJobs(jobs, waitUntilFinished: true)
            return completions.value
        }
        #expect(countWhenReturned == 200)
    }

    @Test func aBatchOfFinishedAndCancelledJobsReturnsAtOnce() async {
        let queue = JobQueue(name: "batch-cancelled")
        let cancelled = BlockJob {}
        cancelled.cancel()
        let alsoCancelled = BlockJob {}
        alsoCancelled.cancel()
        await runOnDispatchThread { queue.addJobs([cancelled, alsoCancelled], waitUntilFinished: true) }
        await runOnDispatchThread { queue.addJobs([], waitUntilFinished: true) }
        #expect(cancelled.isFinished && alsoCancelled.isFinished)
    }

    @Test func jobsCancelledWhileTheBatchWaitsStillCount() async {
        // Held behind a suspended queue, then cancelled by another thread: each settles once.
        let queue = JobQueue(name: "batch-cancel-while-waiting")
        queue.isSuspended = true
        let ran = Counter()
        let jobs: [Job] = (0..<100).map { _ in BlockJob { ran.increment() } }
        let started = DispatchSemaphore(value: 0)
        let done = Flag()
        let waiter = Task {
            await runOnDispatchThread {
                started.signal()
                queue.addJobs(jobs, waitUntilFinished: true)
                done.set()
            }
        }
        await runOnDispatchThread { started.wait() }
        // Whether or not the waiter has enqueued yet, cancelling each job settles it exactly once.
        for job in jobs { job.cancel() }
        await waiter.value
        queue.isSuspended = false
        #expect(done.value)
        #expect(ran.value == 0)
    }

    @Test func aBatchWithObserversAndWaitersOfItsOwn() async {
        let queue = JobQueue(name: "batch-observed")
        let finishedEvents = Counter()
        let jobs: [Job] = (0..<100).map { index in
            let job = BlockJob {}
            if index.isMultiple(of: 2) {
                job.observe { if $0 == .finished { finishedEvents.increment() } }
            }
            return job
        }
        let otherWaits = Task { for job in jobs { await job.waitUntilFinished() } }
        let eventsWhenReturned = await runOnDispatchThread {
            queue.addJobs(jobs, waitUntilFinished: true)
            return finishedEvents.value
        }
        await otherWaits.value
        #expect(eventsWhenReturned == 50)
    }
}
