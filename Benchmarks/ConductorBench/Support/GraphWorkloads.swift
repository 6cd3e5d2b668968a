import Conductor
import Dispatch
import Foundation
import Synchronization

/// How each system runs a dependency graph (`chain`, `fan`, `dag`). The timed region covers
/// creating the jobs, wiring their dependencies, enqueueing them and waiting until all finished.
enum GraphWorkloads {
    static let conductorMethod = "a BlockJob per node, addDependency per edge, addJobs, waitUntilAllJobsAreFinished()"
    static let foundationMethod =
        "a BlockOperation per node, addDependency per edge, addOperations, waitUntilAllOperationsAreFinished()"
    static let dispatchMethod =
        "an atomic count of unfinished dependencies per node; a node is dispatched with global().async when "
        + "its count reaches 0"
    static let taskGroupMethod =
        "withTaskGroup: the parent adds a node's child task when the last of its dependencies' children returns"

    static func conductor(_ graph: Graph) -> Trial {
        let ledger = Ledger(capacity: graph.count)
        let queue = JobQueue(name: "bench")
        var jobs: [Job] = []
        jobs.reserveCapacity(graph.count)
        var failure: String?
        let (_, nanoseconds) = Clock.measure {
            makeJobs(graph, ledger, into: &jobs, failure: &failure)
            queue.addJobs(jobs, waitUntilFinished: false)
            queue.waitUntilAllJobsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: graph.count, failure: failure ?? ledger.checkTopological(graph))
    }

    static func foundation(_ graph: Graph) -> Trial {
        let ledger = Ledger(capacity: graph.count)
        let queue = FoundationStop.queue()
        var operations: [Operation] = []
        operations.reserveCapacity(graph.count)
        let (_, nanoseconds) = Clock.measure {
            makeOperations(graph, ledger, into: &operations)
            queue.addOperations(operations, waitUntilFinished: false)
            queue.waitUntilAllOperationsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: graph.count, failure: ledger.checkTopological(graph))
    }

    static func dispatch(_ graph: Graph) -> Trial {
        let ledger = Ledger(capacity: graph.count)
        let (_, nanoseconds) = Clock.measure { dispatchAndWait(graph, ledger) }
        return Trial(nanoseconds: nanoseconds, jobs: graph.count, failure: ledger.checkTopological(graph))
    }

    static func taskGroup(_ graph: Graph) -> Trial {
        let ledger = Ledger(capacity: graph.count)
        let nanoseconds = runBlocking {
            let start = Clock.now()
            await withTaskGroup(of: Int32.self) { group in
                var waiting = (0..<graph.count).map { graph.dependencies(of: $0).count }
                for root in graph.roots {
                    group.addTask {
                        ledger.record(Int(root))
                        return root
                    }
                }
                while let finished = await group.next() {
                    for dependent in graph.dependents(of: Int(finished)) {
                        waiting[Int(dependent)] -= 1
                        if waiting[Int(dependent)] == 0 {
                            group.addTask {
                                ledger.record(Int(dependent))
                                return dependent
                            }
                        }
                    }
                }
            }
            return Double(Clock.now() - start)
        }
        return Trial(nanoseconds: nanoseconds, jobs: graph.count, failure: ledger.checkTopological(graph))
    }

    // MARK: Building blocks, shared with the `batch-*` scenarios

    /// Appends to `jobs` a `BlockJob` per node that records it in `ledger`, in index order, with
    /// `addDependency` per edge. Sets `failure` if `addDependency` throws.
    static func makeJobs(_ graph: Graph, _ ledger: Ledger, into jobs: inout [Job], failure: inout String?) {
        let base = jobs.count
        for node in 0..<graph.count {
            let job = BlockJob { ledger.record(node) }
            for dependency in graph.dependencies(of: node) {
                do {
                    try job.addDependency(jobs[base + Int(dependency)])
                } catch {
                    failure = "addDependency threw: \(error)"
                }
            }
            jobs.append(job)
        }
    }

    /// Appends to `operations` a `BlockOperation` per node that records it in `ledger`, in index
    /// order, with `addDependency` per edge.
    static func makeOperations(_ graph: Graph, _ ledger: Ledger, into operations: inout [Operation]) {
        let base = operations.count
        for node in 0..<graph.count {
            let operation = BlockOperation { ledger.record(node) }
            for dependency in graph.dependencies(of: node) {
                operation.addDependency(operations[base + Int(dependency)])
            }
            operations.append(operation)
        }
    }

    /// Runs `graph` on Dispatch, recording each node in `ledger`, and returns when every node has
    /// run: one `DispatchGroup` for the graph, one `wait()`.
    static func dispatchAndWait(_ graph: Graph, _ ledger: Ledger) {
        let run = DispatchGraphRun(graph: graph, ledger: ledger)
        run.start()
        run.group.wait()
    }
}

/// The raw Dispatch floor for a graph: per-node atomic counters of unfinished dependencies.
// @unchecked Sendable: `graph` and `ledger` are Sendable; `waiting` points to atomics that are only
// used through atomic operations, allocated in `init` and freed in `deinit`, after every block that
// uses them has finished (they retain `self`).
private final class DispatchGraphRun: @unchecked Sendable {
    let graph: Graph
    let ledger: Ledger
    let group = DispatchGroup()
    private let queue = DispatchQueue.global()
    private let waiting: UnsafeMutablePointer<Atomic<Int32>>

    init(graph: Graph, ledger: Ledger) {
        self.graph = graph
        self.ledger = ledger
        waiting = .allocate(capacity: max(graph.count, 1))
        for node in 0..<graph.count {
            (waiting + node).initialize(to: Atomic(Int32(graph.dependencies(of: node).count)))
        }
    }

    deinit {
        waiting.deinitialize(count: graph.count)
        waiting.deallocate()
    }

    func start() {
        for root in graph.roots {
            submit(Int(root))
        }
    }

    private func submit(_ node: Int) {
        queue.async(group: group) { self.run(node) }
    }

    private func run(_ node: Int) {
        ledger.record(node)
        for dependent in graph.dependents(of: node)
        where waiting[Int(dependent)].wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            submit(Int(dependent))
        }
    }
}
