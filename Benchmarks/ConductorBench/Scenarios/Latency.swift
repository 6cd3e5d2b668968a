import Conductor
import Dispatch
import Foundation
import Synchronization

extension Scenario {
    /// `latency`: the time from adding one job to an idle queue until its body starts, sampled
    /// one job at a time (each sample waits until the queue has drained).
    static func latency(samples: Int) -> Scenario {
        Scenario(
            id: "latency",
            summary:
                "time from adding a job to an idle queue until its body runs, \(Format.count(samples)) "
                + "sequential samples "
                + "(p50 in the median column, fastest sample in min, p99 in max)",
            metric: .latency,
            size: samples,
            describe: { "\(Format.count($0)) samples" },
            workloads: [
                (
                    .conductor,
                    .run(
                        method: "addJob { } on an idle JobQueue, then waitUntilAllJobsAreFinished()", Latency.conductor)
                ),
                (
                    .foundation,
                    .run(
                        method: "addOperation { } on an idle OperationQueue, then waitUntilAllOperationsAreFinished()",
                        Latency.foundation)
                ),
                (.dispatch, .run(method: "DispatchQueue.global().async(group:), then group.wait()", Latency.dispatch)),
                (
                    .taskGroup,
                    .run(
                        method:
                            "addTask on a fresh task group, then waitForAll() (the parent suspends, so its "
                            + "thread is free to run the child at once)",
                        Latency.taskGroup)
                ),
            ])
    }
}

enum Latency {
    /// When the current sample's body started.
    private final class Stamp: Sendable {
        let started = Atomic<UInt64>(0)

        func mark() { started.store(Clock.now(), ordering: .relaxed) }
        func since(_ start: UInt64) -> Double { Double(started.load(ordering: .relaxed) &- start) }
    }

    static func conductor(_ samples: Int) -> Trial {
        let queue = JobQueue(name: "latency")
        return sample(samples) { index, ledger, stamp in
            queue.addJob {
                stamp.mark()
                ledger.record(index)
            }
            queue.waitUntilAllJobsAreFinished()
        }
    }

    static func foundation(_ samples: Int) -> Trial {
        let queue = FoundationStop.queue()
        return sample(samples) { index, ledger, stamp in
            queue.addOperation {
                stamp.mark()
                ledger.record(index)
            }
            queue.waitUntilAllOperationsAreFinished()
        }
    }

    static func dispatch(_ samples: Int) -> Trial {
        let queue = DispatchQueue.global()
        let group = DispatchGroup()
        return sample(samples) { index, ledger, stamp in
            queue.async(group: group) {
                stamp.mark()
                ledger.record(index)
            }
            group.wait()
        }
    }

    static func taskGroup(_ count: Int) -> Trial {
        let ledger = Ledger(capacity: count)
        let stamp = Stamp()
        let (samples, nanoseconds) = runBlocking {
            let start = Clock.now()
            var samples: [Double] = []
            samples.reserveCapacity(count)
            for index in 0..<count {
                let sample = await withTaskGroup(of: Void.self) { group in
                    let added = Clock.now()
                    group.addTask {
                        stamp.mark()
                        ledger.record(index)
                    }
                    await group.waitForAll()
                    return stamp.since(added)
                }
                samples.append(sample)
            }
            return (samples, Double(Clock.now() - start))
        }
        return trial(samples, nanoseconds: nanoseconds, ledger: ledger)
    }

    /// Takes `count` samples on the calling thread; `addAndWait` adds job `index` and returns once it ran.
    private static func sample(_ count: Int, _ addAndWait: (Int, Ledger, Stamp) -> Void) -> Trial {
        let ledger = Ledger(capacity: count)
        let stamp = Stamp()
        var samples: [Double] = []
        samples.reserveCapacity(count)
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<count {
                let added = Clock.now()
                addAndWait(index, ledger, stamp)
                samples.append(stamp.since(added))
            }
        }
        return trial(samples, nanoseconds: nanoseconds, ledger: ledger)
    }

    private static func trial(_ samples: [Double], nanoseconds: Double, ledger: Ledger) -> Trial {
        let sorted = samples.sorted()
        return Trial(
            nanoseconds: nanoseconds, jobs: samples.count, perJob: Stats.percentile(sorted, 0.5), samples: sorted,
            failure: ledger.checkFIFO(jobs: samples.count))
    }
}
