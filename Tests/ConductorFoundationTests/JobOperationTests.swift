import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// JobOperation: a Conductor job run as a Foundation Operation.
//
// The Foundation queues here run their operations on a private serial Dispatch queue (`worker`).
// When an operation reports finished, swift-corelibs-foundation submits the next operation's
// block to `worker` right away, from the thread that reported it. If a JobOperation reported
// finished when its job's `execute()` returned, that would happen inside the running operation's
// block, and two drains of `worker` (the first may be queued before the next operation's block,
// the second cannot be) would find the next operation started. So the serialization tests fail
// deterministically, not by luck of timing.

@Suite("JobOperation")
struct JobOperationTests {
    @Test func itReflectsAsItsJobAndItsState() {
        let job = BlockJob {}
        job.name = "reflected"
        let operation = JobOperation(job)
        let mirror = Mirror(reflecting: operation)
        #expect(mirror.children.map(\.label) == ["job", "isExecuting", "isFinished", "isCancelled"])
        var dumped = ""
        dump(operation, to: &dumped)
        #expect(dumped.contains("reflected") && dumped.contains("isFinished: false"), "\(dumped)")
        #expect(!dumped.contains("lifecycle"))
    }

    // MARK: Serialization

    /// The two kinds of job whose work completes after `execute()` returns.
    enum AsynchronousKind: String, CaseIterable, Sendable {
        case asyncBlockJob = "AsyncBlockJob"
        case taskJob = "TaskJob"

        /// A job that enters `inFlight`, logs `index`, starts work `index` and leaves `inFlight`
        /// and finishes when the test completes that work.
        func makeJob(_ index: Int, work: ManualWork, inFlight: InFlight, log: Log<Int>) -> Job {
            switch self {
            case .asyncBlockJob:
                return AsyncBlockJob { job in
                    inFlight.enter()
                    log.append(index)
                    work.started(index) {
                        inFlight.leave()
                        job.finish()
                    }
                }
            case .taskJob:
                return TaskJob {
                    inFlight.enter()
                    log.append(index)
                    let completed = Signal()
                    work.started(index) { completed.fire() }
                    await completed.wait()
                    inFlight.leave()
                }
            }
        }
    }

    @Test(
        "ten asynchronous jobs in JobOperations run strictly one at a time, in order, at maxConcurrentOperationCount 1",
        arguments: AsynchronousKind.allCases)
    func tenAsynchronousJobsOneAtATime(kind: AsynchronousKind) async {
        let (queue, worker) = makeOperationQueue("serial-\(kind.rawValue)", limit: 1)
        let work = ManualWork(count: 10)
        let inFlight = InFlight()
        let log = Log<Int>()
        let jobs = (0..<10).map { kind.makeJob($0, work: work, inFlight: inFlight, log: log) }
        let operations = jobs.map(JobOperation.init)
        for operation in operations { queue.addOperation(operation) }

        for index in 0..<10 {
            await work.waitUntilStarted(index)
            await drainSerialQueue(worker)
            await drainSerialQueue(worker)
            #expect(inFlight.now == 1, "job \(index): another job started while it was executing")
            #expect(operations[index].isExecuting && !operations[index].isFinished)
            work.complete(index)
        }
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }

        #expect(inFlight.maximum == 1)
        #expect(log.values == Array(0..<10))
        #expect(operations.allSatisfy { $0.isFinished && !$0.isExecuting })
    }

    @Test("contrast: BlockOperations that start asynchronous work overlap at maxConcurrentOperationCount 1")
    func blockOperationsThatStartAsynchronousWorkOverlap() async {
        let (queue, _) = makeOperationQueue("block-operations", limit: 1)
        let work = ManualWork(count: 10)
        let inFlight = InFlight()
        let operations = (0..<10).map { index in
            BlockOperation {
                inFlight.enter()
                work.started(index) { inFlight.leave() }  // the work completes later...
            }  // ...but the operation finishes here, when the block returns.
        }
        for operation in operations { queue.addOperation(operation) }

        // Every operation has finished, and not one piece of work has: all ten are in flight at
        // once on a queue limited to one. Nothing can complete them until the test does.
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(inFlight.now == 10)
        #expect(inFlight.maximum == 10)

        for index in 0..<10 { work.complete(index) }
        #expect(inFlight.now == 0)
    }

    @Test("a Foundation dependent waits until the asynchronous job has finished")
    func foundationDependentWaitsForTheJob() async {
        let (queue, worker) = makeOperationQueue("dependent", limit: 2)
        let work = ManualWork(count: 1)
        let log = Log<String>()
        let operation = JobOperation(
            AsyncBlockJob { job in
                log.append("job started")
                work.started(0) {
                    log.append("job finished")
                    job.finish()
                }
            })
        let dependent = BlockOperation { log.append("dependent") }
        dependent.addDependency(operation)
        queue.addOperation(dependent)
        queue.addOperation(operation)

        await work.waitUntilStarted(0)
        await drainSerialQueue(worker)
        await drainSerialQueue(worker)
        #expect(log.values == ["job started"])
        #expect(operation.isExecuting)

        work.complete(0)
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(log.values == ["job started", "job finished", "dependent"])
    }

    @Test("start() by hand runs the job on the calling thread and reports the lifecycle")
    func startByHand() {
        let ran = Counter()
        let operation = JobOperation(BlockJob { ran.increment() })
        #expect(operation.isAsynchronous)
        #expect(operation.isReady && !operation.isExecuting && !operation.isFinished)
        operation.start()
        #expect(ran.value == 1)
        #expect(operation.isFinished && !operation.isExecuting)
        #expect(operation.job.isFinished)
        operation.start()  // a finished operation ignores start(), as Foundation's does
        #expect(ran.value == 1)
    }

    // MARK: Dependencies of the job

    @Test("a job's unfinished Conductor dependencies at wrapping become the operation's")
    func jobDependenciesCarryOver() async throws {
        let (jobQueue, _) = makeJobQueueOnSerialWorker("carry-over-jobs", limit: 1)
        let (queue, worker) = makeOperationQueue("carry-over-operations", limit: 1)
        let work = ManualWork(count: 1)
        let log = Log<String>()
        let first = AsyncBlockJob { job in
            log.append("first started")
            work.started(0) {
                log.append("first finished")
                job.finish()
            }
        }
        let second = BlockJob { log.append("second") }
        try second.addDependency(first)
        let operation = JobOperation(second)
        #expect(!operation.isReady)
        queue.addOperation(operation)
        jobQueue.addJob(first)

        await work.waitUntilStarted(0)
        await drainSerialQueue(worker)
        #expect(log.values == ["first started"])

        work.complete(0)
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(log.values == ["first started", "first finished", "second"])
    }

    // MARK: Cancellation

    @Test("cancelling the operation before it starts cancels the job; neither runs, and dependents go on")
    func cancelBeforeStart() async throws {
        let (queue, _) = makeOperationQueue("cancel-before", limit: 1)
        queue.isSuspended = true
        let ran = Counter()
        let job = BlockJob { ran.increment() }
        let operation = queue.addJob(job)
        let dependentRan = Counter()
        let dependent = BlockOperation { dependentRan.increment() }
        dependent.addDependency(operation)
        queue.addOperation(dependent)

        operation.cancel()
        try #require(job.isCancelled && job.isFinished, "Conductor finishes a job cancelled before it starts")
        #expect(operation.isCancelled)

        queue.isSuspended = false
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(operation.isFinished && !operation.isExecuting)
        #expect(ran.value == 0)
        #expect(dependentRan.value == 1)
    }

    @Test("cancelling the operation while the job runs cancels the job, which finishes when its work does")
    func cancelWhileRunning() async throws {
        let (queue, _) = makeOperationQueue("cancel-running", limit: 1)
        let started = Signal()
        let cancelled = Signal()
        let job = TaskJob {
            started.fire()
            await withTaskCancellationHandler {
                await cancelled.wait()
            } onCancel: {
                cancelled.fire()
            }
            try Task.checkCancellation()
        }
        let operation = queue.addJob(job)
        await started.wait()
        #expect(operation.isExecuting)

        operation.cancel()
        // `#require`: the job's body waits for cancellation, so without it the wait would not end.
        try #require(job.isCancelled)
        await job.waitUntilFinished()
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(operation.isFinished && operation.isCancelled)
    }

    @Test("cancelling the job cancels the operation, before and while it runs")
    func cancellingTheJobCancelsTheOperation() async {
        // Before: the operation finishes without running anything when its queue starts it.
        let idle = JobOperation(BlockJob {})
        idle.job.cancel()
        #expect(idle.isCancelled)
        idle.start()
        #expect(idle.isFinished)

        // While running.
        let (queue, _) = makeOperationQueue("job-cancelled-running", limit: 1)
        let work = ManualWork(count: 1)
        let job = AsyncBlockJob { job in work.started(0) { job.finish() } }
        let operation = queue.addJob(job)
        await work.waitUntilStarted(0)
        job.cancel()
        #expect(operation.isCancelled && operation.isExecuting)
        work.complete(0)
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(operation.isFinished)
    }

    @Test("a job that finished before it was wrapped: the operation finishes without running it again")
    func alreadyFinishedJob() {
        let ran = Counter()
        let job = BlockJob { ran.increment() }
        job.start()
        let operation = JobOperation(job)
        operation.start()
        #expect(operation.isFinished)
        #expect(ran.value == 1)
    }

    // MARK: Mapping

    @Test(
        "name, priority and quality of service come from the job",
        arguments: zip(
            JobPriority.allCases,
            [DispatchQoS.QoSClass.background, .utility, .default, .userInitiated, .userInteractive]))
    func mappedProperties(priority: JobPriority, qosClass: DispatchQoS.QoSClass) {
        let job = BlockJob {}
        job.name = "named-job"
        job.queuePriority = priority
        job.qualityOfService = qosClass
        let operation = JobOperation(job)
        #expect(operation.name == "named-job")
        #expect(operation.queuePriority == Operation.QueuePriority(priority))
        #expect(operation.qualityOfService == QualityOfService(qosClass))
    }

    // MARK: Lifetime

    @Test("a JobOperation and its asynchronous job are freed once they have finished")
    func operationAndJobAreFreed() async {
        let (queue, worker) = makeOperationQueue("lifetime", limit: 1)
        let work = ManualWork(count: 1)
        let (operation, job) = { () -> (WeakReference<JobOperation>, WeakReference<AsyncBlockJob>) in
            let job = AsyncBlockJob { job in work.started(0) { job.finish() } }
            let operation = queue.addJob(job)
            return (WeakReference(operation), WeakReference(job))
        }()
        await work.waitUntilStarted(0)
        #expect(operation.object != nil && job.object != nil)

        // Finishing the job reports the operation finished on this thread, and Foundation releases
        // it there; the only other holder is the block that ran `start()` on `worker`.
        work.complete(0)
        await drainSerialQueue(worker)
        #expect(operation.object == nil)
        #expect(job.object == nil)
    }

    // MARK: Misuse

    @Test("start() traps when the job waits for a dependency added after wrapping, naming both")
    func lateJobDependencyTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "late-dependent"
            let operation = JobOperation(job)
            let blocker = BlockJob {}
            blocker.name = "late-blocker"
            try? job.addDependency(blocker)
            operation.start()
        }
        let message = standardErrorText(result)
        #expect(message.contains("late-dependent") && message.contains("late-blocker"))
        #expect(message.contains("added to the job after it was wrapped"))
    }

    @Test("start() by hand before the job's dependencies have finished traps, saying so and naming them")
    func startBeforeReadyTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let blocker = BlockJob {}
            blocker.name = "early-blocker"
            let job = BlockJob {}
            job.name = "early-dependent"
            try? job.addDependency(blocker)
            let operation = JobOperation(job)
            operation.start()
        }
        let message = standardErrorText(result)
        #expect(message.contains("early-dependent") && message.contains("early-blocker"))
        #expect(message.contains("started before it was ready"))
        #expect(!message.contains("after it was wrapped"))
    }

    @Test("start() on a job with conditions traps, saying that only a JobQueue evaluates them")
    func jobWithConditionsTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "conditional"
            job.addCondition(BlockCondition(name: "online") { _ in true })
            JobOperation(job).start()
        }
        let message = standardErrorText(result)
        #expect(message.contains("JobOperation.start(): 'conditional' has conditions, which only a JobQueue evaluates"))
        #expect(!message.contains("waits for"))
    }

    @Test("start() on a job with exclusivity categories traps, naming them, even when they are free")
    func jobWithCategoriesTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "exclusive"
            job.exclusivityCategories = ["printer", "disk"]
            JobOperation(job).start()
        }
        #expect(
            standardErrorText(result).contains(
                "JobOperation.start(): 'exclusive' has exclusivity categories ('disk', 'printer'), which only a JobQueue waits for"
            ))
    }

    @Test("a job with categories cancelled as its operation starts does not trap: it has finished")
    func jobWithCategoriesCancelledAsItsOperationStartsDoesNotTrap() async {
        // The job is cancelled on another thread, and the operation started before the job's
        // `.cancelled` observers have told it: an observer registered first holds the delivery.
        await #expect(processExitsWith: .success) {
            let job = BlockJob {}
            job.exclusivityCategories = ["printer"]
            let entered = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            job.observe { event in
                if event == .cancelled {
                    entered.signal()
                    release.wait()  // on the canceller's Dispatch thread
                }
            }
            let operation = JobOperation(job)
            DispatchQueue(label: "canceller").async { job.cancel() }
            await waitForSignals(entered)
            await runOnDispatchThread { operation.start() }
            release.signal()
            await runOnDispatchThread { operation.waitUntilFinished() }
        }
    }

    @Test("starting a JobOperation twice traps, naming the job")
    func startingTwiceTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = AsyncBlockJob { _ in }
            job.name = "started-twice"
            let operation = JobOperation(job)
            operation.start()
            operation.start()
        }
        #expect(standardErrorText(result).contains("started-twice"))
    }

    @Test("a job on a JobQueue cannot run in a JobOperation: Job.start() traps, naming the job")
    func jobOnAQueueTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let queue = JobQueue(name: "owner", maxConcurrentJobCount: 0)
            let job = BlockJob {}
            job.name = "queued-job"
            queue.addJob(job)
            JobOperation(job).start()
        }
        #expect(standardErrorText(result).contains("queued-job"))
    }
}
