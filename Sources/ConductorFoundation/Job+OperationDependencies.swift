import Conductor
import Foundation

extension Job {
    /// Makes this job wait until the Foundation `operation` has finished.
    ///
    /// The operation can be anywhere: on an `OperationQueue`, about to be started by hand, or run by
    /// an ``OperationJob``. The dependency is a proxy job, already executing, that finishes when
    /// Foundation records the operation as finished (KVO on Apple platforms; on Linux, as a
    /// dependent that swift-corelibs-foundation notifies; no polling). It appears in
    /// `dependencies` under a name like `operation 'Download'`. Adding the same operation
    /// twice does nothing. A ``JobOperation`` is not proxied: the job depends on its job directly,
    /// so cycles through it are detected.
    ///
    /// An operation that never finishes keeps this job waiting, and the proxy keeps the operation
    /// alive, as Foundation's own dependents do.
    ///
    /// - Parameter operation: The operation to wait for.
    /// - Throws: `JobError` with code `.alreadyStarted` if this job has started or finished; with
    ///   `.dependencyCycle` through a `JobOperation` whose job waits for this one, or when this job
    ///   is the ``OperationJob`` that runs `operation` (it would wait for itself). The graph is
    ///   unchanged when it throws.
    /// - Complexity: O(number of dependencies) for the duplicate check, plus `addDependency`'s.
    public func addDependency(_ operation: Operation) throws(JobError) {
        if let runner = self as? OperationJob, runner.operation === operation {
            // This job starts `operation`: waiting for it would never end. Thrown as the cycle it is,
            // naming this job.
            try addDependency(self)
        }
        if let bridge = operation as? JobOperation {
            try addDependency(bridge.job)
            return
        }
        if let proxy = operation as? _JobFinishedOperation, let job = proxy.awaitedJob {
            try addDependency(job)
            return
        }
        if dependencies.contains(where: { ($0 as? _OperationFinishedJob)?.operation === operation }) {
            return
        }
        let proxy = _OperationFinishedJob(waitingFor: operation)
        // Executing before anything depends on it, so that it never looks ready to run.
        proxy.start()
        do {
            try addDependency(proxy)
        } catch {
            proxy._finish()
            throw error
        }
        _whenFinished(operation) {
            proxy._finish()
        }
    }
}

/// The proxy behind `job.addDependency(operation)`: a job that is started at once, so it is
/// `executing` while it waits, and finishes when Foundation records `operation` as finished.
///
/// It holds the operation until it is freed (that is, until its dependents have finished), as a
/// Foundation dependent holds its dependencies.
///
/// `package` rather than internal only to work around a Swift 6.3 diagnostic, as the core's
/// `_BarrierJob` does: an internal subclass of a class with a `package` designated initializer
/// gets a spurious "function call causes an infinite recursion" warning.
// @unchecked Sendable: `operation` is immutable; the rest is `Job`'s.
package final class _OperationFinishedJob: Job, @unchecked Sendable {
    package let operation: Operation

    package init(waitingFor operation: Operation) {
        self.operation = operation
        super.init(finishesWhenExecuteReturns: false)
        name = "operation '\(operation.name ?? String(describing: type(of: operation)))'"
    }

    // `execute()` is the default, which does nothing: the job stays executing until `_finish()`.
}
