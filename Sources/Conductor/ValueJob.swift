/// A job that runs an `async` body producing a value, which its dependents read.
///
/// ```swift
/// let download = ValueJob { try await client.data(from: url) }
/// let parse = ValueJob { try Report(parsing: try await download.value) }
/// try parse.addDependency(download, policy: .requireSuccess)
/// queue.addJobs([download, parse], waitUntilFinished: false)
/// let report = try await parse.value
/// ```
///
/// Inside a dependent's body the dependency has finished, so ``value`` returns at once, typed,
/// with no cast. Under a `.requireSuccess` edge the dependent's body never runs after a failure
/// upstream; its own ``value`` then throws `CancellationError`, and its ``Job/outcome`` names the
/// dependency that did not succeed.
///
/// Like ``TaskJob``: the job holds its slot until the body returns, ``cancel()`` cancels the task,
/// a thrown error fails the job and `CancellationError` cancels it.
public final class ValueJob<Value: Sendable>: Job, @unchecked Sendable {
    // @unchecked Sendable: `runner` and `box` are immutable references; the runner's state and the
    // box's value are guarded by `engineLock`.
    private let runner: _TaskRunner
    private let box: _ValueBox<Value>

    /// Creates a job that runs `body` in a `Task` with the given priority and keeps what it returns.
    public init(priority: TaskPriority? = nil, _ body: @escaping @Sendable () async throws -> Value) {
        let box = _ValueBox<Value>()
        self.box = box
        runner = _TaskRunner(priority: priority) {
            let value = try await body()
            // A direct call's run changes nothing: the job's value is its own run's.
            if _TaskRunner.isDirectRun { return }
            engineLock.withLock { box.value = value }
        }
        super.init(finishesWhenExecuteReturns: false)
    }

    /// The job's result once it has finished: the value, the error it failed with, or
    /// `CancellationError` if it was cancelled (``Job/outcome`` has the reason). `nil` until then.
    public var result: Result<Value, any Error>? {
        engineLock.withLock {
            switch _lifecycle.outcome {
            case nil: nil
            case .succeeded: .success(box.value!)
            case .failed: .failure(_details!.error!)
            case .cancelled: .failure(CancellationError())
            }
        }
    }

    /// Waits until the job has finished, then returns its value, or throws the error it failed
    /// with, or `CancellationError` if it was cancelled. Returns at once inside a dependent's body.
    ///
    /// Cancelling the waiting task does not end the wait; cancel the job instead.
    public var value: Value {
        get async throws {
            // A finished job's result is final even while its completion block still runs, so a
            // dependent reads it without waiting.
            if let result {
                return try result.get()
            }
            await waitUntilFinished()
            return try result!.get()
        }
    }

    override var _taskRunner: _TaskRunner? { runner }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        runner.discardLocked(&actions)
    }

    /// Runs the body in a task of its own, when called directly: the job neither starts nor
    /// finishes, and its own run (by a queue, or ``Job/start()``) runs the body again. Once the job
    /// has started, or was cancelled, a direct call runs nothing.
    public override func execute() {
        runner.runDirectly()
    }

    override func _executeClaimed() {
        runner.start(self)
    }

    public override func cancel() {
        super.cancel()
        runner.cancelTask()
    }
}

/// Where a ``ValueJob``'s body leaves its value.
// @unchecked Sendable: `value` is guarded by `engineLock`.
final class _ValueBox<Value: Sendable>: @unchecked Sendable {
    var value: Value?
}
