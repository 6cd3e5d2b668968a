import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// Re-entrancy across the Foundation bridge (the rule, and the core's callbacks, are in
// Tests/ConductorTests/ReentrancyTests.swift): from inside the blocks the bridge runs, an operation's
// block and completion block run by an `OperationJob` on a `JobQueue`, a job's work, observers and
// completion block run by a `JobOperation` on an `OperationQueue`, and the `JobOperation`'s own
// completion block, every call of either side's public API returns: on the job, its queue, the
// operation, and fresh jobs and operations bridged both ways from there. A recursive acquisition
// of the engine lock traps in debug builds, so a failure here ends the run with that message. The
// time limits only turn a deadlock into a failure.

/// Calls the public API of both sides from inside `site`, recording in `log` what contradicts the
/// bridge's documentation. `current` is what `JobQueue.current` must be there.
private func touchBothSides(
    _ site: String, job: Job, operation: Operation, queue: JobQueue?, current: JobQueue?, log: FailureLog
) {
    let check = { (condition: Bool, message: String) in
        if !condition { log.record("\(site): \(message)") }
    }
    check(JobQueue.current === current, "JobQueue.current is \(JobQueue.current?.name ?? "nil")")
    _ = (job.state, job.outcome.map { "\($0)" }, job.description, job.debugDescription, job.explain())
    _ = (job.displayName, job.dependencies, job.progress.fractionCompleted, job.isCancelled)
    job.removeObserver(job.observe { _ in })
    if let queue {
        _ = (queue.jobs, queue.explain(), queue.dotGraph(), queue.progress.fractionCompleted, queue.description)
    }
    _ = (operation.isReady, operation.isExecuting, operation.isFinished, operation.isCancelled, operation.name)
    _ = operation.dependencies.count

    // Fresh jobs and operations, bridged both ways and run from here.
    let before = BlockOperation {}
    let bridged = BlockJob {}
    bridged.name = "\(site) bridged"
    let after = BlockOperation {}
    do {
        try bridged.addDependency(before)
    } catch {
        check(false, "job.addDependency(operation) threw \(error)")
    }
    after.addDependency(bridged)
    _ = (bridged.explain(), bridged.state)
    before.start()
    let operationJob = OperationJob(BlockOperation {})
    operationJob.start()
    check(operationJob.isFinished, "an OperationJob started by hand has not finished")
    let wrapped = JobOperation(bridged)
    wrapped.start()
    check(bridged.isFinished && wrapped.isFinished, "a JobOperation started by hand has not finished")
    check(after.isReady, "an operation that waits for a finished job is not ready")
    if after.isReady {
        after.start()
    }
}

@Suite("Public API called from inside the Foundation bridge's blocks")
struct ReentrancyBridgeTests {
    @Test(.hangLimit)
    func operationJobOnAJobQueue() async {
        let log = FailureLog(context: "ReentrancyBridgeTests: OperationJob")
        let queue = JobQueue(name: "bridge")
        let ownJob = Locked<OperationJob?>(nil)
        let operation = BlockOperation {
            // Started by the job's `execute()`, on its worker.
            let job = ownJob.withLock { $0 }!
            touchBothSides(
                "operation's block", job: job, operation: job.operation, queue: queue, current: queue, log: log)
        }
        operation.name = "bridged operation"
        let ran = Locked<[String]>([])
        let operationCompleted = DispatchSemaphore(value: 0)
        operation.completionBlock = {
            let job = ownJob.withLock { $0 }!
            touchBothSides(
                "operation's completion block", job: job, operation: operation, queue: queue, current: nil, log: log)
            ran.withLock { $0.append("operation's completion block") }
            operationCompleted.signal()
        }
        let job = OperationJob(operation)
        ownJob.withLock { $0 = job }
        job.observe { event in
            guard event == .finished else { return }
            // The job finishes once Foundation has recorded the operation as finished.
            if !operation.isFinished { log.record(".finished: the operation is not finished") }
            touchBothSides(".finished observer", job: job, operation: operation, queue: queue, current: nil, log: log)
            ran.withLock { $0.append(".finished observer") }
        }
        job.completionBlock = {
            touchBothSides("completion block", job: job, operation: operation, queue: queue, current: nil, log: log)
            ran.withLock { $0.append("job's completion block") }
        }
        queue.addJob(job)
        await queue.waitUntilAllJobsAreFinished()
        // Foundation runs the operation's completion block on a thread of its own, after it finished.
        await waitForSignals(operationCompleted)
        ownJob.withLock { $0 = nil }
        #expect(
            ran.withLock { $0.sorted() } == [
                ".finished observer", "job's completion block", "operation's completion block",
            ])
        log.reportIssues(summary: "OperationJob on a JobQueue")
    }

    @Test(.hangLimit)
    func jobOperationOnAnOperationQueue() async {
        let log = FailureLog(context: "ReentrancyBridgeTests: JobOperation")
        let operations = OperationQueue()
        let ownOperation = Locked<JobOperation?>(nil)
        let ownJob = Locked<Job?>(nil)
        let job = BlockJob {
            // Run with `Job.start()` on the thread that starts the operation, outside any JobQueue.
            let operation = ownOperation.withLock { $0 }!
            if !operation.isExecuting { log.record("work: the JobOperation is not executing") }
            touchBothSides(
                "job's work", job: ownJob.withLock { $0 }!, operation: operation, queue: nil, current: nil, log: log)
        }
        job.name = "wrapped job"
        ownJob.withLock { $0 = job }
        let operation = JobOperation(job)
        ownOperation.withLock { $0 = operation }
        let ran = Locked<[String]>([])
        job.observe { event in
            touchBothSides(".\(event) observer", job: job, operation: operation, queue: nil, current: nil, log: log)
            ran.withLock { $0.append(".\(event)") }
        }
        job.completionBlock = {
            touchBothSides("completion block", job: job, operation: operation, queue: nil, current: nil, log: log)
            ran.withLock { $0.append("completion") }
        }
        let done = DispatchSemaphore(value: 0)
        operation.completionBlock = {
            if job.outcome == nil { log.record("operation's completion block: the job has no outcome") }
            touchBothSides(
                "operation's completion block", job: job, operation: operation, queue: nil, current: nil, log: log)
            done.signal()
        }
        operations.addOperation(operation)
        await waitForSignals(done)
        ownJob.withLock { $0 = nil }
        ownOperation.withLock { $0 = nil }
        #expect(ran.withLock { $0 } == [".ready", ".started", ".finished", "completion"])
        log.reportIssues(summary: "JobOperation on an OperationQueue")
    }
}
