import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// Dependencies across the two worlds: `job.addDependency(operation)` and
// `operation.addDependency(job)`. "Not yet started" is checked after draining the serial queues the
// dependents would run on, so a bridge that released a dependent early fails every time.

@Suite("Dependency bridges")
struct DependencyBridgeTests {
    // MARK: Chains

    @Test("Foundation → Conductor → Foundation: each waits for the one before")
    func foundationConductorFoundationChain() async throws {
        let (firstQueue, firstWorker) = makeOperationQueue("chain-first", limit: 1)
        let (jobQueue, jobWorker) = makeJobQueueOnSerialWorker("chain-middle", limit: 1)
        let (lastQueue, lastWorker) = makeOperationQueue("chain-last", limit: 1)
        let work = ManualWork(count: 1)
        let log = Log<String>()

        let first = ManualAsyncOperation(index: 0, work: work, log: log)
        let middle = BlockJob { log.append("middle") }
        try middle.addDependency(first)
        let last = BlockOperation { log.append("last") }
        last.addDependency(middle)
        lastQueue.addOperation(last)
        jobQueue.addJob(middle)
        firstQueue.addOperation(first)

        await work.waitUntilStarted(0)
        await drainSerialQueue(firstWorker)
        await drainSerialQueue(jobWorker)
        await drainSerialQueue(lastWorker)
        #expect(log.values == ["manual-0 started"])
        #expect(middle.state == .pending)
        #expect(!last.isReady)

        work.complete(0)
        await runOnDispatchThread { lastQueue.waitUntilAllOperationsAreFinished() }
        #expect(log.values == ["manual-0 started", "manual-0 finished", "middle", "last"])
    }

    @Test("Conductor → Foundation → Conductor through the wrappers, with asynchronous work in the middle")
    func conductorFoundationConductorChain() async throws {
        let (jobQueue, jobWorker) = makeJobQueueOnSerialWorker("wrapped-chain-jobs", limit: 2)
        let (operationQueue, operationWorker) = makeOperationQueue("wrapped-chain-operations", limit: 1)
        let work = ManualWork(count: 2)
        let log = Log<String>()

        // An asynchronous Foundation operation run as a job...
        let first = OperationJob(ManualAsyncOperation(index: 0, work: work, log: log))
        // ...then an asynchronous job run as a Foundation operation, waiting for it...
        let middle = JobOperation(
            AsyncBlockJob { job in
                log.append("middle started")
                work.started(1) {
                    log.append("middle finished")
                    job.finish()
                }
            })
        middle.addDependency(first)
        // ...then a job waiting for that operation.
        let last = BlockJob { log.append("last") }
        try last.addDependency(middle)
        jobQueue.addJobs([last, first], waitUntilFinished: false)
        operationQueue.addOperation(middle)

        await work.waitUntilStarted(0)
        await drainSerialQueue(jobWorker)
        await drainSerialQueue(operationWorker)
        #expect(log.values == ["manual-0 started"])

        work.complete(0)
        await work.waitUntilStarted(1)
        await drainSerialQueue(jobWorker)
        await drainSerialQueue(operationWorker)
        #expect(log.values == ["manual-0 started", "manual-0 finished", "middle started"])
        #expect(last.state == .pending)

        work.complete(1)
        await last.waitUntilFinished()
        #expect(log.values == ["manual-0 started", "manual-0 finished", "middle started", "middle finished", "last"])
    }

    // MARK: job.addDependency(operation)

    @Test("a dependency on a finished operation is satisfied at once")
    func dependencyOnFinishedOperation() throws {
        let operation = BlockOperation {}
        operation.start()
        let job = BlockJob {}
        try job.addDependency(operation)
        #expect(job.state == .ready)
    }

    @Test("the proxy job executes while it waits, and adding the same operation twice adds one proxy")
    func proxyJobIsExecutingAndDeduplicated() throws {
        let operation = BlockOperation {}
        operation.name = "awaited"
        let job = BlockJob {}
        try job.addDependency(operation)
        try job.addDependency(operation)
        #expect(job.dependencies.count == 1)
        let proxy = try #require(job.dependencies.first)
        #expect(proxy.isExecuting)
        #expect(proxy.displayName == "operation 'awaited'")
        #expect(job.state == .pending)

        operation.start()
        #expect(proxy.isFinished)
        #expect(job.state == .ready)
    }

    @Test("a started job refuses the dependency with .alreadyStarted and is left unchanged")
    func alreadyStartedJobThrows() throws {
        let job = AsyncBlockJob { _ in }
        job.start()
        let operation = BlockOperation {}
        let error = #expect(throws: JobError.self) { try job.addDependency(operation) }
        #expect(error?.code == .alreadyStarted)
        #expect(job.dependencies.isEmpty)
        #expect(error?.jobs.last?.isFinished == true, "the refused proxy is finished, not left executing")
        job.finish()
    }

    @Test("a JobOperation is not proxied: a cycle through it is refused")
    func cycleThroughJobOperationIsRefused() throws {
        let job = BlockJob {}
        job.name = "cycle-job"
        let operation = JobOperation(job)
        let error = #expect(throws: JobError.self) { try job.addDependency(operation) }
        #expect(error?.code == .dependencyCycle)
        #expect(job.dependencies.isEmpty)
    }

