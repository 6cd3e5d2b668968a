import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Timeouts: the clock starts when the job starts executing; on expiry the job is cancelled with
// `timedOut`; a timer of a job that finished first is cancelled and never fires; timers keep
// nothing alive. No test measures time: the limits are either tiny (so expiry is certain once the
// job waits for cancellation) or long (so a job that finishes at once is certainly first).

/// A Dispatch timer a test keeps to inspect later.
// @unchecked Sendable: `timer` is immutable, and a Dispatch source may be used from any thread.
private struct TimerReference: @unchecked Sendable {
    let timer: DispatchSourceTimer
}

@Suite struct TimeoutTests {
    @Test func anAsynchronousJobThatHonoursCancellationEndsTimedOut() async {
        let queue = JobQueue(name: "timeouts")
        let job = AsyncBlockJob { _ in }  // never calls finish() by itself
        job.observe { event in
            if event == .cancelled { job.finish() }
        }
        job.timeout = .milliseconds(5)
        queue.addJob(job)
        await job.waitUntilFinished()
        guard case .cancelled(let reason) = job.outcome else {
            Issue.record("not cancelled: \(String(describing: job.outcome))")
            return
        }
        #expect(reason.code == .timedOut)
        #expect(reason.detail == "after \(Duration.milliseconds(5))")
        #expect(job._timeoutTimer == nil)
    }

    @Test func aTaskJobIsCancelledByItsTimeout() async {
        let queue = JobQueue(name: "task-timeout")
        let job = TaskJob {
            while true {
                try Task.checkCancellation()
                await Task.yield()
            }
        }
        job.timeout = .milliseconds(5)
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(job.cancellationReason?.code == .timedOut)
        #expect(job.error == nil)
    }

    @Test func theClockStartsWhenTheJobStartsNotWhenItIsQueued() async {
        // The job waits behind a blocked job far longer than its limit; it must still run and
        // succeed, because its clock has not started. Its own work takes no time.
        let queue = JobQueue(name: "clock-starts-at-start", maxConcurrentJobCount: 1)
        let release = DispatchSemaphore(value: 0)
        let blocker = BlockJob { release.wait() }
        let timed = BlockJob {}
        timed.timeout = .seconds(3_600)
        let observedTimerBeforeStart = Locked<Bool?>(nil)
        let observed = Signal()
        blocker.observe { event in
            guard event == .started else { return }
            observedTimerBeforeStart.withLock { $0 = timed._timeoutTimer != nil }
            observed.fire()
        }
        queue.addJobs([blocker, timed], waitUntilFinished: false)
        await observed.wait()
        release.signal()
        await queue.waitUntilAllJobsAreFinished()
        #expect(observedTimerBeforeStart.withLock { $0 } == false)
        if case .succeeded = timed.outcome {} else { Issue.record("timed: \(String(describing: timed.outcome))") }
    }

    @Test func theTimerOfAJobThatFinishedFirstIsCancelled() async {
        let queue = JobQueue(name: "finished-first")
        let timers = Locked<[TimerReference]>([])
        let box = Locked<Job?>(nil)
        let job = BlockJob {
            if let timer = box.withLock({ $0 })?._timeoutTimer {
                timers.withLock { $0.append(TimerReference(timer: timer)) }
            }
        }
        box.withLock { $0 = job }
        job.timeout = .seconds(3_600)
        queue.addJob(job)
        await job.waitUntilFinished()
        box.withLock { $0 = nil }
        // The timer existed while the job ran, and is cancelled now: a cancelled source never fires.
        let seen = timers.withLock { $0 }
        #expect(seen.count == 1)
        #expect(seen.allSatisfy { $0.timer.isCancelled })
        #expect(job._timeoutTimer == nil)
        if case .succeeded = job.outcome {} else { Issue.record("job: \(String(describing: job.outcome))") }
    }

    /// Runs `count` jobs with a long timeout through a queue and returns weak references to them.
    private static func runTimedJobs(_ count: Int, on queue: JobQueue) async -> [WeakReference<Job>] {
        var references: [WeakReference<Job>] = []
        var jobs: [Job] = []
        for _ in 0..<count {
            let job = BlockJob {}
            job.timeout = .seconds(3_600)
            references.append(WeakReference(job))
            jobs.append(job)
        }
        queue.addJobs(jobs, waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        return references
    }

    @Test func manyJobsWithTimeoutsLeaveNoJobAlive() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("many-timeouts")
        let references = await Self.runTimedJobs(100_000, on: queue)
        await drainSerialQueue(worker)  // the worker that finished the last job has let go of it
        #expect(references.allSatisfy { $0.object == nil })
    }

    @Test func aTimeoutOfZeroOrLessCancelsTheJobAsSoonAsItStarts() async {
        let queue = JobQueue(name: "timeout-not-positive")
        for limit in [Duration.zero, .seconds(-5), .seconds(Int64.min) * 10] {
            let job = TaskJob { try await Task.sleep(for: .seconds(3600)) }
            job.timeout = limit
            queue.addJob(job)
            await job.waitUntilFinished()
            guard case .cancelled(let reason) = job.outcome else {
                Issue.record("\(limit): not cancelled: \(String(describing: job.outcome))")
                continue
            }
            #expect(reason.code == .timedOut)
            #expect(reason.detail == "after \(limit)")
        }
    }

    @Test func aTimeoutTooLongForDispatchNeverFires() async {
        // Beyond `Int64` seconds (`.seconds(Int64.max) * 10`), arming the timer trapped in
        // `Duration.components` on the worker that started the job, with the standard library's
        // message and nothing naming the job. Such a limit, like any too long for Dispatch, never fires.
        let queue = JobQueue(name: "timeout-too-long")
        for limit in [Duration.seconds(Int64.max), .seconds(Int64.max) * 10] {
            let job = BlockJob {}
            job.timeout = limit
            queue.addJob(job)
            await job.waitUntilFinished()
            if case .succeeded? = job.outcome {} else { Issue.record("\(limit): \(String(describing: job.outcome))") }
            #expect(job._timeoutTimer == nil)
        }
    }

    @Test func settingATimeoutOnAnExecutingJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = Locked<Job?>(nil)
            let job = BlockJob { box.withLock { $0 }?.timeout = .seconds(1) }
            job.name = "running-job"
            box.withLock { $0 = job }
            job.start()
        }
        #expect(standardErrorText(result).contains("Job.timeout: 'running-job' is already executing"))
    }
}
