import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Outcomes (succeeded, failed, cancelled with a reason), the rule that fixes them, and per-edge
// dependency policies with their cascade (Docs/Concepts.md, "Outcomes").

private struct Boom: Error, Equatable {
    let label: String
}

/// A synchronous job whose work throws.
private final class FailingJob: Job, @unchecked Sendable {  // @unchecked Sendable: no mutable state.
    override func execute() throws { throw Boom(label: "sync") }
}

/// An asynchronous job whose `execute()` throws before starting anything.
private final class FailingAsyncJob: AsynchronousJob, @unchecked Sendable {  // @unchecked Sendable: no mutable state.
    override func execute() throws { throw Boom(label: "async execute") }
}

/// A job that counts the calls of its `cancel()` override.
private final class CountingCancels: Job, @unchecked Sendable {
    // @unchecked Sendable: `cancels` is a Counter, itself Sendable; nothing else is stored.
    let cancels = Counter()
    override func cancel() {
        cancels.increment()
        super.cancel()
    }
}

private func outcomeCode(_ job: Job) -> String {
    switch job.outcome {
    case nil: "nil"
    case .succeeded: "succeeded"
    case .failed(let error): "failed(\((error as? Boom)?.label ?? "\(error)"))"
    case .cancelled(let reason): "cancelled(\(reason.code))"
    }
}

@Suite struct OutcomeTests {
    // MARK: Succeeded and failed

    @Test func aJobSucceedsAndItsOutcomeIsSetOnceItFinishes() async {
        let queue = JobQueue(name: "outcomes")
        let job = BlockJob {}
        #expect(job.outcome == nil)
        let seenByObserver = Locked<String?>(nil)
        job.observe { event in
            if event == .finished { seenByObserver.withLock { $0 = outcomeCode(job) } }
        }
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(outcomeCode(job) == "succeeded")
        #expect(seenByObserver.withLock { $0 } == "succeeded")
    }

    @Test func throwingFromExecuteFailsTheJob() async {
        let queue = JobQueue(name: "failures")
        let job = FailingJob()
        let completionSaw = Locked<String?>(nil)
        job.completionBlock = { completionSaw.withLock { $0 = outcomeCode(job) } }
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(outcomeCode(job) == "failed(sync)")
        #expect(completionSaw.withLock { $0 } == "failed(sync)")
        #expect(!job.isCancelled)
    }

