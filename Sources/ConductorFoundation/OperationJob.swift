import Conductor
import Dispatch
import Foundation

/// A Conductor `Job` that runs an existing Foundation `Operation`, so that operations written
/// for `OperationQueue` can run on a `JobQueue` unchanged.
///
/// The job finishes when Foundation has recorded the operation as finished, not when `start()`
/// returns. A correct asynchronous operation (one that posts `isExecuting`/`isFinished` changes)
/// therefore holds its slot until its work is done, its Conductor dependents wait for it, and a
/// queue with `maxConcurrentJobCount = 1` runs such operations strictly one at a time.
///
/// ```swift
/// let queue = JobQueue(name: "downloads", maxConcurrentJobCount: 1)
/// let download = OperationJob(DownloadOperation(resource: "report.json"))
/// let index = BlockJob { rebuildIndex() }
/// try index.addDependency(download)      // waits until the operation has really finished
/// queue.addJobs([download, index], waitUntilFinished: false)
/// ```
///
/// - The operation's `start()` runs on the job's worker, inside ``execute()``. If the operation is
///   not ready then (see below), a private Foundation queue starts it once it is, and the job
///   keeps its slot meanwhile.
/// - The operation's unfinished dependencies at creation become the job's, through
///   `job.addDependency(operation)`. Dependencies added to the operation later are
///   still honoured by Foundation, in the way above, but the job holds a slot while it waits
///   for them.
/// - The job's name, queue priority and quality of service are copied from the operation when it
///   is created, with the case-by-case mappings of this module.
/// - Cancelling the job cancels the operation. If the job had not run, it finishes at once
///   (Conductor's rule), and the operation is started so that, seeing itself cancelled, Foundation
///   moves it to finished without running its work: its Foundation dependents and waiters are
///   released, as an `OperationQueue` would do. Cancelling the operation directly is not seen by
///   the job (Linux has no KVO); the operation then finishes at once when the job runs it.
/// - How the finish is detected: key-value observing of `isFinished` on Apple platforms, and on
///   Linux a private operation that depends on this one, which swift-corelibs-foundation notifies.
///   The operation's `completionBlock` is not touched. The job finishes on the thread that
///   finishes the operation.
///
/// - Important: An operation that never reports finished (an asynchronous subclass that forgets
///   its `isFinished` notification) keeps the job executing forever, holding its slot and its
///   dependents. That is the one case Conductor cannot rescue: it is indistinguishable from work
///   that is slow. Conductor's own asynchronous jobs cannot make this mistake.
// @unchecked Sendable: `operation` is immutable and `bridge` is a locked box; the rest is `Job`'s.
public final class OperationJob: Job, @unchecked Sendable {
    /// The operation this job runs.
    public let operation: Operation

    private let bridge = _LockedValue(_OperationJobStateMachine())

    /// Creates a job that runs `operation`.
    ///
    /// - Parameter operation: An operation that is not on an `OperationQueue` and will not be
    ///   started elsewhere.
    public init(_ operation: Operation) {
        self.operation = operation
        super.init(finishesWhenExecuteReturns: false)
        name = operation.name
        queuePriority = JobPriority(operation.queuePriority)
        qualityOfService = DispatchQoS.QoSClass(operation.qualityOfService)
        for dependency in operation.dependencies {
            do {
                try addDependency(dependency)
            } catch {
                // A new job has not started, and nothing waits for it yet, so no cycle can close.
                _trap("OperationJob.init: bridging a dependency failed: \(error)")
            }
        }
    }

    /// Starts the operation, and arranges for the job to finish when the operation has.
    public override func execute() {
        bridge.withLock { $0.executeBegan() }
        if operation.isReady {
            operation.start()
        } else {
            _ReadinessQueue.start(operation)
        }
        _whenFinished(operation) { [self] in
            if bridge.withLock({ $0.operationFinished() }) == .finishJob {
                _finish()
            }
        }
    }

    /// Cancels the job and its operation. See the type's discussion for a job that had not run.
    public override func cancel() {
        super.cancel()
        operation.cancel()
        guard isFinished else { return }
        let action = bridge.withLock { $0.jobFoundFinishedAfterCancel() }
        // Foundation makes a cancelled operation ready; one whose own `isReady` says otherwise is
        // left alone, as an `OperationQueue` would leave it.
        if action == .startCancelledOperation && operation.isReady {
            operation.start()
        }
    }
}
