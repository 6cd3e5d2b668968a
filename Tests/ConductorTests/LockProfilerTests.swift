import Conductor
import Testing

// The engine lock profiler behind `conductor-bench --lock-profile` (Docs/Benchmarks.md, "The engine
// lock"). The lock is the process's, so other tests running meanwhile add to what it counts: the
// assertions are lower bounds from this test's own work. Serialized: one profile at a time.
@Suite(.serialized) struct LockProfilerTests {
    @Test func aProfileCountsEveryAcquisitionAndTheTimeHeld() async {
        let queue = JobQueue(name: "lock-profile")
        queue.isSuspended = true
        _LockProfiler.start()
        // Each addJob takes the lock once; running and finishing each job takes it at least once.
        for _ in 0..<100 {
            queue.addJob {}
        }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        let profile = _LockProfiler.stop()
        #expect(profile.acquisitions >= 200)
        #expect(profile.heldNanoseconds > 0)
    }

    @Test func aClockReadCostsSomething() {
        let cost = _LockProfiler.clockReadNanoseconds(samples: 3)
        #expect(cost > 0 && cost.isFinite)
    }
}
