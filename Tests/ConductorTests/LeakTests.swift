import Conductor
import ConductorTestSupport
import Dispatch
import Synchronization
import Testing

// Leak and growth checks: once a job has finished, nothing in the engine may keep it, its closures
// (block, body, observers, completion block) or what they capture alive; a queue its owner dropped
// is freed once its jobs are done; cycles that user code builds through a job's own closures are
// broken when the job runs. Every check is a weak reference that must be nil at a point where the
// engine is known to have let go, and most tests first check that the same reference was alive
// while the job was unfinished, so that a check cannot pass just because nothing was ever held.
//
// When is "the engine has let go"? The engine drops its last references to a finished job just
// *after* it resumes the job's waiters and the queue's waiters, on the thread that finished the job:
//
// - `_Actions.perform()` (_Engine.swift) runs in this order: start workers, deliver events (the
//   `.finished` delivery runs the observers and the completion block, then resumes the job's
//   waiters and settles the queue, which resumes `waitUntilAllJobsAreFinished()`), resume waiters,
//   and only then drop the `released` job lists and the queue's self-retain. Until it returns, the
//   `deliveries` array and `_deliverEvents`' locals (the observers and the completion block) are
//   alive too.
// - `_runWorker` (JobQueue+Scheduling.swift) holds the job it ran in its loop variable until
//   `actions.perform()` for that job has returned, and the worker block captures the queue until
//   it returns.
//
// So after `await queue.waitUntilAllJobsAreFinished()` (or `job.waitUntilFinished()`), the job
// may still be referenced for a moment by the thread that finished it. Every queue here therefore
// runs its workers on a private serial `underlyingQueue`, and every asynchronous job here calls
// `finish()` from a block on that same queue (or on another private serial queue that the test
// also drains). The thread that finished the job is then always running a block on a queue the
// test owns, and `drainSerialQueue(_:)` enqueues an empty block behind it: a serial queue runs its
// next block only after the previous one has returned and been released, so when the empty block
// runs, the worker (or finisher) has returned from `perform()` and from `_runWorker`, its locals
// are gone, and the block (with its captured queue) is released. No worker can be enqueued after
// the drain: workers are only started for ready jobs, and none is left.
//
// The one exception is `TaskJob`: its job is finished from inside its `Task`, whose closure
// captures the job and the body (BlockJob.swift, `TaskJob.execute()`, `Task(priority:) { [self] in
// ... }`), and that closure is released on a cooperative-pool thread when the task ends, after
// `complete(with:)` has already resumed every waiter. Nothing the test can await comes after it.
// Those tests therefore wait for the deinit itself: the body throws an error object that the job
// keeps in `error` until it is freed, and whose deinit fires a `Signal`; captured objects fire one
// too. `Signal.wait()` ends when its task is cancelled, so a leak there fails through the tests'
// time limit (`.hangLimit`, a guard against hanging, far above the microseconds the release takes;
// nothing is measured).

// MARK: - Helpers

/// An error object: a `TaskJob` keeps the error its body threw until the job is freed.
private final class TrackedError: Error, Sendable {
    let signal: Signal

    init(signal: Signal) {
        self.signal = signal
    }

    deinit { signal.fire() }
}

/// A job queue whose workers run on a private serial Dispatch queue, `worker`.
private struct Harness {
    let queue: JobQueue
    let worker: DispatchQueue

    init(_ name: String, limit: Int = JobQueue.defaultMaxConcurrentJobCount) {
        (queue, worker) = makeJobQueueOnSerialWorker(name, limit: limit)
    }

    /// Waits until every job has finished and the thread that finished the last one has let go.
    func settle() async {
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
    }
}

/// Weak references to what a test built; `job` and `captured` are what the test expects freed.
private struct Built {
    let job: WeakReference<Job>
    let captured: WeakReference<Tracked>

    var bothAlive: Bool { job.object != nil && captured.object != nil }
    var bothFreed: Bool { job.object == nil && captured.object == nil }
}

