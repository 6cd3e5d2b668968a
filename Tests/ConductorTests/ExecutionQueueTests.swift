import Conductor
import ConductorTestSupport
import Dispatch
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Job.executionQueue and JobQueue.main (Docs/Composition.md, "Main-queue work"). The test process
// drains the main queue (Swift Testing runs an `async` main), so jobs on `.main` run without any
// test thread blocking.

private let markerKey = DispatchSpecificKey<String>()

/// Whether the calling code runs on the main queue.
private func onMainQueue() -> Bool {
    DispatchQueue.getSpecific(key: markerKey) == "main"
}

@Suite struct ExecutionQueueTests {
    init() {
        DispatchQueue.main.setSpecific(key: markerKey, value: "main")
    }

    @Test func withALimitOf3AndTheMainQueueAtMost3AreInFlightAndEveryBodyRunsOnMain() async {
        let queue = JobQueue(name: "to-main", maxConcurrentJobCount: 3)
        let inFlight = InFlight()
        let onMain = Log<Bool>()
        let sawQueue = Log<Bool>()
        for _ in 0..<30 {
            let job = AsyncBlockJob { job in
                inFlight.enter()
                onMain.append(onMainQueue())
                sawQueue.append(JobQueue.current === queue)
                // Finishes later, from another thread: the slot is held until then.
                DispatchQueue.global().async {
                    inFlight.leave()
                    job.finish()
                }
            }
            job.executionQueue = .main
            queue.addJob(job)
        }
        await queue.waitUntilAllJobsAreFinished()
        #expect(inFlight.starts == 30)
        #expect(inFlight.maximum <= 3)
        #expect(onMain.values.count == 30 && onMain.values.allSatisfy { $0 })
        #expect(sawQueue.values.allSatisfy { $0 })
    }

