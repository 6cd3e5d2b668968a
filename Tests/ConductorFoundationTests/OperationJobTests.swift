import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// OperationJob: a Foundation Operation run as a Conductor job.
//
// Several tests run the JobQueue's workers on a private serial Dispatch queue (`worker`) and
// drain it (`drainSerialQueue(_:)`) after a job's operation has started. A worker that finishes a job takes the next
// ready one in the same Dispatch block. So if the bridge finished the job when the operation's
// `start()` returned, instead of when the operation really finished, the next job (or the
// dependent) would have started by the time the drain returns, every time: these tests fail
// deterministically, not by luck of timing.

@Suite("OperationJob")
struct OperationJobTests {
    // MARK: The seed scenario

    @Test("ten asynchronous Operations run strictly one at a time, in order, on a limit-1 JobQueue")
    func tenAsynchronousOperationsOneAtATime() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("seed-limit-1", limit: 1)
        let work = ManualWork(count: 10)
        let inFlight = InFlight()
        let log = Log<String>()
        let operations = (0..<10).map { ManualAsyncOperation(index: $0, work: work, inFlight: inFlight, log: log) }
        let jobs = operations.map(OperationJob.init)
        queue.addJobs(jobs, waitUntilFinished: false)

        for index in 0..<10 {
            await work.waitUntilStarted(index)
            await drainSerialQueue(worker)
            #expect(inFlight.now == 1, "operation \(index): another operation started while it was executing")
            #expect(jobs[index].isExecuting, "job \(index) finished when start() returned")
            work.complete(index)
        }
        await queue.waitUntilAllJobsAreFinished()