/// Builds a job with `make` (which captures a fresh `Tracked` object in the job's closures), adds it
/// to `queue` if one is given, and keeps only weak references. Building in a function of its own
/// makes sure that no strong local of the test outlives the call (debug builds keep locals to the
/// end of their scope).
private func build(on queue: JobQueue?, _ make: (Tracked) -> Job) -> Built {
    let tracked = Tracked()
    let job = make(tracked)
    queue?.addJob(job)
    return Built(job: WeakReference(job), captured: WeakReference(tracked))
}

/// An `AsyncBlockJob` whose body captures a fresh `Tracked` object, kept strongly, with a weak
/// reference to the captured object; its body calls `finish()` itself or returns without finishing.
/// Built in a function of its own, so that no strong local of the test keeps the captured object.
private func makeAsyncBlockJobKeepingItsCapture(
    finishesInItsBody: Bool
) -> (AsyncBlockJob, WeakReference<Tracked>) {
    let tracked = Tracked()
    let job = AsyncBlockJob { job in
        _ = tracked
        if finishesInItsBody { job.finish() }
    }
    return (job, WeakReference(tracked))
}

// MARK: - Tests

@Suite("Leaks", .serialized)
struct LeakTests {

    // MARK: Finished jobs and their closures

    /// Builds a job on a suspended queue, checks the queue keeps it alive, runs it, and checks that
    /// the job and what its closures captured are freed.
    private func expectFreedAfterRunning(
        _ name: String, worker extraQueue: DispatchQueue? = nil, _ make: (Tracked, DispatchQueue) -> Job
    ) async {
        let harness = Harness(name)
        harness.queue.isSuspended = true
        let built = build(on: harness.queue) { make($0, harness.worker) }
        #expect(built.bothAlive, "an unfinished job (\(name)) and its closures are kept by its queue")
        harness.queue.isSuspended = false
        await harness.settle()
        if let extraQueue { await drainSerialQueue(extraQueue) }
        #expect(built.job.object == nil, "a finished \(name) is freed")
        #expect(built.captured.object == nil, "what a finished \(name)'s closures captured is freed")
    }

    @Test("a finished BlockJob and what its block captured are freed")
    func finishedBlockJob() async {
        await expectFreedAfterRunning("BlockJob") { tracked, _ in BlockJob { _ = tracked } }
    }

    @Test("a finished BlockJob with several blocks and what each block captured are freed")
    func finishedBlockJobWithSeveralBlocks() async {
        let harness = Harness("several-blocks")
        harness.queue.isSuspended = true
        let (job, weakCaptures): (WeakReference<Job>, [WeakReference<Tracked>]) = {
            let captures = (0..<3).map { _ in Tracked() }
            let job = BlockJob { _ = captures[0] }
            job.addExecutionBlock { _ = captures[1] }
            job.addExecutionBlock { _ = captures[2] }
            harness.queue.addJob(job)
            return (WeakReference(job), captures.map { WeakReference($0) })
        }()
        #expect(job.object != nil && weakCaptures.allSatisfy { $0.object != nil })
        harness.queue.isSuspended = false
        await harness.settle()
        #expect(job.object == nil)
        #expect(weakCaptures.allSatisfy { $0.object == nil }, "every block's captures are freed")
    }

