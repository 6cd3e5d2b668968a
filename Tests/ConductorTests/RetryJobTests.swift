import Conductor
import ConductorTestSupport
import Dispatch
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// RetryJob and Backoff (Docs/Composition.md, "Retry"). Delays are never timed: a test either uses
// no wait, or a wait so long that only a cancellation can end it, and counts attempts.

private struct Flaky: Error, Equatable {
    let attempt: Int
}

/// An attempt that fails with `Flaky(attempt:)` unless `succeeds`.
private func attempt(_ number: Int, succeeds: Bool, made: Log<Int>) -> Job {
    made.append(number)
    let job = ProbeJob { _ in
        if !succeeds { throw Flaky(attempt: number) }
    }
    job.name = "attempt \(number)"
    return job
}

private func failure(of job: Job) -> Flaky? {
    if case .failed(let error)? = job.outcome { error as? Flaky } else { nil }
}

/// The `JobError` `job` failed with, or `nil` (recording an issue) if it did not fail with one.
private func jobError(of job: Job) -> JobError? {
    guard case .failed(let error as JobError)? = job.outcome else {
        Issue.record("outcome \(String(describing: job.outcome))")
        return nil
    }
    return error
}

@Suite struct RetryJobTests {
    @Test func twoFailuresThenASuccessSucceedAfterExactlyThreeAttempts() async {
        let queue = JobQueue(name: "retry")
        let made = Log<Int>()
        let retry = RetryJob(maxAttempts: 5) { number in attempt(number, succeeds: number == 3, made: made) }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        #expect(made.values == [1, 2, 3])
        #expect(retry.attemptCount == 3)
        if case .succeeded? = retry.outcome {} else { Issue.record("outcome \(String(describing: retry.outcome))") }
    }

    @Test func shouldRetryReturningFalseStopsAtOnceWithThatFailure() async {
        let queue = JobQueue(name: "retry-stop")
        let made = Log<Int>()
        let asked = Log<Int>()
        let retry = RetryJob(
            maxAttempts: 5,
            shouldRetry: { error in
                asked.append((error as? Flaky)?.attempt ?? -1)
                return false
            }
        ) { number in attempt(number, succeeds: false, made: made) }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        #expect(made.values == [1])
        #expect(asked.values == [1])
        #expect(failure(of: retry) == Flaky(attempt: 1))
    }

