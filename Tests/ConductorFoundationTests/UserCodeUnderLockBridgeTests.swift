import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// "No user code under a lock" (Docs/Design.md, "Decide inside, act outside") across the Foundation
// bridge: an `OperationJob` holds its operation, a `JobOperation` its job, and the proxies behind
// `job.addDependency(operation)` and `operation.addDependency(job)` hold both sides until the
// dependency finishes. Each test captures lock canaries (LockCanary.swift) in operations' blocks
// and completion blocks and in jobs' blocks, completion blocks and errors, runs its scenario many
// times, waits until every canary is freed (Foundation's threads cannot be drained, so
// `waitUntilAllFreed()`, with a time limit), and expects none to have been freed by a thread
// holding the engine lock. Debug builds only: the check reads the lock's owner.
//
// The bridge's own locks (`_LockedValue` in `OperationJob`, `_OperationLifecycle`, the proxies and
// `_whenFinished`) hold only state-machine values and move what they drop out before unlocking;
// the canary sees only the engine lock, so those are checked by reading, not here.

#if DEBUG

    /// A block operation whose block and completion block each hold a canary.
    private func canaryOperation(_ label: String, _ ledger: CanaryLedger) -> BlockOperation {
        let block = ledger.canary("\(label) operation block")
        let operation = BlockOperation { block.touch() }
        operation.name = label
        let completion = ledger.canary("\(label) operation completion block")
        operation.completionBlock = { completion.touch() }
        return operation
    }

    /// A block job whose block and completion block each hold a canary.
    private func canaryJob(_ label: String, _ ledger: CanaryLedger) -> BlockJob {
        let block = ledger.canary("\(label) job block")
        let job = BlockJob { block.touch() }
        job.name = label
        let completion = ledger.canary("\(label) job completion block")
        job.completionBlock = { completion.touch() }
        return job
    }

    @Suite("Nothing a user handed Conductor is freed under the engine lock: Foundation bridge", .serialized)
    struct UserCodeUnderLockBridgeTests {

        /// Operations run as jobs on `queue`: plain, cancelled before they ran, or waiting for a
        /// Foundation operation on `operations` (which the job takes as its dependency).
        private func operationJobs(
            _ round: Int, _ ledger: CanaryLedger, on queue: JobQueue, after operations: OperationQueue
        ) {
            var jobs: [OperationJob] = []
            for index in 0..<20 {
                let label = "operation job \(round).\(index)"
                let operation = canaryOperation(label, ledger)
                if index % 4 == 1 {
                    let dependency = canaryOperation("\(label) dependency", ledger)
                    operation.addDependency(dependency)
                    operations.addOperation(dependency)
                }
                let job = OperationJob(operation)
                let completion = ledger.canary("\(label) job completion block")
                job.completionBlock = { completion.touch() }
                if index % 4 == 2 { job.cancel() }
                jobs.append(job)
            }
            queue.addJobs(jobs, waitUntilFinished: false)
            // Some cancelled while they wait in line, running or not.
            for job in jobs.enumerated() where job.offset % 4 == 3 {
                job.element.cancel()
            }
        }

        @Test(
            "OperationJobs, their operations and Foundation dependencies are released outside the lock",
            .hangLimit)
        func operationJobsOnAJobQueue() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("operation jobs", limit: 3)
            let (operations, _) = makeOperationQueue("operation job dependencies", limit: 2)
            for round in 0..<10 {
                operationJobs(round, ledger, on: queue, after: operations)
            }
            await queue.waitUntilAllJobsAreFinished()
            await drainSerialQueue(worker)
            await runOnDispatchThread { operations.waitUntilAllOperationsAreFinished() }
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 10 * 20 * 3)
        }

        /// Jobs run as operations on `operations`: plain, failing, asynchronous, cancelled through
        /// their operation, or waiting for a job on `queue`.
        private func jobOperations(
            _ round: Int, _ ledger: CanaryLedger, on operations: OperationQueue, after queue: JobQueue
        ) {
            for index in 0..<20 {
                let label = "job operation \(round).\(index)"
                let job: Job
                switch index % 4 {
                case 0:
                    job = canaryJob(label, ledger)
                case 1:
                    job = ledger.failingJob(label)
                case 2:
                    let body = ledger.canary("\(label) asynchronous body")
                    job = AsyncBlockJob { job in
                        DispatchQueue.global().async {
                            body.touch()
                            job.finish()
                        }
                    }
                default:
                    job = canaryJob(label, ledger)
                    let dependency = canaryJob("\(label) dependency", ledger)
                    try? job.addDependency(dependency)
                    queue.addJob(dependency)
                }
                let operation = operations.addJob(job)
                if index % 5 == 4 { operation.cancel() }
            }
        }

        @Test("JobOperations and the jobs they run are released outside the lock", .hangLimit)
        func jobOperationsOnAnOperationQueue() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("job operation dependencies", limit: 2)
            let (operations, _) = makeOperationQueue("job operations", limit: 3)
            for round in 0..<10 {
                jobOperations(round, ledger, on: operations, after: queue)
            }
            await runOnDispatchThread { operations.waitUntilAllOperationsAreFinished() }
            await queue.waitUntilAllJobsAreFinished()
            await drainSerialQueue(worker)
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 10 * 20 * 2)
        }

        /// Jobs waiting for operations and operations waiting for jobs, some cancelled meanwhile.
        private func bridgedDependencies(
            _ round: Int, _ ledger: CanaryLedger, queue: JobQueue, operations: OperationQueue
        ) {
            var jobs: [Job] = []
            for index in 0..<20 {
                let label = "bridged \(round).\(index)"
                // A job waiting for an operation.
                let awaited = canaryOperation("\(label) awaited operation", ledger)
                let waiting = index % 3 == 0 ? ledger.failingJob("\(label) waiting job") : canaryJob(label, ledger)
                try? waiting.addDependency(awaited)
                jobs.append(waiting)
                // An operation waiting for a job.
                let awaitedJob = canaryJob("\(label) awaited job", ledger)
                let dependent = canaryOperation("\(label) dependent operation", ledger)
                dependent.addDependency(awaitedJob)
                jobs.append(awaitedJob)
                operations.addOperation(dependent)
                operations.addOperation(awaited)
                if index % 4 == 1 { waiting.cancel() }
                if index % 4 == 2 { dependent.cancel() }
            }
            queue.addJobs(jobs, waitUntilFinished: false)
        }

        @Test(
            "dependencies bridged both ways, and what they hold, are released outside the lock", .hangLimit
        )
        func bridgedDependenciesBothWays() async {
            let ledger = CanaryLedger()
            let (queue, worker) = makeJobQueueOnSerialWorker("bridged jobs", limit: 2)
            let (operations, _) = makeOperationQueue("bridged operations", limit: 2)
            for round in 0..<10 {
                bridgedDependencies(round, ledger, queue: queue, operations: operations)
            }
            await queue.waitUntilAllJobsAreFinished()
            await drainSerialQueue(worker)
            await runOnDispatchThread { operations.waitUntilAllOperationsAreFinished() }
            await ledger.waitUntilAllFreed()
            ledger.expectAllFreedOutsideTheLock(minimum: 10 * 20 * 8)
        }
    }

#endif
