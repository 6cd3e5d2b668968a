import Conductor
import Dispatch
import Foundation

extension Scenario {
    /// `cancel`: jobs added to a suspended queue, all cancelled, the queue resumed and drained.
    /// No job body may run.
    static func cancel(size: Int) -> Scenario {
        Scenario(
            id: "cancel",
            summary: "suspended queue, \(Format.count(size)) jobs added, cancel all, resume, drained (no body may run)",
            size: size,
            workloads: [
                (
                    .conductor,
                    .run(
                        method: "isSuspended = true, addJob per job, cancelAllJobs(), isSuspended = false, wait",
                        Cancel.conductor)
                ),
                (
                    .foundation,
                    .run(
                        method:
                            "isSuspended = true, addOperation per job, cancelAllOperations(), isSuspended = "
                            + "false, wait",
                        Cancel.foundation)
                ),
                (
                    .dispatch,
                    .run(
                        method:
                            "a suspended concurrent DispatchQueue, a DispatchWorkItem per job, cancel() each, "
                            + "resume(), group.wait()",
                        Cancel.dispatch)
                ),
                (
                    .taskGroup,
                    .notApplicable(
                        reason:
                            "a task cannot be created suspended, and a cancelled child task still runs its "
                            + "body (cancellation is cooperative)"
                    )
                ),
            ])
    }
}

enum Cancel {
    static func conductor(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = JobQueue(name: "cancel")
        let (_, nanoseconds) = Clock.measure {
            queue.isSuspended = true
            for index in 0..<jobs {
                queue.addJob { ledger.record(index) }
            }
            queue.cancelAllJobs()
            queue.isSuspended = false
            queue.waitUntilAllJobsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check(ledger, jobs: jobs, left: queue.jobCount))
    }

    static func foundation(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = FoundationStop.queue()
        let (_, nanoseconds) = Clock.measure {
            queue.isSuspended = true
            for index in 0..<jobs {
                queue.addOperation { ledger.record(index) }
            }
            queue.cancelAllOperations()
            queue.isSuspended = false
            queue.waitUntilAllOperationsAreFinished()
        }
        return Trial(
            nanoseconds: nanoseconds, jobs: jobs, failure: check(ledger, jobs: jobs, left: queue.operationCount))
    }

    static func dispatch(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let queue = DispatchQueue(label: "cancel", attributes: .concurrent)
        let group = DispatchGroup()
        var items: [DispatchWorkItem] = []
        items.reserveCapacity(jobs)
        let (_, nanoseconds) = Clock.measure {
            queue.suspend()
            for index in 0..<jobs {
                let item = DispatchWorkItem { ledger.record(index) }
                items.append(item)
                queue.async(group: group, execute: item)
            }
            for item in items {
                item.cancel()
            }
            queue.resume()
            group.wait()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check(ledger, jobs: jobs, left: 0))
    }

    private static func check(_ ledger: Ledger, jobs: Int, left: Int) -> String? {
        if ledger.recorded > 0 { return "\(Format.count(ledger.recorded)) of \(Format.count(jobs)) cancelled jobs ran" }
        if left > 0 { return "\(Format.count(left)) jobs left on the queue after it drained" }
        return nil
    }
}
