import Conductor
import Foundation

extension JobQueue {
    /// Adds a Foundation operation, wrapped in an ``OperationJob``.
    ///
    /// This is the way to move an `OperationQueue` to Conductor while keeping its operations: the
    /// operation's dependencies at this moment, its priority and its quality of service carry over;
    /// the queue's limit, suspension, barriers and waiting apply to it like to any job.
    ///
    /// - Parameter operation: An operation that is not on an `OperationQueue` and will not be
    ///   started elsewhere.
    /// - Returns: The job that runs the operation.
    /// - Complexity: O(1) amortized, plus O(dependencies of the operation).
    @discardableResult
    public func addOperation(_ operation: Operation) -> OperationJob {
        let job = OperationJob(operation)
        addJob(job)
        return job
    }

    /// Adds Foundation operations as one batch, each wrapped in an ``OperationJob``; see
    /// `addJobs(_:waitUntilFinished:)`.
    ///
    /// - Parameters:
    ///   - operations: Operations that are not on an `OperationQueue` and will not be started elsewhere.
    ///   - waitUntilFinished: Whether to block until all have finished.
    /// - Returns: The jobs that run the operations, in the same order.
    /// - Complexity: O(n) for n operations, plus O(their dependencies).
    @discardableResult
    public func addOperations(_ operations: [Operation], waitUntilFinished: Bool) -> [OperationJob] {
        let jobs = operations.map(OperationJob.init)
        addJobs(jobs, waitUntilFinished: waitUntilFinished)
        return jobs
    }
}
