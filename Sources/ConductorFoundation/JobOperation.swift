import Conductor
import Foundation

/// A Foundation `Operation` that runs a Conductor `Job`, so that Conductor jobs can run on any
/// `OperationQueue`.
///
/// `JobOperation` is a correct asynchronous operation: it reports `isExecuting` and `isFinished`
/// with key-value notifications, and it is finished only when its job is. So an
/// `AsyncBlockJob`, an `AsynchronousJob` subclass or a `TaskJob` holds its Foundation slot
/// until its work completes, and `maxConcurrentOperationCount = 1` really runs such work one at a
/// time, which a `BlockOperation` that starts asynchronous work cannot do.
///
/// ```swift
/// let queue = OperationQueue()
/// queue.maxConcurrentOperationCount = 1
/// queue.addOperation(JobOperation(AsyncBlockJob { job in
///     fetchData("report.json") { _ in job.finish() }
/// }))
/// ```
///
/// - The job runs with `Job.start()` on the thread that starts the operation, outside any
///   `JobQueue`. A job that is already on a `JobQueue` cannot also run here: `Job.start()` traps,
///   naming the job and its queue.
/// - Conditions and exclusivity categories need a `JobQueue`, which evaluates the first and waits
///   for the second. `start()` traps on a job with either, saying so, even when a category happens
///   to be free: run such a job on a `JobQueue`, and let operations depend on it there.
/// - The operation's name, queue priority and quality of service are copied from the job when it
///   is created (see ``Conductor/JobPriority`` and `QualityOfService(_:)` for the mappings).
/// - The job's unfinished dependencies at that moment become the operation's, each through a
///   proxy operation that reports finished once the Conductor job has finished and released this
///   job (even for an ``OperationJob``, or the proxy behind `job.addDependency(operation)`), so
///   the operation never starts while its job waits. Dependencies added to the job later are not
///   seen; if one is still unfinished when the operation starts, `start()` traps, naming it. Add
///   them to the operation instead (`operation.addDependency(otherJob)`).
/// - Cancelling the operation cancels the job; cancelling the job cancels the operation. An
///   operation cancelled before it starts finishes without running the job, as Apple documents.
///
/// - Important: Every member may be called from any thread. No lock is held while the job runs
///   or while key-value notifications are posted.
// @unchecked Sendable: `job` is immutable and `lifecycle` keeps its state behind a lock; the rest
// is `Operation`'s, which locks it.
public final class JobOperation: Operation, @unchecked Sendable {
    /// The job this operation runs.
    public let job: Job

    private let lifecycle = _OperationLifecycle()

    /// Creates an operation that runs `job`.
    ///
    /// - Parameter job: A job that is not on a `JobQueue` and will not be started elsewhere.
    public init(_ job: Job) {
        self.job = job
        super.init()
        name = job.name
        queuePriority = Operation.QueuePriority(job.queuePriority)
        // Left unset when it maps to `.default`, as on an operation whose QoS nobody set:
        // Foundation on Linux enforces an explicitly set QoS on the operation's work item.
        let qualityOfService = QualityOfService(job.qualityOfService)
        if qualityOfService != .default {
            self.qualityOfService = qualityOfService
        }
        // Mirrored by proxies that report finished only after the Conductor dependency has
        // finished and released this job, never by the Foundation operation behind an
        // `OperationJob` or `job.addDependency(operation)`: Foundation records that operation as
        // finished, and could start this one, before the job has stopped waiting for it.
        for dependency in job.dependencies where !dependency.isFinished {
            _addDependency(onConductorFinishOf: dependency)
        }
        // The observer holds the operation weakly: a job that never runs must not keep it alive.
        job.observe { [weak self] event in
            switch event {
            case .cancelled: self?._jobWasCancelled()
            case .finished: self?._jobDidFinish()
            case .ready, .started: break
            }
        }
        // Observing a finished job registers nothing, so catch up with anything already past.
        if job.isCancelled {
            _jobWasCancelled()
        }
        if job.isFinished {
            _jobDidFinish()
        }
    }

