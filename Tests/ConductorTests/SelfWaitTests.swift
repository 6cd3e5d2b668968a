import Conductor
import ConductorTestSupport
import Dispatch
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// A `TaskJob`'s body runs on the cooperative pool, where no worker's thread context is set. A wait
// from the body for its own job, or for its own queue, would never return; each form traps with
// the message of the misuse table (Docs/Concepts.md). A task the body creates is another task and
// may wait.

/// Lets a `TaskJob`'s body reach the job itself.
// @unchecked Sendable: `job` is written once, before the job is added to a queue (which orders the
// write before the body's read).
private final class JobBox: @unchecked Sendable {
    var job: Job?
}

/// The blocking `waitUntilFinished()`, called from a synchronous function as a body would.
private func blockingWait(for job: Job) {
    job.waitUntilFinished()
}

/// The blocking `waitUntilAllJobsAreFinished()`, called from a synchronous function.
private func blockingWait(for queue: JobQueue) {
    queue.waitUntilAllJobsAreFinished()
}

/// Runs, on a queue named 'group-queue', a group named 'waited-for group' (inside `outer`, if given)
/// whose one child, named 'waiting child', is `makeChild(group, queue)`. Ends the process with
/// success once the child's work is blocked in a wait (so no trap ended it first), which fails an
/// exit test expecting a trap; returns the child otherwise, for the caller to watch.
@discardableResult
private func runGroupWhoseChild(
    inside outer: GroupJob? = nil, exitOnceBlocked: Bool = true, _ makeChild: (GroupJob, JobQueue) -> Job
) -> (GroupJob, Job) {
    let queue = JobQueue(name: "group-queue")
    let group = GroupJob(name: "waited-for group", jobs: [])
    let child = makeChild(group, queue)
    child.name = "waiting child"
    group.addChild(child)
    if let outer {
        outer.addChild(group)
        queue.addJob(outer)
    } else {
        queue.addJob(group)
    }
    if exitOnceBlocked {
        while !child.explain().contains("its work is blocked in") { sched_yield() }
        exit(0)
    }
    return (group, child)
}

