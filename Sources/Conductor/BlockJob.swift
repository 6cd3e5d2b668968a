import Dispatch

/// A job that runs one or more blocks.
///
/// Like Foundation's `BlockOperation`, the blocks may run concurrently with each other, and the job
/// finishes when all of them have returned. A block that starts asynchronous work and returns
/// finishes the job at once; for such work use ``AsyncBlockJob`` or ``TaskJob``.
public final class BlockJob: Job, @unchecked Sendable {
    // Guarded by engineLock until the job starts; from then on owned by the thread running it (see
    // `takeBlocks()`). The first block is stored inline so a one-block job allocates no array.
    @exclusivity(unchecked) private var firstBlock: (@Sendable () -> Void)?
    @exclusivity(unchecked) private var moreBlocks: [@Sendable () -> Void] = []

    /// Creates a job that runs `block`.
    public init(block: @escaping @Sendable () -> Void) {
        firstBlock = block
        super.init()
    }

    /// Adds a block to run. Adding one after the job has started is a programming error and traps.
    public func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        engineLock.lock()
        guard _state == .pending || _state == .ready else {
            let name = _describeLocked
            engineLock.unlock()
            preconditionFailure("BlockJob.addExecutionBlock(_:): '\(name)' has already started or finished")
        }
        if firstBlock == nil {
            firstBlock = block
        } else {
            moreBlocks.append(block)
        }
        engineLock.unlock()
    }

    /// The blocks the job will run. Empty once it has started or finished: the blocks are released
    /// as they are taken (or, for a job cancelled before it started, when it finishes), which also
    /// breaks reference cycles through blocks that capture the job.
    public var executionBlocks: [@Sendable () -> Void] {
        engineLock.withLock {
            // Once started, the blocks belong to the running thread; do not touch them here.
            guard _state == .pending || _state == .ready, let firstBlock else { return [] }
            return [firstBlock] + moreBlocks
        }
    }

    /// Moves the blocks out, releasing them from the job.
    ///
    /// The thread running the job owns its blocks from the moment the job was claimed under the
    /// engine lock: after that, `addExecutionBlock` traps and `executionBlocks` does not read them.
    /// So that thread takes them without the lock, which saves a lock round trip per job on the
    /// hot path. A direct call of `execute()` from any other thread takes the lock.
    private func takeBlocks() -> (first: (@Sendable () -> Void)?, more: [@Sendable () -> Void]) {
        let owned = _ThreadContext.job === self
        if !owned { engineLock.lock() }
        defer { if !owned { engineLock.unlock() } }
        let taken = (firstBlock, moreBlocks)
        firstBlock = nil
        moreBlocks = []
        return taken
    }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        actions.releaseAfterUnlocking(block: firstBlock)
        firstBlock = nil
        if !moreBlocks.isEmpty {
            actions.releaseAfterUnlocking(moreBlocks)
            moreBlocks = []
        }
    }

    public override func execute() {
        let (first, more) = takeBlocks()
        guard let first else { return }
        if more.isEmpty {
            first()
        } else {
            // Blocks that land on other threads see the same `JobQueue.current` and current job.
            let blocks = [first] + more
            let queue = _ThreadContext.queue
            DispatchQueue.concurrentPerform(iterations: blocks.count) { index in
                _ThreadContext.withContext(queue: queue, job: self, blocks[index])
            }
        }
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

    public override func execute() {
        let owned = _ThreadContext.job === self
        if !owned { engineLock.lock() }
        let body = self.body
        self.body = nil
        if !owned { engineLock.unlock() }
        body?(self)
    }
}

/// A job that runs an `async` body as a Swift `Task`.
///
/// The job holds its queue slot until the body returns, so a limit of 1 serializes `async` work.
/// ``cancel()`` cancels the task (cooperatively, as usual in Swift concurrency). A body that throws
/// `CancellationError` leaves the job cancelled; any other error is kept in ``error``.
/// ``JobQueue/current`` inside the body is the queue that started the job.
public final class TaskJob: Job, @unchecked Sendable {
    // Guarded by engineLock.
    @exclusivity(unchecked) private var body: (@Sendable () async throws -> Void)?
    @exclusivity(unchecked) private var task: Task<Void, Never>?
    @exclusivity(unchecked) private var _error: (any Error)?
    private let priority: TaskPriority?

    /// Creates a job that runs `body` in a `Task` with the given priority.
    public init(priority: TaskPriority? = nil, _ body: @escaping @Sendable () async throws -> Void) {
        self.body = body
        self.priority = priority
        super.init(finishesWhenExecuteReturns: false)
    }

    /// The error the body threw, other than `CancellationError`; `nil` if it returned normally.
    public var error: (any Error)? {
        engineLock.withLock { _error }
    }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        actions.releaseAfterUnlocking(body as Any)
        body = nil
    }

    public override func execute() {
        engineLock.lock()
        let body = self.body
        self.body = nil
        engineLock.unlock()
        guard let body else { return _finish() }
        let queue = JobQueue.current
        // The task takes the body out of the box, so the body (and whatever it captured) is
        // released when it returns, before `complete` wakes the job's waiters.
        let work = _TaskWork(body)
        let task = Task(priority: priority) { [self] in
            let error = await TaskJob.run(work.take(), on: queue)
            complete(with: error)
        }
        engineLock.lock()
        self.task = task
        let cancelled = _isCancelled
        engineLock.unlock()
        if cancelled {
            task.cancel()
        }
    }

    /// Runs `body` with `queue` as `JobQueue.current`; returns what it threw.
    private static func run(_ body: (@Sendable () async throws -> Void)?, on queue: JobQueue?) async -> (any Error)? {
        guard let body else { return nil }
        do {
            try await JobQueue.$_taskQueue.withValue(queue) { try await body() }
            return nil
        } catch {
            return error
        }
    }

    public override func cancel() {
        super.cancel()
        engineLock.lock()
        let task = self.task
        engineLock.unlock()
        task?.cancel()
    }

    private func complete(with error: (any Error)?) {
        var actions = _Actions()
        engineLock.lock()
        task = nil
        if error is CancellationError {
            if !_isCancelled {
                _isCancelled = true
                _postLocked(.cancelled, &actions)
            }
        } else {
            _error = error
        }
        _finishLocked(&actions)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
    }
}

/// Hands a `TaskJob`'s body to its task, which takes it out exactly once.
// @unchecked Sendable: `body` is written once, before the task is created, and read and cleared once,
// by that task; task creation orders the two.
private final class _TaskWork: @unchecked Sendable {
    private var body: (@Sendable () async throws -> Void)?

    init(_ body: @escaping @Sendable () async throws -> Void) {
        self.body = body
    }

    func take() -> (@Sendable () async throws -> Void)? {
        defer { body = nil }
        return body
    }
}