    public override var isAsynchronous: Bool { true }
    public override var isExecuting: Bool { lifecycle.isExecuting }
    public override var isFinished: Bool { lifecycle.isFinished }

    /// Runs the job: reports executing, starts the job, and reports finished when the job has
    /// finished. A cancelled operation reports finished without running the job. Traps if the job
    /// still waits for a dependency or for its conditions, or has exclusivity categories.
    public override func start() {
        let cancelled = isCancelled
        guard lifecycle.start(self, isCancelled: cancelled, description: "JobOperation '\(job.displayName)'") else {
            return
        }
        if let problem = _startProblem() {
            fatalError(problem)
        }
        job.start()
    }

    /// Why the job cannot run here, if it cannot: it has exclusivity categories, or it still waits.
    /// The operation waits for every dependency the job had when it was wrapped, so a job that
    /// still waits is a programming error: a dependency added to the job afterwards, the operation
    /// started by hand before it was ready, or conditions, which only a `JobQueue` evaluates.
    private func _startProblem() -> String? {
        let prefix = "JobOperation.start(): '\(job.displayName)'"
        // Refused whether or not a category is free now, so that the error shows the first time,
        // not only when another job happens to hold one. Not for a job already finished (cancelled
        // as the operation starts): `job.start()` does nothing for it, or says it has finished.
        let categories = job.exclusivityCategories
        if !categories.isEmpty && !job.isFinished {
            let names = categories.sorted().map { "'\($0)'" }.joined(separator: ", ")
            return "\(prefix) has exclusivity categories (\(names)), which only a JobQueue waits for; an "
                + "OperationQueue would start it while another job holds one. Add the job to a JobQueue (an "
                + "operation can still depend on it: operation.addDependency(job))"
        }
        guard job.state == .pending else { return nil }
        let waiting = job.dependencies.filter { !$0.isFinished }
        // The jobs this operation waits for: the proxies made in `init`, and any added with
        // `addDependency(_:)` since.
        let awaited = dependencies.compactMap { ($0 as? _JobFinishedOperation)?.awaitedJob }
        let late = waiting.filter { dependency in !awaited.contains { $0 === dependency } }
        let names = { (jobs: [Job]) in jobs.map { "'\($0.displayName)'" }.joined(separator: ", ") }
        if !late.isEmpty {
            return "\(prefix) waits for \(names(late)): dependencies added to the job after it was wrapped, "
                + "which the operation does not wait for; add them before wrapping the job, or to the operation "
                + "as well (operation.addDependency(job))"
        }
        if !waiting.isEmpty {
            return "\(prefix) waits for \(names(waiting)): the operation was started before it was ready; let an "
                + "OperationQueue start it, or call start() only once isReady is true"
        }
        // No dependency left (the last may have finished just now, if started by hand): what still
        // holds the job is its conditions.
        guard job.state == .pending else { return nil }
        return "\(prefix) has conditions, which only a JobQueue evaluates; an OperationQueue cannot run it. "
            + "Add the job to a JobQueue (an operation can still depend on it: operation.addDependency(job))"
    }

    /// Cancels the operation and its job.
    public override func cancel() {
        super.cancel()
        job.cancel()
    }

    private func _jobWasCancelled() {
        super.cancel()
    }

    private func _jobDidFinish() {
        lifecycle.workFinished(self)
    }
}

extension JobOperation: CustomReflectable {
    /// What `dump(_:)` and a `Mirror` show: its ``job`` (which reflects as its public state) and
    /// whether it is executing, finished or cancelled. Not its stored lifecycle, whose state the
    /// bridge changes under a lock (`Job.customMirror`).
    public var customMirror: Mirror {
        Mirror(
            self,
            children: ["job": job, "isExecuting": isExecuting, "isFinished": isFinished, "isCancelled": isCancelled],
            displayStyle: .class, ancestorRepresentation: .suppressed)
    }
}
