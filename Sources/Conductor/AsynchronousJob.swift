/// A job whose work completes after ``Job/execute()`` returns.
///
/// `execute()` starts the work; the job stays executing, holding its queue slot, until ``finish()``
/// is called, from any thread. Dependents start only after `finish()`, and a queue with
/// `maxConcurrentJobCount = 1` runs asynchronous jobs strictly one at a time. There is no state to
/// post by hand: the engine owns the state machine.
///
/// ```swift
/// final class Download: AsynchronousJob, @unchecked Sendable {
///     override func execute() {
///         client.fetch(url) { result in
///             self.result = result
///             self.finish()
///         }
///     }
/// }
/// ```
open class AsynchronousJob: Job, @unchecked Sendable {
    /// Creates an asynchronous job in the `ready` state.
    public override init() {
        super.init(finishesWhenExecuteReturns: false)
    }

    /// Marks the job finished: frees its slot, releases its dependents, then notifies observers,
    /// runs the completion block and wakes waiters.
    ///
    /// Call it exactly once when the work is done, including when the work stopped early because
    /// the job was cancelled. Extra calls are harmless: a call while the job is not executing (before
    /// it started, or after it finished) is ignored.
    ///
    /// - Complexity: O(dependents).
    public final func finish() {
        _finish()
    }

    /// Marks the job finished with a failure: its ``Job/outcome`` is `.failed(error)` (or, for
    /// `CancellationError`, `.cancelled`), and dependents that require its success are cancelled.
    /// Otherwise as ``finish()``: the first call while executing counts, later ones are ignored.
    ///
    /// - Complexity: O(dependents), plus the cancellations it causes.
    public final func finish(throwing error: any Error) {
        _finish(failure: error)
    }
}