    @Test("a job that fails with a JobError naming it is freed, and the error keeps its text")
    func jobFailingWithAnErrorNamingIt() async {
        // Its work adds itself a dependency, too late: `.alreadyStarted` names the job, and the job
        // keeps the error as its outcome. Kept, the error must not keep the job alive.
        // @unchecked Sendable: its only stored properties, `tracked` and `described`, are immutable and Sendable; the rest is `Job`'s.
        final class LateDependency: Job, @unchecked Sendable {
            let tracked: Tracked
            let described: Log<String>
            init(_ tracked: Tracked, _ described: Log<String>) {
                self.tracked = tracked
                self.described = described
                super.init()
                name = "late"
                observe { [weak self] event in
                    guard event == .finished, case .failed(let error)? = self?.outcome else { return }
                    described.append("\(error)")
                }
            }
            override func execute() throws {
                let dependency = BlockJob {}
                dependency.name = "too late"
                try addDependency(dependency)
            }
        }
        let described = Log<String>()
        await expectFreedAfterRunning("job failing with a JobError naming it") { tracked, _ in
            LateDependency(tracked, described)
        }
        #expect(
            described.values == [
                "JobError.alreadyStarted: 'late' has already started, so it cannot gain the dependency 'too late'"
            ])
    }

    @Test("a finished Job subclass is freed")
    func finishedJobSubclass() async {
        // @unchecked Sendable: its only stored property, `tracked`, is immutable and Sendable; the rest is `Job`'s.
        final class Work: Job, @unchecked Sendable {
            let tracked: Tracked
            init(_ tracked: Tracked) {
                self.tracked = tracked
                super.init()
            }
        }
        await expectFreedAfterRunning("Job subclass") { tracked, _ in Work(tracked) }
    }

    @Test("an AsyncBlockJob finished later on its worker's queue, and its body's captures, are freed")
    func finishedAsyncBlockJob() async {
        await expectFreedAfterRunning("AsyncBlockJob") { tracked, worker in
            AsyncBlockJob { job in
                _ = tracked
                worker.async { job.finish() }  // After the worker block has returned.
            }
        }
    }

    @Test("an AsyncBlockJob finished from another Dispatch queue is freed")
    func asyncBlockJobFinishedElsewhere() async {
        let finisher = DispatchQueue(label: "LeakTests.finisher")
        await expectFreedAfterRunning("AsyncBlockJob finished elsewhere", worker: finisher) { tracked, _ in
            AsyncBlockJob { job in
                _ = tracked
                finisher.async { job.finish() }
            }
        }
    }

    @Test("an AsyncBlockJob that finishes inside its body is freed")
    func asyncBlockJobFinishedInline() async {
        await expectFreedAfterRunning("AsyncBlockJob finished inline") { tracked, _ in
            AsyncBlockJob { job in
                _ = tracked
                job.finish()
            }
        }
    }

    @Test(
        "an AsyncBlockJob's body is kept until the job finishes, then released by the finish() that comes after it returned, after the job's callbacks"
    )
    func asyncBlockJobBodyReleasedByTheLaterFinish() async {
        let harness = Harness("body released by finish")
        let aliveInCompletionBlock = Locked<Bool?>(nil)
        let (job, captured) = makeAsyncBlockJobKeepingItsCapture(finishesInItsBody: false)
        job.completionBlock = { aliveInCompletionBlock.withLock { $0 = captured.object != nil } }
        harness.queue.addJob(job)
        // The worker block has returned: the body ran and returned, and the job is still executing.
        await drainSerialQueue(harness.worker)
        #expect(job.state == .executing)
        #expect(captured.object != nil, "the body of an unfinished AsyncBlockJob is kept after it returned")
        job.finish()
        #expect(aliveInCompletionBlock.withLock { $0 } == true, "the body is released after the job's callbacks")
        #expect(captured.object == nil, "the finish() after the body returned releases it before returning")
        await harness.settle()
    }

    @Test("an AsyncBlockJob whose body finishes it releases the body when it returns, while the job lives on")
    func asyncBlockJobBodyReleasedByTheWorkerWhenFinishCameFirst() async {
        let harness = Harness("body released by the worker")
        let (job, captured) = makeAsyncBlockJobKeepingItsCapture(finishesInItsBody: true)
        harness.queue.addJob(job)
        await harness.settle()
        #expect(job.state == .finished)
        #expect(captured.object == nil, "the worker released the body of a job that finished before it returned")
    }

    @Test(
        "a finished TaskJob and what its body captured are freed (awaited through their deinits)",
        .hangLimit)
    func finishedTaskJob() async {
        let harness = Harness("TaskJob")
        let jobFreed = Signal()
        let captureFreed = Signal()
        let job: WeakReference<Job> = {
            let tracked = Tracked(signal: captureFreed)
            let job = TaskJob {
                _ = tracked
                await Task.yield()
                throw TrackedError(signal: jobFreed)  // Kept in `error` until the job is freed.
            }
            harness.queue.addJob(job)
            return WeakReference(job)
        }()
        await harness.settle()
        await jobFreed.wait()
        await captureFreed.wait()
        #expect(job.object == nil)
    }

    // MARK: Observers and completion blocks

    @Test("an observer's captures are freed after `.finished`; a removed observer's at once")
    func observersAreReleased() async {
        let harness = Harness("observers")
        harness.queue.isSuspended = true
        let finishedSeen = Counter()
        let (kept, removed): (WeakReference<Tracked>, WeakReference<Tracked>) = {
            let job = BlockJob {}
            let kept = Tracked()
            let removed = Tracked()
            job.observe { event in
                _ = kept
                if event == .finished { finishedSeen.increment() }
            }
            let token = job.observe { _ in _ = removed }
            harness.queue.addJob(job)
            let result = (WeakReference(kept), WeakReference(removed))
            job.removeObserver(token)
            return result
        }()
        #expect(removed.object == nil, "a removed observer is released when removeObserver returns")
        #expect(kept.object != nil, "an observer is kept until the job finishes")
        harness.queue.isSuspended = false
        await harness.settle()
        #expect(finishedSeen.value == 1)
        #expect(kept.object == nil, "observers are released after `.finished`")
    }

    @Test("a completion block's captures are freed after it ran; a replaced block's at once")
    func completionBlocksAreReleased() async {
        let harness = Harness("completion")
        harness.queue.isSuspended = true
        let ran = Counter()
        let (built, replaced): (Built, WeakReference<Tracked>) = {
            let replaced = Tracked()
            let built = build(on: harness.queue) { tracked in
                let job = BlockJob {}
                job.completionBlock = { _ = replaced }
                job.completionBlock = {
                    _ = tracked
                    ran.increment()
                }
                return job
            }
            return (built, WeakReference(replaced))
        }()
        #expect(replaced.object == nil, "a replaced completion block is released at once")
        #expect(built.bothAlive)
        harness.queue.isSuspended = false
        await harness.settle()
        #expect(ran.value == 1)
        #expect(built.bothFreed)
    }

    // MARK: Dropped queues

    /// Adds `count` jobs (and, with `barriers`, a barrier between each two) to a queue that is then
    /// dropped; returns weak references to the queue and the jobs, and a strong one to the last job.
    private static func dropQueue(
        _ name: String, worker: DispatchQueue, count: Int, barriers: Bool, ran: Log<String>
    ) -> (WeakReference<JobQueue>, [WeakReference<Job>], Job) {
        let queue = JobQueue(name: name, maxConcurrentJobCount: 2)
        queue.underlyingQueue = worker
        queue.isSuspended = true
        var jobs: [Job] = []
        for index in 0..<count {
            if barriers && index > 0 {
                queue.addBarrierBlock { [queue] in
                    _ = queue  // A barrier that captures its own queue: released when it has run.
                    ran.append("barrier\(index)")
                }
            }
            let job = BlockJob { ran.append("job\(index)") }
            jobs.append(job)
            queue.addJob(job)
        }
        queue.isSuspended = false
        return (WeakReference(queue), jobs.map { WeakReference($0) }, jobs[count - 1])
    }

    @Test("a dropped queue finishes its jobs and is then freed", arguments: [false, true])
    func droppedQueueIsFreed(withBarriers: Bool) async {
        let worker = DispatchQueue(label: "LeakTests.dropped")
        let ran = Log<String>()
        var (queue, jobs, last) = Self.dropQueue(
            "dropped", worker: worker, count: 4, barriers: withBarriers, ran: ran)
        await last.waitUntilFinished()
        await drainSerialQueue(worker)
        #expect(ran.count == (withBarriers ? 7 : 4))
        #expect(queue.object == nil, "the queue is freed once its jobs are done")
        last = BlockJob {}
        #expect(jobs.allSatisfy { $0.object == nil })
        jobs = []
    }

    @Test("a dropped suspended queue keeps its jobs; freed once resumed and drained")
    func droppedSuspendedQueue() async {
        let worker = DispatchQueue(label: "LeakTests.dropped-suspended")
        let (queue, job): (WeakReference<JobQueue>, Job) = {
            let queue = JobQueue(name: "dropped-suspended")
            queue.underlyingQueue = worker
            queue.isSuspended = true
            let job = BlockJob {}
            queue.addJob(job)
            return (WeakReference(queue), job)
        }()
        await drainSerialQueue(worker)
        #expect(queue.object != nil, "a queue with unfinished jobs lives on")
        queue.object?.isSuspended = false
        await job.waitUntilFinished()
        await drainSerialQueue(worker)
        #expect(queue.object == nil)
    }

    // MARK: Cycles through a job's own closures

    @Test("a BlockJob whose blocks capture the job is freed once it ran")
    func blockCapturingItsJob() async {
        await expectFreedAfterRunning("self-capturing BlockJob") { tracked, _ in
            let box = Locked<Job?>(nil)
            let job = BlockJob {
                _ = tracked
                _ = box  // job → first block → box → job
            }
            job.addExecutionBlock { [job] in _ = job }  // job → second block → job
            box.withLock { $0 = job }
            return job
        }
    }

    @Test("a job releases its block or body when it starts, while the job itself is still referenced")
    func closuresAreReleasedWhenTheJobRuns() async {
        let harness = Harness("released-at-start")
        let captures = Locked<[WeakReference<Tracked>]>([])
        let jobs: [Job] = (0..<3).map { kind in
            let tracked = Tracked()
            captures.withLock { $0.append(WeakReference(tracked)) }
            switch kind {
            case 0: return BlockJob { _ = tracked }
            case 1:
                let job = BlockJob {}
                job.addExecutionBlock { _ = tracked }
                return job
            default:
                return AsyncBlockJob { job in
                    _ = tracked
                    harness.worker.async { job.finish() }
                }
            }
        }
        harness.queue.addJobs(jobs, waitUntilFinished: false)
        await harness.settle()
        #expect(jobs.allSatisfy { $0.isFinished })
        let freed = captures.withLock { $0 }.allSatisfy { $0.object == nil }
        #expect(freed, "the closures went with the work")
        #expect(jobs.compactMap { $0 as? BlockJob }.allSatisfy { $0.executionBlocks.isEmpty })
    }

    @Test("an observer that captures its job is freed with it")
    func observerCapturingItsJob() async {
        await expectFreedAfterRunning("self-observing BlockJob") { tracked, _ in
            let job = BlockJob {}
            job.observe { [job] _ in
                _ = job
                _ = tracked
            }
            return job
        }
    }

    @Test("a completion block that captures its job is freed with it")
    func completionCapturingItsJob() async {
        await expectFreedAfterRunning("BlockJob with a self-capturing completion") { tracked, _ in
            let job = BlockJob {}
            job.completionBlock = { [job] in
                _ = job
                _ = tracked
            }
            return job
        }
    }

    @Test("an AsyncBlockJob whose body stores the job in a captured box is freed")
    func asyncBodyStoringItsJob() async {
        await expectFreedAfterRunning("AsyncBlockJob that stores itself") { tracked, worker in
            let box = Locked<AsyncBlockJob?>(nil)
            let job = AsyncBlockJob { job in
                _ = tracked
                box.withLock { $0 = job }  // job → body → box → job, until the body is released.
                worker.async { box.withLock { $0 }?.finish() }
            }
            box.withLock { $0 = job }
            return job
        }
    }

    @Test("a TaskJob whose body captures the job is freed (awaited through its deinit)", .hangLimit)
    func taskBodyCapturingItsJob() async {
        let harness = Harness("self-capturing TaskJob")
        let jobFreed = Signal()
        let job: WeakReference<Job> = {
            let box = Locked<TaskJob?>(nil)
            let job = TaskJob {
                _ = box.withLock { $0 }  // job → body → box → job
                throw TrackedError(signal: jobFreed)
            }
            box.withLock { $0 = job }
            harness.queue.addJob(job)
            return WeakReference(job)
        }()
        await harness.settle()
        await jobFreed.wait()
        #expect(job.object == nil)
    }

    // MARK: Cancelled before they started

    @Test("a job cancelled before it was added is freed, with its un-run block's captures")
    func cancelledBeforeAdding() async {
        let built = build(on: nil) { tracked in
            let job = BlockJob { _ = tracked }
            job.cancel()
            return job
        }
        #expect(built.bothFreed)
    }

    @Test("a job cancelled while it waits for a dependency is freed once the dependency finished")
    func cancelledWhilePending() async {
        let harness = Harness("cancelled-pending")
        harness.queue.isSuspended = true
        let blocker = BlockJob {}
        harness.queue.addJob(blocker)
        let built = build(on: nil) { tracked in
            let job = BlockJob { _ = tracked }
            try? job.addDependency(blocker)
            harness.queue.addJob(job)
            job.cancel()
            return job
        }
        // The unfinished dependency still holds its (finished) dependent, as documented, but the
        // dependent released its un-run block when it was cancelled.
        #expect(built.job.object != nil)
        #expect(built.captured.object == nil)
        harness.queue.isSuspended = false
        await harness.settle()
        #expect(built.bothFreed)
        _ = blocker
    }

    @Test("a ready job cancelled on a queue is freed, with its un-run block's captures")
    func cancelledWhileReady() async {
        let harness = Harness("cancelled-ready")
        harness.queue.isSuspended = true
        let built = build(on: harness.queue) { tracked in BlockJob { _ = tracked } }
        built.job.object?.cancel()
        await harness.settle()
        // The ready entry the cancelled job left is dropped at once, because no live entry is left.
        #expect(built.job.object == nil, "job")
        #expect(built.captured.object == nil, "captured")
        // Draining the queue pops the stale entry.
        harness.queue.isSuspended = false
        harness.queue.addJob(BlockJob {})
        await harness.settle()
        #expect(built.bothFreed)
    }

    @Test("a cancelled job whose block captures the job is freed")
    func cancelledSelfCapturingBlockJob() async {
        let built = build(on: nil) { tracked in
            let job = BlockJob { _ = tracked }
            job.addExecutionBlock { [job] in _ = job }
            job.cancel()
            return job
        }
        // A job that finishes without running releases its un-run blocks at once, which breaks
        // the cycle through a block that captures the job.
        #expect(built.bothFreed)
    }

    @Test("cancelled asynchronous jobs whose body captures the job are freed")
    func cancelledSelfCapturingBodies() async {
        let asyncBuilt = build(on: nil) { tracked in
            let box = Locked<Job?>(nil)
            let job = AsyncBlockJob { job in
                _ = tracked
                _ = box
                job.finish()
            }
            box.withLock { $0 = job }
            job.cancel()
            return job
        }
        let taskBuilt = build(on: nil) { tracked in
            let box = Locked<Job?>(nil)
            let job = TaskJob {
                _ = tracked
                _ = box
            }
            box.withLock { $0 = job }
            job.cancel()
            return job
        }
        // As for BlockJob, the un-run body is released when the job finishes without running.
        #expect(asyncBuilt.bothFreed)
        #expect(taskBuilt.bothFreed)
    }

    // MARK: Growth

    @Test("a long-lived queue keeps none of the thousands of jobs it ran")
    func longLivedQueueKeepsNothing() async throws {
        let harness = Harness("long-lived", limit: 3)
        let count = 5_000
        let weakJobs: [WeakReference<Job>] = try {
            var jobs: [Job] = []
            jobs.reserveCapacity(count)
            for index in 0..<count {
                let job: Job
                switch index % 4 {
                case 0: job = BlockJob {}
                case 1: job = AsyncBlockJob { job in harness.worker.async { job.finish() } }
                case 2:
                    job = BlockJob {}
                    job.observe { _ in }
                    job.completionBlock = {}
                default:
                    job = BlockJob {}
                    try job.addDependency(jobs[index - 1])
                }
                job.queuePriority = JobPriority.allCases[index % JobPriority.allCases.count]
                jobs.append(job)
            }
            harness.queue.addJobs(jobs, waitUntilFinished: false)
            return jobs.map { WeakReference($0) }
        }()
        await harness.settle()
        #expect(harness.queue.jobCount == 0 && harness.queue.jobs.isEmpty)
        #expect(weakJobs.filter { $0.object != nil }.count == 0)
    }

    @Test("cancelled jobs kept by stale ready entries stay bounded, and go when the queue runs again")
    func staleEntriesStayBounded() async {
        let harness = Harness("stale-bounded")
        harness.queue.isSuspended = true
        let weakJobs: [WeakReference<Job>] = (0..<1_000).map { _ in
            let job = BlockJob {}
            harness.queue.addJob(job)
            job.cancel()
            return WeakReference(job)
        }
        await harness.settle()
        // The ready buckets are compacted once stale entries outnumber live ones and exceed 64.
        let kept = weakJobs.filter { $0.object != nil }.count
        #expect(kept <= 64, "\(kept) cancelled jobs still referenced")
        harness.queue.isSuspended = false
        harness.queue.addJob(BlockJob {})
        await harness.settle()
        #expect(weakJobs.allSatisfy { $0.object == nil })
    }

    // MARK: Dependencies

    @Test("a TaskJob's body and what it captured are freed before its waiters wake")
    func taskJobBodyIsFreedBeforeWaitersWake() async {
        // The task can run the body and finish the job before `start()` has returned on the thread
        // that started it, so nothing there may hold the body either. That happens when the
        // starting thread is preempted right after creating the task: many jobs on several queues,
        // more threads than cores, so that some are.
        let count = 2_000
        let queues = (0..<8).map { JobQueue(name: "task-body-\($0)") }
        // Observers get `.finished` inside the task's call to finish the job, before its closure
        // returns: checking there tells a body released first from one the closure still holds.
        let freedWhenFinished = Log<Bool>()
        let jobs: [TaskJob] = (0..<count).map { _ in
            let tracked = Tracked()
            let captured = WeakReference(tracked)
            let job = TaskJob { _ = tracked }
            job.observe { event in
                if event == .finished { freedWhenFinished.append(captured.object == nil) }
            }
            return job
        }
        for (index, job) in jobs.enumerated() {
            queues[index % queues.count].addJob(job)
        }
        for job in jobs {
            await job.waitUntilFinished()
        }
        #expect(freedWhenFinished.count == count)
        let held = freedWhenFinished.values.filter { !$0 }.count
        #expect(held == 0, "\(held) of \(count) bodies were still held when their job finished")
    }

    @Test("a long-running job does not accumulate its cancelled dependents")
    func cancelledDependentsOfAnUnfinishedJobAreFreed() async {
        let harness = Harness("cancelled-dependents")
        harness.queue.isSuspended = true
        let blocker = BlockJob {}
        harness.queue.addJob(blocker)
        let weakDependents: [WeakReference<Job>] = {
            var weak: [WeakReference<Job>] = []
            for _ in 0..<1_000 {
                let job = BlockJob {}
                try? job.addDependency(blocker)
                harness.queue.addJob(job)
                job.cancel()
                weak.append(WeakReference(job))
            }
            return weak
        }()
        // The blocker has not finished, yet it has dropped (almost) all of its cancelled dependents:
        // it compacts them once they are at least 16 and half its list, so fewer than 32 remain.
        let alive = weakDependents.filter { $0.object != nil }.count
        #expect(alive < 32, "\(alive) of 1,000 cancelled dependents still alive")
        harness.queue.isSuspended = false
        await harness.settle()
        #expect(weakDependents.allSatisfy { $0.object == nil })
        _ = blocker
    }

    @Test("the jobs of a dense graph are freed once it ran: edge lists grown, shrunk and dropped")
    func denseGraphIsFreed() async throws {
        // Two layers of 6, each job of the second waiting for every job of the first: every list
        // holds 6 jobs, so each grew past its first storage (room for four), and one edge per job
        // is removed again. A list that kept or over-released what it held fails here (or crashes).
        let harness = Harness("dense-graph")
        let ran = Counter()
        harness.queue.isSuspended = true
        let weakJobs: [WeakReference<Job>] = try {
            let first = (0..<6).map { _ in BlockJob { ran.increment() } }
            let second = (0..<6).map { _ in BlockJob { ran.increment() } }
            for (index, job) in second.enumerated() {
                for dependency in first {
                    try job.addDependency(dependency)
                }
                job.removeDependency(first[index])
                #expect(job.dependencies.count == 5)
            }
            harness.queue.addJobs(first + second, waitUntilFinished: false)
            return (first + second).map { WeakReference($0) }
        }()
        #expect(weakJobs.allSatisfy { $0.object != nil }, "the queue holds its unfinished jobs")
        harness.queue.isSuspended = false
        await harness.settle()
        #expect(ran.value == 12)
        #expect(weakJobs.allSatisfy { $0.object == nil })
    }

    @Test("a job that depends on a cancelled job runs, and both are freed")
    func dependentOfACancelledJob() async throws {
        let harness = Harness("dependent-of-cancelled")
        let ran = Counter()
        harness.queue.isSuspended = true
        let (dependency, dependent): (Built, Built) = try {
            let dependencyCapture = Tracked()
            let dependentCapture = Tracked()
            let dependency = BlockJob { _ = dependencyCapture }
            let dependent = BlockJob {
                _ = dependentCapture
                ran.increment()
            }
            try dependent.addDependency(dependency)
            harness.queue.addJob(dependent)
            harness.queue.addJob(dependency)
            dependency.cancel()
            return (
                Built(job: WeakReference(dependency), captured: WeakReference(dependencyCapture)),
                Built(job: WeakReference(dependent), captured: WeakReference(dependentCapture))
            )
        }()
        #expect(dependency.job.object != nil, "the waiting dependent holds its cancelled dependency")
        #expect(dependency.captured.object == nil, "but the cancelled job released its un-run block at once")
        harness.queue.isSuspended = false
        await harness.settle()
        #expect(ran.value == 1)
        #expect(dependent.bothFreed)
        #expect(dependency.bothFreed)
    }

    /// Builds a diamond of mixed jobs over two queues: `top` ← `left`, `right` ← `bottom`
    /// (`bottom` waits for both, which wait for `top`), and runs it.
    private static func finishedDiamond(_ a: Harness, _ b: Harness) async throws -> [Job] {
        let top = BlockJob {}
        let left = AsyncBlockJob { job in a.worker.async { job.finish() } }
        let right = BlockJob {}
        right.addExecutionBlock {}
        let bottom = BlockJob {}
        try left.addDependency(top)
        try right.addDependency(top)
        try bottom.addDependency(left)
        try bottom.addDependency(right)
        a.queue.addJobs([bottom, left], waitUntilFinished: false)
        b.queue.addJobs([right, top], waitUntilFinished: false)
        await bottom.waitUntilFinished()
        await a.settle()
        await b.settle()
        return [top, left, right, bottom]
    }

    @Test("a finished dependency graph frees job by job, in either order", arguments: [false, true])
    func finishedGraphFreesInEitherOrder(dependentsFirst: Bool) async throws {
        let a = Harness("graph-a")
        let b = Harness("graph-b")
        var jobs: [Job?] = try await Self.finishedDiamond(a, b)
        let weak = jobs.map { WeakReference($0) }
        #expect(jobs.allSatisfy { $0!.isFinished && $0!.dependencies.isEmpty })
        let order = dependentsFirst ? Array(jobs.indices.reversed()) : Array(jobs.indices)
        for (step, index) in order.enumerated() {
            jobs[index] = nil
            // Finished jobs hold no edges: dropping one frees exactly that one.
            #expect(weak[index].object == nil, "job \(index) freed when dropped")
            let later = order[(step + 1)...]
            #expect(later.allSatisfy { weak[$0].object != nil }, "jobs not yet dropped are alive")
        }
    }
}
