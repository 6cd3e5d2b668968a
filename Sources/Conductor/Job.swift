import Dispatch

/// A unit of work with a lifecycle, dependencies and a priority.
///
/// Subclass `Job` and override ``execute()`` for synchronous work: the job finishes when
/// `execute()` returns. For work that completes later, subclass ``AsynchronousJob`` and call
/// ``AsynchronousJob/finish()``. ``BlockJob``, ``AsyncBlockJob`` and ``TaskJob`` cover the common
/// cases without a subclass.
///
/// Only the engine changes a job's state. A job is `pending` while it waits for dependencies,
/// `ready` once they have finished, `executing` while its work runs and `finished` when done.
/// Cancelling a job that has not started finishes it at once without running its work; cancelling
/// a running job only sets ``isCancelled``. See `Docs/Concepts.md`.
///
/// - Important: Every member may be called from any thread. No lock is held while the job's work,
///   its observers or its completion block run.
// @unchecked Sendable: every mutable stored property below is guarded by `engineLock` (the comment
// on each group says so); `id` and `finishesWhenExecuteReturns` are immutable.
//
// `@exclusivity(unchecked)`: the lock already rules out conflicting accesses from two threads, and
// Swift's dynamic exclusivity checks on these properties cost about 650 instructions per job on the
// hot path (measured with callgrind), a fifth of the engine's total. See Docs/Design.md.
open class Job: @unchecked Sendable {
    /// A number that identifies this job for its lifetime, unique within the process.
    public let id: UInt64

    /// `true` for jobs that finish when `execute()` returns; `false` for jobs that finish later
    /// (``AsynchronousJob``, ``TaskJob``).
    let finishesWhenExecuteReturns: Bool

    // MARK: Lifecycle (guarded by engineLock)
    @exclusivity(unchecked) var _state: JobState = .ready
    @exclusivity(unchecked) var _isCancelled = false
    /// Whether `.ready` has been posted; it is posted at most once.
    @exclusivity(unchecked) var _didPostReady = false
    /// Whether this is a queue's barrier, which keeps its place in line even when cancelled.
    @exclusivity(unchecked) var _isBarrier = false
    /// Whether the queue counts this job in its current barrier epoch (`false` while held behind a barrier).
    @exclusivity(unchecked) var _admitted = false
    /// Finished, but observers, completion block or waiters have not all been served yet.
    @exclusivity(unchecked) var _callbacksPending = false
    @exclusivity(unchecked) var _priority: JobPriority = .normal
    @exclusivity(unchecked) var _qualityOfService: DispatchQoS.QoSClass = .default
    /// Unfinished dependencies; the job is `pending` while this is above zero.
    @exclusivity(unchecked) var _blockers: Int32 = 0
    /// Dependents in `_dependents` that finished first (cancelled); compacted away in bulk.
    @exclusivity(unchecked) var _finishedDependents: Int32 = 0
    @exclusivity(unchecked) var _name: String?

    // MARK: Dependency graph (guarded by engineLock)
    /// Position in the incremental topological order: every unfinished dependency has a smaller one.
    @exclusivity(unchecked) var _order: UInt64
    /// Jobs this job waits for. Strong, like Foundation's, until this job finishes; then dropped, so
    /// that finished graphs free in any order and without recursion.
    @exclusivity(unchecked) var _dependencies: [Job] = []
    /// Unfinished jobs that wait for this one. Dropped when this job finishes.
    @exclusivity(unchecked) var _dependents: [Job] = []

    // MARK: Queue membership (guarded by engineLock)
    /// The queue that owns this job until it finishes. Not retained: a queue keeps itself alive
    /// while it has unsettled jobs (see `JobQueue._linkLocked`). `Unmanaged`, used through
    /// `_withUnsafeGuaranteedRef`, so the hot paths do not touch the queue's reference count,
    /// which every worker and producer would otherwise contend on.
    @exclusivity(unchecked) var _queue: Unmanaged<JobQueue>?
    /// Non-zero while this job has a live entry in its queue's ready buckets.
    @exclusivity(unchecked) var _readyTicket: UInt64 = 0
    /// Links of the queue's insertion-ordered membership list. Not retained: the queue holds one
    /// manual retain per member (see `JobQueue._linkLocked`).
    @exclusivity(unchecked) var _next: Unmanaged<Job>?
    @exclusivity(unchecked) var _previous: Unmanaged<Job>?

    // MARK: Rarely used state (guarded by engineLock)
    /// Observers, completion block, waiters and pending events; allocated on first use.
    @exclusivity(unchecked) var _extras: _JobExtras?

    /// Creates a job in the `ready` state.
    public init() {
        id = nextJobID.wrappingAdd(1, ordering: .relaxed).oldValue
        _order = id
        finishesWhenExecuteReturns = true
    }

