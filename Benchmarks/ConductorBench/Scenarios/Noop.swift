import Conductor
import Dispatch
import Foundation

extension Scenario {
    /// `noop`: independent no-op jobs on a default-limit queue, from the first enqueue until drained.
    static func noop(size: Int) -> Scenario {
        Scenario(
            id: "noop",
            summary: "\(Format.count(size)) independent no-op jobs on a default-limit queue, enqueue to drained",
            size: size,
            workloads: [
                (
                    .conductor,
                    .run(method: "JobQueue().addJob { } per job; waitUntilAllJobsAreFinished()", Noop.conductor)
                ),
                (
                    .foundation,
                    .run(
                        method: "OperationQueue().addOperation { } per job; waitUntilAllOperationsAreFinished()",
                        Noop.foundation)
                ),
                (.dispatch, .run(method: "DispatchQueue.global().async(group:) per job; group.wait()", Noop.dispatch)),
                (.taskGroup, .run(method: "withDiscardingTaskGroup, one child task per job", Noop.taskGroup)),
            ])
    }
}

enum Noop {
    static func conductor(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = JobQueue(name: "noop")
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.addJob { ledger.record(index) }
            }
            queue.waitUntilAllJobsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkExactlyOnce(jobs: jobs))
    }

    static func foundation(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = FoundationStop.queue()
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.addOperation { ledger.record(index) }
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkExactlyOnce(jobs: jobs))
    }

    static func dispatch(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = DispatchQueue.global()
        let group = DispatchGroup()
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.async(group: group) { ledger.record(index) }
            }
            group.wait()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkExactlyOnce(jobs: jobs))
    }

    static func taskGroup(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let nanoseconds = runBlocking {
            let start = Clock.now()
            await withDiscardingTaskGroup { group in
                for index in 0..<jobs {
                    group.addTask { ledger.record(index) }
                }
            }
            return Double(Clock.now() - start)
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkExactlyOnce(jobs: jobs))
    }
}
