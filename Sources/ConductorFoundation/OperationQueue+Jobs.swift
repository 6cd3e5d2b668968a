import Conductor
import Foundation

extension OperationQueue {
    /// Adds a Conductor job, wrapped in a ``JobOperation``.
    ///
    /// - Parameter job: A job that is not on a `JobQueue` and will not be started elsewhere.
    /// - Returns: The operation that runs the job.
    /// The operation waits for the job's unfinished dependencies (see ``JobOperation``). It starts
    /// even when the last of them finishes while it is being added, which a plain
    /// `addOperation(_:)` does not promise on Linux (see Docs/FoundationInterop.md).
    @discardableResult
    public func addJob(_ job: Job) -> JobOperation {
        let operation = JobOperation(job)
        addOperation(operation)
        // swift-corelibs-foundation reads `isReady` while adding the operation and caches what it
        // read after a dependency may have finished and announced readiness: the operation then
        // waits, ready, for an event that never comes. Announcing again once it is in the queue
        // corrects the cache and schedules it; for an operation already started it does nothing.
        if !operation.dependencies.isEmpty {
            operation._announceReadinessIfReady()
        }
        return operation
    }
}