    /// Creates a job that finishes when `execute()` returns, or, with `false`, when `_finish()` is
    /// called. `package` so that adapters in this package (ConductorFoundation) can build jobs
    /// whose work completes elsewhere without being ``AsynchronousJob`` subclasses.
    package init(finishesWhenExecuteReturns: Bool) {
        id = nextJobID.wrappingAdd(1, ordering: .relaxed).oldValue
        _order = id
        self.finishesWhenExecuteReturns = finishesWhenExecuteReturns
    }

    // MARK: Work

    /// The job's work. Override it; the default does nothing.
    ///
    /// The engine calls it at most once, on a worker of the job's queue or on the thread that
    /// calls ``start()``. It is never called for a job cancelled before it started. A plain `Job`
    /// finishes when this returns; an ``AsynchronousJob`` finishes when it calls `finish()`.
    open func execute() {}

    /// Runs the job on the calling thread, without a queue.
    ///
    /// A cancelled job is already finished, and `start()` does nothing. Starting a job that is
    /// waiting for dependencies, already started, finished, or owned by a queue is a programming
    /// error and traps with a message naming the job.
    ///
    /// - Complexity: O(1) plus the job's work and, when it finishes, O(dependents).
    public final func start() {
        var actions = _Actions()
        engineLock.lock()
        if let problem = _startProblemLocked() {
            engineLock.unlock()
            if problem.isEmpty { return }
            preconditionFailure(problem)
        }
        _beginExecutingLocked(&actions)
        engineLock.unlock()
        actions.perform()

        let previousJob = _ThreadContext.job
        _ThreadContext.job = self
        execute()
        _ThreadContext.job = previousJob
        if finishesWhenExecuteReturns {
            _finish()
        }
    }

    /// Returns `nil` when `start()` may proceed, an empty string when it should do nothing, or a trap message.
    private func _startProblemLocked() -> String? {
        if let queue = _queue?.takeUnretainedValue() {
            return
                "Job.start(): '\(_describeLocked)' belongs to queue '\(queue._displayNameLocked)'; the queue starts it"
        }
        switch _state {
        case .ready: return nil
        case .finished where _isCancelled: return ""
        case .finished: return "Job.start(): '\(_describeLocked)' has already finished"
        case .executing: return "Job.start(): '\(_describeLocked)' has already started"
        case .pending:
            return "Job.start(): '\(_describeLocked)' is not ready; it waits for \(_blockers) unfinished dependencies"
        }
    }

    // MARK: Properties

    /// A name for diagnostics and error messages. Defaults to `nil`; messages then use the type and ``id``.
    public var name: String? {
        get { engineLock.withLock { _name } }
        set { engineLock.withLock { _name = newValue } }
    }

    /// The job's priority within its queue. Changing it while the job waits in a queue takes effect
    /// at once: the job moves to the back of its new priority level.
    ///
    /// - Complexity: O(1) amortized.
    public var queuePriority: JobPriority {
        get { engineLock.withLock { _priority } }
        set {
            var actions = _Actions()
            engineLock.lock()
            if _priority != newValue {
                _priority = newValue
                if _readyTicket != 0, let queue = _queue?.takeUnretainedValue() {
                    queue._ready.remove(self, &actions)
                    queue._pushReadyLocked(self)
                }
            }
            engineLock.unlock()
            actions.perform()
        }
    }

    /// The quality of service the job asks for. Recorded for bridges and diagnostics; the worker
    /// that runs it uses its queue's ``JobQueue/qualityOfService``. Defaults to `.default`.
    public var qualityOfService: DispatchQoS.QoSClass {
        get { engineLock.withLock { _qualityOfService } }
        set { engineLock.withLock { _qualityOfService = newValue } }
    }

    /// The job's current lifecycle state.
    public var state: JobState { engineLock.withLock { _state } }
    /// Whether every dependency has finished and the job has not yet started.
    public var isReady: Bool { state == .ready }
    /// Whether the job's work is running (for an asynchronous job: until it calls `finish()`).
    public var isExecuting: Bool { state == .executing }
    /// Whether the job has finished, by completing its work or by being cancelled before it started.
    public var isFinished: Bool { state == .finished }
    /// Whether ``cancel()`` has been called (or a ``TaskJob``'s body threw `CancellationError`).
    public var isCancelled: Bool { engineLock.withLock { _isCancelled } }

    // MARK: Cancellation

    /// Cancels the job.
    ///
    /// - A job that has not started finishes at once, without running its work and without waiting
    ///   for a slot or for its dependencies; its dependents are released and see it as cancelled.
    /// - A running job only has ``isCancelled`` set and observers told `.cancelled`; it keeps its
    ///   slot until its work returns (or, for an asynchronous job, calls `finish()`). Long work
    ///   should check `isCancelled`.
    /// - Cancelling a finished or already cancelled job does nothing.
    ///
    /// Subclasses that override it must call `super.cancel()`.
    ///
    /// - Complexity: O(1), plus O(dependents) when the job finishes.
    open func cancel() {
        var actions = _Actions()
        engineLock.lock()
        _cancelLocked(&actions)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
    }