    @Test func aSynchronousJobFinishesWhenItsWorkReturnsThereAndItsDependentWaits() async throws {
        let serial = DispatchQueue(label: "execution-queue")
        serial.setSpecific(key: markerKey, value: "serial")
        let queue = JobQueue(name: "to-serial")
        let order = Log<String>()
        let first = BlockJob { order.append(DispatchQueue.getSpecific(key: markerKey) ?? "elsewhere") }
        first.executionQueue = serial
        let second = BlockJob { order.append("dependent") }
        try second.addDependency(first, policy: .requireSuccess)
        queue.addJobs([first, second], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(order.values == ["serial", "dependent"])
    }

    @Test func aThrowingJobFailsOnItsExecutionQueue() async {
        struct Broken: Error {}
        let queue = JobQueue(name: "to-main-failing")
        let job = ProbeJob { _ in throw Broken() }
        job.executionQueue = .main
        queue.addJob(job)
        await job.waitUntilFinished()
        if case .failed(let error)? = job.outcome {
            #expect(error is Broken)
        } else {
            Issue.record("outcome \(String(describing: job.outcome))")
        }
    }

    @Test func startByHandHandsTheWorkToTheExecutionQueueAndReturns() async {
        let ran = Signal()
        let onMain = Log<Bool>()
        let job = BlockJob {
            onMain.append(onMainQueue())
            ran.fire()
        }
        job.executionQueue = .main
        await runOnDispatchThread { job.start() }
        await ran.wait()
        await job.waitUntilFinished()
        #expect(onMain.values == [true])
        #expect(job.isFinished)
    }

    @Test func theMainJobQueueRunsOneJobAtATimeOnTheMainQueue() async {
        let inFlight = InFlight()
        let onMain = Log<Bool>()
        let jobs = (0..<20).map { _ in
            BlockJob {
                inFlight.enter()
                onMain.append(onMainQueue())
                inFlight.leave()
            }
        }
        #expect(JobQueue.main.maxConcurrentJobCount == 1)
        JobQueue.main.addJobs(jobs, waitUntilFinished: false)
        for job in jobs { await job.waitUntilFinished() }
        #expect(inFlight.maximum == 1 && inFlight.starts == 20)
        #expect(onMain.values.allSatisfy { $0 })
    }

    @Test func everyAttemptOfARetryJobOnTheMainJobQueueRunsOnTheMainQueue() async {
        // Until 2026-11-25 the attempts after the first ran on the backoff timer's global queue.
        struct Failure: Error {}
        let onMain = Log<Bool>()
        let retry = RetryJob(maxAttempts: 3) { number in
            ProbeJob { _ in
                onMain.append(onMainQueue())
                if number < 3 { throw Failure() }
            }
        }
        JobQueue.main.addJob(retry)
        await retry.waitUntilFinished()
        #expect(onMain.values == [true, true, true])
        if case .succeeded? = retry.outcome {} else { Issue.record("outcome \(String(describing: retry.outcome))") }
    }

    @Test func aTaskJobBodyMayBeMainActorIsolated() async {
        let queue = JobQueue(name: "main-actor")
        let onMain = Log<Bool>()
        let job = TaskJob { @MainActor in
            onMain.append(onMainQueue())
        }
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(onMain.values == [true])
    }

    // MARK: Blocking waits on the main queue (the misuse table, Docs/Concepts.md)
    //
    // Each runs in its own process. The wait runs on the main queue as the work of a job whose
    // `executionQueue` is `.main`, for a job of JobQueue.main, which is suspended so that the job
    // cannot start. Without the trap the wait would block: the test's thread sees it blocked (in
    // the waiting job's `explain()`, or the job added) and ends the process with success, which
    // fails the test.

    @Test func waitingForTheMainJobQueueOnTheMainQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            JobQueue.main.isSuspended = true
            JobQueue.main.addJob {}
            let waiter = BlockJob { JobQueue.main.waitUntilAllJobsAreFinished() }
            waiter.executionQueue = .main
            exitOnceBlocked(waiter, in: "waitUntilAllJobsAreFinished() on queue 'main'")
        }
        #expect(
            standardErrorText(result).contains(
                "JobQueue.waitUntilAllJobsAreFinished(): called on the main queue while 'main' has jobs that have not started; the jobs of 'main' start only on the main queue (its underlyingQueue), which this wait blocks, so it would return only if another thread cancelled them or moved the queue off the main queue. Wait from another thread, or with an async wait (await)"
            ))
    }

    @Test func waitingForAJobOfTheMainJobQueueOnTheMainQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            JobQueue.main.isSuspended = true
            let job = BlockJob {}
            job.name = "main-job"
            JobQueue.main.addJob(job)
            let waiter = BlockJob { job.waitUntilFinished() }
            waiter.executionQueue = .main
            exitOnceBlocked(waiter, in: "waitUntilFinished() on 'main-job'")
        }
        #expect(
            standardErrorText(result).contains(
                "Job.waitUntilFinished(): called on the main queue for 'main-job', which has not started; the jobs of 'main' start only on the main queue"
            ))
    }

    @Test func addingJobsToTheMainJobQueueAndWaitingOnTheMainQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            JobQueue.main.isSuspended = true
            let waiter = BlockJob { JobQueue.main.addJobs([BlockJob {}], waitUntilFinished: true) }
            waiter.executionQueue = .main
            JobQueue(name: "waiter-queue").addJob(waiter)
            // The trap comes before the job is added.
            while JobQueue.main.jobCount == 0 { sched_yield() }
            exit(0)
        }
        #expect(
            standardErrorText(result).contains(
                "JobQueue.addJobs(_:waitUntilFinished:): called with waitUntilFinished: true on the main queue; the jobs of 'main' start only on the main queue"
            ))
    }

    @Test func waitingForAnyQueueWhoseUnderlyingQueueIsMainTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "on-main")
            queue.underlyingQueue = .main
            queue.isSuspended = true
            queue.addJob {}
            let waiter = BlockJob { queue.waitUntilAllJobsAreFinished() }
            waiter.executionQueue = .main
            exitOnceBlocked(waiter, in: "waitUntilAllJobsAreFinished() on queue 'on-main'")
        }
        #expect(
            standardErrorText(result).contains(
                "called on the main queue while 'on-main' has jobs that have not started; the jobs of 'on-main' start only on the main queue"
            ))
    }

    @Test func waitingOnTheMainQueueForAQueueWhoseRetryJobWaitsToRetryThereTraps() async {
        // Its next attempt runs on the main queue, which the wait would block.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = retryJobWaitingOutItsBackoff(on: JobQueue.main)
            let waiter = BlockJob { JobQueue.main.waitUntilAllJobsAreFinished() }
            waiter.executionQueue = .main
            exitOnceBlocked(waiter, in: "waitUntilAllJobsAreFinished() on queue 'main'")
        }
        #expect(
            standardErrorText(result).contains(
                "JobQueue.waitUntilAllJobsAreFinished(): called on the main queue while 'main' has a retry job waiting out its backoff, whose next attempt runs only on the main queue, which this wait blocks, so it would return only if another thread cancelled the retry job. Wait from another thread, or with an async wait (await)"
            ))
    }

    @Test func waitingOnTheMainQueueForARetryJobWaitingToRetryThereTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let retry = retryJobWaitingOutItsBackoff(on: JobQueue.main)
            let waiter = BlockJob { retry.waitUntilFinished() }
            waiter.executionQueue = .main
            exitOnceBlocked(waiter, in: "waitUntilFinished() on 'retrier'")
        }
        #expect(
            standardErrorText(result).contains(
                "Job.waitUntilFinished(): called on the main queue for 'retrier', a retry job waiting out its backoff, whose next attempt runs only on the main queue"
            ))
    }

    @Test func waitingOnTheMainQueueForTheMainJobQueueMovedOffItDoesNotTrap() async {
        // JobQueue.main given another underlying queue: its jobs no longer need the main queue.
        await #expect(processExitsWith: .success) {
            JobQueue.main.underlyingQueue = .global()
            JobQueue.main.isSuspended = true
            JobQueue.main.addJob {}
            let waiter = BlockJob { JobQueue.main.waitUntilAllJobsAreFinished() }
            waiter.executionQueue = .main
            JobQueue(name: "waiter-queue").addJob(waiter)
            while !waiter.explain().contains("its work is blocked in waitUntilAllJobsAreFinished() on queue 'main'") {
                sched_yield()
            }
            JobQueue.main.isSuspended = false
            waiter.waitUntilFinished()
            exit(0)
        }
    }

    @Test func waitingOnTheMainQueueForAMainJobThatHasStartedDoesNotTrap() async {
        // An asynchronous job of JobQueue.main that has started needs the main queue no more:
        // another thread finishes it, and the wait returns.
        await #expect(processExitsWith: .success) {
            let job = AsyncBlockJob { _ in }
            job.name = "started-main-job"
            let waiter = BlockJob { job.waitUntilFinished() }
            waitOnMainWhileExecuting(job, waiter, blockedIn: "waitUntilFinished() on 'started-main-job'")
        }
    }

    @Test func waitingOnTheMainQueueForTheMainJobQueueWhoseJobsHaveStartedDoesNotTrap() async {
        await #expect(processExitsWith: .success) {
            let job = AsyncBlockJob { _ in }
            let waiter = BlockJob { JobQueue.main.waitUntilAllJobsAreFinished() }
            waitOnMainWhileExecuting(job, waiter, blockedIn: "waitUntilAllJobsAreFinished() on queue 'main'")
        }
    }
}