        #expect(inFlight.maximum == 1)
        #expect(inFlight.starts == 10)
        let expected = (0..<10).flatMap { ["manual-\($0) started", "manual-\($0) finished"] }
        #expect(log.values == expected)
        #expect(jobs.allSatisfy { $0.isFinished })
        #expect(operations.allSatisfy { $0.isFinished })
    }

    @Test("an asynchronous Operation releases its Conductor dependents only when it has finished")
    func asynchronousOperationReleasesDependentsWhenFinished() async throws {
        let (queue, worker) = makeJobQueueOnSerialWorker("seed-dependents", limit: 2)
        let work = ManualWork(count: 1)
        let log = Log<String>()
        let operation = ManualAsyncOperation(index: 0, work: work, log: log)
        let job = OperationJob(operation)
        let dependent = BlockJob { log.append("dependent") }
        try dependent.addDependency(job)
        queue.addJobs([job, dependent], waitUntilFinished: false)

        await work.waitUntilStarted(0)
        await drainSerialQueue(worker)
        #expect(log.values == ["manual-0 started"])
        #expect(dependent.state == .pending)

        work.complete(0)
        await dependent.waitUntilFinished()
        #expect(log.values == ["manual-0 started", "manual-0 finished", "dependent"])
    }

    // MARK: Synchronous operations

    @Test("a synchronous Operation runs on the job's worker and keeps its completion block")
    func synchronousOperationRunsOnTheWorker() async {
        let (queue, _) = makeJobQueueOnSerialWorker("sync", limit: 1)
        let ranOn = Locked<JobQueue?>(nil)
        let operation = BlockOperation { ranOn.withLock { $0 = JobQueue.current } }
        let completed = Signal()
        operation.completionBlock = { completed.fire() }
        let job = OperationJob(operation)
        queue.addJob(job)

        await job.waitUntilFinished()
        #expect(ranOn.withLock { $0 } === queue)
        #expect(operation.isFinished)
        // Foundation runs the operation's own completion block, untouched by the bridge.
        await completed.wait()
    }

    @Test("an Operation that finished before it was wrapped finishes its job when the job runs")
    func alreadyFinishedOperation() async {
        let ran = Counter()
        let operation = BlockOperation { ran.increment() }
        operation.start()
        let job = OperationJob(operation)
        let (queue, _) = makeJobQueueOnSerialWorker("already-finished", limit: 1)
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(ran.value == 1)
        #expect(!job.isCancelled)
    }

    // MARK: Dependencies of the operation

    @Test("an Operation's Foundation dependencies at wrapping become the job's")
    func operationDependenciesCarryOver() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("carry-over", limit: 2)
        let work = ManualWork(count: 1)
        let log = Log<String>()
        let first = ManualAsyncOperation(index: 0, work: work, log: log)
        let second = BlockOperation { log.append("second") }
        second.addDependency(first)
        let secondJob = OperationJob(second)
        #expect(secondJob.state == .pending)
        queue.addJob(secondJob)
        queue.addJob(OperationJob(first))

        await work.waitUntilStarted(0)
        await drainSerialQueue(worker)
        #expect(log.values == ["manual-0 started"])

        work.complete(0)
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["manual-0 started", "manual-0 finished", "second"])
    }

    @Test("a dependency added to the Operation after wrapping is still honoured; the job holds its slot")
    func lateOperationDependency() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("late-dependency", limit: 1)
        let work = ManualWork(count: 1)
        let log = Log<String>()
        let operation = BlockOperation { log.append("operation") }
        let job = OperationJob(operation)
        let blocker = ManualAsyncOperation(index: 0, work: work, log: log)
        operation.addDependency(blocker)  // the job never learns of this one
        let other = BlockJob { log.append("other") }
        queue.addJobs([job, other], waitUntilFinished: false)

        await drainSerialQueue(worker)
        // The operation was not ready when its job ran: the job waits, executing, holding the
        // only slot, so `other` cannot start either.
        #expect(job.isExecuting)
        #expect(log.values.isEmpty)

        blocker.start()
        await work.waitUntilStarted(0)
        work.complete(0)
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["manual-0 started", "manual-0 finished", "operation", "other"])
    }

    // MARK: Cancellation

    @Test("cancelling the job before it runs cancels and finishes the operation without running it")
    func cancelBeforeStart() async throws {
        let (queue, _) = makeJobQueueOnSerialWorker("cancel-before", limit: 1)
        queue.isSuspended = true
        let ran = Counter()
        let operation = BlockOperation { ran.increment() }
        let completed = Signal()
        operation.completionBlock = { completed.fire() }
        let (foundationQueue, _) = makeOperationQueue("cancel-before-dependents", limit: 1)
        let dependentRan = Signal()
        let dependent = BlockOperation { dependentRan.fire() }
        dependent.addDependency(operation)
        foundationQueue.addOperation(dependent)
        let job = OperationJob(operation)
        queue.addJob(job)

        job.cancel()

        #expect(job.isFinished && job.isCancelled)
        #expect(operation.isCancelled)
        // Started, cancelled, so Foundation finished it without running it, as a queue would.
        // (`#require`: without it, the waits below would never end.)
        try #require(operation.isFinished)
        await completed.wait()
        await dependentRan.wait()
        #expect(ran.value == 0)
    }

    @Test("cancelling the job while the operation runs cancels the operation; the job finishes with it")
    func cancelWhileRunning() async {
        let (queue, _) = makeJobQueueOnSerialWorker("cancel-running", limit: 1)
        let work = ManualWork(count: 1)
        let operation = ManualAsyncOperation(index: 0, work: work)
        let job = OperationJob(operation)
        queue.addJob(job)
        await work.waitUntilStarted(0)

        job.cancel()
        #expect(operation.isCancelled)
        #expect(job.isCancelled)
        #expect(job.isExecuting, "a running job keeps its slot until its operation finishes")

        work.complete(0)
        await job.waitUntilFinished()
        #expect(job.isCancelled)
    }

    @Test("an asynchronous Operation cancelled before its job runs finishes through its own start()")
    func asynchronousOperationCancelledBeforeStart() async {
        let work = ManualWork(count: 1)
        let log = Log<String>()
        let operation = ManualAsyncOperation(index: 0, work: work, log: log)
        let job = OperationJob(operation)
        job.cancel()
        #expect(job.isFinished)
        #expect(operation.isFinished)
        #expect(log.values == ["manual-0 cancelled before start"])
        #expect(work.pending == 0)
    }

    // MARK: Mapping

    @Test(
        "name, priority and quality of service come from the operation",
        arguments: zip(
            [Operation.QueuePriority.veryLow, .low, .normal, .high, .veryHigh],
            [QualityOfService.background, .utility, .default, .userInitiated, .userInteractive]))
    func mappedProperties(priority: Operation.QueuePriority, qualityOfService: QualityOfService) {
        let operation = BlockOperation {}
        operation.name = "named-operation"
        operation.queuePriority = priority
        operation.qualityOfService = qualityOfService
        let job = OperationJob(operation)
        #expect(job.name == "named-operation")
        #expect(job.queuePriority == JobPriority(priority))
        #expect(job.qualityOfService == DispatchQoS.QoSClass(qualityOfService))
    }

    // MARK: Lifetime

    /// Builds an asynchronous operation and its job, adds the job, and keeps only weak references.
    private static func addDroppedOperation(to queue: JobQueue, work: ManualWork)
        -> (WeakReference<ManualAsyncOperation>, WeakReference<OperationJob>)
    {
        let operation = ManualAsyncOperation(index: 0, work: work)
        let job = OperationJob(operation)
        queue.addJob(job)
        return (WeakReference(operation), WeakReference(job))
    }

    @Test("an asynchronous Operation and its job are freed once it has finished")
    func asynchronousOperationAndJobAreFreed() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("lifetime-async", limit: 1)
        let work = ManualWork(count: 1)
        let (operation, job) = Self.addDroppedOperation(to: queue, work: work)
        await work.waitUntilStarted(0)
        #expect(operation.object != nil && job.object != nil)

        // Completing the work posts `isFinished` on this thread. Foundation tells the bridge at
        // once, on this thread, and the job finishes here too; nothing is left for another thread
        // except the worker block, which may still be returning.
        work.complete(0)
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(operation.object == nil)
        #expect(job.object == nil)
    }

    @Test("a synchronous Operation and its job are freed once it has finished")
    func synchronousOperationAndJobAreFreed() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("lifetime-sync", limit: 1)
        let (operation, job) = { () -> (WeakReference<BlockOperation>, WeakReference<OperationJob>) in
            let operation = BlockOperation {}
            let job = OperationJob(operation)
            queue.addJob(job)
            return (WeakReference(operation), WeakReference(job))
        }()
        await queue.waitUntilAllJobsAreFinished()
        // The operation finished inside the worker's block; once that block has returned, nothing
        // but a leak could hold either object.
        await drainSerialQueue(worker)
        #expect(operation.object == nil)
        #expect(job.object == nil)
    }
}
