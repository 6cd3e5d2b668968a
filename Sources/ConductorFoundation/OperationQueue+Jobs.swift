import Conductor
import Foundation

extension OperationQueue {
    /// Adds a Conductor job, wrapped in a ``JobOperation``.
    ///
    /// - Parameter job: A job that is not on a `JobQueue` and will not be started elsewhere.
    /// - Returns: The operation that runs the job.
    @discardableResult
    public func addJob(_ job: Job) -> JobOperation {
        let operation = JobOperation(job)
        addOperation(operation)
        return operation
    }
}
