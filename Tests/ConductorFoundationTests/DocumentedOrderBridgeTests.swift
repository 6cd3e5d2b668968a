import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// The ordering guarantees of Docs/FoundationInterop.md that no other test checked exactly as
// written. Each test quotes the line it checks.
//
// The key-value notifications themselves (FoundationInterop.md:102-105, 111) cannot be checked on
// Linux: swift-corelibs-foundation declares `willChangeValue`/`didChangeValue(forKey:)` in an
// extension of `Operation`, so no subclass can observe them, and it has no KVO. Here the
// properties they announce are read at the moments the documentation names.

@Suite struct DocumentedOrderBridgeTests {
    /// FoundationInterop.md:109-110: `start()` "reports executing, then runs the job", and the
    /// operation finishes "When the job delivers `.finished`": the job's work finds the operation
    /// executing, and the job's completion block (step 3, after every `.finished` observer,
    /// Concepts.md:299-300) finds it finished.
    @Test func aJobOperationIsExecutingWhileItsJobRunsAndFinishedByTheJobsCompletionBlock() {
        let seen = Log<String>()
        let operationBox = Locked<JobOperation?>(nil)
        let job = BlockJob {
            let operation = operationBox.withLock { $0 }
            seen.append("work: executing \(operation?.isExecuting == true) finished \(operation?.isFinished == true)")
        }
        let operation = JobOperation(job)
        operationBox.withLock { $0 = operation }
        job.completionBlock = {
            let operation = operationBox.withLock { $0 }
            seen.append(
                "completion: executing \(operation?.isExecuting == true) finished \(operation?.isFinished == true)")
        }
        operation.start()
        #expect(
            seen.values == [
                "work: executing true finished false", "completion: executing false finished true",
            ])
        operationBox.withLock { $0 = nil }
    }

    /// FoundationInterop.md:140-142: "Conductor delivers `.finished` after it has released the job's
    /// dependents ..., so by the time Foundation sees the last proxy finish, the wrapped job is
    /// ready", and 167-169 (the proxy behind `operation.addDependency(job)` "reports finished ...
    /// when the job delivers `.finished`"). A Foundation dependent of a job therefore starts only
    /// once that job's Conductor dependent has been released.
    @Test(.hangLimit)
    func aFoundationDependentOfAJobRunsAfterTheJobsConductorDependentsWereReleased() async throws {
        let jobQueue = JobQueue(name: "bridge-step-one")
        let parked = JobQueue(name: "bridge-step-one-parked")
        parked.isSuspended = true
        let job = BlockJob {}
        let conductorDependent = BlockJob {}
        try conductorDependent.addDependency(job)
        parked.addJob(conductorDependent)
        let seen = Log<String>()
        let foundationDependent = BlockOperation {
            seen.append("job \(job.state), its dependent \(conductorDependent.state)")
        }
        foundationDependent.addDependency(job)
        let (operationQueue, _) = makeOperationQueue("bridge-step-one", limit: 1)
        operationQueue.addOperation(foundationDependent)
        jobQueue.addJob(job)
        await runOnDispatchThread { operationQueue.waitUntilAllOperationsAreFinished() }
        #expect(seen.values == ["job finished, its dependent ready"])
        parked.isSuspended = false
        await parked.waitUntilAllJobsAreFinished()
    }
}