/// Adds `job`, asynchronous, to JobQueue.main; once it executes, runs `waiter`'s work on the main
/// queue; once that work is blocked in `wait`, finishes `job`; then waits for `waiter` and ends the
/// process with success. A trap in the wait ends it with failure first.
private func waitOnMainWhileExecuting(_ job: AsyncBlockJob, _ waiter: Job, blockedIn wait: String) -> Never {
    waiter.executionQueue = .main
    job.observe { event in
        // After `job`'s work, on the main queue: the waiter's work runs there after it.
        if event == .started { JobQueue(name: "waiter-queue").addJob(waiter) }
    }
    JobQueue.main.addJob(job)
    while !waiter.explain().contains("its work is blocked in \(wait)") { sched_yield() }
    job.finish()
    waiter.waitUntilFinished()
    exit(0)
}

/// A retry job named 'retrier', added to `queue`, whose first attempt has failed: it waits out an
/// hour's backoff when this returns.
private func retryJobWaitingOutItsBackoff(on queue: JobQueue) -> RetryJob {
    struct Failure: Error {}
    let retry = RetryJob(maxAttempts: 2, backoff: .constant(.seconds(3600))) { _ in ProbeJob { _ in throw Failure() } }
    retry.name = "retrier"
    queue.addJob(retry)
    while !retry.explain().contains("it waits out the backoff") { sched_yield() }
    return retry
}

/// Runs `waiter` on a queue of its own and, once its `explain()` says its work is blocked in `wait`
/// (so no trap ended the process first), ends the process with success.
private func exitOnceBlocked(_ waiter: Job, in wait: String) -> Never {
    JobQueue(name: "waiter-queue").addJob(waiter)
    while !waiter.explain().contains("its work is blocked in \(wait)") { sched_yield() }
    exit(0)
}
