/// Runs a job's `async` body as a Swift `Task`: what ``TaskJob`` and ``ValueJob`` share.
///
/// The body is taken out when the task starts, so it (and whatever it captured) is released when
/// it returns, before the job finishes and wakes its waiters; a job cancelled before it started
/// releases it unrun (`discardLocked`). The runner records which task runs the body, so that a
/// wait from inside the body for its own job or queue traps instead of hanging (see
/// `bodyJobOfCurrentTaskLocked()`).
// @unchecked Sendable: every mutable stored property is guarded by `engineLock`; `priority` is
// immutable.
final class _TaskRunner: @unchecked Sendable {
    @exclusivity(unchecked) private var body: (@Sendable () async throws -> Void)?
    @exclusivity(unchecked) private var task: Task<Void, Never>?
    /// The task running the body, while it runs; compared, never used to reach the task. Cleared
    /// before the task ends, so a stale identity can never match a later task.
    @exclusivity(unchecked) private var bodyTask: UnsafeCurrentTask?
    private let priority: TaskPriority?

    /// The job whose body the current task (or a task it created) runs. Only a hint: an
    /// unstructured `Task` created inside the body inherits it, so `bodyJobOfCurrentTaskLocked()`
    /// also compares the task itself.
    @TaskLocal private static var bodyJob: _BodyJob?

    init(priority: TaskPriority?, _ body: @escaping @Sendable () async throws -> Void) {
        self.body = body
        self.priority = priority
    }

    /// The job whose body is running in the current task itself, if any; `nil` outside a task, in
    /// other tasks, and in tasks the body created. Call with `engineLock` held.
    ///
    /// The task is compared first, through the runner, and the job loaded only when it matches:
    /// the body's task holds the job while it runs, so the loaded reference is not the job's last.
    /// A task the body created may wait after the job finished, as the job's last other references
    /// go: loading the job then could free it here, under the lock.
    static func bodyJobOfCurrentTaskLocked() -> Job? {
        guard let bodyJob, let bodyTask = bodyJob.runner.bodyTask,
            withUnsafeCurrentTask(body: { $0 == bodyTask })
        else { return nil }
        return bodyJob.job
    }

    /// Hands the un-run body to `actions`, to be released after unlocking.
    func discardLocked(_ actions: inout _Actions) {
        actions.releaseAfterUnlocking(body as Any)
        body = nil
    }

    /// Starts the body in a task for `job`, which finishes when the body returns: failed if it
    /// threw, cancelled if it threw `CancellationError`.
    func start(_ job: Job) {
        guard let work = takeWork() else { return job._finish() }
        let queue = JobQueue.current
        let task = Task(priority: priority) { [self] in
            withUnsafeCurrentTask { task in
                engineLock.withLock { bodyTask = task }
            }
            // The job weakly: a task the body creates inherits the task-local and may outlive it.
            let error = await _TaskRunner.$bodyJob.withValue(_BodyJob(job, runner: self)) {
                await _TaskRunner.run(work.take(), on: queue)
            }
            complete(job, with: error)
        }
        engineLock.lock()
        // A body that already returned has finished the job: keep no handle to its task.
        let executing = job._state == .executing
        if executing {
            self.task = task
        }
        let cancelled = executing && job._isCancelled
        engineLock.unlock()
        if cancelled {
            task.cancel()
        }
    }

    /// Runs the body in a task of its own for a direct call of `execute()`, which is no start: the
    /// job neither starts nor finishes, and the body stays for the job's own run. Runs nothing once
    /// the body is gone (the job has started, or was cancelled).
    func runDirectly() {
        engineLock.lock()
        let body = self.body
        engineLock.unlock()
        guard let body else { return }
        Task(priority: priority) {
            try? await _TaskRunner.$isDirectRun.withValue(true) { try await body() }
        }
    }

    /// Whether the current task runs a body for a direct call of `execute()`: what the body makes
    /// is not the job's (a ``ValueJob`` keeps no value from it).
    @TaskLocal static var isDirectRun = false

    /// Moves the body into the box its task takes it from, or returns `nil` if it is gone. A
    /// separate function so that no local of `start(_:)` holds the body: the task may run it,
    /// finish the job and deliver `.finished` before `start(_:)` returns, and the body must be
    /// released by then.
    private func takeWork() -> _TaskWork? {
        engineLock.lock()
        let body = self.body
        self.body = nil
        engineLock.unlock()
        return body.map(_TaskWork.init)
    }

    /// Cancels the task running the body, if there is one.
    func cancelTask() {
        let task = engineLock.withLock { self.task }
        task?.cancel()
    }

    /// Runs `body` with `queue` as `JobQueue.current`; returns what it threw.
    private static func run(_ body: (@Sendable () async throws -> Void)?, on queue: JobQueue?) async -> (any Error)? {
        guard let body else { return nil }
        // A job started from inside a direct call's run (its task inherits the task-local) is a
        // job's own run: bound back only then, since binding a task-local allocates.
        if isDirectRun {
            return await $isDirectRun.withValue(false) { await run(body, on: queue) }
        }
        do {
            try await JobQueue.$_taskQueue.withValue(queue) { try await body() }
            return nil
        } catch {
            return error
        }
    }

    private func complete(_ job: Job, with error: (any Error)?) {
        var actions = _Actions()
        engineLock.lock()
        task = nil
        bodyTask = nil
        // A thrown error fails the job; `CancellationError` cancels it (with the job's own reason
        // if it was cancelled first). Only an executing job finishes.
        if job._state == .executing {
            job._finishLocked(failure: error, &actions)
        }
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
    }
}

/// Hands a body to its task, which takes it out exactly once.
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

/// What the task-local of a ``TaskJob``'s body names: the job, weakly, and its runner, which says
/// which task runs the body (`_TaskRunner.bodyJobOfCurrentTaskLocked()`). The runner outlives the
/// job while a task the body created does, keeping nothing of it: its body and task are gone by
/// then.
// @unchecked Sendable: both are set once, in `init`; loading a weak reference is thread-safe, and
// the runner is Sendable.
final class _BodyJob: @unchecked Sendable {
    weak var job: Job?
    let runner: _TaskRunner

    init(_ job: Job, runner: _TaskRunner) {
        self.job = job
        self.runner = runner
    }
}

/// A weak reference to a job: for the jobs of a `JobError` that a job keeps as its outcome.
// @unchecked Sendable: `job` is set once, in `init`; loading a weak reference is thread-safe. (Not
// `weak let`, which needs a newer compiler than the package's tools version.)
final class _WeakJob: @unchecked Sendable {
    weak var job: Job?

    init(_ job: Job) {
        self.job = job
    }
}
