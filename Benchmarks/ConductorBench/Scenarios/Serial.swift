import Conductor
import Dispatch
import Foundation

extension Scenario {
    /// `serial`: no-op jobs on a limit-1 queue; they must run first in, first out.
    static func serial(size: Int) -> Scenario {
        Scenario(
            id: "serial",
            summary: "\(Format.count(size)) no-op jobs on a limit-1 queue, checked first in, first out",
            size: size,
            workloads: [
                (.conductor, .run(method: "JobQueue(maxConcurrentJobCount: 1).addJob { } per job", Serial.conductor)),
                (
                    .foundation,
                    .run(
                        method: "OperationQueue with maxConcurrentOperationCount = 1, addOperation { } per job",
                        Serial.foundation)
                ),
                (.dispatch, .run(method: "a serial DispatchQueue, async(group:) per job", Serial.dispatch)),
                (
                    .taskGroup,
                    .run(method: "withTaskGroup with one child in flight: addTask, then await next()", Serial.taskGroup)
                ),
            ])
    }
}

enum Serial {
    static func conductor(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = JobQueue(name: "serial", maxConcurrentJobCount: 1)
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.addJob { ledger.record(index) }
            }
            queue.waitUntilAllJobsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkFIFO(jobs: jobs))
    }

    static func foundation(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = FoundationStop.queue()
        queue.maxConcurrentOperationCount = 1
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.addOperation { ledger.record(index) }
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkFIFO(jobs: jobs))
    }

    static func dispatch(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = DispatchQueue(label: "serial")
        let group = DispatchGroup()
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.async(group: group) { ledger.record(index) }
            }
            group.wait()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkFIFO(jobs: jobs))
    }

    static func taskGroup(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let nanoseconds = runBlocking {
            let start = Clock.now()
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<jobs {
                    group.addTask { ledger.record(index) }
                    await group.next()
                }
            }
            return Double(Clock.now() - start)
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkFIFO(jobs: jobs))
    }
}
