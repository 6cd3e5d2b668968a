import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Callbacks (observers, completion blocks) of a job that a worker finished run before that worker
// claims another job, and with no worker context (Docs/Concepts.md, "Observers, completion blocks
// and waiters"). The time limits only turn a deadlock into a failure instead of a hung run; no
// assertion depends on timing.

@Suite struct CallbackTests {
    @Test(.hangLimit)
    func completionBlockMayWaitForTheJobsDependent() async throws {
        let queue = JobQueue(name: "completion-waits-for-dependent")
        let a = BlockJob {}
        let b = BlockJob {}
        try b.addDependency(a)
        let sawDependentFinished = Flag()
        a.completionBlock = {
            b.waitUntilFinished()
            sawDependentFinished.set(b.isFinished)
        }
        queue.addJobs([a, b], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(sawDependentFinished.value)
    }

    @Test(.hangLimit)
    func finishedObserverMayWaitForTheNextJobOfALimitOneQueue() async {
        let queue = JobQueue(name: "observer-waits-for-next", maxConcurrentJobCount: 1)
        let a = BlockJob {}
        let next = BlockJob {}
        let sawNextFinished = Flag()
        a.observe { event in
            guard event == .finished else { return }
            next.waitUntilFinished()
            sawNextFinished.set(next.isFinished)
        }
        queue.addJobs([a, next], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(sawNextFinished.value)
    }

    @Test func callbacksRunWithNoCurrentQueue() async {
        let queue = JobQueue(name: "callback-context")
        let inWork = Locked<[String]>([])
        let inCallbacks = Locked<[String]>([])
        @Sendable func record(_ log: Locked<[String]>, _ label: String) {
            let current = JobQueue.current
            log.withLock {
                $0.append(current === queue ? "\(label): queue" : "\(label): \(current == nil ? "nil" : "other")")
            }
        }
        let block = BlockJob { record(inWork, "block") }
        block.completionBlock = { record(inCallbacks, "block completion") }
        block.observe { event in if event == .finished { record(inCallbacks, "block .finished") } }
        // Finishes from inside its own work, on the worker thread.
        let async = AsyncBlockJob { job in
            record(inWork, "async")
            job.finish()
        }
        async.completionBlock = { record(inCallbacks, "async completion") }
        async.observe { event in if event == .finished { record(inCallbacks, "async .finished") } }
        queue.addJobs([block, async], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(inWork.withLock { $0.sorted() } == ["async: queue", "block: queue"])
        #expect(
            inCallbacks.withLock { $0.sorted() } == [
                "async .finished: nil", "async completion: nil", "block .finished: nil", "block completion: nil",
            ])
    }

    @Test func anObserverRemovedDuringADeliveryIsReleasedAfterUnlocking() async {
        // The removed observer's captured object touches the engine in its deinit. Debug builds
        // record the lock's holder, so had the deinit run under the engine lock, taking it again on
        // the same thread would trap; the child process must exit normally.
        await #expect(processExitsWith: .success) {
            final class TouchesTheEngine: Sendable {
                let job: Job
                init(_ job: Job) { self.job = job }
                deinit { _ = job.name }
            }
            let queue = JobQueue(name: "observer-removed")
            let probe = BlockJob {}
            let job = BlockJob {}
            let entered = DispatchSemaphore(value: 0)
            let gate = DispatchSemaphore(value: 0)
            job.observe { event in
                guard event == .started else { return }
                entered.signal()
                gate.wait()
            }
            let token = { () -> JobObserverToken in
                let capture = TouchesTheEngine(probe)
                return job.observe { _ in _ = capture }
            }()
            // Added from a Dispatch thread that has nothing else to do: whichever thread delivers
            // `.started` (the worker, or the adding thread if it is still delivering `.ready`)
            // blocks in the observer until the gate opens, so it must not be the test's own.
            DispatchQueue.global().async { queue.addJob(job) }
            await runOnDispatchThread { entered.wait() }
            // `.started` is being delivered with a snapshot holding both observers.
            job.removeObserver(token)
            gate.signal()
            await queue.waitUntilAllJobsAreFinished()
        }
    }

    @Test func aCallbackOnAWorkerThreadMayWaitForThatWorkersQueue() async {
        // `d`'s `.ready` is delivered on the worker of `q1` that finished `a`. The handler waits for
        // `q1`, whose last job `e` runs on another worker once `d` (on `q2`) has finished; the wait
        // returns. Before callbacks ran without worker context, it trapped as a self-wait.
        await #expect(processExitsWith: .success) {
            let q1 = JobQueue(name: "q1")
            let q2 = JobQueue(name: "q2")
            let a = BlockJob {}
            let d = BlockJob {}
            let e = BlockJob {}
            try d.addDependency(a)
            try e.addDependency(d)
            let waited = Flag()
            d.observe { event in
                guard event == .ready else { return }
                q1.waitUntilAllJobsAreFinished()
                waited.set()
            }
            q2.addJob(d)
            q1.addJobs([a, e], waitUntilFinished: false)
            await q2.waitUntilAllJobsAreFinished()
            await q1.waitUntilAllJobsAreFinished()
            await d.waitUntilFinished()
            if !waited.value { fatalError("the handler did not finish waiting") }
        }
    }
}