// Each exit test has a time limit: before these waits were detected they hung instead of trapping.
@Suite(.hangLimit) struct SelfWaitTests {
    @Test func taskJobBlockingWaitForItselfTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = JobBox()
            let job = TaskJob { blockingWait(for: box.job!) }
            job.name = "task-waits-for-itself"
            box.job = job
            JobQueue(name: "self-wait").addJob(job)
            await job.waitUntilFinished()
        }
        #expect(standardErrorText(result).contains("'task-waits-for-itself' waits for itself from its own work"))
    }

    @Test func taskJobAsyncWaitForItselfTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = JobBox()
            let job = TaskJob { await box.job!.waitUntilFinished() }
            job.name = "task-awaits-itself"
            box.job = job
            JobQueue(name: "self-wait").addJob(job)
            await job.waitUntilFinished()
        }
        #expect(standardErrorText(result).contains("'task-awaits-itself' waits for itself from its own work"))
    }

    @Test func taskJobBlockingWaitForItsQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "task-queue-blocking")
            let job = TaskJob { blockingWait(for: JobQueue.current!) }
            queue.addJob(job)
            await job.waitUntilFinished()
        }
        #expect(standardErrorText(result).contains("called from a job running on 'task-queue-blocking'"))
    }

    @Test func taskJobAsyncWaitForItsQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "task-queue-async")
            let job = TaskJob { await JobQueue.current!.waitUntilAllJobsAreFinished() }
            queue.addJob(job)
            await job.waitUntilFinished()
        }
        #expect(standardErrorText(result).contains("called from a job running on 'task-queue-async'"))
    }

    // A group waits for its children, at any depth, and a queue for its group: a child's wait for
    // either would never return. Until 2026-11-25 none of these trapped (found by an audit).

    @Test func aChildsBlockingWaitForItsGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            runGroupWhoseChild { group, _ in BlockJob { blockingWait(for: group) } }
        }
        #expect(
            standardErrorText(result).contains(
                "Job.waitUntilFinished(): 'waited-for group' is waited for from the work of 'waiting child', inside it (a group's child, a retry job's attempt), which it waits for; it would never return"
            ))
    }

    @Test func aTaskJobChildAwaitingAGroupAroundItsGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = JobBox()
            let outer = GroupJob(name: "outer group", jobs: [])
            box.job = outer
            runGroupWhoseChild(inside: outer) { _, _ in TaskJob { await box.job!.waitUntilFinished() } }
        }
        #expect(
            standardErrorText(result).contains(
                "'outer group' is waited for from the work of 'waiting child', inside it"))
    }

    @Test func aChildsBlockingWaitForItsGroupsQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            runGroupWhoseChild { _, queue in BlockJob { blockingWait(for: queue) } }
        }
        #expect(standardErrorText(result).contains("called from a job running on 'group-queue'"))
    }

    @Test func aTaskJobChildAwaitingItsGroupsQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            runGroupWhoseChild { _, queue in TaskJob { await queue.waitUntilAllJobsAreFinished() } }
        }
        #expect(standardErrorText(result).contains("called from a job running on 'group-queue'"))
    }

    @Test func aChildsCompletionBlockWaitingForItsGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            // A wait in a callback is no job's work, so `explain()` cannot show it blocked; the
            // group's count of pending waits can: the wait is counted once it passed the traps.
            let (group, _) = runGroupWhoseChild(exitOnceBlocked: false) { group, _ in
                let child = BlockJob {}
                child.completionBlock = { blockingWait(for: group) }
                return child
            }
            while group._pendingWaitCount == 0 { sched_yield() }
            exit(0)
        }
        #expect(
            standardErrorText(result).contains(
                "Job.waitUntilFinished(): 'waited-for group' is waited for from an observer or completion block of 'waiting child', inside it"
            ))
    }

    // Waits that return, and must not trap (found by a review on 2026-11-25: the first two trapped,
    // and so did the job's own and its queue's in the third).

    @Test func aTaskAChildsWorkStartsMayAwaitTheGroupAndItsQueue() async {
        // A job's synchronous work reaches an `await` only through a task it starts; with
        // `Task.immediate` that task's first part runs on the job's thread. It is another task: the
        // child returns, and the waits return once the group has finished.
        await #expect(processExitsWith: .success) {
            let waited = DispatchSemaphore(value: 0)
            let (group, child) = runGroupWhoseChild(exitOnceBlocked: false) { group, queue in
                BlockJob {
                    Task.immediate {
                        await group.waitUntilFinished()
                        await queue.waitUntilAllJobsAreFinished()
                        waited.signal()
                    }
                }
            }
            await waitForSignals(waited)
            _ = (group, child)
        }
    }

    @Test(arguments: [false, true])
    func aChildThatFinishedMayWaitForItsGroupWhileAnotherThreadDeliversItsEvents(forTheQueue: Bool) async {
        // The child finishes inside its work while another thread delivers its `.cancelled`; its
        // `.finished`, and so its count-down in the group, waits for that delivery, which the test
        // lets end once the child's wait is pending. The wait then returns.
        let releaseDelivery = DispatchSemaphore(value: 0)
        let deliveryStarted = DispatchSemaphore(value: 0)
        let childStarted = DispatchSemaphore(value: 0)
        let waitReturned = DispatchSemaphore(value: 0)
        let box = JobBox()
        let queue = JobQueue(name: "finished-child-waits")
        let child = AsyncBlockJob { job in
            childStarted.signal()
            deliveryStarted.wait()
            job.finish()
            if forTheQueue {
                queue.waitUntilAllJobsAreFinished()
            } else {
                box.job!.waitUntilFinished()
            }
            waitReturned.signal()
        }
        child.observe { event in
            guard event == .cancelled else { return }
            deliveryStarted.signal()
            releaseDelivery.wait()
        }
        let group = GroupJob(name: "finished-child-group", jobs: [child])
        box.job = group
        queue.addJob(group)
        await waitForSignals(childStarted)
        DispatchQueue(label: "canceller").async { child.cancel() }
        await runOnDispatchThread {
            // The child's wait is the first pending one.
            if forTheQueue {
                while queue._pendingWaitCount == 0 { sched_yield() }
            } else {
                while group._pendingWaitCount == 0 { sched_yield() }
            }
            releaseDelivery.signal()
        }
        await waitForSignals(waitReturned)
        await group.waitUntilFinished()
        #expect(child.isCancelled)
    }

    @Test func aTaskCreatedByTheBodyMayWaitForTheJobAndItsQueue() async throws {
        // Unstructured tasks inherit the body's task-locals, but they are other tasks: the job can
        // finish while they wait, so they must not trap.
        let queue = JobQueue(name: "inner-task-waits")
        let box = JobBox()
        let innerWaits = Locked<Task<Bool, Never>?>(nil)
        let job = TaskJob {
            let task = Task {
                await box.job!.waitUntilFinished()
                await queue.waitUntilAllJobsAreFinished()
                return box.job!.isFinished
            }
            innerWaits.withLock { $0 = task }
        }
        box.job = job
        queue.addJob(job)
        await job.waitUntilFinished()
        let task = try #require(innerWaits.withLock { $0 })
        #expect(await task.value)
    }
}

// Not under SelfWaitTests' time limit: a race repeated for many rounds, which takes about a second
// alone and close to a minute under ThreadSanitizer beside the rest of the suite.
@Suite struct SelfWaitLifetimeTests {
    @Test("a task the body created that waits while the job is let go does not free it under the lock")
    func aTaskCreatedByTheBodyWaitsWhileTheJobIsLetGo() async throws {
        // The task inherits the task-local naming the body's job, weakly; every wait it makes asks,
        // under the engine lock, whether it is that body. If the job's last other reference goes
        // meanwhile (its queue's and its task's, as it finishes), the job must not be freed under
        // the lock (debug builds trap when a job is). A race, so many rounds; no round keeps a
        // reference to the job.
        let queue = JobQueue(name: "let-go-task-job")
        let other = JobQueue(name: "let-go-steps")
        for _ in 0..<10_000 {
            let inner = Locked<Task<Void, Never>?>(nil)
            queue.addJob(
                TaskJob {
                    // The body returns, and the job finishes, once the task has begun waiting.
                    let waiting = Signal()
                    let task = Task {
                        waiting.fire()
                        for _ in 0..<2 {
                            let step = BlockJob {}
                            other.addJob(step)
                            await step.waitUntilFinished()
                        }
                    }
                    inner.withLock { $0 = task }
                    await waiting.wait()
                })
            await queue.waitUntilAllJobsAreFinished()
            let task = try #require(inner.withLock { $0 })
            await task.value
        }
    }
}