    @Test(
        "an OperationJob refuses to wait for the operation it runs: a cycle naming it, graph unchanged",
        .hangLimit)
    func operationJobWaitingForItsOwnOperationIsRefused() async {
        let operation = BlockOperation {}
        let job = OperationJob(operation)
        job.name = "runs-its-dependency"
        let error = #expect(throws: JobError.self) { try job.addDependency(operation) }
        #expect(error?.code == .dependencyCycle)
        #expect(error?.description.contains("'runs-its-dependency' cannot depend on itself") == true)
        #expect(job.dependencies.isEmpty)
        // Before, the job waited forever for a proxy of the operation only it would start.
        let queue = JobQueue(name: "runs-its-dependency-queue")
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(operation.isFinished)
    }

    // MARK: operation.addDependency(job)

    @Test("the proxy operation executes while it waits, reports finished with the job, and is deduplicated")
    func proxyOperation() throws {
        let job = BlockJob {}
        job.name = "awaited-job"
        let operation = BlockOperation {}
        operation.addDependency(job)
        operation.addDependency(job)
        #expect(operation.dependencies.count == 1)
        let proxy = try #require(operation.dependencies.first)
        #expect(proxy.isAsynchronous && proxy.isExecuting && !proxy.isFinished)
        #expect(proxy.name == "job 'awaited-job'")
        #expect(!operation.isReady)

        job.start()
        #expect(proxy.isFinished && !proxy.isExecuting)
        #expect(operation.isReady)
    }

    @Test("a dependency on a finished job is satisfied at once")
    func dependencyOnFinishedJob() {
        let job = BlockJob {}
        job.start()
        let operation = BlockOperation {}
        operation.addDependency(job)
        #expect(operation.isReady)
    }

    @Test("an OperationJob is not proxied: the operation depends on the wrapped operation")
    func operationJobIsNotProxied() {
        let wrapped = BlockOperation {}
        let job = OperationJob(wrapped)
        let operation = BlockOperation {}
        operation.addDependency(job)
        #expect(operation.dependencies.count == 1)
        #expect(operation.dependencies.first === wrapped)
    }

    @Test(
        "an operation waiting for the OperationJob that runs it traps, naming the job (Foundation hangs)",
        .hangLimit)
    func operationWaitingForItsOwnOperationJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let operation = BlockOperation {}
            let job = OperationJob(operation)
            job.name = "runs-this-operation"
            operation.addDependency(job)
        }
        #expect(
            standardErrorText(result).contains(
                "Operation.addDependency(_:): 'runs-this-operation' is the OperationJob that runs this operation"))
    }

    @Test("a JobOperation waiting for its own job traps, naming the job")
    func jobOperationWaitingForItsOwnJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = BlockJob {}
            job.name = "wrapped-and-awaited"
            JobOperation(job).addDependency(job)
        }
        #expect(
            standardErrorText(result).contains(
                "Operation.addDependency(_:): 'wrapped-and-awaited' is the job this JobOperation runs"))
    }

    // MARK: Lifetime

    @Test("a dependent operation dropped before the job finishes is kept alive, then freed")
    func droppedDependentIsKeptUntilTheJobFinishes() {
        // swift-corelibs-foundation refers to dependents without retaining them; a dependent freed
        // before its dependency finishes would be used after it was freed. The proxy holds it.
        let job = BlockJob {}
        let dependent = { () -> WeakReference<BlockOperation> in
            let operation = BlockOperation {}
            operation.addDependency(job)
            return WeakReference(operation)
        }()
        #expect(dependent.object != nil)

        job.start()  // finishes on this thread; the proxy reports finished here, then lets go
        #expect(dependent.object == nil)
    }

    @Test("after a cross-world chain has run, its operations, jobs and proxies are freed")
    func chainIsFreed() async throws {
        let (jobQueue, jobWorker) = makeJobQueueOnSerialWorker("freed-chain-jobs", limit: 1)
        let (operationQueue, operationWorker) = makeOperationQueue("freed-chain-operations", limit: 1)
        let work = ManualWork(count: 1)

        struct Weak: Sendable {
            let first: WeakReference<ManualAsyncOperation>
            let middle: WeakReference<BlockJob>
            let middleProxy: WeakReference<Job>
            let last: WeakReference<BlockOperation>
            let lastProxy: WeakReference<Operation>
        }
        let weak = try { () throws -> Weak in
            let first = ManualAsyncOperation(index: 0, work: work)
            let middle = BlockJob {}
            try middle.addDependency(first)
            let last = BlockOperation {}
            last.addDependency(middle)
            let weak = Weak(
                first: WeakReference(first), middle: WeakReference(middle),
                middleProxy: WeakReference(middle.dependencies[0]),
                last: WeakReference(last), lastProxy: WeakReference(last.dependencies[0]))
            operationQueue.addOperation(last)
            operationQueue.addOperation(first)
            jobQueue.addJob(middle)
            return weak
        }()

        await work.waitUntilStarted(0)
        work.complete(0)
        await jobQueue.waitUntilAllJobsAreFinished()
        await runOnDispatchThread { operationQueue.waitUntilAllOperationsAreFinished() }
        // No completion blocks are set, so Foundation dispatches nothing to its global queues.
        // The last holders are blocks on the two serial worker queues: the job's worker, and the
        // block in which `last` ran and Foundation released it. Once both have returned, nothing
        // but a leak could keep any of these alive.
        await drainSerialQueue(jobWorker)
        await drainSerialQueue(operationWorker)
        #expect(weak.first.object == nil)
        #expect(weak.middle.object == nil)
        #expect(weak.middleProxy.object == nil)
        #expect(weak.last.object == nil)
        #expect(weak.lastProxy.object == nil)
    }
}
