import Conductor
import ConductorTestSupport
import Dispatch
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Programming errors trap (each checked in its own exit test, whose closure captures nothing), and a
// few look-alikes are harmless. Where the trap message is observable, the test also checks that it
// names the job (or the bad value), so that a crash for an unrelated reason does not pass.

// MARK: - Helpers

/// A job that waits for itself from inside its own work.
// @unchecked Sendable: no stored properties of its own; the rest is `Job`'s, which locks its state.
private final class SelfWaitingJob: Job, @unchecked Sendable {
    override func execute() { waitUntilFinished() }
}

/// A job that starts itself from inside its own work.
// @unchecked Sendable: no stored properties of its own; the rest is `Job`'s, which locks its state.
private final class SelfStartingJob: Job, @unchecked Sendable {
    override func execute() { start() }
}

/// A job that adds itself to a queue from inside its own work (it is executing, started with start()).
// @unchecked Sendable: no stored properties of its own; the rest is `Job`'s, which locks its state.
private final class SelfAddingJob: Job, @unchecked Sendable {
    override func execute() { JobQueue(name: "misuse-executing-target").addJob(self) }
}

/// Lets a producing job's block reach the job itself.
// @unchecked Sendable: `job` is set before the job is added to a queue, which happens-before its
// block runs; nothing writes it after.
private final class ProducerBox: @unchecked Sendable {
    var job: BlockJob?
}

/// Lets a BlockJob's block reach the job itself.
// @unchecked Sendable: `job` is set before `start()`, which runs the block on the same thread; no other access.
private final class BlockJobBox: @unchecked Sendable {
    var job: BlockJob?
}

// MARK: - Tests

/// A condition that generates `dependency` and is then met.
private struct GeneratesMisuseDependency: JobCondition {
    let dependency: Job
    var name: String { "generates a dependency" }
    func dependency(for job: Job) -> Job? { dependency }
    func evaluate(for job: Job) async throws -> Bool { true }
}

@Suite struct MisuseTests {

    // MARK: Adding jobs

    @Test func addingAJobTwiceToTheSameQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "misuse-same-queue", maxConcurrentJobCount: 0)
            let job = BlockJob {}
            job.name = "job-added-twice"
            queue.addJob(job)
            queue.addJob(job)
        }
        #expect(standardErrorText(result).contains("job-added-twice"))
    }

    @Test func addingAJobTwiceInOneBatchTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "misuse-batch", maxConcurrentJobCount: 0)
            let job = BlockJob {}
            job.name = "job-twice-in-batch"
            queue.addJobs([job, job], waitUntilFinished: false)
        }
        #expect(standardErrorText(result).contains("job-twice-in-batch"))
    }

    @Test func addingAJobToTwoQueuesTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let first = JobQueue(name: "misuse-first", maxConcurrentJobCount: 0)
            let second = JobQueue(name: "misuse-second")
            let job = BlockJob {}
            job.name = "job-on-two-queues"
            first.addJob(job)
            second.addJob(job)
        }
        #expect(standardErrorText(result).contains("job-on-two-queues"))
    }

    @Test func addingAJobThatRanTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "misuse-ran")
            let job = BlockJob {}
            job.name = "job-that-ran"
            job.start()
            queue.addJob(job)
        }
        #expect(standardErrorText(result).contains("job-that-ran"))
    }

    @Test func addingAJobThatRanOnAnotherQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let first = JobQueue(name: "misuse-ran-first")
            let job = BlockJob {}
            job.name = "job-that-ran-on-a-queue"
            first.addJob(job)
            await first.waitUntilAllJobsAreFinished()
            JobQueue(name: "misuse-ran-second").addJob(job)
        }
        #expect(standardErrorText(result).contains("job-that-ran-on-a-queue"))
    }

    @Test func addingAnExecutingJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = SelfAddingJob()
            job.name = "job-adding-itself"
            job.start()
        }
        #expect(standardErrorText(result).contains("job-adding-itself"))
    }

    // MARK: The limit

    @Test func negativeLimitInInitTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = JobQueue(name: "misuse-init", maxConcurrentJobCount: -2)
        }
        #expect(standardErrorText(result).contains("-2"))
    }

    @Test func negativeLimitInSetterTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "misuse-setter")
            queue.maxConcurrentJobCount = -2
        }
        #expect(standardErrorText(result).contains("-2"))
    }

    // MARK: Blocks and start()

    @Test func addExecutionBlockAfterStartTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "block-job-already-run"
            job.start()
            job.addExecutionBlock {}
        }
        #expect(standardErrorText(result).contains("block-job-already-run"))
    }

    @Test func addExecutionBlockWhileExecutingTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = BlockJobBox()
            let job = BlockJob { box.job?.addExecutionBlock {} }
            job.name = "block-job-running"
            box.job = job
            job.start()
        }
        #expect(standardErrorText(result).contains("block-job-running"))
    }

    @Test func startOnAPendingJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let dependency = BlockJob {}
            dependency.name = "unfinished-dependency"
            let job = BlockJob {}
            job.name = "pending-job"
            try? job.addDependency(dependency)
            job.start()
        }
        #expect(standardErrorText(result).contains("pending-job"))
        #expect(standardErrorText(result).contains("1 unfinished dependency: 'unfinished-dependency'"))
    }

    @Test func startWithUnevaluatedConditionsTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "conditional-job"
            job.addCondition(BlockCondition(name: "gate") { _ in true })
            job.start()
        }
        #expect(
            standardErrorText(result).contains(
                "Job.start(): 'conditional-job' is not ready; its conditions have not been satisfied"))
    }

    @Test func addConditionAfterStartTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "started-job"
            job.start()
            job.addCondition(BlockCondition(name: "late") { _ in true })
        }
        #expect(
            standardErrorText(result).contains(
                "Job.addCondition(_:): 'started-job' has already started; add conditions before it starts"))
    }

    @Test func settingExclusivityCategoriesAfterStartTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "started-job"
            job.start()
            job.exclusivityCategories = ["late"]
        }
        #expect(
            standardErrorText(result).contains(
                "Job.exclusivityCategories: 'started-job' has already started; set its categories before it starts"))
    }

    @Test func settingTheCountsOfAQueuesOrAGroupsProgressTraps() async {
        let queueResult = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            JobQueue(name: "misuse-progress").progress.completedUnitCount = 1
        }
        #expect(
            standardErrorText(queueResult).contains(
                "JobProgress.completedUnitCount: this progress adds up a queue's jobs; set the counts on a job's own progress"
            ))
        let groupResult = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            GroupJob(name: "misuse-group").progress.totalUnitCount = 5
        }
        #expect(
            standardErrorText(groupResult).contains(
                "JobProgress.totalUnitCount: this progress adds up a group's children; set the counts on a job's own progress"
            ))
    }

    @Test func aNegativeUnitCountTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            BlockJob {}.progress.totalUnitCount = -2
        }
        #expect(
            standardErrorText(result).contains("JobProgress.totalUnitCount: -2 is negative; unit counts are 0 or more"))
    }

    @Test func startByHandWhileACategoryIsHeldTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let holder = AsyncBlockJob { _ in }  // executes until finish(), which never comes
            holder.name = "holder"
            holder.exclusivityCategories = ["printer"]
            holder.start()
            let job = BlockJob {}
            job.name = "second"
            job.exclusivityCategories = ["printer"]
            job.start()
        }
        #expect(
            standardErrorText(result).contains(
                "Job.start(): 'second' cannot start now: its exclusivity category 'printer' is held by 'holder'"))
    }

    @Test func settingTheExecutionQueueAfterStartTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "started-job"
            job.start()
            job.executionQueue = .main
        }
        #expect(
            standardErrorText(result).contains(
                "Job.executionQueue: 'started-job' has already started; set its execution queue before it starts"))
    }

    @Test func addingAChildToAFinishedGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let group = GroupJob(name: "finished-group")
            group.start()
            group.addChild(BlockJob {})
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob.addChild(_:): 'finished-group' has already finished; add children before it finishes"))
    }

    @Test func aGroupLimitOfZeroTraps() async {
        // A queue's limit of 0 can be raised later; a group's cannot, so its children would never
        // start and the group would hold its slot forever.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = GroupJob(name: "zero-limit-group", maxConcurrentJobCount: 0, jobs: [BlockJob {}])
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob(name:maxConcurrentJobCount:jobs:): 0 is not a valid limit for 'zero-limit-group'"))
    }

    // `JobQueue.current` inside a child is the group's queue of children. Until 2026-11-25 a child
    // could raise the group's limit there (a limit-1 group then ran 8 at once), or suspend it, and
    // the group never finished (found by an audit).

    @Test func limitingAGroupsChildrenFromInsideTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let child = BlockJob { JobQueue.current?.maxConcurrentJobCount = 8 }
            let group = GroupJob(name: "limited-group", maxConcurrentJobCount: 1, jobs: [child])
            JobQueue(name: "limited-group-queue").addJob(group)
            await group.waitUntilFinished()
        }
        #expect(
            standardErrorText(result).contains(
                "JobQueue.maxConcurrentJobCount: 'limited-group.children' runs a group's children, as the group says; it cannot be limited while the group runs them"
            ))
    }

    @Test func suspendingAGroupsChildrenFromInsideTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            // Were it not refused, `second` would never start and the group never finish: the
            // process ends with success once `first` has finished, which fails the test.
            let first = BlockJob { JobQueue.current?.isSuspended = true }
            let group = GroupJob(name: "suspended-group", maxConcurrentJobCount: 1, jobs: [first, BlockJob {}])
            JobQueue(name: "suspended-group-queue").addJob(group)
            while !first.isFinished { sched_yield() }
            exit(0)
        }
        #expect(
            standardErrorText(result).contains(
                "JobQueue.isSuspended: 'suspended-group.children' runs a group's children, as the group says; it cannot be suspended or resumed while the group runs them"
            ))
    }

    @Test func aNegativeGroupLimitTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = GroupJob(name: "negative-limit-group", maxConcurrentJobCount: -2)
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob(name:maxConcurrentJobCount:jobs:): -2 is not a valid limit for 'negative-limit-group'"))
    }

    @Test func addingAnotherGroupsChildToACancelledGroupTraps() async {
        // A cancelled group cancels the children it is given; one that belongs to another group
        // must not be taken from it (nor counted by two groups).
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let first = GroupJob(name: "first-group")
            let child = BlockJob {}
            child.name = "shared-child"
            first.addChild(child)
            let second = GroupJob(name: "second-group")
            second.cancel()
            second.addChild(child)
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob.addChild(_:): 'shared-child' is already on queue 'first-group.children'; a job belongs to one queue"
            ))
    }

    @Test func addingAQueuedJobAsAChildTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = queuedJobOnASuspendedQueue()
            GroupJob(name: "taker").addChild(job)
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob.addChild(_:): 'queued-job' is already on queue 'owner-queue'; a job belongs to one queue"))
    }

    @Test func aQueuedJobAmongAGroupsFirstJobsTraps() async {
        // `GroupJob(jobs:)` adds its jobs in one critical section, with `addChild(_:)`'s checks.
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = queuedJobOnASuspendedQueue()
            _ = GroupJob(name: "taker", jobs: [BlockJob {}, job])
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob.addChild(_:): 'queued-job' is already on queue 'owner-queue'; a job belongs to one queue"))
    }

    /// A child's generated dependency that waits for the group is left out of the group's count
    /// (Composition, "Groups and produced jobs"); adding it as a child then traps on the cycle, as
    /// for any job that waits for the group, though it is on the queue of children already.
    @Test func addingAnUncountedGeneratedDependencyThatWaitsForTheGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let login = BlockJob {}
            login.name = "cycle-login"
            let child = BlockJob {}
            child.addCondition(GeneratesMisuseDependency(dependency: login))
            let group = GroupJob(name: "cycle-group")
            try? login.addDependency(group)
            group.addChild(child)
            group.addChild(login)
        }
        #expect(standardErrorText(result).contains("GroupJob.addChild(_:): the child would close the cycle"))
        #expect(standardErrorText(result).contains("cycle-login"))
    }

    @Test func aJobTwiceAmongAGroupsFirstJobsTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "twice"
            _ = GroupJob(name: "doubled", jobs: [job, job])
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob.addChild(_:): 'twice' is already on this queue ('doubled.children'); a job is added once"))
    }

    @Test func producingOutsideTheJobsWorkTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "idle-producer"
            job.produce(BlockJob {})
        }
        #expect(
            standardErrorText(result).contains(
                "Job.produce(_:): 'idle-producer' is ready; a job produces jobs only while it executes"))
    }

    @Test func producingItselfTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = ProducerBox()
            let job = BlockJob { box.job!.produce(box.job!) }
            job.name = "self-producer"
            box.job = job
            JobQueue(name: "produce-queue").addJobs([job], waitUntilFinished: true)
        }
        #expect(
            standardErrorText(result).contains(
                "Job.produce(_:): 'self-producer' cannot produce itself; produce a new job"))
    }

    @Test func producingAJobOnAnotherQueueFromAGroupsChildTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let elsewhere = JobQueue(name: "elsewhere")
            elsewhere.isSuspended = true
            let other = BlockJob {}
            other.name = "queued-elsewhere"
            elsewhere.addJob(other)
            let box = ProducerBox()
            let child = BlockJob { box.job!.produce(other) }
            box.job = child
            JobQueue(name: "produce-queue").addJobs([GroupJob(jobs: [child])], waitUntilFinished: true)
        }
        #expect(
            standardErrorText(result).contains(
                "Job.produce(_:): 'queued-elsewhere' is already on queue 'elsewhere'; a job belongs to one queue"))
    }

    @Test func startOnAFinishedJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "finished-job"
            job.start()
            job.start()
        }
        #expect(standardErrorText(result).contains("finished-job"))
    }

    @Test func startOnAnExecutingJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = SelfStartingJob()
            job.name = "self-starting-job"
            job.start()
        }
        #expect(standardErrorText(result).contains("self-starting-job"))
    }

    @Test func startOnAQueuedJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "misuse-queued", maxConcurrentJobCount: 0)
            let job = BlockJob {}
            job.name = "queued-job"
            queue.addJob(job)
            job.start()
        }
        #expect(standardErrorText(result).contains("queued-job"))
    }

    // MARK: Waiting for oneself

    @Test func waitUntilFinishedFromOwnExecuteTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = SelfWaitingJob()
            job.name = "self-waiting-job"
            job.start()
        }
        #expect(standardErrorText(result).contains("self-waiting-job"))
    }

    @Test func waitUntilFinishedFromOwnExecuteOnAQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "misuse-self-wait")
            let job = SelfWaitingJob()
            job.name = "self-waiting-queued-job"
            queue.addJob(job)
            await queue.waitUntilAllJobsAreFinished()
        }
        #expect(standardErrorText(result).contains("self-waiting-queued-job"))
    }

    @Test(.hangLimit) func waitUntilFinishedFromOwnCompletionBlockTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "misuse-callback-wait")
            let job = BlockJob {}
            job.name = "job-waited-for-by-its-completion-block"
            job.completionBlock = { [unowned job] in job.waitUntilFinished() }
            queue.addJob(job)
            await queue.waitUntilAllJobsAreFinished()
        }
        expectText(
            standardErrorText(result),
            contains: [
                "Job.waitUntilFinished(): 'job-waited-for-by-its-completion-block' is waited for from its own observer or completion block"
            ])
    }

    @Test(.hangLimit) func waitingForTheQueueFromAnObserverOfOneOfItsJobsTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "queue-waited-for-by-an-observer")
            let job = BlockJob {}
            job.name = "observed-job"
            job.observe { event in
                if event == .started { queue.waitUntilAllJobsAreFinished() }
            }
            queue.addJob(job)
            await queue.waitUntilAllJobsAreFinished()
        }
        expectText(
            standardErrorText(result),
            contains: [
                "JobQueue.waitUntilAllJobsAreFinished(): called from an observer or completion block of 'observed-job' on 'queue-waited-for-by-an-observer'"
            ])
    }

    @Test func waitingForAllJobsFromAJobOnTheSameQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "queue-waiting-for-itself")
            queue.addJob { queue.waitUntilAllJobsAreFinished() }
            await queue.waitUntilAllJobsAreFinished()
        }
        #expect(standardErrorText(result).contains("queue-waiting-for-itself"))
    }

    // MARK: Harmless look-alikes

    @Test func exitTestsOfHarmlessCallsSucceed() async {
        // Control for the exit tests above: the same kind of child process exits normally when
        // nothing traps, and limit -1 (the default) is accepted by init and setter.
        await #expect(processExitsWith: .success) {
            let queue = JobQueue(name: "harmless", maxConcurrentJobCount: -1)
            queue.maxConcurrentJobCount = 0
            queue.maxConcurrentJobCount = JobQueue.defaultMaxConcurrentJobCount
            let job = BlockJob {}
            queue.addJob(job)
            await queue.waitUntilAllJobsAreFinished()
        }
    }

    @Test(.hangLimit) func asyncWaitsStartedInsideACallbackForItsJobOrQueueDoNotTrap() async {
        // The blocking waits from a job's own callbacks trap (above); an `async` one suspends, and
        // returns once the job has settled, even when a task started at once inside the callback
        // runs its first part on the delivering thread.
        guard #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) else { return }
        await #expect(processExitsWith: .success) {
            let queue = JobQueue(name: "callback-async-waits")
            let job = BlockJob {}
            let jobWaited = DispatchSemaphore(value: 0)
            let queueWaited = DispatchSemaphore(value: 0)
            job.observe { event in
                guard event == .started else { return }
                Task.immediate {
                    await queue.waitUntilAllJobsAreFinished()
                    queueWaited.signal()
                }
            }
            job.completionBlock = { [unowned job] in
                Task.immediate {
                    await job.waitUntilFinished()
                    jobWaited.signal()
                }
            }
            queue.addJob(job)
            await waitForSignals(jobWaited)
            await waitForSignals(queueWaited)
        }
    }

    @Test func limitMinusOneIsAcceptedAndMeansTheDefaultWidth() async {
        #expect(JobQueue.defaultMaxConcurrentJobCount == -1)
        #expect(JobQueue.systemDefaultWidth >= 64)
        let queue = JobQueue(name: "minus-one", maxConcurrentJobCount: -1)
        #expect(queue.maxConcurrentJobCount == -1)
        #expect(JobQueue().maxConcurrentJobCount == -1)
        queue.maxConcurrentJobCount = 1
        queue.maxConcurrentJobCount = -1
        #expect(queue.maxConcurrentJobCount == -1)

        // Not a limit of 0 or 1: two blocking jobs run at once (on `.utility` workers, so that they
        // do not hold the default-QoS threads Swift concurrency runs on).
        queue.qualityOfService = .utility
        let started = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        for _ in 0..<2 {
            queue.addJob {
                started.signal()
                gate.wait()
            }
        }
        await waitForSignals(started, count: 2)
        #expect(queue.jobCount == 2)
        gate.signal()
        gate.signal()
        await queue.waitUntilAllJobsAreFinished()
        #expect(queue.jobCount == 0)
    }

    @Test func addingACancelledJobDoesNothing() async {
        let queue = JobQueue(name: "cancelled-add")
        let other = JobQueue(name: "cancelled-add-other")
        let ran = Counter()
        let job = BlockJob { ran.increment() }
        job.cancel()
        #expect(job.isFinished && job.isCancelled)
        queue.addJob(job)
        #expect(queue.jobCount == 0)
        #expect(queue.jobs.isEmpty)
        other.addJob(job)  // no queue owns it, so a second queue may be given it too
        #expect(other.jobCount == 0)
        await queue.waitUntilAllJobsAreFinished()
        let returned = await runOnDispatchThread {
            other.addJobs([job], waitUntilFinished: true)
            return true
        }
        #expect(returned)
        #expect(ran.value == 0)
        #expect(job.isFinished && job.isCancelled)

        // start() on a cancelled job is a no-op too.
        job.start()
        #expect(ran.value == 0)
    }

    @Test func finishTwiceIsHarmless() async throws {
        let workers = DispatchQueue(label: "MisuseTests.finish-twice", qos: .utility, attributes: .concurrent)
        let queue = JobQueue(name: "finish-twice", maxConcurrentJobCount: 1)
        queue.underlyingQueue = workers
        let dependentRuns = Counter()
        let twice = AsyncBlockJob { job in
            job.finish()
            job.finish()
        }
        let dependent = BlockJob { dependentRuns.increment() }
        try dependent.addDependency(twice)
        let started = DispatchSemaphore(value: 0)
        let holder = AsyncBlockJob { _ in started.signal() }
        let sawHolderFinished = Counter()
        let last = BlockJob { if holder.isFinished { sawHolderFinished.increment() } }

        queue.addJob(twice)
        queue.addJob(dependent)
        queue.addJob(holder)
        queue.addJob(last)
        await twice.waitUntilFinished()
        await waitForSignals(started)
        await drainConcurrentQueue(workers)
        // Had the second finish() freed a second slot, `last` would have started next to `holder`.
        #expect(holder.isExecuting)
        #expect(last.state == .ready)

        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(dependentRuns.value == 1)
        #expect(sawHolderFinished.value == 1)

        // After the job finished, more calls change nothing.
        twice.finish()
        holder.finish()
        #expect(twice.isFinished && !twice.isCancelled)
        #expect(queue.jobCount == 0)
    }

    @Test func finishBeforeStartIsIgnored() async {
        let queue = JobQueue(name: "finish-early")
        let ran = Counter()
        let job = AsyncBlockJob { job in
            ran.increment()
            job.finish()
        }
        job.finish()
        #expect(job.state == .ready)
        #expect(!job.isFinished)
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(ran.value == 1)
        #expect(job.isFinished && !job.isCancelled)
    }

    /// A dependency added to a job while its work runs is refused (it could no longer hold the job
    /// back); removing one is harmless. Either way the job finishes normally and its dependents run.
    @Test func dependencyChangesWhileTheDependentExecutes() async throws {
        let queue = JobQueue(name: "changes-while-executing")
        let finishedDependency = BlockJob {}
        finishedDependency.start()
        let unrelated = BlockJob {}
        let record = Log<String>()
        // @unchecked Sendable: its properties are set before it is enqueued and only read by execute() after.
        final class SelfChangingJob: Job, @unchecked Sendable {
            // Set before the job is enqueued; read by execute() (ordered by the engine's lock).
            var dependency: Job?
            var unrelated: Job?
            var record: Log<String>?
            override func execute() {
                do {
                    try addDependency(unrelated!)
                    record?.append("added")
                } catch {
                    record?.append(error.code == .alreadyStarted ? "refused" : "wrong error: \(error)")
                }
                removeDependency(dependency!)
                record?.append("removed")
            }
        }
        let job = SelfChangingJob()
        job.dependency = finishedDependency
        job.unrelated = unrelated
        job.record = record
        try job.addDependency(finishedDependency)
        let dependent = BlockJob { record.append("dependent ran") }
        try dependent.addDependency(job)
        queue.addJobs([job, dependent], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(record.values == ["refused", "removed", "dependent ran"])
        #expect(job.isFinished && !job.isCancelled)
        #expect(job.dependencies.isEmpty)
        #expect(unrelated.state == .ready, "the refused edge left the other job untouched")
    }
}

/// A job named "queued-job" waiting on a suspended queue named "owner-queue" (which keeps itself,
/// and its job, while the job waits): for the exit tests that hand a job on a queue to a group.
private func queuedJobOnASuspendedQueue() -> BlockJob {
    let queue = JobQueue(name: "owner-queue")
    queue.isSuspended = true
    let job = BlockJob {}
    job.name = "queued-job"
    queue.addJob(job)
    return job
}