    @Test func whenEveryAttemptFailsTheOutcomeIsTheLastFailure() async {
        let queue = JobQueue(name: "retry-exhausted")
        let made = Log<Int>()
        let retry = RetryJob(maxAttempts: 4) { number in attempt(number, succeeds: false, made: made) }
        let dependent = BlockJob {}
        try? dependent.addDependency(retry, policy: .requireSuccess)
        queue.addJobs([retry, dependent], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(made.values == [1, 2, 3, 4])
        #expect(failure(of: retry) == Flaky(attempt: 4))
        #expect(dependent.cancellationReason?.code == .dependencyFailed)
    }

    @Test func aWaitBetweenAttemptsIsHonouredAndCancellingEndsIt() async {
        // Attempt 1 fails, and the retry job waits an hour before attempt 2. The attempt's
        // completion block runs after its `.finished` observers, the retry job's among them, so by
        // then the wait is scheduled: no second attempt may have been made, and the retry job is
        // still executing. Cancelling ends the wait, and the retry job, at once.
        let queue = JobQueue(name: "retry-wait")
        let made = Log<Int>()
        let firstSettled = Signal()
        let retry = RetryJob(maxAttempts: 3, backoff: .constant(.seconds(3600))) { number in
            let job = attempt(number, succeeds: false, made: made)
            job.completionBlock = { firstSettled.fire() }
            return job
        }
        queue.addJob(retry)
        await firstSettled.wait()
        #expect(made.values == [1])
        #expect(retry.state == .executing)
        retry.cancel()
        await retry.waitUntilFinished()
        #expect(made.values == [1])
        #expect(retry.attemptCount == 1)
        #expect(retry.cancellationReason == CancellationReason(code: .requested))
        #expect(queue.jobCount == 0)
    }

    @Test func cancellingTheRetryJobCancelsTheAttemptInFlight() async {
        let queue = JobQueue(name: "retry-cancel")
        let started = Signal()
        let attemptRef = Locked<Job?>(nil)
        let retry = RetryJob(maxAttempts: 3) { _ in
            // Ends only when cancelled.
            let job = AsyncBlockJob { job in
                job.observe { event in if event == .cancelled { job.finish() } }
                if job.isCancelled { job.finish() }
                started.fire()
            }
            attemptRef.withLock { $0 = job }
            return job
        }
        retry.name = "retrier"
        queue.addJob(retry)
        await started.wait()
        retry.cancel(reason: CancellationReason(code: .requested, detail: "stop"))
        await retry.waitUntilFinished()
        let inFlight = attemptRef.withLock { $0 }
        #expect(inFlight?.cancellationReason?.code == .parentCancelled)
        #expect(inFlight?.cancellationReason?.description == "parentCancelled: 'retrier' was cancelled")
        #expect(retry.cancellationReason == CancellationReason(code: .requested, detail: "stop"))
        #expect(retry.attemptCount == 1)
    }

    @Test func aCancelledRetryJobWhoseAttemptThenFailsKeepsItsOwnReason() async {
        // The attempt answers its cancellation by failing with its own error, as a cancelled
        // network call does. Until 2026-11-25 the retry job then failed with that error.
        struct Aborted: Error {}
        let queue = JobQueue(name: "retry-cancel-then-fail")
        let started = Signal()
        let made = Log<Int>()
        let retry = RetryJob(maxAttempts: 3) { number in
            made.append(number)
            return AsyncBlockJob { job in
                job.observe { event in if event == .cancelled { job.finish(throwing: Aborted()) } }
                if job.isCancelled { job.finish(throwing: Aborted()) }
                started.fire()
            }
        }
        queue.addJob(retry)
        await started.wait()
        retry.cancel(reason: CancellationReason(code: .requested, detail: "stop"))
        await retry.waitUntilFinished()
        #expect(made.values == [1])
        #expect(retry.cancellationReason == CancellationReason(code: .requested, detail: "stop"))
        if case .cancelled? = retry.outcome {} else { Issue.record("outcome \(String(describing: retry.outcome))") }
    }

    @Test func aRetryJobStartedByHandIsKeptDuringItsBackoffWait() async {
        // Nothing else holds a retry job started by hand while it waits: not a queue, not an
        // attempt's observer. Until 2026-11-25 the wait's timer held it weakly, so it was freed
        // while executing, and its completion block never ran.
        let made = Log<Int>()
        let completed = Flag()
        let retry: WeakReference<RetryJob> = await runOnDispatchThread {
            let retry = RetryJob(maxAttempts: 2, backoff: .constant(.seconds(3600))) { number in
                attempt(number, succeeds: false, made: made)
            }
            retry.completionBlock = { completed.set() }
            // Attempt 1 runs and fails on this thread, and the wait is armed, before start() returns.
            retry.start()
            return WeakReference(retry)
        }
        #expect(made.values == [1])
        guard let waiting = retry.object else {
            Issue.record("the retry job was freed during its backoff wait, while executing")
            return
        }
        #expect(waiting.state == .executing)
        waiting.cancel()
        await waiting.waitUntilFinished()
        #expect(completed.value)
        #expect(made.values == [1])
    }

    @Test func anAttemptCancelledOnItsOwnGivesTheRetryJobItsReason() async {
        // The attempt honours cancellation and runs out of time; it is not retried.
        let queue = JobQueue(name: "retry-timeout")
        let made = Log<Int>()
        let retry = RetryJob(maxAttempts: 3) { number in
            made.append(number)
            let job = AsyncBlockJob { job in
                job.observe { event in if event == .cancelled { job.finish() } }
                if job.isCancelled { job.finish() }
            }
            job.timeout = .milliseconds(1)
            return job
        }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        #expect(made.values == [1])
        #expect(retry.cancellationReason?.code == .timedOut)
    }

    @Test func attemptsRunInTheRetryJobsSlotSoALimitOneQueueCannotDeadlock() async {
        // Were attempts added to the queue, the first would wait for the slot the retry job holds.
        let queue = JobQueue(name: "retry-limit-1", maxConcurrentJobCount: 1)
        let made = Log<Int>()
        let sawQueue = Log<Bool>()
        let retry = RetryJob(maxAttempts: 3) { number in
            made.append(number)
            return ProbeJob { _ in
                sawQueue.append(JobQueue.current === queue)
                if number < 3 { throw Flaky(attempt: number) }
            }
        }
        let after = BlockJob {}
        try? after.addDependency(retry)
        queue.addJobs([retry, after], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(made.values == [1, 2, 3])
        #expect(sawQueue.values == [true, true, true])
        #expect(after.outcome.map { if case .succeeded = $0 { true } else { false } } == true)
    }

    @Test(arguments: [false, true])
    func laterAttemptsRunWhereTheRetryJobRuns(onItsExecutionQueue: Bool) async {
        // On a queue whose underlying queue is serial, or on the retry job's own execution queue.
        // Until 2026-11-25 the attempts after the first ran on the backoff timer's global queue.
        let key = DispatchSpecificKey<Bool>()
        let place = DispatchQueue(label: "retry-place")
        place.setSpecific(key: key, value: true)
        let queue = JobQueue(name: "retry-place")
        let there = Log<Bool>()
        let retry = RetryJob(maxAttempts: 3, backoff: .exponential(initial: .zero, maximum: .zero)) { number in
            ProbeJob { _ in
                there.append(DispatchQueue.getSpecific(key: key) == true)
                if number < 3 { throw Flaky(attempt: number) }
            }
        }
        if onItsExecutionQueue {
            retry.executionQueue = place
        } else {
            queue.underlyingQueue = place
        }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        #expect(there.values == [true, true, true])
        if case .succeeded? = retry.outcome {} else { Issue.record("outcome \(String(describing: retry.outcome))") }
    }

    @Test func aRetryJobThatIsAnAttemptRunsItsAttemptsWhereItsRetryJobRuns() async {
        // The inner retry job is on no queue: its attempts run where the outer one's do, and see
        // the outer one's queue. Found by a review on 2026-11-25: they ran on a global queue.
        let key = DispatchSpecificKey<Bool>()
        let place = DispatchQueue(label: "retry-nested-place")
        place.setSpecific(key: key, value: true)
        let queue = JobQueue(name: "retry-nested")
        queue.underlyingQueue = place
        let seen = Log<String>()
        let outer = RetryJob(maxAttempts: 1) { _ in
            RetryJob(maxAttempts: 3) { number in
                ProbeJob { _ in
                    seen.append("\(DispatchQueue.getSpecific(key: key) == true) \(JobQueue.current?.name ?? "nil")")
                    if number < 3 { throw Flaky(attempt: number) }
                }
            }
        }
        queue.addJob(outer)
        await outer.waitUntilFinished()
        #expect(seen.values == Array(repeating: "true retry-nested", count: 3))
        if case .succeeded? = outer.outcome {} else { Issue.record("outcome \(String(describing: outer.outcome))") }
    }

    @Test func laterAttemptsFollowAChangedUnderlyingQueue() async {
        // The place is read for each attempt, as for any job not yet started.
        let key = DispatchSpecificKey<String>()
        let (first, second) = (DispatchQueue(label: "first"), DispatchQueue(label: "second"))
        first.setSpecific(key: key, value: "first")
        second.setSpecific(key: key, value: "second")
        let queue = JobQueue(name: "retry-moved")
        queue.underlyingQueue = first
        let seen = Log<String>()
        let retry = RetryJob(
            maxAttempts: 2,
            shouldRetry: { _ in
                queue.underlyingQueue = second
                return true
            }
        ) { number in
            ProbeJob { _ in
                seen.append(DispatchQueue.getSpecific(key: key) ?? "nil")
                if number < 2 { throw Flaky(attempt: number) }
            }
        }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        #expect(seen.values == ["first", "second"])
    }

    @Test func attemptsOfARetryJobStartedByHandSeeNoQueueOnTheirOwnExecutionQueue() async {
        // Started by hand inside a job of `starter`, which does not wait for it: `starter` is not
        // the retry job's queue. Found by a review on 2026-11-25: such attempts saw `starter`, and a
        // wait for it from them trapped as a wait for themselves.
        let starter = JobQueue(name: "retry-starter")
        let elsewhere = DispatchQueue(label: "attempts")
        let seen = Log<String>()
        let retry = RetryJob(maxAttempts: 2) { number in
            let job = ProbeJob { _ in
                seen.append(JobQueue.current?.name ?? "nil")
                if number < 2 { throw Flaky(attempt: number) }
            }
            job.executionQueue = elsewhere
            return job
        }
        starter.addJob(BlockJob { retry.start() })
        await retry.waitUntilFinished()
        #expect(seen.values == ["nil", "nil"])
    }

    @Test func anAttemptWithItsOwnExecutionQueueSeesTheRetryJobsQueueAsCurrent() async {
        // Until 2026-11-25 such an attempt saw `JobQueue.current` as nil: `start()` handed its work
        // to its execution queue with no queue context.
        let queue = JobQueue(name: "retry-execution-queue")
        let elsewhere = DispatchQueue(label: "attempts")
        let sawQueue = Log<String>()
        let retry = RetryJob(maxAttempts: 3) { number in
            let job = ProbeJob { _ in
                sawQueue.append(JobQueue.current?.name ?? "nil")
                if number < 3 { throw Flaky(attempt: number) }
            }
            job.executionQueue = elsewhere
            return job
        }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        #expect(sawQueue.values == Array(repeating: "retry-execution-queue", count: 3))
        if case .succeeded? = retry.outcome {} else { Issue.record("outcome \(String(describing: retry.outcome))") }
    }

    @Test func aTaskJobAttemptAwaitingItsRetryJobsQueueTraps() async {
        // The queue waits for the retry job, which waits for the attempt: the wait would never
        // return. Until 2026-11-25 only the blocking form was refused. Without the trap, the
        // process sees the attempt blocked in its wait and exits with success, failing the test.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "retry-self-wait")
            let made = Log<Job>()
            let retry = RetryJob(maxAttempts: 1) { _ in
                let job = TaskJob { await queue.waitUntilAllJobsAreFinished() }
                made.append(job)
                return job
            }
            queue.addJob(retry)
            while !(made.values.first?.explain().contains("its work is blocked in") ?? false) { sched_yield() }
            exit(0)
        }
        #expect(
            standardErrorText(result).contains(
                "JobQueue.waitUntilAllJobsAreFinished(): called from a job running on 'retry-self-wait'; it would wait for itself and never return"
            ))
    }

