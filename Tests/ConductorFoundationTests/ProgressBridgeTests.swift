import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// Progress(_: JobProgress): a Foundation Progress that follows Conductor's counts
// (Docs/FoundationInterop.md, "Progress").

@Suite struct ProgressBridgeTests {
    @Test func aFoundationProgressFollowsAJobsCountsAndItsParentFollowsIt() {
        let job = BlockJob {}
        job.progress.totalUnitCount = 4
        let bridged = Progress(job.progress)
        #expect(bridged.totalUnitCount == 4 && bridged.completedUnitCount == 0)
        let parent = Progress(totalUnitCount: 2)
        parent.addChild(bridged, withPendingUnitCount: 2)
        for step in 1...3 {
            // Changes made on this thread only: each is copied before the setter returns.
            job.progress.completedUnitCount = Int64(step)
            #expect(bridged.completedUnitCount == Int64(step))
        }
        #expect(parent.fractionCompleted == 0.75)
        job.progress.totalUnitCount = 6
        #expect(bridged.totalUnitCount == 6 && bridged.fractionCompleted == 0.5)
    }

    @Test func aQueuesBridgedProgressReachesOneWhenItsJobsHaveFinished() async {
        // One worker thread runs every job, so the copies happen one after another, each before
        // the step that caused it wakes anyone.
        let (queue, _) = makeJobQueueOnSerialWorker("progress-bridge-queue", limit: 1)
        queue.isSuspended = true
        let bridged = Progress(queue.progress)
        for index in 0..<300 {
            let job = BlockJob {}
            if index % 3 == 0 {
                job.progress.totalUnitCount = 3
                job.addExecutionBlock {
                    job.progress.completedUnitCount = 1
                    job.progress.completedUnitCount = 2
                }
            }
            queue.addJob(job)
        }
        #expect(bridged.totalUnitCount == 500 && bridged.completedUnitCount == 0)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(bridged.completedUnitCount == 500)
        #expect(bridged.fractionCompleted == 1.0)
    }

    @Test func aBridgeCreatedAfterTheWorkFinishedStartsComplete() async {
        let job = AsyncBlockJob { job in DispatchQueue.global().async { job.finish() } }
        let queue = JobQueue(name: "progress-bridge-late")
        queue.addJob(job)
        await queue.waitUntilAllJobsAreFinished()
        let bridged = Progress(job.progress)
        #expect(bridged.fractionCompleted == 1.0)
    }
}
