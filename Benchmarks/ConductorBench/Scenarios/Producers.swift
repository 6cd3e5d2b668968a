import Conductor
import Dispatch
import Foundation

extension Scenario {
    /// `producers`: two threads add jobs to one queue at the same time.
    static func producers(perThread: Int) -> Scenario {
        Scenario(
            id: "producers",
            summary:
                "\(Producers.threads) threads adding \(Format.count(perThread)) no-op jobs each to one "
                + "default-limit queue",
            size: perThread,
            describe: { "\(Producers.threads) × \(Format.count($0)) jobs" },
            workloads: [
                (.conductor, .run(method: "both threads call addJob { } on one JobQueue", Producers.conductor)),
                (
                    .foundation,
                    .run(method: "both threads call addOperation { } on one OperationQueue", Producers.foundation)
                ),
                (.dispatch, .run(method: "both threads call DispatchQueue.global().async(group:)", Producers.dispatch)),
                (
                    .taskGroup,
                    .notApplicable(
                        reason:
                            "only the task that owns a task group may add to it; there is no shared queue two "
                            + "threads can add to"
                    )
                ),
            ])
    }
}

enum Producers {
    static let threads = 2

    static func conductor(_ perThread: Int) -> Trial {
        let jobs = threads * perThread
        let ledger = Ledger(capacity: jobs)
        let queue = JobQueue(name: "producers")
        let (_, nanoseconds) = Clock.measure {
            produce(perThread) { index in queue.addJob { ledger.record(index) } }
            queue.waitUntilAllJobsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkExactlyOnce(jobs: jobs))
    }

    static func foundation(_ perThread: Int) -> Trial {
        let jobs = threads * perThread
        let ledger = Ledger(capacity: jobs)
        let queue = FoundationStop.queue()
        let (_, nanoseconds) = Clock.measure {
            produce(perThread) { index in queue.addOperation { ledger.record(index) } }
            queue.waitUntilAllOperationsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkExactlyOnce(jobs: jobs))
    }

    static func dispatch(_ perThread: Int) -> Trial {
        let jobs = threads * perThread
        let ledger = Ledger(capacity: jobs)
        let queue = DispatchQueue.global()
        let group = DispatchGroup()
        let (_, nanoseconds) = Clock.measure {
            produce(perThread) { index in queue.async(group: group) { ledger.record(index) } }
            group.wait()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: ledger.checkExactlyOnce(jobs: jobs))
    }

    /// Starts `threads` threads; thread `t` calls `add` with the indices `t * perThread ..< (t + 1) * perThread`.
    /// Returns when every thread has added all of its jobs.
    private static func produce(_ perThread: Int, _ add: @escaping @Sendable (Int) -> Void) {
        let done = DispatchGroup()
        for thread in 0..<threads {
            done.enter()
            Thread {
                for index in (thread * perThread)..<((thread + 1) * perThread) {
                    add(index)
                }
                done.leave()
            }.start()
        }
        done.wait()
    }
}
