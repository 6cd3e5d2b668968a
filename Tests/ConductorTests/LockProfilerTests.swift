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
        // Adding to a suspended queue pushes each closure without the lock, so the bound counts only
        // what must take it: each job's finish, a critical section of its own (the worker finishes
        // one job per section, claiming the next in the same one).
        for _ in 0..<100 {
            queue.addJob {}
        }
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        let profile = _LockProfiler.stop()
        #expect(profile.acquisitions >= 100)
        #expect(profile.heldNanoseconds > 0)
    }

    @Test func aClockReadCostsSomething() {
        let cost = _LockProfiler.clockReadNanoseconds(samples: 3)
        #expect(cost > 0 && cost.isFinite)
    }
}
