import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// Moving an OperationQueue to a JobQueue: `jobQueue.addOperation(_:)` keeps the operations'
// dependencies and priorities, and the JobQueue's limit, suspension, barriers and waiting apply.
// And the other way round, `operationQueue.addJob(_:)`.

@Suite("JobQueue.addOperation and OperationQueue.addJob")
struct JobQueueOperationsTests {
    @Test("a chain of 200 Foundation operations, added in reverse, runs in dependency order")
    func longChainRunsInOrder() async {
        let queue = JobQueue(name: "chain")
        let log = Log<Int>()
        let operations = (0..<200).map { index in BlockOperation { log.append(index) } }
        for index in 1..<operations.count {
            operations[index].addDependency(operations[index - 1])
        }
        for operation in operations.reversed() {
            queue.addOperation(operation)
        }
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == Array(0..<200))
        #expect(operations.allSatisfy { $0.isFinished })
    }

    @Test("a fan-in: one operation waits for fifty that run concurrently")
    func fanIn() async {
        let queue = JobQueue(name: "fan-in")
        let finished = Counter()
        let sources = (0..<50).map { _ in BlockOperation { finished.increment() } }
        let seenBySink = Locked(-1)
        let sink = BlockOperation { seenBySink.withLock { $0 = finished.value } }
        for source in sources { sink.addDependency(source) }
        queue.addOperation(sink)
        queue.addOperations(sources, waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(seenBySink.withLock { $0 } == 50)
    }

    @Test("operations start by their queue priority")
    func priorities() async {
        let (queue, _) = makeJobQueueOnSerialWorker("priorities", limit: 1)
        queue.isSuspended = true
        let log = Log<String>()
        let levels: [(String, Operation.QueuePriority)] = [
            ("low", .low), ("veryHigh", .veryHigh), ("normal", .normal), ("veryLow", .veryLow), ("high", .high),
        ]
        for (name, priority) in levels {
            let operation = BlockOperation { log.append(name) }
            operation.queuePriority = priority
            queue.addOperation(operation)
        }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["veryHigh", "high", "normal", "low", "veryLow"])
    }

    @Test("a barrier waits for asynchronous operations added before it, and holds back those added after")
    func barrier() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("barrier", limit: 4)
        let work = ManualWork(count: 2)
        let log = Log<String>()
        queue.addOperation(ManualAsyncOperation(index: 0, work: work, log: log))
        queue.addOperation(ManualAsyncOperation(index: 1, work: work, log: log))
        queue.addBarrierBlock { log.append("barrier") }
        queue.addOperation(BlockOperation { log.append("after") })

        await work.waitUntilStarted(0)
        await work.waitUntilStarted(1)
        await drainSerialQueue(worker)
        #expect(log.count == 2)
        work.complete(0)
        await drainSerialQueue(worker)
        #expect(log.count == 3, "the barrier still waits for manual-1")
        work.complete(1)
        await queue.waitUntilAllJobsAreFinished()
        #expect(Array(log.values.suffix(2)) == ["barrier", "after"])
    }

    @Test("addOperations(_:waitUntilFinished: true) returns once the asynchronous operations have finished")
    func waitingForABatch() async {
        let queue = JobQueue(name: "waiting")
        let work = ManualWork(count: 3)
        let operations = (0..<3).map { ManualAsyncOperation(index: $0, work: work) }
        let returned = Flag()
        let waiter = Task {
            await runOnDispatchThread {
                queue.addOperations(operations, waitUntilFinished: true)
                returned.set()
            }
        }
        for index in 0..<3 {
            await work.waitUntilStarted(index)
            #expect(!returned.value)
            work.complete(index)
        }
        await waiter.value
        #expect(returned.value)
        #expect(operations.allSatisfy { $0.isFinished })
    }

    @Test("OperationQueue.addJob runs a job as an operation")
    func operationQueueAddJob() async {
        let (queue, _) = makeOperationQueue("add-job", limit: 1)
        let ran = Counter()
        let operation = queue.addJob(BlockJob { ran.increment() })
        await runOnDispatchThread { queue.waitUntilAllOperationsAreFinished() }
        #expect(ran.value == 1)
        #expect(operation.isFinished)
    }
}