    @Test func anAsynchronousJobFailsWithFinishThrowingOrByThrowingFromExecute() async {
        let queue = JobQueue(name: "async-failures", maxConcurrentJobCount: 1)
        let viaFinish = AsyncBlockJob { job in job.finish(throwing: Boom(label: "finish")) }
        let viaExecute = FailingAsyncJob()
        let after = BlockJob {}
        queue.addJobs([viaFinish, viaExecute, after], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(outcomeCode(viaFinish) == "failed(finish)")
        // It finished at once, freeing the only slot: `after` ran.
        #expect(outcomeCode(viaExecute) == "failed(async execute)")
        #expect(outcomeCode(after) == "succeeded")
    }

    @Test func startedByHandTheOutcomeIsTheSame() {
        let job = FailingJob()
        job.start()
        #expect(outcomeCode(job) == "failed(sync)")
        let fine = BlockJob {}
        fine.start()
        #expect(outcomeCode(fine) == "succeeded")
    }

    // MARK: Cancellation reasons and the rule

    @Test func cancellingBeforeStartGivesTheFirstReason() {
        let job = BlockJob {}
        job.cancel(reason: .init(code: .requested, detail: "user tapped Stop"))
        job.cancel(reason: .init(code: .timedOut))
        job.cancel()
        guard case .cancelled(let reason) = job.outcome else {
            Issue.record("not cancelled: \(outcomeCode(job))")
            return
        }
        #expect(reason == CancellationReason(code: .requested, detail: "user tapped Stop"))
        #expect(reason.description == "requested: user tapped Stop")
        #expect(job.cancellationReason == reason)
        let plain = BlockJob {}
        plain.cancel()
        #expect(plain.cancellationReason == CancellationReason(code: .requested))
    }

    @Test func cancelledWhileRunningIsCancelledUnlessTheWorkThenFails() async {
        let queue = JobQueue(name: "cancel-running")
        let started = (0..<3).map { _ in Signal() }
        let returnsNormally = AsyncBlockJob { _ in started[0].fire() }
        let failsAfterwards = AsyncBlockJob { _ in started[1].fire() }
        let throwsCancellation = AsyncBlockJob { _ in started[2].fire() }
        queue.addJobs([returnsNormally, failsAfterwards, throwsCancellation], waitUntilFinished: false)
        let reason = CancellationReason(code: .requested, detail: "stop")
        for (index, job) in [returnsNormally, failsAfterwards, throwsCancellation].enumerated() {
            await started[index].wait()
            job.cancel(reason: reason)
            #expect(job.cancellationReason == reason)
            #expect(job.outcome == nil)
        }
        returnsNormally.finish()
        failsAfterwards.finish(throwing: Boom(label: "late"))
        throwsCancellation.finish(throwing: CancellationError())
        await queue.waitUntilAllJobsAreFinished()
        #expect(outcomeCode(returnsNormally) == "cancelled(requested)")
        #expect(outcomeCode(failsAfterwards) == "failed(late)")
        #expect(outcomeCode(throwsCancellation) == "cancelled(requested)")
        #expect(throwsCancellation.cancellationReason == reason)
    }

    @Test func aJobThatFinishedKeepsItsOutcomeWhenCancelledLater() {
        let job = BlockJob {}
        job.start()
        job.cancel(reason: .init(code: .timedOut))
        #expect(outcomeCode(job) == "succeeded")
        #expect(!job.isCancelled)
        #expect(job.cancellationReason == nil)
    }

    @Test func taskJobOutcomes() async {
        let queue = JobQueue(name: "task-outcomes")
        let fails = TaskJob { throw Boom(label: "task") }
        let cancelsItself = TaskJob { throw CancellationError() }
        let returns = TaskJob {}
        queue.addJobs([fails, cancelsItself, returns], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(outcomeCode(fails) == "failed(task)")
        #expect((fails.error as? Boom) == Boom(label: "task"))
        #expect(outcomeCode(cancelsItself) == "cancelled(requested)")
        #expect(cancelsItself.isCancelled && cancelsItself.error == nil)
        #expect(outcomeCode(returns) == "succeeded")
    }

    @Test func aCancelledTaskJobKeepsTheReasonItWasGiven() async {
        let queue = JobQueue(name: "task-cancelled")
        let started = Signal()
        let job = TaskJob {
            started.fire()
            while !Task.isCancelled { await Task.yield() }
            throw CancellationError()
        }
        queue.addJob(job)
        await started.wait()
        job.cancel(reason: .init(code: .requested, detail: "enough"))
        await job.waitUntilFinished()
        #expect(job.outcome.map { "\($0)" } == "cancelled (requested: enough)")
    }

    @Test func cancelAllJobsGivesQueueCancelled() async {
        let queue = JobQueue(name: "cancel-all-reason", maxConcurrentJobCount: 0)
        let jobs = (0..<3).map { _ in BlockJob {} }
        queue.addJobs(jobs, waitUntilFinished: false)
        queue.cancelAllJobs()
        await queue.waitUntilAllJobsAreFinished()
        #expect(jobs.allSatisfy { outcomeCode($0) == "cancelled(queueCancelled)" })
    }

    // MARK: Dependency policies

    @Test func requireSuccessCancelsTheDependentOfAFailedJobNamingIt() async throws {
        let queue = JobQueue(name: "require-success")
        let download = FailingJob()
        download.name = "download"
        let ran = Counter()
        let parse = BlockJob { ran.increment() }
        let log = BlockJob { ran.increment() }
        try parse.addDependency(download, policy: .requireSuccess)
        try log.addDependency(download, policy: .afterFinish)
        queue.addJobs([download, parse, log], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 1)
        #expect(outcomeCode(log) == "succeeded")
        guard case .cancelled(let reason) = parse.outcome else {
            Issue.record("parse: \(outcomeCode(parse))")
            return
        }
        #expect(reason.code == .dependencyFailed)
        #expect(reason.responsibleJob == "download")
        #expect(reason.description == "dependencyFailed: 'download' failed")
    }

    @Test func aDiamondWithOneFailingBranch() async throws {
        for policy in [DependencyPolicy.requireSuccess, .afterFinish] {
            let queue = JobQueue(name: "diamond")
            let top = BlockJob {}
            let left = FailingJob()
            left.name = "left"
            let right = BlockJob {}
            right.name = "right"
            let seen = Locked<[String]>([])
            let join = BlockJob {
                seen.withLock { $0 = [outcomeCode(left), outcomeCode(right)] }
            }
            try left.addDependency(top)
            try right.addDependency(top)
            try join.addDependency(left, policy: policy)
            try join.addDependency(right, policy: policy)
            queue.addJobs([top, left, right, join], waitUntilFinished: false)
            await queue.waitUntilAllJobsAreFinished()
            if policy == .requireSuccess {
                #expect(join.cancellationReason?.code == .dependencyFailed)
                #expect(join.cancellationReason?.responsibleJob == "left")
                #expect(seen.withLock { $0 }.isEmpty)
            } else {
                #expect(outcomeCode(join) == "succeeded")
                #expect(seen.withLock { $0 } == ["failed(sync)", "succeeded"])
            }
        }
    }

    @Test func failurePropagatesThroughALongChainAcrossTwoQueuesWithoutRunningAnything() async throws {
        let queues = [JobQueue(name: "chain-a"), JobQueue(name: "chain-b")]
        let ran = Counter()
        let head = FailingJob()
        head.name = "head"
        var chain: [Job] = [head]
        for _ in 0..<100_000 {
            let next = BlockJob { ran.increment() }
            try next.addDependency(chain.last!, policy: .requireSuccess)
            chain.append(next)
        }
        for (index, job) in chain.enumerated() {
            queues[index % 2].addJob(job)
        }
        for queue in queues { await queue.waitUntilAllJobsAreFinished() }
        #expect(ran.value == 0)
        #expect(chain[1].cancellationReason?.code == .dependencyFailed)
        #expect(chain[1].cancellationReason?.responsibleJob == "head")
        #expect(chain.dropFirst(2).allSatisfy { $0.cancellationReason?.code == .dependencyCancelled })
    }

    @Test func failurePropagatesThroughAChainWhoseJobsAreEachOnAQueueOfTheirOwn() async throws {
        // One critical section cancels the whole chain and touches 2,000 queues, each once.
        let queues = (0..<2_000).map { JobQueue(name: "own-\($0)") }
        let ran = Counter()
        let head = FailingJob()
        head.name = "head"
        var chain: [Job] = [head]
        for _ in 1..<queues.count {
            let next = BlockJob { ran.increment() }
            try next.addDependency(chain.last!, policy: .requireSuccess)
            chain.append(next)
        }
        for (job, queue) in zip(chain, queues).reversed() {
            queue.addJob(job)
        }
        for queue in queues { await queue.waitUntilAllJobsAreFinished() }
        #expect(ran.value == 0)
        #expect(chain.dropFirst().allSatisfy { $0.isFinished && $0.isCancelled })
        #expect(queues.allSatisfy { $0.jobCount == 0 })
    }

    @Test func cancellationPropagatesThroughAWideFanAcrossTwoQueues() async throws {
        let queues = [JobQueue(name: "fan-a", maxConcurrentJobCount: 0), JobQueue(name: "fan-b")]
        let root = BlockJob {}
        root.name = "root"
        let ran = Counter()
        let leaves = (0..<10_000).map { _ in BlockJob { ran.increment() } }
        let join = BlockJob { ran.increment() }
        for leaf in leaves {
            try leaf.addDependency(root, policy: .requireSuccess)
            try join.addDependency(leaf, policy: .requireSuccess)
        }
        queues[0].addJobs([root, join], waitUntilFinished: false)
        for (index, leaf) in leaves.enumerated() {
            queues[index % 2].addJob(leaf)
        }
        root.cancel()
        for queue in queues { await queue.waitUntilAllJobsAreFinished() }
        #expect(ran.value == 0)
        #expect(leaves.allSatisfy { $0.cancellationReason?.description == "dependencyCancelled: 'root' was cancelled" })
        #expect(join.cancellationReason?.code == .dependencyCancelled)
    }

    @Test func afterFinishEdgesDoNotPropagate() async throws {
        let queue = JobQueue(name: "after-finish")
        let failed = FailingJob()
        let ran = Counter()
        let middle = BlockJob { ran.increment() }
        let last = BlockJob { ran.increment() }
        try middle.addDependency(failed)
        try last.addDependency(middle, policy: .requireSuccess)
        queue.addJobs([failed, middle, last], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 2)
        #expect(outcomeCode(middle) == "succeeded" && outcomeCode(last) == "succeeded")
    }

    /// Job.addDependency(_:policy:): "Adding the same dependency again does nothing, whatever the
    /// policy: the first one stays", before the dependency finishes and after.
    @Test func aRepeatedEdgeKeepsTheFirstEdgesPolicy() async throws {
        let queue = JobQueue(name: "repeated-edge")
        let failed = FailingJob()
        let ran = Log<String>()
        let lenient = BlockJob { ran.append("lenient") }
        try lenient.addDependency(failed)
        try lenient.addDependency(failed, policy: .requireSuccess)  // ignored: .afterFinish stays
        let strict = BlockJob { ran.append("strict") }
        try strict.addDependency(failed, policy: .requireSuccess)
        try strict.addDependency(failed)  // ignored: .requireSuccess stays
        queue.addJobs([failed, lenient, strict], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.values == ["lenient"])
        #expect(strict.cancellationReason?.code == .dependencyFailed)

        // After the dependency failed: the repeated `.requireSuccess` edge does not cancel.
        let late = BlockJob {}
        try late.addDependency(failed)
        try late.addDependency(failed, policy: .requireSuccess)
        #expect(late.state == .ready)
    }

    @Test func anEdgeToAnAlreadyFailedOrCancelledJobCancelsAtOnce() throws {
        let failed = FailingJob()
        failed.name = "failed"
        failed.start()
        let cancelled = BlockJob {}
        cancelled.name = "cancelled"
        cancelled.cancel()

        let afterFailure = BlockJob {}
        try afterFailure.addDependency(failed, policy: .requireSuccess)
        #expect(afterFailure.isFinished)
        #expect(afterFailure.cancellationReason?.description == "dependencyFailed: 'failed' failed")

        let afterCancel = BlockJob {}
        try afterCancel.addDependency(cancelled, policy: .requireSuccess)
        #expect(afterCancel.cancellationReason?.code == .dependencyCancelled)

        let lenient = BlockJob {}
        try lenient.addDependency(failed)
        #expect(lenient.state == .ready)
    }

    @Test func aBarrierWhoseRequiredDependencyFailsStillRunsAsCancelledAndReleasesTheQueue() async throws {
        // A cancelled barrier keeps its place and runs (without its block) when its turn comes; a
        // failed `.requireSuccess` dependency must therefore still be counted as released, or the
        // barrier, and every job held behind it, would wait forever.
        let queue = JobQueue(name: "barrier-require-success")
        queue.isSuspended = true
        let blockRan = Flag()
        queue.addBarrierBlock { blockRan.set() }
        let barrier = try #require(queue.jobs.first)
        let failed = FailingJob()
        failed.name = "failed"
        try barrier.addDependency(failed, policy: .requireSuccess)
        let after = BlockJob {}
        queue.addJob(after)
        queue.isSuspended = false
        failed.start()
        await queue.waitUntilAllJobsAreFinished()
        #expect(!blockRan.value)
        #expect(barrier.cancellationReason?.description == "dependencyFailed: 'failed' failed")
        #expect(outcomeCode(after) == "succeeded")
    }

    @Test func cascadedJobsHaveTheirCancelOverrideCalled() async throws {
        let queue = JobQueue(name: "cascade-overrides")
        let failed = FailingJob()
        let dependent = CountingCancels()
        try dependent.addDependency(failed, policy: .requireSuccess)
        queue.addJobs([failed, dependent], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(dependent.cancels.value == 1)
        #expect(dependent.cancellationReason?.code == .dependencyFailed)

        // cancel(reason:) calls the override once too.
        let direct = CountingCancels()
        direct.cancel(reason: .init(code: .requested, detail: "x"))
        #expect(direct.cancels.value == 1)
        #expect(direct.cancellationReason?.detail == "x")
    }
}
