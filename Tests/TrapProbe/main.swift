// Triggers one documented misuse trap, named by the first argument, so that CI can check that a
// release build prints the trap's message (`.ci/check-release-traps`). Not a product.
import Conductor

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A job that waits for itself from inside its own work.
final class SelfWaitingJob: Job, @unchecked Sendable {  // @unchecked Sendable: no stored state of its own.
    override func execute() { waitUntilFinished() }
}

/// A job that waits for its own queue from inside its own work.
final class QueueWaitingJob: Job, @unchecked Sendable {  // @unchecked Sendable: no stored state of its own.
    override func execute() { JobQueue.current?.waitUntilAllJobsAreFinished() }
}

/// A job that adds itself to a queue while it executes (started with `start()`).
final class SelfAddingJob: Job, @unchecked Sendable {  // @unchecked Sendable: no stored state of its own.
    override func execute() { JobQueue(name: "probe-queue").addJob(self) }
}

/// A job that sets its own time limit while it executes.
final class TimeoutSettingJob: Job, @unchecked Sendable {  // @unchecked Sendable: no stored state of its own.
    override func execute() { timeout = .seconds(1) }
}

/// Lets a job's block reach the job itself.
// @unchecked Sendable: `job` is set before the job is added to a queue, which happens-before its
// block runs; nothing writes it after.
final class ProducerBox: @unchecked Sendable {
    var job: BlockJob?
}

/// Lets a retry job's attempt reach the retry job.
// @unchecked Sendable: `job` is set before the retry job is added to a queue, which happens-before
// its attempt runs; nothing writes it after.
final class RetryBox: @unchecked Sendable {
    var job: RetryJob?
}

let traps: [String: () -> Void] = [
    "watchdog-zero-threshold": {
        _ = StallWatchdog(threshold: .zero) { _ in }
    },
    "main-queue-wait-on-main-thread": {
        JobQueue.main.addJob {}
        JobQueue.main.waitUntilAllJobsAreFinished()
    },
    "produce-itself": {
        let box = ProducerBox()
        let job = BlockJob { box.job!.produce(box.job!) }
        job.name = "probe-job"
        box.job = job
        JobQueue(name: "probe-queue").addJobs([job], waitUntilFinished: true)
    },
    "add-child-cycle": {
        let group = GroupJob(name: "probe-group")
        let job = BlockJob {}
        job.name = "probe-job"
        try? job.addDependency(group)
        group.addChild(job)
    },
    "group-zero-limit": {
        _ = GroupJob(name: "probe-group", maxConcurrentJobCount: 0)
    },
    "add-child-to-finished-group": {
        let group = GroupJob(name: "probe-group")
        group.start()
        group.addChild(BlockJob {})
    },
    "add-queued-job-as-child": {
        let queue = JobQueue(name: "probe-queue")
        queue.isSuspended = true
        let job = BlockJob {}
        job.name = "probe-job"
        queue.addJob(job)
        GroupJob(name: "probe-group").addChild(job)
    },
    "group-job-twice": {
        let job = BlockJob {}
        job.name = "probe-job"
        _ = GroupJob(name: "probe-group", jobs: [job, job])
    },
    "queue-progress-counts": {
        JobQueue(name: "probe-queue").progress.completedUnitCount = 1
    },
    "group-progress-counts": {
        GroupJob(name: "probe-group").progress.totalUnitCount = 5
    },
    "negative-unit-count": {
        BlockJob {}.progress.totalUnitCount = -2
    },
    "produce-outside-work": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.produce(BlockJob {})
    },
    "execution-queue-after-start": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.start()
        job.executionQueue = .main
    },
    "categories-after-start": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.start()
        job.exclusivityCategories = ["late"]
    },
    "start-category-held": {
        let holder = AsyncBlockJob { _ in }
        holder.name = "probe-holder"
        holder.exclusivityCategories = ["probe-category"]
        holder.start()
        let job = BlockJob {}
        job.name = "probe-job"
        job.exclusivityCategories = ["probe-category"]
        job.start()
    },
    "condition-after-start": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.start()
        job.addCondition(BlockCondition(name: "late") { _ in true })
    },
    "start-unevaluated-conditions": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.addCondition(BlockCondition(name: "gate") { _ in true })
        job.start()
    },
    "add-twice": {
        let queue = JobQueue(name: "probe-queue", maxConcurrentJobCount: 0)
        let job = BlockJob {}
        job.name = "probe-job"
        queue.addJob(job)
        queue.addJob(job)
    },
    "add-to-another-queue": {
        let job = BlockJob {}
        job.name = "probe-job"
        JobQueue(name: "first-queue", maxConcurrentJobCount: 0).addJob(job)
        JobQueue(name: "probe-queue").addJob(job)
    },
    "add-executing": {
        let job = SelfAddingJob()
        job.name = "probe-job"
        job.start()
    },
    "negative-limit-setter": {
        JobQueue(name: "probe-queue").maxConcurrentJobCount = -3
    },
    "start-finished": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.start()
        job.start()
    },
    "start-on-queue": {
        let job = BlockJob {}
        job.name = "probe-job"
        JobQueue(name: "probe-queue", maxConcurrentJobCount: 0).addJob(job)
        job.start()
    },
    "timeout-while-executing": {
        let job = TimeoutSettingJob()
        job.name = "probe-job"
        job.start()
    },
    "negative-limit": {
        _ = JobQueue(name: "probe-queue", maxConcurrentJobCount: -2)
    },
    "add-finished": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.start()
        JobQueue(name: "probe-queue").addJob(job)
    },
    "start-pending": {
        let dependency = BlockJob {}
        dependency.name = "probe-dependency"
        let job = BlockJob {}
        job.name = "probe-job"
        try! job.addDependency(dependency)
        job.start()
    },
    "add-execution-block": {
        let job = BlockJob {}
        job.name = "probe-job"
        job.start()
        job.addExecutionBlock {}
    },
    "self-wait": {
        let queue = JobQueue(name: "probe-queue")
        let job = SelfWaitingJob()
        job.name = "probe-job"
        queue.addJob(job)
        queue.waitUntilAllJobsAreFinished()
    },
    "retry-attempt-self-wait": {
        let box = RetryBox()
        let retry = RetryJob(maxAttempts: 1) { _ in BlockJob { box.job!.waitUntilFinished() } }
        retry.name = "probe-retry"
        box.job = retry
        JobQueue(name: "probe-queue").addJob(retry)
        retry.waitUntilFinished()
    },
    "queue-self-wait": {
        let queue = JobQueue(name: "probe-queue")
        queue.addJob(QueueWaitingJob())
        queue.waitUntilAllJobsAreFinished()
    },
]

let arguments = CommandLine.arguments.dropFirst()
guard let name = arguments.first, let trap = traps[name] else {
    print("usage: conductor-trap-probe <\(traps.keys.sorted().joined(separator: "|"))>")
    exit(2)
}
trap()
print("conductor-trap-probe: '\(name)' did not trap")
exit(1)
