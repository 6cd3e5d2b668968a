import Conductor
import Dispatch
import Foundation
import Synchronization

extension Scenario {
    /// `async`: asynchronous jobs under a limit of 4, each finished from another thread (a serial
    /// completion queue). Checks that no more than 4 were in flight at once.
    static func async(size: Int) -> Scenario {
        Scenario(
            id: "async",
            summary: "\(Format.count(size)) asynchronous jobs, limit \(Async.limit), each finished from another thread",
            size: size,
            workloads: [
                (
                    .conductor,
                    .run(
                        method: "AsyncBlockJob whose body calls job.finish() on a completion DispatchQueue",
                        Async.conductor)
                ),
                (
                    .foundation,
                    .run(
                        method:
                            "an asynchronous Operation subclass (thread-safe state, KVO for "
                            + "isExecuting/isFinished) finished on a completion DispatchQueue",
                        Async.foundation)
                ),
                (
                    .dispatch,
                    .run(
                        method: "a semaphore of 4: wait, global().async, then the completion queue signals it",
                        Async.dispatch)
                ),
                (
                    .taskGroup,
                    .run(
                        method:
                            "withTaskGroup with 4 children in flight, each awaiting a continuation resumed on "
                            + "a completion DispatchQueue",
                        Async.taskGroup)
                ),
            ])
    }
}

enum Async {
    static let limit = 4

    static func conductor(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let completion = DispatchQueue(label: "completion")
        let queue = JobQueue(name: "async", maxConcurrentJobCount: limit)
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.addJob(
                    AsyncBlockJob { job in
                        ledger.enter()
                        completion.async {
                            ledger.record(index)
                            ledger.leave()
                            job.finish()
                        }
                    })
            }
            queue.waitUntilAllJobsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check(ledger, jobs: jobs))
    }

    static func foundation(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let completion = DispatchQueue(label: "completion")
        let queue = FoundationStop.queue()
        queue.maxConcurrentOperationCount = limit
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                queue.addOperation(
                    FoundationAsyncOperation { operation in
                        ledger.enter()
                        completion.async {
                            ledger.record(index)
                            ledger.leave()
                            operation.finish()
                        }
                    })
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check(ledger, jobs: jobs))
    }

    static func dispatch(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let completion = DispatchQueue(label: "completion")
        let workers = DispatchQueue.global()
        let slots = DispatchSemaphore(value: limit)
        let group = DispatchGroup()
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                slots.wait()
                group.enter()
                workers.async {
                    ledger.enter()
                    completion.async {
                        ledger.record(index)
                        ledger.leave()
                        slots.signal()
                        group.leave()
                    }
                }
            }
            group.wait()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check(ledger, jobs: jobs))
    }

    static func taskGroup(_ jobs: Int) -> Trial {
        let ledger = Ledger(capacity: jobs)
        let completion = DispatchQueue(label: "completion")
        let nanoseconds = runBlocking {
            let start = Clock.now()
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<jobs {
                    if index >= limit {
                        await group.next()
                    }
                    group.addTask {
                        ledger.enter()
                        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                            completion.async {
                                ledger.record(index)
                                ledger.leave()
                                continuation.resume()
                            }
                        }
                    }
                }
            }
            return Double(Clock.now() - start)
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check(ledger, jobs: jobs))
    }

    private static func check(_ ledger: Ledger, jobs: Int) -> String? {
        ledger.checkExactlyOnce(jobs: jobs) ?? ledger.checkLimit(limit)
    }
}
