import Conductor
import ConductorTestSupport
import Testing

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

// Each exit test has a time limit: before these waits were detected they hung instead of trapping.
@Suite(.timeLimit(.minutes(1))) struct SelfWaitTests {
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
