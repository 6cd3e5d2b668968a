import Dispatch

/// A job that runs one or more blocks.
///
/// Like Foundation's `BlockOperation`, the blocks may run concurrently with each other, and the job
/// finishes when all of them have returned. A block that starts asynchronous work and returns
/// finishes the job at once; for such work use ``AsyncBlockJob`` or ``TaskJob``.
public final class BlockJob: Job, @unchecked Sendable {
    // Guarded by engineLock until the job starts; from then on owned by the thread running it (see
    // `takeBlock()`). A one-block job keeps its block here and allocates nothing else; a job with
    // several keeps here one closure that runs them all, and their list in `_details`.
    @exclusivity(unchecked) private var firstBlock: (@Sendable () -> Void)?

    /// Creates a job that runs `block`.
    public init(block: @escaping @Sendable () -> Void) {
        firstBlock = block
        super.init()
    }

    /// Adds a block to run. Adding one after the job has started is a programming error and traps.
    ///
    /// - Complexity: O(1) amortized.
    public func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        engineLock.lock()
        guard _lifecycle.isUnstarted else {
            let name = _describeLocked
            engineLock.unlock()
            _trap("BlockJob.addExecutionBlock(_:): '\(name)' has already started or finished")
        }
        let details = _detailsLocked
        if let list = details.blockList {
            list.blocks.append(block)
        } else {
            let list = _BlockList(firstBlock.map { [$0, block] } ?? [block])
            details.blockList = list
            firstBlock = BlockJob.runner(list, of: self)
        }
        engineLock.unlock()
    }

    /// The closure a job with several blocks runs: it takes the list (the thread that claimed the
    /// job owns it, as it owns `firstBlock`) and runs them, so the blocks are released as they
    /// were before they were several, when they have run.
    private static func runner(_ list: _BlockList, of job: BlockJob) -> @Sendable () -> Void {
        // Unowned: the closure is the job's own, and runs only while the job runs.
        { [unowned job] in
            job.runAll(list.take())
        }
    }

    /// The blocks the job will run. Empty once it has started or finished: the blocks are released
    /// as they are taken (or, for a job cancelled before it started, when it finishes), which also
    /// breaks reference cycles through blocks that capture the job.
    public var executionBlocks: [@Sendable () -> Void] {
        engineLock.withLock {
            // Once started, the blocks belong to the running thread; do not touch them here.
            guard _lifecycle.isUnstarted, let firstBlock else { return [] }
            if let list = _details?.blockList {
                return list.blocks
            }
            return [firstBlock]
        }
    }

    /// Moves the block (or the closure running the blocks) out, releasing it from the job.
    ///
    /// The thread that claimed the job under the engine lock owns its blocks from then on:
    /// `addExecutionBlock` traps and `executionBlocks` does not read them. So that thread
    /// (`_executeClaimed()`) takes them without the lock, which saves a lock round trip per job on
    /// the hot path. A direct call of `execute()` is no claim: it takes them under the lock, and only
    /// while the job has not started.
    private func takeBlock() -> (@Sendable () -> Void)? {
        firstBlock.take()
    }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        actions.releaseAfterUnlocking(block: firstBlock.take())
        if let blocks = _details?.blockList?.take(), !blocks.isEmpty {
            actions.releaseAfterUnlocking(blocks)
        }
    }

    /// Runs the blocks, when called directly on a job that has not started. The blocks are taken
    /// as they run, so they run once; on a job a queue or ``Job/start()`` has started, the blocks
    /// belong to that run, and a direct call runs nothing.
    public override func execute() {
        engineLock.lock()
        let block = _lifecycle.isUnstarted ? takeBlock() : nil
        // Several blocks: their list is taken here, under the lock, since the job is not claimed and
        // `executionBlocks` may read it meanwhile; the closure that would take it is dropped.
        let blocks = block != nil ? _details?.blockList?.take() : nil
        engineLock.unlock()
        if let blocks {
            runAll(blocks)
        } else {
            run(block)
        }
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

    /// Runs `blocks` at once, on as many threads as Dispatch gives it; blocks that land on other
    /// threads see the same `JobQueue.current` and current job. Consumes them: they are released
    /// when they have run.
    private func runAll(_ blocks: consuming [@Sendable () -> Void]) {
        let blocks = blocks
        let queue = _ThreadContext.queue
        DispatchQueue.concurrentPerform(iterations: blocks.count) { index in
            _ThreadContext.withContext(queue: queue, job: self, blocks[index])
        }
    }
}

/// The blocks of a `BlockJob` that has several: in the job's details for `executionBlocks` and for
/// releasing them unrun, and in the closure that runs them.
// @unchecked Sendable: `blocks` is guarded by `engineLock` until the job is claimed (or taken by a
// direct `execute()` under the lock); from then on it belongs to the thread running the job, as the
// job's `firstBlock` does.
final class _BlockList: @unchecked Sendable {
    @exclusivity(unchecked) var blocks: [@Sendable () -> Void]

    init(_ blocks: [@Sendable () -> Void]) {
        self.blocks = blocks
    }

    /// Moves the blocks out.
    func take() -> [@Sendable () -> Void] {
        let taken = blocks
        blocks = []
        return taken
    }
}

/// A job whose body starts callback-based work and calls `finish()` on the job when it is done.
///
/// ```swift
/// let job = AsyncBlockJob { job in
///     session.load(request) { _ in job.finish() }
/// }
/// ```
///
/// The body, and whatever it captured, is released once the job has finished and the body has
/// returned, whichever comes second: usually by the thread that calls `finish()`, after the
/// callbacks it delivers, otherwise by the thread that ran the body. A job cancelled before it
/// started releases it when it finishes. So the body must not capture an object whose `deinit`
/// calls `finish()`: the job keeps the body until it finishes.
public final class AsyncBlockJob: AsynchronousJob, @unchecked Sendable {
    // Guarded by engineLock until the job starts; then owned by the thread running it (see
    // `BlockJob.takeBlock()`), which puts it back when the body returns and sets `.workReturned`
    // under the lock; from then on, by whichever releases it (`_releaseSpentWork()`).
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
        // Claimed: the body is this thread's (see `BlockJob.takeBlock()`).
        let body = self.body.take()
        body?(self)
        // Put back, for `finish()` to release: the thread calling it is usually not a worker, which
        // then goes on to its next job without freeing what the body captured.
        self.body = body
    }

    override func _releaseSpentWork() {
        body = nil
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
        engineLock.withLock { _lifecycle.outcome == .failed ? _details?.error : nil }
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