    func _cancelLocked(_ actions: inout _Actions) {
        guard !_isCancelled, _state != .finished else { return }
        _isCancelled = true
        _postLocked(.cancelled, &actions)
        switch _state {
        case .pending, .ready:
            // A queue's barrier keeps its place in line so that later jobs still wait for earlier ones.
            if !(_isBarrier && _queue != nil) {
                _finishLocked(&actions)
            }
        case .executing, .finished:
            break
        }
    }

    // MARK: Engine transitions (call with engineLock held)

    /// The job is about to run: `ready → executing`.
    func _beginExecutingLocked(_ actions: inout _Actions) {
        #if CONDUCTOR_INVARIANTS
            precondition(_state == .ready, "Conductor: starting \(_describeLocked) in state \(_state)")
        #endif
        _state = .executing
        if !_didPostReady {
            _didPostReady = true
            _postLocked(.ready, &actions)
        }
        _postLocked(.started, &actions)
    }

    /// Finishes an executing job from outside the lock; does nothing if it is not executing.
    /// `package` for adapters in this package; users call ``AsynchronousJob/finish()``.
    package func _finish() {
        var actions = _Actions()
        engineLock.lock()
        if _state == .executing {
            _finishLocked(&actions)
        }
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
    }

    /// `pending | ready | executing → finished`: frees the slot, leaves the queue, releases dependents.
    ///
    /// - Complexity: O(dependents).
    func _finishLocked(_ actions: inout _Actions) {
        #if CONDUCTOR_INVARIANTS
            precondition(_state != .finished, "Conductor: finishing \(_describeLocked) twice")
        #endif
        let wasExecuting = _state == .executing
        _state = .finished
        if !wasExecuting {
            // Finished without running (cancelled): its work will never run, so let it go now. A
            // closure that captured the job would otherwise keep it alive forever.
            _discardWorkLocked(&actions)
            // Unfinished dependencies still list this job as a dependent; let them know so that
            // a long-running dependency does not accumulate cancelled dependents.
            if _blockers > 0 {
                for dependency in _dependencies where dependency._state != .finished {
                    dependency._dependentFinishedFirstLocked(&actions)
                }
            }
        }
        let hasCallbacks = _extras != nil
        _callbacksPending = hasCallbacks

        if let queue = _queue {
            _queue = nil
            queue._withUnsafeGuaranteedRef { queue in
                if hasCallbacks {
                    _extras!.settleQueue = queue
                }
                queue._jobLeftLocked(self, wasExecuting: wasExecuting, settlesNow: !hasCallbacks, &actions)
            }
        }

        for dependent in _dependents {
            dependent._dependencyFinishedLocked(&actions)
        }
        // Drop the edges, but release the jobs after unlocking: a job freed here would run its
        // deinit (and its captures' deinits) under the lock.
        actions.drop(&_dependents)
        actions.drop(&_dependencies)
        _postLocked(.finished, &actions)
    }

    /// Hands the job's un-run work (closures) to `actions` to be released after unlocking. Called
    /// when the job finishes without having started. Subclasses in this module that store work
    /// override it; a user's `Job` subclass owns its own stored properties.
    func _discardWorkLocked(_ actions: inout _Actions) {}

    /// A dependent finished before this job (it was cancelled). Once such dependents are at least
    /// 16 and half the list, they are removed in one pass, so the cost is O(1) amortized per
    /// cancelled dependent and the list never holds more dead entries than live ones (plus 16).
    func _dependentFinishedFirstLocked(_ actions: inout _Actions) {
        _finishedDependents += 1
        guard _finishedDependents >= 16, Int(_finishedDependents) * 2 >= _dependents.count else { return }
        var finished: [Job] = []
        _dependents.removeAll { dependent in
            guard dependent._state == .finished else { return false }
            finished.append(dependent)
            return true
        }
        actions.release(finished)
        _finishedDependents = 0
    }

    /// One of this job's dependencies finished.
    func _dependencyFinishedLocked(_ actions: inout _Actions) {
        // A job cancelled before its dependencies finished is already finished; nothing to count.
        guard _state == .pending else { return }
        _blockers -= 1
        if _blockers == 0 {
            _becomeReadyLocked(&actions)
        }
    }

    /// `pending → ready`: the last unfinished dependency finished or was removed.
    func _becomeReadyLocked(_ actions: inout _Actions) {
        _state = .ready
        if !_didPostReady {
            _didPostReady = true
            _postLocked(.ready, &actions)
        }
        if _admitted, let queue = _queue {
            queue._withUnsafeGuaranteedRef { queue in
                queue._pushReadyLocked(self)
                actions.touch(queue)
            }
        }
    }

    /// `ready → pending`: a dependency was added to a job that had none unfinished.
    func _becomePendingLocked(_ actions: inout _Actions) {
        _state = .pending
        if _readyTicket != 0, let queue = _queue?.takeUnretainedValue() {
            queue._ready.remove(self, &actions)
        }
    }

    // MARK: Descriptions

    /// The job's name, or its type and ``id`` when it has none.
    public var displayName: String { engineLock.withLock { _describeLocked } }

    var _describeLocked: String { _name ?? "\(type(of: self))#\(id)" }
}
