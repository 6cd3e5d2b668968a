import Dispatch

/// A job that runs one or more blocks.
///
/// Like Foundation's `BlockOperation`, the blocks may run concurrently with each other, and the job
/// finishes when all of them have returned. A block that starts asynchronous work and returns
/// finishes the job at once; for such work use ``AsyncBlockJob`` or ``TaskJob``.
public final class BlockJob: Job, @unchecked Sendable {
    // Guarded by engineLock until the job starts; from then on owned by the thread running it (see
    // `takeBlock()`). A one-block job keeps its block here and allocates nothing else; a job with
    // several keeps here one closure that runs them all, and the list in `_details`.
    @exclusivity(unchecked) private var firstBlock: (@Sendable () -> Void)?

    /// Creates a job that runs `block`.
    public init(block: @escaping @Sendable () -> Void) {
        firstBlock = block
        super.init()
    }

    /// Adds a block to run. Adding one after the job has started is a programming error and traps.
    public func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        engineLock.lock()
        guard _lifecycle.isUnstarted else {
            let name = _describeLocked
            engineLock.unlock()
            _trap("BlockJob.addExecutionBlock(_:): '\(name)' has already started or finished")
        }
        let details = _detailsLocked
        if details.blocks.isEmpty, let firstBlock {
            details.blocks = [firstBlock]
        }
        details.blocks.append(block)
        firstBlock = BlockJob.runner(details.blocks, of: self)
        engineLock.unlock()
    }

    /// One closure that runs `blocks` at once, on as many threads as Dispatch gives it; the blocks
    /// that land on other threads see the same `JobQueue.current` and current job.
    private static func runner(
        _ blocks: [@Sendable () -> Void], of job: BlockJob
    ) -> @Sendable () -> Void {
        // Unowned: the closure is the job's own, and runs only while the job runs.
        { [unowned job] in
            let queue = _ThreadContext.queue
            DispatchQueue.concurrentPerform(iterations: blocks.count) { index in
                _ThreadContext.withContext(queue: queue, job: job, blocks[index])
            }
        }
    }

    /// The blocks the job will run. Empty once it has started or finished: the blocks are released
    /// as they are taken (or, for a job cancelled before it started, when it finishes), which also
    /// breaks reference cycles through blocks that capture the job.
    public var executionBlocks: [@Sendable () -> Void] {
        engineLock.withLock {
            // Once started, the blocks belong to the running thread; do not touch them here.
            guard _lifecycle.isUnstarted, let firstBlock else { return [] }
            if let blocks = _details?.blocks, !blocks.isEmpty {
                return blocks
            }
            return [firstBlock]
        }
    }

    /// Moves the block (or the closure running the blocks) out, releasing it from the job.
    ///
    /// The thread that claimed the job under the engine lock owns its block from then on:
    /// `addExecutionBlock` traps and `executionBlocks` does not read it. So that thread
    /// (`_executeClaimed()`) takes it without the lock, which saves a lock round trip per job on
    /// the hot path. A direct call of `execute()` is no claim: it takes it under the lock, and only
    /// while the job has not started. The list of several blocks in `_details` is released when the
    /// job finishes (or, for a direct call, when the blocks are taken).
    private func takeBlock() -> (@Sendable () -> Void)? {
        firstBlock.take()
    }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        actions.releaseAfterUnlocking(block: firstBlock.take())
    }

    /// Runs the blocks, when called directly on a job that has not started. The blocks are taken
    /// as they run, so they run once; on a job a queue or ``Job/start()`` has started, the blocks
    /// belong to that run, and a direct call runs nothing.
    public override func execute() {
        var list: [@Sendable () -> Void] = []
        engineLock.lock()
        let block = _lifecycle.isUnstarted ? takeBlock() : nil
        if block != nil, let details = _details {
            swap(&list, &details.blocks)
        }
        engineLock.unlock()
        list = []  // released after unlocking: the blocks' captures may run deinits
        run(block)
    }

    override func _executeClaimed() {
        run(takeBlock())
    }

    /// Runs the block taken. Consumes it, so that the closure is released as it was taken, with no
    /// retain of its own.
    private func run(_ block: consuming (@Sendable () -> Void)?) {
        guard let block else { return }
        block()
    }
}

/// A job whose body starts callback-based work and calls `finish()` on the job when it is done.
///
/// ```swift
/// let job = AsyncBlockJob { job in
///     session.load(request) { _ in job.finish() }
/// }
/// ```
public final class AsyncBlockJob: AsynchronousJob, @unchecked Sendable {
    // Guarded by engineLock until the job starts; then owned by the thread running it (see
    // `BlockJob.takeBlocks()`). Released when the job starts.
    @exclusivity(unchecked) private var body: (@Sendable (AsyncBlockJob) -> Void)?

    /// Creates a job that runs `body` and finishes when `body`'s work calls `finish()`.
    public init(_ body: @escaping @Sendable (AsyncBlockJob) -> Void) {
        self.body = body
        super.init()
    }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        actions.releaseAfterUnlocking(body as Any)
        body = nil
    }

    /// Runs the body, when called directly on a job that has not started; see
    /// ``BlockJob/execute()``.
    public override func execute() {
        engineLock.lock()
        let body = _lifecycle.isUnstarted ? self.body.take() : nil
        engineLock.unlock()
        body?(self)
    }

    override func _executeClaimed() {
        // Claimed: the body is this thread's (see `BlockJob.takeBlocks()`).
        let body = self.body.take()
        body?(self)
    }
}

/// A job that runs an `async` body as a Swift `Task`.
///
/// The job holds its queue slot until the body returns, so a limit of 1 serializes `async` work.
/// ``cancel()`` cancels the task (cooperatively, as usual in Swift concurrency). A body that throws
/// `CancellationError` leaves the job cancelled (``Job/outcome`` `.cancelled`, with the job's reason
/// if it was cancelled first); any other error fails it (`.failed`, and kept in ``error``).
/// ``JobQueue/current`` inside the body is the queue that started the job. The body may be
/// `@MainActor` or isolated to any actor, as any `Task`'s may.
///
/// For work that produces a value for its dependents, use ``ValueJob``.
public final class TaskJob: Job, @unchecked Sendable {
    // @unchecked Sendable: `runner` is immutable and keeps its state under `engineLock`.
    private let runner: _TaskRunner

    /// Creates a job that runs `body` in a `Task` with the given priority.
    public init(priority: TaskPriority? = nil, _ body: @escaping @Sendable () async throws -> Void) {
        runner = _TaskRunner(priority: priority, body)
        super.init(finishesWhenExecuteReturns: false)
    }

    /// The error the body threw, other than `CancellationError`; `nil` if it returned normally.
    /// The same error as in ``Job/outcome``'s `.failed`.
    public var error: (any Error)? {
        engineLock.withLock { _lifecycle.outcome == .failed ? _outcomeDetails?.error : nil }
    }

    override var _taskRunner: _TaskRunner? { runner }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        runner.discardLocked(&actions)
    }

    public override func execute() {
        runner.start(self)
    }

    public override func cancel() {
        super.cancel()
        runner.cancelTask()
    }
}
