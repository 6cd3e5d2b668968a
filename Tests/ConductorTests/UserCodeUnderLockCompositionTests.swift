import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// "No user code under a lock" (Docs/Design.md, "Decide inside, act outside"), for what users hand
// the composition and diagnostics features: conditions, exclusive jobs, groups, retry jobs,
// progress observers, tracers, watchdogs. Each test captures lock canaries (LockCanary.swift) in
// those closures, conditions, errors and jobs, runs its scenario many times, waits until every
// canary is freed, and expects none to have been freed by a thread holding the engine lock. The
// check reads the lock's owner, which only debug builds record.
//
// Waiting until everything is freed. What runs on a queue of the test's, on a private serial
// `underlyingQueue`, is drained as LeakTests.swift explains (`settle`). What the engine releases
// elsewhere (a condition's evaluation task, a group's children on its own queue, a retry job's
// later attempts on a Dispatch thread, a watchdog's thread) ends with `waitUntilAllFreed()`, which
// returns when the last canary's deinit has run; a leak fails through the time limit. Either way
// `freed == made` is then expected too, so that no test passes because it freed nothing.
//
// Scenarios are built in functions of their own, so that no local of the test holds what the
// engine should let go (debug builds keep locals to the end of their scope).

#if DEBUG

    // MARK: - Helpers

    /// Waits until `queue` has no unfinished job and the worker that finished the last one has let
    /// go of it (see LeakTests.swift).
    private func settle(_ queue: JobQueue, _ worker: DispatchQueue) async {
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
    }

    /// A condition that holds a canary and answers as it is told; `dependency(for:)` returns
    /// `generated`.
    private struct CanaryCondition: JobCondition {
        enum Answer: Sendable {
            case satisfied
            case unsatisfied
            case throwing(CanaryError)
            /// Never answers: waits until its task is cancelled (its job was), then throws.
            case untilCancelled
            /// Tells `started`, then waits for `go` and answers `true`.
            case gated(started: Signal, go: Signal)
        }

        let name: String
        let canary: LockCanary
        let answer: Answer
        var generated: Job?

        func dependency(for job: Job) -> Job? { generated }

        func evaluate(for job: Job) async throws -> Bool {
            canary.touch()
            switch answer {
            case .satisfied:
                return true
            case .unsatisfied:
                await Task.yield()
                return false
            case .throwing(let error):
                throw error
            case .untilCancelled:
                try await Task.sleep(for: .seconds(3_600))
                return true
            case .gated(let started, let go):
                started.fire()
                await go.wait()
                return true
            }
        }
    }

    /// A block job whose block, completion block and observer each hold a canary. The canaries
    /// are made in capture lists, so that only the closures hold them.
    private func canaryJob(_ label: String, _ ledger: CanaryLedger) -> BlockJob {
        let job = BlockJob { [canary = ledger.canary("\(label) block")] in canary.touch() }
        job.name = label
        job.completionBlock = { [canary = ledger.canary("\(label) completion block")] in canary.touch() }
        job.observe { [canary = ledger.canary("\(label) observer")] _ in canary.touch() }
        return job
    }

    /// An asynchronous job that holds a canary and stays executing until `finish()`; tells
    /// `started` when it starts.
    private func heldJob(_ label: String, _ ledger: CanaryLedger, started: Signal) -> ProbeAsyncJob {
        let canary = ledger.canary("\(label) work")
        let job = ProbeAsyncJob { _ in
            canary.touch()
            started.fire()
        }
        job.name = label
        return job
    }

    // MARK: - Tests

    @Suite("Nothing a user handed Conductor is freed under the engine lock: composition", .serialized)
    struct UserCodeUnderLockCompositionTests {

        // MARK: Conditions

        /// A job with a condition struct, a `BlockCondition` and, for some, a generated dependency,
        /// all holding canaries; the condition passes, fails or throws a `CanaryError`.
        private func conditionedJob(_ index: Int, _ ledger: CanaryLedger) -> Job {
            let job = canaryJob("conditioned \(index)", ledger)
            let answer: CanaryCondition.Answer
            switch index % 3 {
            case 0: answer = .satisfied
            case 1: answer = .unsatisfied
            default: answer = .throwing(CanaryError(ledger.canary("condition \(index) error")))
            }
            var condition = CanaryCondition(
                name: "condition \(index)", canary: ledger.canary("condition \(index)"), answer: answer)
            if index % 4 == 0 {
                condition.generated = canaryJob("generated \(index)", ledger)
            }
            job.addCondition(condition)
            let blockCanary = ledger.canary("block condition \(index)")
            job.addCondition(
                BlockCondition(name: "block \(index)") { _ in
                    blockCanary.touch()
                    return true
                })
            return job
        }

        @Test(
            "conditions that pass, fail or throw, with generated dependencies, are released outside the lock",
            .hangLimit)
        func conditionsPassFailOrThrow() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("conditions", limit: 4)
            let outcomes = Log<String>()
            for round in 0..<20 {
                let jobs = (0..<30).map { conditionedJob(round * 30 + $0, ledger) }
                for job in jobs {
                    job.observe { [weak job] event in
                        guard event == .finished, let outcome = job?.outcome else { return }
                        outcomes.append(outcome.isSucceeded ? "succeeded" : outcome.reason?.code.description ?? "?")
                    }
                }
                queue.addJobs(jobs, waitUntilFinished: false)
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 600 * 5)
            let values = outcomes.values
            #expect(values.count == 600)
            #expect(values.count { $0 == "succeeded" } == 200)
            #expect(values.count { $0 == "conditionFailed" } == 400)
        }

        /// A condition whose generated dependency already waits for the job: the job is cancelled
        /// with `conditionFailed`, in the critical section that found the cycle.
        private func jobWithCyclicCondition(_ index: Int, _ ledger: CanaryLedger) -> [Job] {
            let job = canaryJob("cyclic \(index)", ledger)
            let login = canaryJob("login \(index)", ledger)
            try? login.addDependency(job)
            job.addCondition(
                CanaryCondition(
                    name: "logged in", canary: ledger.canary("cyclic condition \(index)"), answer: .satisfied,
                    generated: login))
            return [job, login]
        }

        @Test("a generated dependency that would close a cycle cancels the job, with no lock taken twice")
        func generatedDependencyClosingACycle() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("cyclic-conditions", limit: 2)
            let reasons = Log<String>()
            for index in 0..<50 {
                let jobs = jobWithCyclicCondition(index, ledger)
                reasons.append(jobs[0].cancellationReason?.description ?? "not cancelled")
                queue.addJobs(jobs, waitUntilFinished: false)
            }
            await settle(queue, worker)
            ledger.expectAllFreedOutsideTheLock(minimum: 50 * 7)
            #expect(reasons.count == 50)
            #expect(
                reasons.values.allSatisfy {
                    $0.hasPrefix("conditionFailed: 'logged in' generated a dependency that would close a cycle: ")
                        && $0.contains("JobError.dependencyCycle")
                }, "\(reasons.values.first ?? "")")
        }

        /// A job whose condition waits until the test lets it answer, or until it is cancelled.
        private func jobWithSlowCondition(
            _ index: Int, _ ledger: CanaryLedger, on queue: JobQueue, started: Signal, go: Signal
        ) -> WeakReference<Job> {
            let job = canaryJob("slow condition \(index)", ledger)
            let answer: CanaryCondition.Answer = index % 2 == 0 ? .gated(started: started, go: go) : .untilCancelled
            job.addCondition(
                CanaryCondition(name: "slow \(index)", canary: ledger.canary("slow condition \(index)"), answer: answer)
            )
            queue.addJob(job)
            return WeakReference(job)
        }

        @Test("a job cancelled while its conditions evaluate lets them go outside the lock", .hangLimit)
        func cancelledWhileConditionsEvaluate() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("cancelled-conditions")
            for index in 0..<60 {
                let started = Signal()
                let go = Signal()
                let job = jobWithSlowCondition(index, ledger, on: queue, started: started, go: go)
                if index % 2 == 0 {
                    await started.wait()
                }
                job.object?.cancel()
                go.fire()
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 60 * 4)
        }

        /// A queue the test lets go of at once, with conditioned jobs and a progress observer.
        private func droppedQueueWithConditions(_ ledger: CanaryLedger) -> (WeakReference<JobQueue>, DispatchQueue) {
            let (queue, worker) = makeJobQueueOnSerialWorker("dropped-with-conditions", limit: 3)
            let observer = ledger.canary("dropped queue's progress observer")
            queue.progress.observe { _ in observer.touch() }
            queue.addJobs((0..<40).map { conditionedJob($0, ledger) }, waitUntilFinished: false)
            return (WeakReference(queue), worker)
        }

        @Test(
            "conditions on the jobs of a queue its owner dropped are released outside the lock", .hangLimit
        )
        func conditionsOnADroppedQueue() async {
            let ledger = CanaryLedger()
            for _ in 0..<5 {
                let (queue, worker) = droppedQueueWithConditions(ledger)
                await ledger.waitUntilAllFreed()
                await drainSerialQueue(worker)
                #expect(queue.object == nil, "the dropped queue was freed (its observer's canary counts it)")
            }
            ledger.expectAllFreedOutsideTheLock(minimum: 5 * 40 * 6)
        }

        @Test("conditions of a job cancelled before it was added, or added after, are released outside the lock")
        func conditionsOfACancelledJob() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("cancelled-before-added")
            for index in 0..<100 {
                let job: Job = {
                    let job = canaryJob("cancelled \(index)", ledger)
                    if index % 2 == 0 {
                        job.addCondition(
                            CanaryCondition(
                                name: "before", canary: ledger.canary("condition before \(index)"), answer: .satisfied,
                                generated: canaryJob("generated \(index)", ledger)))
                    }
                    job.cancel()
                    // Ignored on a cancelled job: the caller's is the condition's last reference.
                    job.addCondition(
                        CanaryCondition(
                            name: "after", canary: ledger.canary("condition after \(index)"), answer: .satisfied))
                    return job
                }()
                queue.addJob(job)
            }
            await settle(queue, worker)
            ledger.expectAllFreedOutsideTheLock(minimum: 100 * 4)
        }

        // MARK: Mutual exclusivity

        /// Jobs of one category on a wide queue: the first holds it until the test finishes it, the
        /// others wait in its line; some of those are cancelled while they wait.
        private func exclusiveRound(
            _ round: Int, _ ledger: CanaryLedger, _ queue: JobQueue, started: Signal
        ) -> (holder: ProbeAsyncJob, waiting: [WeakReference<Job>]) {
            let category = "canary category \(round % 3)"
            let holder = heldJob("holder \(round)", ledger, started: started)
            holder.exclusivityCategories = [category]
            var waiting: [WeakReference<Job>] = []
            var jobs: [Job] = [holder]
            for index in 0..<40 {
                let job = canaryJob("in line \(round).\(index)", ledger)
                job.exclusivityCategories = index % 5 == 0 ? [category, "canary other \(round)"] : [category]
                waiting.append(WeakReference(job))
                jobs.append(job)
            }
            queue.addJobs(jobs, waitUntilFinished: false)
            return (holder, waiting)
        }

        @Test("jobs cancelled while they wait in a category's line are released outside the lock")
        func cancelledWhileWaitingForACategory() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("exclusive", limit: 8)
            for round in 0..<12 {
                let started = Signal()
                let (holder, waiting) = exclusiveRound(round, ledger, queue, started: started)
                await started.wait()
                // The worker has claimed every job: those in line are pending, without a slot.
                await drainSerialQueue(worker)
                #expect(waiting.allSatisfy { $0.object?.state == .pending })
                if round % 4 == 3 {
                    queue.cancelAllJobs()
                } else {
                    for (index, job) in waiting.enumerated() where index % 3 != 1 {
                        job.object?.cancel()
                    }
                }
                holder.finish()
                await settle(queue, worker)
                #expect(waiting.allSatisfy { $0.object == nil }, "the jobs that waited in line were freed")
            }
            ledger.expectAllFreedOutsideTheLock(minimum: 12 * 121)
            #expect(JobQueue._exclusivityCategoriesInUse(among: ["canary category 0", "canary category 1"]) == 0)
        }

        /// A group holding a category, whose children share it, and one naming a category no group
        /// around it holds, which is refused without running; and a nested group refused likewise.
        private func groupWithCategories(_ index: Int, _ ledger: CanaryLedger) -> GroupJob {
            let sharing = canaryJob("sharing \(index)", ledger)
            sharing.exclusivityCategories = ["canary group category"]
            let refused = canaryJob("refused \(index)", ledger)
            refused.exclusivityCategories = ["canary elsewhere \(index % 4)"]
            let refusedChild = canaryJob("refused group's child \(index)", ledger)
            let refusedGroup = GroupJob(name: "refused group \(index)", jobs: [refusedChild])
            refusedGroup.exclusivityCategories = ["canary elsewhere \(index % 4)"]
            let group = GroupJob(
                name: "categories \(index)", maxConcurrentJobCount: 2,
                jobs: [sharing, refused, refusedGroup, canaryJob("plain \(index)", ledger)])
            group.exclusivityCategories = ["canary group category"]
            return group
        }

        @Test(
            "jobs a group refuses their categories, and those sharing its own, are released outside the lock",
            .hangLimit)
        func groupChildrenRefusedTheirCategories() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("group categories", limit: 4)
            let refusals = Log<String>()
            for index in 0..<40 {
                let group = groupWithCategories(index, ledger)
                group.observe { [weak group] event in
                    guard event == .finished, case .failed(let error as GroupFailure)? = group?.outcome else { return }
                    for failure in error.failures {
                        refusals.append((failure.error as? JobError)?.code.description ?? "\(failure.error)")
                    }
                }
                queue.addJob(group)
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 40 * 12)
            #expect(refusals.values == Array(repeating: "categoryNotHeldByGroup", count: 80))
        }

        // MARK: Groups

        /// A group of canary jobs, a failing child, a child that produces a job, and a nested group
        /// with a failing grandchild.
        private func canaryGroup(_ index: Int, _ ledger: CanaryLedger) -> GroupJob {
            var children: [Job] = (0..<4).map { canaryJob("child \(index).\($0)", ledger) }
            children.append(ledger.failingJob("failing child \(index)"))
            let produced = ledger.canary("producer \(index) work")
            children.append(
                ProbeJob { job in
                    produced.touch()
                    job.produce(canaryJob("produced \(index)", ledger))
                })
            let inner = GroupJob(
                name: "inner \(index)", maxConcurrentJobCount: 1,
                jobs: [canaryJob("grandchild \(index)", ledger), ledger.failingJob("failing grandchild \(index)")])
            let innerCompletion = ledger.canary("inner \(index) completion block")
            inner.completionBlock = { innerCompletion.touch() }
            children.append(inner)
            let group = GroupJob(name: "group \(index)", maxConcurrentJobCount: 3, jobs: children)
            let completion = ledger.canary("group \(index) completion block")
            group.completionBlock = { completion.touch() }
            return group
        }

        @Test(
            "a group's children, their CanaryErrors in its GroupFailure, produced jobs and nested groups are released outside the lock",
            .hangLimit)
        func groupsWithFailuresAndProducedJobs() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("groups", limit: 4)
            let failures = Log<Int>()
            for round in 0..<10 {
                let groups = (0..<5).map { canaryGroup(round * 5 + $0, ledger) }
                for group in groups {
                    group.observe { [weak group] event in
                        guard event == .finished, case .failed(let error as GroupFailure)? = group?.outcome else {
                            return
                        }
                        failures.append(error.failures.count)
                    }
                }
                queue.addJobs(groups, waitUntilFinished: false)
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 50 * 25)
            // Each group: its failing child and its failed nested group.
            #expect(failures.values == Array(repeating: 2, count: 50))
        }

        /// A group executing on `queue`, whose first child holds its group's only slot until the
        /// test finishes it; the other children wait on the group's queue of children.
        private func groupWithHeldChild(
            _ index: Int, _ ledger: CanaryLedger, started: Signal
        ) -> (group: GroupJob, held: ProbeAsyncJob) {
            let held = heldJob("held child \(index)", ledger, started: started)
            var children: [Job] = [held]
            children += (0..<5).map { canaryJob("waiting child \(index).\($0)", ledger) }
            children.append(
                GroupJob(name: "nested \(index)", jobs: [canaryJob("nested child \(index)", ledger)]))
            let group = GroupJob(name: "held group \(index)", maxConcurrentJobCount: 1, jobs: children)
            let completion = ledger.canary("held group \(index) completion block")
            group.completionBlock = { completion.touch() }
            return (group, held)
        }

        @Test("a group cancelled with unfinished children releases them outside the lock", .hangLimit)
        func groupCancelledWithUnfinishedChildren() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("cancelled-groups")
            for index in 0..<30 {
                let started = Signal()
                let (group, held) = groupWithHeldChild(index, ledger, started: started)
                queue.addJob(group)
                await started.wait()
                group.cancel()
                held.finish()
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 30 * 20)
        }

        @Test("a group cancelled before it started cancels and releases its children outside the lock")
        func groupCancelledBeforeItStarted() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("unstarted-groups")
            queue.isSuspended = true
            for index in 0..<40 {
                let group = canaryGroup(index, ledger)
                queue.addJob(group)
                if index % 2 == 0 { group.cancel() }
            }
            queue.cancelAllJobs()
            queue.isSuspended = false
            await settle(queue, worker)
            // Every child was cancelled before it ran, in the sections that finished the groups (the
            // jobs a child would have produced were never made).
            ledger.expectAllFreedOutsideTheLock(minimum: 40 * 22)
        }

        /// A group started by hand on a Dispatch thread, and let go by the test while it runs.
        private func groupLetGo(_ index: Int, _ ledger: CanaryLedger, started: Signal) async -> ProbeAsyncJob {
            let (group, held) = groupWithHeldChild(index, ledger, started: started)
            await runOnDispatchThread { group.start() }
            return held
        }

        @Test("a group let go by its user while it runs is released outside the lock", .hangLimit)
        func groupLetGoMidRun() async {
            let ledger = CanaryLedger()
            for index in 0..<100 {
                let started = Signal()
                let held = await groupLetGo(index, ledger, started: started)
                await started.wait()
                if index % 2 == 0 {
                    await runOnDispatchThread { held.finish() }
                } else {
                    held.finish()
                }
            }
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 100 * 20)
        }

        /// A job that finished on a queue the test then let go of, whose progress observer holds a
        /// canary: the finished job's progress is the queue progress's last holder.
        private func jobFinishedOnADroppedQueue(_ index: Int, _ ledger: CanaryLedger) async -> Job {
            let job = canaryJob("finished elsewhere \(index)", ledger)
            if index % 2 == 0 { _ = job.progress }
            let (queue, worker) = makeJobQueueOnSerialWorker("dropped progress \(index)")
            let observer = ledger.canary("dropped queue \(index) progress observer")
            queue.progress.observe { _ in observer.touch() }
            queue.addJob(job)
            await settle(queue, worker)
            return job
        }

        @Test(
            "a finished job given to a group lets the progress it finished in go outside the lock",
            .hangLimit)
        func finishedChildLeavesItsQueuesProgress() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("late children")
            for index in 0..<40 {
                let finished = await jobFinishedOnADroppedQueue(index, ledger)
                let group = GroupJob(name: "late group \(index)", jobs: [canaryJob("late child \(index)", ledger)])
                if index % 4 < 2 { _ = group.progress }
                group.addChild(finished)
                queue.addJob(group)
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 40 * 7)
        }

        // MARK: Retry

        /// A retry job whose factory, `shouldRetry` and attempts hold canaries; attempts before the
        /// last `failures` fail with a `CanaryError`.
        private func canaryRetry(_ index: Int, _ ledger: CanaryLedger, failures: Int, backoff: Backoff) -> RetryJob {
            let factory = ledger.canary("retry \(index) factory")
            let decider = ledger.canary("retry \(index) shouldRetry")
            let retry = RetryJob(
                maxAttempts: 4, backoff: backoff,
                shouldRetry: { error in
                    decider.touch()
                    return error is CanaryError
                }
            ) { number in
                factory.touch()
                if number <= failures {
                    return ledger.failingJob("retry \(index) attempt \(number)")
                }
                if index % 2 == 0 {
                    return canaryJob("retry \(index) attempt \(number)", ledger)
                }
                // Finished on another thread: the retry job ends outside the call that started it.
                let body = ledger.canary("retry \(index) attempt \(number) body")
                return AsyncBlockJob { job in
                    DispatchQueue.global().async {
                        body.touch()
                        job.finish()
                    }
                }
            }
            retry.name = "retry \(index)"
            let completion = ledger.canary("retry \(index) completion block")
            retry.completionBlock = { completion.touch() }
            return retry
        }

        @Test(
            "a retry job's factory, shouldRetry, attempts and their CanaryErrors are released outside the lock",
            .hangLimit)
        func retryAttemptsFailingWithCanaryErrors() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("retries", limit: 4)
            let outcomes = Log<String>()
            for index in 0..<60 {
                // 0 to 4 failures: the last ones run out of attempts and fail with the CanaryError.
                let retry = canaryRetry(index, ledger, failures: index % 5, backoff: .none)
                retry.observe { [weak retry] event in
                    guard event == .finished, let outcome = retry?.outcome else { return }
                    outcomes.append(outcome.isSucceeded ? "succeeded" : outcome.isFailed ? "failed" : "cancelled")
                }
                queue.addJob(retry)
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 60 * 3)
            #expect(outcomes.values.count { $0 == "succeeded" } == 48)
            #expect(outcomes.values.count { $0 == "failed" } == 12)
        }

        /// A retry job whose first attempt fails and which then waits an hour before the next; tells
        /// `waiting` once the wait is scheduled (the attempt's completion block runs after the retry
        /// job's observer of it).
        private func retryWaitingAnHour(_ index: Int, _ ledger: CanaryLedger, waiting: Signal) -> RetryJob {
            let factory = ledger.canary("waiting retry \(index) factory")
            let retry = RetryJob(maxAttempts: 3, backoff: .constant(.seconds(3_600))) { number in
                factory.touch()
                let attempt = ledger.failingJob("waiting retry \(index) attempt \(number)")
                attempt.completionBlock = { waiting.fire() }
                return attempt
            }
            retry.name = "waiting retry \(index)"
            return retry
        }

        @Test("a retry job cancelled while it waits for its next attempt is released outside the lock")
        func retryCancelledWhileWaitingForItsDelay() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("waiting retries")
            for index in 0..<40 {
                let waiting = Signal()
                let retry = retryWaitingAnHour(index, ledger, waiting: waiting)
                queue.addJob(retry)
                await waiting.wait()
                #expect(retry.attemptCount == 1 && retry.state == .executing)
                retry.cancel()
            }
            await settle(queue, worker)
            ledger.expectAllFreedOutsideTheLock(minimum: 40 * 3)
        }

        /// A retry job whose attempt stays executing until it is cancelled.
        private func retryWithAttemptInFlight(_ index: Int, _ ledger: CanaryLedger, started: Signal) -> RetryJob {
            let factory = ledger.canary("in-flight retry \(index) factory")
            return RetryJob(maxAttempts: 3) { number in
                factory.touch()
                let canary = ledger.canary("in-flight retry \(index) attempt \(number)")
                return ProbeAsyncJob { job in
                    canary.touch()
                    job.observe { event in if event == .cancelled { job.finish(throwing: CancellationError()) } }
                    if job.isCancelled { job.finish() }
                    started.fire()
                }
            }
        }

        @Test(
            "a retry job cancelled with an attempt in flight, before it started, or given an invalid attempt is released outside the lock"
        )
        func retryCancelledOrRefused() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("cancelled retries", limit: 2)
            let (elsewhere, elsewhereWorker) = makeJobQueueOnSerialWorker("elsewhere")
            elsewhere.isSuspended = true
            for index in 0..<30 {
                let started = Signal()
                let inFlight = retryWithAttemptInFlight(index, ledger, started: started)
                queue.addJob(inFlight)
                await started.wait()
                inFlight.cancel()

                let unstarted = canaryRetry(index, ledger, failures: 0, backoff: .none)
                unstarted.cancel()
                queue.addJob(unstarted)

                // An attempt on another queue: the retry job fails with `invalidAttempt`, naming it.
                let invalid = ledger.canary("invalid retry \(index) factory")
                let refused = RetryJob(maxAttempts: 2) { _ in
                    invalid.touch()
                    let attempt = canaryJob("invalid attempt \(index)", ledger)
                    elsewhere.addJob(attempt)
                    return attempt
                }
                queue.addJob(refused)
            }
            await settle(queue, worker)
            elsewhere.cancelAllJobs()
            elsewhere.isSuspended = false
            await settle(elsewhere, elsewhereWorker)
            ledger.expectAllFreedOutsideTheLock(minimum: 30 * 8)
        }

        // MARK: Progress

        /// Jobs whose progress observers hold canaries: kept until the job finishes, removed while
        /// it waits, or on a progress the test drops; a group's progress observer; and the queue's.
        private func observedProgressRound(_ round: Int, _ ledger: CanaryLedger) -> WeakReference<JobQueue> {
            let (queue, worker) = makeJobQueueOnSerialWorker("progress \(round)", limit: 2)
            queue.isSuspended = true
            queue.progress.observe { [canary = ledger.canary("queue \(round) progress observer")] _ in canary.touch() }
            for index in 0..<20 {
                let job = canaryJob("progress \(round).\(index)", ledger)
                job.progress.observe { [canary = ledger.canary("progress \(round).\(index) observer")] _ in
                    canary.touch()
                }
                let token = job.progress.observe {
                    [canary = ledger.canary("progress \(round).\(index) removed observer")] _ in canary.touch()
                }
                if index % 2 == 0 { job.progress.removeObserver(token) }
                if index % 3 == 0 {
                    // A replaced completion block is released at once.
                    job.completionBlock = { [canary = ledger.canary("progress \(round).\(index) replacing")] in
                        canary.touch()
                    }
                }
                queue.addJob(job)
                if index % 5 == 0 { job.cancel() }
            }
            let group = GroupJob(
                name: "progress group \(round)",
                jobs: (0..<3).map { canaryJob("progress group \(round) child \($0)", ledger) })
            let token = group.progress.observe {
                [canary = ledger.canary("progress group \(round) removed observer")] _ in canary.touch()
            }
            group.progress.removeObserver(token)
            group.progress.observe { [canary = ledger.canary("progress group \(round) observer")] _ in canary.touch() }
            queue.addJob(group)
            queue.isSuspended = false
            // The worker serial queue outlives the job queue; the test waits for the canaries.
            _ = worker
            return WeakReference(queue)
        }

        @Test(
            "progress observers, kept, removed or dropped with their queue, are released outside the lock",
            .hangLimit)
        func progressObservers() async {
            let ledger = CanaryLedger()
            var queues: [WeakReference<JobQueue>] = []
            for round in 0..<10 {
                queues.append(observedProgressRound(round, ledger))
            }
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 10 * (20 * 5 + 3 * 3 + 3))
            #expect(queues.allSatisfy { $0.object == nil })
        }

        // MARK: Diagnostics

        @Test("jobs traced by a JobTracer, started, stopped and dropped, are released outside the lock")
        func tracedJobs() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("traced", limit: 3)
            for round in 0..<5 {
                var tracer: JobTracer? = JobTracer(capacity: 64, queues: round % 2 == 0 ? nil : [queue])
                tracer?.start()
                let jobs: [Job] = (0..<60).map { index in
                    let label = "traced \(round).\(index)"
                    let job = index % 4 == 0 ? ledger.failingJob(label) : canaryJob(label, ledger)
                    job.name = label
                    if index % 6 == 1 { job.cancel() }
                    return job
                }
                queue.addJobs(jobs, waitUntilFinished: false)
                await settle(queue, worker)
                tracer?.stop()
                let json = tracer?.chromeTraceJSON() ?? ""
                // A tracer of every queue records other tests' jobs too, which may fill its ring.
                #expect(round % 2 == 0 || json.contains("traced \(round)"))
                if round % 2 == 0 { tracer = nil } else { tracer?.start() }
                _ = tracer
            }
            await settle(queue, worker)
            ledger.expectAllFreedOutsideTheLock(minimum: 5 * 60 * 2)
        }

        /// A watchdog whose `onStall` and tick observer hold canaries, started on a queue whose job
        /// executes until the test finishes it; `reported` is told of each report.
        private func watchdog(_ index: Int, _ ledger: CanaryLedger, watching id: UInt64, reported: Signal)
            -> StallWatchdog
        {
            let onStall = ledger.canary("watchdog \(index) onStall")
            let onTick = ledger.canary("watchdog \(index) tick observer")
            // The watchdog sees every queue in the process: only the report naming our job counts.
            return StallWatchdog(
                threshold: .milliseconds(50), interval: .milliseconds(10), tickObserver: { onTick.touch() }
            ) { report in
                onStall.touch()
                if report.jobs.contains(where: { $0.id == id }) { reported.fire() }
            }
        }

        @Test(
            "a StallWatchdog's onStall, started, stopped or dropped while running, is released outside the lock",
            .hangLimit)
        func stallWatchdogHandlers() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("watched")
            for index in 0..<10 {
                let started = Signal()
                let long = heldJob("long \(index)", ledger, started: started)
                let completion = ledger.canary("long \(index) completion block")
                long.completionBlock = { completion.touch() }
                queue.addJob(long)
                await started.wait()
                let reported = Signal()
                var watchdog: StallWatchdog? = watchdog(index, ledger, watching: long.id, reported: reported)
                watchdog?.start()
                await reported.wait()
                if index % 2 == 0 { watchdog?.stop() }
                // Dropped, stopped or running: its thread lets it go after its current wake-up.
                watchdog = nil
                long.finish()
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 10 * 4)
        }

        /// Jobs with conditions, failures and categories whose queue the test drops, while another
        /// thread asks for every explanation and graph the engine writes.
        private func explainedRound(_ round: Int, _ ledger: CanaryLedger, into log: Log<WeakReference<Job>>) -> (
            JobQueue, DispatchQueue
        ) {
            let (queue, worker) = makeJobQueueOnSerialWorker("explained \(round)", limit: 2)
            for index in 0..<30 {
                let label = "explained \(round).\(index)"
                let job: Job
                switch index % 3 {
                case 0: job = conditionedJob(round * 30 + index, ledger)
                case 1: job = ledger.failingJob(label)
                default:
                    job = canaryJob(label, ledger)
                    job.exclusivityCategories = ["explained category"]
                }
                log.append(WeakReference(job))
                queue.addJob(job)
            }
            return (queue, worker)
        }

        @Test(
            "explain(), descriptions and dot graphs taken while jobs finish release nothing under the lock",
            .hangLimit)
        func diagnosticsWhileJobsFinish() async {
            let ledger = CanaryLedger()
            for round in 0..<5 {
                let jobs = Log<WeakReference<Job>>()
                let (queue, worker) = explainedRound(round, ledger, into: jobs)
                let done = Flag()
                let reader = DispatchQueue(label: "explainer \(round)")
                let read = Signal()
                reader.async {
                    while !done.value {
                        _ = queue.explain()
                        _ = queue.dotGraph()
                        _ = queue.description
                        for job in jobs.values {
                            if let job = job.object {
                                _ = job.explain()
                                _ = job.description
                            }
                        }
                    }
                    read.fire()
                }
                await settle(queue, worker)
                done.set()
                await read.wait()
                await drainSerialQueue(reader)
            }
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 5 * 100)
        }

        /// An asynchronous job whose work blocks in `waitUntilFinished()` on `target`; the target's
        /// completion block, which runs before its waiters wake, finishes the job.
        private func jobFinishedWhileItsWorkWaits(
            _ index: Int, _ ledger: CanaryLedger, on queue: JobQueue, target: ProbeAsyncJob, waiting: Signal
        ) -> WeakReference<Job> {
            let canary = ledger.canary("blocked \(index) work")
            let job = ProbeAsyncJob { _ in
                canary.touch()
                waiting.fire()
                target.waitUntilFinished()
            }
            job.name = "blocked \(index)"
            target.completionBlock = { [weak job] in job?.finish() }
            queue.addJob(job)
            return WeakReference(job)
        }

        @Test(
            "a job finished while its work waits in waitUntilFinished() is freed, and outside the lock",
            .hangLimit)
        func jobFinishedWhileItsWorkWaits() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("blocked", limit: 4)
            let (targets, targetsWorker) = makeJobQueueOnSerialWorker("targets")
            for index in 0..<20 {
                let targetStarted = Signal()
                let target = heldJob("target \(index)", ledger, started: targetStarted)
                targets.addJob(target)
                await targetStarted.wait()
                let waiting = Signal()
                let job = jobFinishedWhileItsWorkWaits(index, ledger, on: queue, target: target, waiting: waiting)
                await waiting.wait()
                // Its work is blocked once explain() says so (a state, read without sleeping).
                while job.object.map({ !$0.explain().contains("its work is blocked in") }) ?? false {
                    await Task.yield()
                }
                target.finish()
                await settle(targets, targetsWorker)
                await settle(queue, worker)
                #expect(job.object == nil, "the job is freed once its work returned")
            }
            ledger.expectAllFreedOutsideTheLock(minimum: 20 * 2)
        }

        // MARK: JobQueue.current

        @Test(
            "closures that capture JobQueue.current, in groups, task jobs and attempts, are released outside the lock",
            .hangLimit)
        func closuresCapturingTheCurrentQueue() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("current", limit: 3)
            for index in 0..<30 {
                let inGroup = ledger.canary("group child \(index) work")
                let child = BlockJob {
                    inGroup.touch()
                    guard let current = JobQueue.current else { return }
                    // The group's queue of children: a job added there, and its progress observed.
                    let added = ledger.canary("added to children \(index)")
                    current.addJob { added.touch() }
                    let observer = ledger.canary("children \(index) progress observer")
                    current.progress.observe { _ in observer.touch() }
                }
                let group = GroupJob(name: "current group \(index)", jobs: [child])
                let inTask = ledger.canary("task \(index) body")
                let task = TaskJob {
                    inTask.touch()
                    let added = ledger.canary("added from task \(index)")
                    JobQueue.current?.addJob { added.touch() }
                }
                let inAttempt = ledger.canary("retry \(index) factory")
                let retry = RetryJob(maxAttempts: 1) { _ in
                    inAttempt.touch()
                    let attempt = ledger.canary("current attempt \(index)")
                    return BlockJob {
                        attempt.touch()
                        let added = ledger.canary("added from attempt \(index)")
                        JobQueue.current?.addJob { added.touch() }
                    }
                }
                queue.addJobs([group, task, retry], waitUntilFinished: false)
            }
            await settle(queue, worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 30 * 8)
        }
    }

#endif