    @Test func anAttemptWaitingForItsRetryJobTraps() async {
        // The retry job waits for its attempt. Until 2026-11-25 neither form of the wait was
        // refused, and both hung.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let (retry, attempt) = retryJobWhoseAttemptWaitsForIt { retry in BlockJob { retry.waitUntilFinished() } }
            JobQueue(name: "retry-waited-for").addJob(retry)
            while !(attempt.values.first?.explain().contains("its work is blocked in") ?? false) { sched_yield() }
            exit(0)
        }
        #expect(
            standardErrorText(result).contains(
                "Job.waitUntilFinished(): 'retrier' is waited for from the work of 'waiting attempt', inside it (a group's child, a retry job's attempt), which it waits for; it would never return"
            ))
    }

    @Test func aTaskJobAttemptAwaitingItsRetryJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let (retry, attempt) = retryJobWhoseAttemptWaitsForIt { retry in TaskJob { await retry.waitUntilFinished() }
            }
            retry.start()
            while !(attempt.values.first?.explain().contains("its work is blocked in") ?? false) { sched_yield() }
            exit(0)
        }
        #expect(
            standardErrorText(result).contains(
                "Job.waitUntilFinished(): 'retrier' is waited for from the work of 'waiting attempt', inside it (a group's child, a retry job's attempt), which it waits for; it would never return"
            ))
    }

    @Test func anAttemptProducesOntoItsRetryJobsQueue() async {
        // Until 2026-11-25 it trapped: "was started by hand, outside any queue or group".
        let queue = JobQueue(name: "retry-produces")
        let sawQueue = Log<Bool>()
        let retry = RetryJob(maxAttempts: 1) { _ in
            ProbeJob { job in
                job.produce(BlockJob { sawQueue.append(JobQueue.current === queue) })
            }
        }
        queue.addJob(retry)
        await queue.waitUntilAllJobsAreFinished()
        #expect(sawQueue.values == [true])
    }

    @Test func anAttemptOfAGroupsChildProducesIntoTheGroup() async {
        // The produced job is a child: the group finishes only after it.
        let producedRan = Flag()
        let retry = RetryJob(maxAttempts: 1) { _ in
            ProbeJob { job in job.produce(BlockJob { producedRan.set() }) }
        }
        let group = GroupJob(name: "retry-group", jobs: [retry])
        JobQueue(name: "retry-group-queue").addJob(group)
        await group.waitUntilFinished()
        #expect(producedRan.value)
        if case .succeeded? = group.outcome {} else { Issue.record("outcome \(String(describing: group.outcome))") }
    }

    @Test func anAttemptThatCannotBeStartedFailsTheRetryJobAndIsLeftAlone() async throws {
        let queue = JobQueue(name: "retry-invalid")
        let elsewhere = JobQueue(name: "elsewhere", maxConcurrentJobCount: 0)
        let ran = Counter()
        let queued = BlockJob { ran.increment() }
        queued.name = "queued"
        elsewhere.addJob(queued)
        let retry = RetryJob(maxAttempts: 3) { _ in queued }
        retry.name = "retrier"
        queue.addJob(retry)
        await retry.waitUntilFinished()
        guard let error = jobError(of: retry) else { return }
        #expect(error.code == .invalidAttempt)
        #expect(
            error.description
                == "JobError.invalidAttempt: 'retrier' cannot start its attempt 'queued', which belongs to queue 'elsewhere'; return a new job that is on no queue and waits for nothing"
        )
        elsewhere.maxConcurrentJobCount = 1
        await elsewhere.waitUntilAllJobsAreFinished()
        #expect(ran.value == 1)
    }

    @Test func aRetryJobThatFailedOnAnInvalidAttemptIsFreed() async {
        // Its error names it and the attempt: kept as its outcome, it must not keep the retry job
        // alive (nor the attempt, which it left alone and nobody else holds).
        let (queue, worker) = makeJobQueueOnSerialWorker("retry-invalid-freed")
        let failures = Log<String>()
        let (retry, attempt): (WeakReference<RetryJob>, WeakReference<Job>) = {
            let attempt = BlockJob {}
            attempt.exclusivityCategories = ["retry-freed"]
            let retry = RetryJob(maxAttempts: 2) { _ in attempt }
            retry.observe { [weak retry] event in
                guard event == .finished, case .failed(let error as JobError)? = retry?.outcome else { return }
                failures.append("\(error.code)")
            }
            queue.addJob(retry)
            return (WeakReference(retry), WeakReference(attempt))
        }()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(failures.values == ["invalidAttempt"])
        #expect(retry.object == nil)
        #expect(attempt.object == nil)
    }

    @Test func anAttemptWithExclusivityCategoriesIsRefused() async {
        let queue = JobQueue(name: "retry-exclusive")
        let retry = RetryJob(maxAttempts: 2) { _ in
            let job = BlockJob {}
            job.name = "exclusive attempt"
            job.exclusivityCategories = ["retry-printer"]
            return job
        }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        guard let error = jobError(of: retry) else { return }
        #expect(error.code == .invalidAttempt)
        #expect(error.description.contains("'exclusive attempt', which has exclusivity categories"))
    }

    @Test func anAttemptWithAConditionIsRefusedSayingSo() async {
        // A job with conditions is pending with no dependency; until 2026-11-25 the message read
        // "which waits for 0 unfinished dependencies: ".
        let queue = JobQueue(name: "retry-conditional")
        let retry = RetryJob(maxAttempts: 2) { _ in
            let job = BlockJob {}
            job.name = "conditional attempt"
            job.addCondition(BlockCondition(name: "always") { _ in true })
            return job
        }
        queue.addJob(retry)
        await retry.waitUntilFinished()
        guard let error = jobError(of: retry) else { return }
        #expect(error.code == .invalidAttempt)
        #expect(
            error.description.contains(
                "'conditional attempt', which has conditions (only a queue evaluates them); return a new job"))
    }

    @Test func aRetryJobCancelledWhileShouldRetryRunsEndsAndIsFreed() async {
        // shouldRetry blocks its (Dispatch) thread until the test has cancelled the retry job; the
        // wait that would follow is then never armed, and must let the retry job go.
        let (queue, worker) = makeJobQueueOnSerialWorker("retry-cancel-deciding")
        let deciding = Signal()
        let gate = DispatchSemaphore(value: 0)
        let made = Log<Int>()
        let retry: WeakReference<RetryJob> = {
            let retry = RetryJob(
                maxAttempts: 3, backoff: .constant(.seconds(3600)),
                shouldRetry: { _ in
                    deciding.fire()
                    gate.wait()
                    return true
                }
            ) { number in attempt(number, succeeds: false, made: made) }
            queue.addJob(retry)
            return WeakReference(retry)
        }()
        await deciding.wait()
        retry.object?.cancel()
        gate.signal()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(made.values == [1])
        #expect(retry.object == nil)
    }

    @Test func aRetryJobCancelledBeforeItStartsMakesNoAttemptAndFreesItsClosures() async {
        let made = Log<Int>()
        weak var weakRetry: RetryJob?
        do {
            let retry = RetryJob(maxAttempts: 3) { number in attempt(number, succeeds: true, made: made) }
            weakRetry = retry
            retry.cancel()
            JobQueue(name: "retry-cancelled-early").addJob(retry)
            #expect(retry.isFinished && retry.isCancelled)
        }
        #expect(weakRetry == nil)
        #expect(made.values.isEmpty)
    }

    @Test func aRetryJobWhoseClosureCapturesItIsFreedOnceFinished() async {
        weak var weakRetry: RetryJob?
        do {
            let box = Locked<RetryJob?>(nil)
            let retry = RetryJob(maxAttempts: 2) { _ in
                _ = box.withLock { $0 }  // a cycle through the closure while the job lives
                return BlockJob {}
            }
            box.withLock { $0 = retry }
            weakRetry = retry
            let (queue, worker) = makeJobQueueOnSerialWorker("retry-freed")
            queue.addJob(retry)
            await queue.waitUntilAllJobsAreFinished()
            // The retry job ends inside its worker's run of it, which still holds it until it returns.
            await drainSerialQueue(worker)
            // The box still holds the retry job: only the job's release of its closure breaks the
            // cycle.
        }
        #expect(weakRetry == nil)
    }

    // MARK: Backoff

    @Test func backoffDelays() {
        #expect(Backoff.none.maximumDelay(beforeAttempt: 2) == .zero)
        #expect(Backoff.constant(.seconds(2)).maximumDelay(beforeAttempt: 7) == .seconds(2))
        let exponential = Backoff.exponential(initial: .milliseconds(100), maximum: .seconds(1))
        let delays = (2...7).map { exponential.maximumDelay(beforeAttempt: $0) }
        #expect(
            delays == [
                .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1),
                .seconds(1),
            ])
        #expect(exponential.maximumDelay(beforeAttempt: 1_000_000) == .seconds(1))
        #expect(exponential.delay(beforeAttempt: 4) == .milliseconds(400))
        let jittered = Backoff.exponential(initial: .milliseconds(100), maximum: .seconds(1), jitter: true)
        for attempt in 2...12 {
            let delay = jittered.delay(beforeAttempt: attempt)
            #expect(delay >= .zero && delay <= jittered.maximumDelay(beforeAttempt: attempt))
        }
    }

    // MARK: Out-of-range settings (Concepts, "Misuse")

    @Test func backoffClampsOutOfRangeValuesInsteadOfCrashing() {
        // A negative wait counts as zero.
        #expect(Backoff.constant(.seconds(-10)).maximumDelay(beforeAttempt: 2) == .zero)
        let negative = Backoff.exponential(initial: .seconds(-1), maximum: .seconds(-3), jitter: true)
        #expect(negative.maximumDelay(beforeAttempt: 5) == .zero)
        #expect(negative.delay(beforeAttempt: 5) == .zero)
        // An attempt below 2 is the first retry: `Int.min` overflowed `attempt - 2` (a crash with no message).
        let exponential = Backoff.exponential(initial: .milliseconds(100), maximum: .seconds(1))
        #expect(exponential.maximumDelay(beforeAttempt: .min) == .milliseconds(100))
        #expect(exponential.maximumDelay(beforeAttempt: 0) == .milliseconds(100))
        #expect(exponential.maximumDelay(beforeAttempt: .max) == .seconds(1))
        // Near Duration's own limit, doubling stops at the maximum instead of overflowing, and
        // jitter draws under `Int64.max` nanoseconds instead of trapping in `Duration.components`.
        let vast = Backoff.exponential(
            initial: .seconds(Int64.max) * 10, maximum: .seconds(Int64.max) * 18, jitter: true)
        #expect(vast.maximumDelay(beforeAttempt: 3) == .seconds(Int64.max) * 18)
        let drawn = vast.delay(beforeAttempt: 3)
        #expect(drawn >= .zero && drawn <= .nanoseconds(Int64.max))
    }

    @Test func maxAttemptsBelowOneMakesOneAttemptAndANegativeWaitNone() async {
        #expect(RetryJob(maxAttempts: 0) { _ in BlockJob {} }.maxAttempts == 1)
        let queue = JobQueue(name: "retry-clamped")
        let once = Log<Int>()
        let single = RetryJob(maxAttempts: .min) { number in attempt(number, succeeds: false, made: once) }
        #expect(single.maxAttempts == 1)
        // A negative wait is no wait: the three attempts follow each other at once.
        let thrice = Log<Int>()
        let eager = RetryJob(maxAttempts: 3, backoff: .constant(.seconds(-3600))) { number in
            attempt(number, succeeds: false, made: thrice)
        }
        queue.addJobs([single, eager], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(once.values == [1])
        #expect(failure(of: single) == Flaky(attempt: 1))
        #expect(thrice.values == [1, 2, 3])
        #expect(failure(of: eager) == Flaky(attempt: 3))
    }

    @Test func aWaitBeyondWhatDispatchCanRepresentNeverEndsAndCancellingEndsIt() async {
        // `.seconds(Int64.max) * 10` is beyond `Int64` seconds: scheduling it trapped in
        // `Duration.components`, with the standard library's message, on the thread that saw the
        // attempt fail. It now counts as forever, as any wait too long for Dispatch does.
        let queue = JobQueue(name: "retry-vast-wait")
        let made = Log<Int>()
        let firstSettled = Signal()
        let retry = RetryJob(maxAttempts: 2, backoff: .constant(.seconds(Int64.max) * 10)) { number in
            let job = attempt(number, succeeds: false, made: made)
            job.completionBlock = { firstSettled.fire() }
            return job
        }
        queue.addJob(retry)
        await firstSettled.wait()  // the wait is scheduled (see aWaitBetweenAttemptsIsHonouredAndCancellingEndsIt)
        #expect(retry.state == .executing)
        retry.cancel()
        await retry.waitUntilFinished()
        #expect(made.values == [1])
        #expect(retry.cancellationReason == CancellationReason(code: .requested))
    }
}

/// A retry job named 'retrier' whose one attempt, named 'waiting attempt', is `makeAttempt(retry)`;
/// and a log that holds the attempt once it is made. The two keep each other (for exit tests).
private func retryJobWhoseAttemptWaitsForIt(
    _ makeAttempt: @escaping @Sendable (RetryJob) -> Job
) -> (RetryJob, Log<Job>) {
    let retryJob = Log<RetryJob>()
    let made = Log<Job>()
    let retry = RetryJob(maxAttempts: 1) { _ in
        let job = makeAttempt(retryJob.values[0])
        job.name = "waiting attempt"
        made.append(job)
        return job
    }
    retry.name = "retrier"
    retryJob.append(retry)
    return (retry, made)
}
