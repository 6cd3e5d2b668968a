import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Job.executionQueue and JobQueue.main (Docs/Composition.md, "Main-queue work"). The test process
// drains the main queue (Swift Testing runs an `async` main), so jobs on `.main` run without any
// test thread blocking.

private let markerKey = DispatchSpecificKey<String>()

/// Whether the calling code runs on the main queue.
private func onMainQueue() -> Bool {
    DispatchQueue.getSpecific(key: markerKey) == "main"
}

@Suite struct ExecutionQueueTests {
    init() {
        DispatchQueue.main.setSpecific(key: markerKey, value: "main")
    }

    @Test func withALimitOf3AndTheMainQueueAtMost3AreInFlightAndEveryBodyRunsOnMain() async {
        let queue = JobQueue(name: "to-main", maxConcurrentJobCount: 3)
        let inFlight = InFlight()
        let onMain = Log<Bool>()
        let sawQueue = Log<Bool>()
        for _ in 0..<30 {
            let job = AsyncBlockJob { job in
                inFlight.enter()
                onMain.append(onMainQueue())
                sawQueue.append(JobQueue.current === queue)
                // Finishes later, from another thread: the slot is held until then.
                DispatchQueue.global().async {
                    inFlight.leave()
                    job.finish()
                }
            }
            job.executionQueue = .main
            queue.addJob(job)
        }
        await queue.waitUntilAllJobsAreFinished()
        #expect(inFlight.starts == 30)
        #expect(inFlight.maximum <= 3)
        #expect(onMain.values.count == 30 && onMain.values.allSatisfy { $0 })
        #expect(sawQueue.values.allSatisfy { $0 })
    }

    @Test func aSynchronousJobFinishesWhenItsWorkReturnsThereAndItsDependentWaits() async throws {
        let serial = DispatchQueue(label: "execution-queue")
        serial.setSpecific(key: markerKey, value: "serial")
        let queue = JobQueue(name: "to-serial")
        let order = Log<String>()
        let first = BlockJob { order.append(DispatchQueue.getSpecific(key: markerKey) ?? "elsewhere") }
        first.executionQueue = serial
        let second = BlockJob { order.append("dependent") }
        try second.addDependency(first, policy: .requireSuccess)
        queue.addJobs([first, second], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(order.values == ["serial", "dependent"])
    }

    @Test func aThrowingJobFailsOnItsExecutionQueue() async {
        struct Broken: Error {}
        let queue = JobQueue(name: "to-main-failing")
        let job = ProbeJob { _ in throw Broken() }
        job.executionQueue = .main
        queue.addJob(job)
        await job.waitUntilFinished()
        if case .failed(let error)? = job.outcome {
            #expect(error is Broken)
        } else {
            Issue.record("outcome \(String(describing: job.outcome))")
        }
    }

    @Test func startByHandHandsTheWorkToTheExecutionQueueAndReturns() async {
        let ran = Signal()
        let onMain = Log<Bool>()
        let job = BlockJob {
            onMain.append(onMainQueue())
            ran.fire()
        }
        job.executionQueue = .main
        await runOnDispatchThread { job.start() }
        await ran.wait()
        await job.waitUntilFinished()
        #expect(onMain.values == [true])
        #expect(job.isFinished)
    }

    @Test func theMainJobQueueRunsOneJobAtATimeOnTheMainQueue() async {
        let inFlight = InFlight()
        let onMain = Log<Bool>()
        let jobs = (0..<20).map { _ in
            BlockJob {
                inFlight.enter()
                onMain.append(onMainQueue())
                inFlight.leave()
            }
        }
        #expect(JobQueue.main.maxConcurrentJobCount == 1)
        JobQueue.main.addJobs(jobs, waitUntilFinished: false)
        for job in jobs { await job.waitUntilFinished() }
        #expect(inFlight.maximum == 1 && inFlight.starts == 20)
        #expect(onMain.values.allSatisfy { $0 })
    }

    @Test func aTaskJobBodyMayBeMainActorIsolated() async {
        let queue = JobQueue(name: "main-actor")
        let onMain = Log<Bool>()
        let job = TaskJob { @MainActor in
            onMain.append(onMainQueue())
        }
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(onMain.values == [true])
    }
}
