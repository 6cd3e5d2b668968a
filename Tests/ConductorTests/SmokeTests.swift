import Conductor
import ConductorTestSupport
import Synchronization
import Testing

@Suite struct SmokeTests {
    @Test func runsManyJobs() async {
        let queue = JobQueue(name: "smoke")
        let counter = Atomic<Int>(0)
        for _ in 0..<10_000 { queue.addJob { counter.add(1, ordering: .relaxed) } }
        await queue.waitUntilAllJobsAreFinished()
        #expect(counter.load(ordering: .relaxed) == 10_000)
        #expect(queue.jobCount == 0)
    }
}
