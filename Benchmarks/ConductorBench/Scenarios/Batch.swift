import Conductor
import Dispatch
import Foundation

extension Scenario {
    /// `batch-chain`: the `chain` graph added as one batch that waits until it has finished,
    /// `Batch.repetitions` times in a row on one queue.
    static func batchChain(length: Int) -> Scenario {
        Scenario(
            id: "batch-chain",
            summary:
                "\(Batch.repetitions) linear chains of \(Format.count(length)) jobs in a row on one queue, each added "
                + "as one batch that waits until it has finished",
            size: length,
            describe: { "\(Batch.repetitions) × \(Format.count($0))-job chains" },
            workloads: Batch.workloads { .chain($0) })
    }

    /// `batch-fan`: the `fan` graph added as one batch that waits until it has finished,
    /// `Batch.repetitions` times in a row on one queue.
    static func batchFan(width: Int) -> Scenario {
        Scenario(
            id: "batch-fan",
            summary:
                "\(Batch.repetitions) fans 1 → \(Format.count(width)) → 1 in a row on one queue, each added as one "
                + "batch that waits until it has finished",
            size: width,
            describe: { "\(Batch.repetitions) × fan width \(Format.count($0)) (\(Format.count($0 + 2)) jobs each)" },
            workloads: Batch.workloads { .fan(width: $0) })
    }
}

/// The batch form of the graph scenarios: `addJobs(_:waitUntilFinished: true)` and
/// `addOperations(_:waitUntilFinished: true)` instead of adding without waiting and then waiting for
/// the whole queue. The graph is run `repetitions` times in a row on one queue, each time with new
/// jobs, so that a run is long enough to time and so that each wait starts on a queue that has just
/// drained, as for a caller that submits batches one after another. The timed region covers creating
/// and wiring every batch's jobs, adding them and the waits; the jobs stay alive until it ends, as in
/// `chain` and `fan`.
///
/// Besides the order within each batch, each run checks that every batch had run completely when
/// its wait returned. Where the platform counts them (``ThreadBlocks``), it also counts how many
/// times the thread blocked in each add-and-wait call: a wait that wakes once per batch blocks about
/// once, one that waits job by job up to once per job.
enum Batch {
    static let repetitions = 10

    static func workloads(_ graph: @escaping (Int) -> Graph) -> [(system: System, workload: Workload)] {
        [
            (
                .conductor,
                .run(
                    method:
                        "per batch: a BlockJob per node, addDependency per edge, addJobs(_:waitUntilFinished: true); "
                        + "one JobQueue for all batches",
                    { conductor(graph($0)) })
            ),
            (
                .foundation,
                .run(
                    method:
                        "per batch: a BlockOperation per node, addDependency per edge, "
                        + "addOperations(_:waitUntilFinished: true); one OperationQueue for all batches",
                    { foundation(graph($0)) })
            ),
            (
                .dispatch,
                .run(
                    method:
                        "per batch: the chain and fan Dispatch floor (an atomic count of unfinished dependencies per "
                        + "node, global().async when it reaches 0) in one DispatchGroup, then group.wait()",
                    { dispatch(graph($0)) })
            ),
            (
                .taskGroup,
                .notApplicable(
                    reason:
                        "a task group has no batch to add and wait for: its parent task awaits each child to add "
                        + "that child's dependents, which is the chain and fan workload already measured")
            ),
        ]
    }

    static func conductor(_ graph: Graph) -> Trial {
        let ledgers = (0..<repetitions).map { _ in Ledger(capacity: graph.count) }
        let queue = JobQueue(name: "batch")
        var batches = ledgers.map { _ in [Job]() }
        for index in batches.indices { batches[index].reserveCapacity(graph.count) }
        var failure: String?
        var blocks = BlockCount()
        let (_, nanoseconds) = Clock.measure {
            for (index, ledger) in ledgers.enumerated() {
                GraphWorkloads.makeJobs(graph, ledger, into: &batches[index], failure: &failure)
                blocks.during { queue.addJobs(batches[index], waitUntilFinished: true) }
                if failure == nil { failure = unfinished(ledger, graph, batch: index) }
            }
        }
        return trial(nanoseconds, graph, ledgers, blocks, failure: failure)
    }

    static func foundation(_ graph: Graph) -> Trial {
        let ledgers = (0..<repetitions).map { _ in Ledger(capacity: graph.count) }
        let queue = FoundationStop.queue()
        var batches = ledgers.map { _ in [Operation]() }
        for index in batches.indices { batches[index].reserveCapacity(graph.count) }
        var failure: String?
        var blocks = BlockCount()
        let (_, nanoseconds) = Clock.measure {
            for (index, ledger) in ledgers.enumerated() {
                GraphWorkloads.makeOperations(graph, ledger, into: &batches[index])
                blocks.during { queue.addOperations(batches[index], waitUntilFinished: true) }
                if failure == nil { failure = unfinished(ledger, graph, batch: index) }
            }
        }
        return trial(nanoseconds, graph, ledgers, blocks, failure: failure)
    }

    static func dispatch(_ graph: Graph) -> Trial {
        let ledgers = (0..<repetitions).map { _ in Ledger(capacity: graph.count) }
        var failure: String?
        var blocks = BlockCount()
        let (_, nanoseconds) = Clock.measure {
            for (index, ledger) in ledgers.enumerated() {
                blocks.during { GraphWorkloads.dispatchAndWait(graph, ledger) }
                if failure == nil { failure = unfinished(ledger, graph, batch: index) }
            }
        }
        return trial(nanoseconds, graph, ledgers, blocks, failure: failure)
    }

    /// Why the batch's wait returned too early, if it did: read right after the wait, so a job of
    /// the batch that has not run yet shows as missing.
    @inline(__always)
    private static func unfinished(_ ledger: Ledger, _ graph: Graph, batch: Int) -> String? {
        let ran = ledger.recorded
        guard ran != graph.count else { return nil }
        return
            "batch \(batch + 1): the wait returned with \(Format.count(ran)) of \(Format.count(graph.count)) jobs run"
    }

    /// The trial over every batch; each batch's jobs must each have run once, after their dependencies.
    private static func trial(
        _ nanoseconds: Double, _ graph: Graph, _ ledgers: [Ledger], _ blocks: BlockCount, failure: String?
    ) -> Trial {
        var failure = failure
        for (index, ledger) in ledgers.enumerated() where failure == nil {
            failure = ledger.checkTopological(graph).map { "batch \(index + 1): \($0)" }
        }
        var trial = Trial(nanoseconds: nanoseconds, jobs: ledgers.count * graph.count, failure: failure)
        trial.waiterBlocksPerBatch = blocks.total.map { Double($0) / Double(ledgers.count) }
        return trial
    }

    /// Times the calling thread blocked in the add-and-wait calls, summed; `nil` where not counted.
    private struct BlockCount {
        private(set) var total: Int? = 0

        @inline(__always)
        mutating func during(_ wait: () -> Void) {
            let before = ThreadBlocks.now()
            wait()
            if let before, let after = ThreadBlocks.now(), let sum = total {
                total = sum + (after - before)
            } else {
                total = nil
            }
        }
    }
}
