import Conductor
import ConductorFoundation
import ConductorTestSupport
import Dispatch
import Foundation
import Testing

// A Conductor job that waits for a Foundation operation, wrapped and run on an OperationQueue: the
// pattern Docs/FoundationInterop.md recommends for moving work between the two worlds. The wrapper
// must not start before its job is ready, however the two worlds' "finished" interleave.
//
// Each graph is an upstream operation (a `BlockOperation`, on an OperationQueue or on a JobQueue)
// and a job that depends on it (on the operation, or on its OperationJob), wrapped in a
// JobOperation on another OperationQueue. Thousands of graphs run one after another, in both orders
// of enqueueing, on the queues' own threads: a wrapper started while its job still waited would trap
// in `JobOperation.start()`.
//
// That trap depends on thread timing, so a witness checks the invariant in each graph without it.
// On Linux, when an operation finishes, swift-corelibs-foundation lowers the count of each of its
// dependents in turn and reads the `isReady` of each that reached zero, which is when it starts a
// dependent that is on a queue. The witness is one more dependent of the upstream operation, whose
// `isReady` checks that the wrapper is not ready while its job still waits. Foundation visits the
// dependents in the order of a hash set of their addresses, which differs from graph to graph, so
// the witness often comes after the wrapper and before the bridge's own observer (the finish
// probe of `_whenFinished`), whatever the threads' timing.

@Suite("A wrapped job's dependencies")
struct WrappedJobDependencyTests {
    /// What the wrapped job depends on.
    enum Dependency: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// `try job.addDependency(operation)`, the operation on an OperationQueue.
        case operationOnOperationQueue
        /// `try job.addDependency(operation)`, the operation on a JobQueue, run by an OperationJob.
        case operationOnJobQueue
        /// `try job.addDependency(operationJob)`: the OperationJob that runs the operation.
        case operationJob

        var testDescription: String {
            switch self {
            case .operationOnOperationQueue: "an operation on an OperationQueue"
            case .operationOnJobQueue: "an operation on a JobQueue"
            case .operationJob: "an OperationJob"
            }
        }
    }

    /// Which is enqueued first.
    enum Order: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// The upstream operation, then the job (wrapped as it is enqueued, while the operation runs).
        case dependencyFirst
        /// The job (wrapped as it is enqueued), then the upstream operation.
        case wrapperFirst

        var testDescription: String {
            switch self {
            case .dependencyFirst: "dependency enqueued first"
            case .wrapperFirst: "wrapper enqueued first"
            }
        }
    }

    /// Graphs per test case: 6,000 in all, about a second in a debug build, several under
    /// ThreadSanitizer. Before the fix, each case trapped within its first 1 to 73 graphs, and with
    /// the trap disabled the witness caught about one graph in six with an operation dependency,
    /// one in two with an OperationJob, under ThreadSanitizer too.
    ///
    /// Each graph waits for its wrapper, so swift-corelibs-foundation's stale-readiness race (see
    /// "An operation whose last dependency finishes while it is being added" in
    /// Docs/FoundationInterop.md) hangs the test. Before `addJob(_:)` announced readiness again,
    /// about one run in fifty hung, always with the dependency enqueued first.
    static let iterations = 1_000

    @Test(
        "a wrapped job that waits for a Foundation operation starts only once it is ready",
        arguments: Dependency.allCases, Order.allCases)
    func wrappedJobStartsOnlyWhenReady(dependency: Dependency, order: Order) async {
        let (operationQueue, operationWorker) = makeOperationQueue("upstream-operations", limit: 1)
        let (jobQueue, jobWorker) = makeJobQueueOnSerialWorker("upstream-jobs", limit: 1)
        let (wrapperQueue, wrapperWorker) = makeOperationQueue("wrappers", limit: 1)
        let problems = Log<String>()
        let ran = Counter()

        let witnesses = await runOnDispatchThread { () -> [ReadinessWitness] in
            var witnesses: [ReadinessWitness] = []
            witnesses.reserveCapacity(Self.iterations)
            for iteration in 0..<Self.iterations {
                let upstream = BlockOperation {}
                upstream.name = "upstream-\(iteration)"
                let operationJob = dependency == .operationJob ? OperationJob(upstream) : nil
                let job = BlockJob {
                    ran.increment()
                    if !upstream.isFinished {
                        problems.append("graph \(iteration): the job ran before its operation finished")
                    }
                    if let operationJob, !operationJob.isFinished {
                        problems.append("graph \(iteration): the job ran before its OperationJob finished")
                    }
                }
                job.name = "wrapped-\(iteration)"
                do {
                    if let operationJob {
                        try job.addDependency(operationJob)
                    } else {
                        try job.addDependency(upstream)
                    }
                } catch {
                    problems.append("graph \(iteration): addDependency threw \(error)")
                    break
                }

                let enqueueUpstream = {
                    if let operationJob {
                        jobQueue.addJob(operationJob)
                    } else if dependency == .operationOnJobQueue {
                        jobQueue.addOperation(upstream)
                    } else {
                        operationQueue.addOperation(upstream)
                    }
                }
                let wrapper: JobOperation
                switch order {
                case .dependencyFirst:
                    enqueueUpstream()
                    wrapper = wrapperQueue.addJob(job)
                    witnesses.append(ReadinessWitness(watching: wrapper, of: upstream, problems: problems))
                case .wrapperFirst:
                    wrapper = wrapperQueue.addJob(job)
                    witnesses.append(ReadinessWitness(watching: wrapper, of: upstream, problems: problems))
                    enqueueUpstream()
                }
                wrapper.waitUntilFinished()
            }
            // Foundation refers to a finished operation's dependents without retaining them, and
            // may still be reading a witness's `isReady` on the upstream's thread after the wrapper
            // has finished: keep the witnesses until those threads are done.
            operationQueue.waitUntilAllOperationsAreFinished()
            jobQueue.waitUntilAllJobsAreFinished()
            operationWorker.sync {}
            jobWorker.sync {}
            wrapperWorker.sync {}
            return witnesses
        }

        #expect(ran.value == Self.iterations)
        #expect(problems.values.isEmpty, "\(problems.count) problems; the first: \(problems.values.prefix(3))")
        withExtendedLifetime(witnesses) {}
    }
}

/// A private operation that depends on the upstream operation and is never started: Foundation
/// reads its `isReady` when it is added and, on Linux, when the upstream operation finishes, among
/// the wrapper and the bridges' observers. Each read checks that the wrapper, if Foundation could
/// start it (it is ready), has a job that no longer waits for dependencies.
// @unchecked Sendable: `wrapper` and `problems` are immutable references to thread-safe objects;
// the rest is `Operation`'s, which locks it.
final class ReadinessWitness: Operation, @unchecked Sendable {
    private let wrapper: JobOperation
    private let problems: Log<String>

    init(watching wrapper: JobOperation, of upstream: Operation, problems: Log<String>) {
        self.wrapper = wrapper
        self.problems = problems
        super.init()
        addDependency(upstream)
    }

    override var isReady: Bool {
        // In this order: the job becomes ready before the wrapper may, so if the wrapper is ready
        // the job can no longer be pending when it is read afterwards.
        let wrapperIsReady = wrapper.isReady
        let jobState = wrapper.job.state
        if wrapperIsReady && jobState == .pending {
            problems.append("'\(wrapper.job.displayName)': its JobOperation is ready while the job still waits")
        }
        return super.isReady
    }
}
