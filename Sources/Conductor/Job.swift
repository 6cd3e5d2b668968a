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
    // The one-byte fields come first, in the padding after `finishesWhenExecuteReturns`, so that the
    // lifecycle and the rest pack without a gap. A `BlockJob` is 120 bytes, a 128-byte malloc chunk:
    // the largest that glibc frees into its fast bins, without the arena's lock, when another thread
    // frees it (a worker, a job the thread adding jobs allocated). Anything a plain job does not use
    // lives in `_details` or `_extras`. See Docs/Design.md, "Memory ownership".
    /// Flags in one byte: see `_JobFlags`.
    @exclusivity(unchecked) var _flags = _JobFlags()
    @exclusivity(unchecked) var _priority: JobPriority = .normal
    @exclusivity(unchecked) var _qualityOfService: DispatchQoS.QoSClass = .default
    /// State, flags and wait reasons; changed only through its events (see `_JobLifecycle`).
    @exclusivity(unchecked) var _lifecycle = _JobLifecycle()

    /// What only some jobs need, allocated on first use and kept for the job's life (`_JobDetails`:
    /// a name, the outcome's payloads, a batch wait, an order moved by Pearce–Kelly, further blocks
    /// of a `BlockJob`, a count of dependents that finished first); or, while the batch wait is the
    /// only one, that `_BatchWait` itself.
    @exclusivity(unchecked) var _side: _JobSide?

    /// The job's details, if it has any beyond a batch wait.
    var _details: _JobDetails? {
        guard let side = _side, !side.isBatch else { return nil }
        return unsafeDowncast(side, to: _JobDetails.self)
    }

    /// Whether this is a queue's barrier, which keeps its place in line even when cancelled.
    var _isBarrier: Bool {
        get { _flags.contains(.isBarrier) }
        set { _flags.set(.isBarrier, newValue) }
    }
    /// Whether the queue counts this job in its current barrier epoch (`false` while held behind a barrier).
    var _admitted: Bool {
        get { _flags.contains(.admitted) }
        set { _flags.set(.admitted, newValue) }
    }
    /// Finished, but observers, completion block or waiters have not all been served yet.
    var _callbacksPending: Bool {
        get { _flags.contains(.callbacksPending) }
        set { _flags.set(.callbacksPending, newValue) }
    }
    /// Whether the job has exclusivity categories (in its extras), so that claiming it must take them.
    var _isExclusive: Bool {
        get { _flags.contains(.isExclusive) }
        set { _flags.set(.isExclusive, newValue) }
    }
    /// Whether the job's work runs on its `executionQueue` rather than on the worker.
    var _runsElsewhere: Bool {
        get { _flags.contains(.runsElsewhere) }
        set { _flags.set(.runsElsewhere, newValue) }
    }
    /// Whether a group counts the job among its unfinished children (`_countingGroupLocked`).
    var _isCountedChild: Bool {
        get { _flags.contains(.isCountedChild) }
        set { _flags.set(.isCountedChild, newValue) }
    }
    /// Whether the job joined its queue as another job's generated dependency (`_JobFlags`).
    var _joinedAsGeneratedDependency: Bool {
        get { _flags.contains(.joinedAsGeneratedDependency) }
        set { _flags.set(.joinedAsGeneratedDependency, newValue) }
    }

    /// The group that counts this job among its unfinished children, if one does: the group whose
    /// queue of children the job is on, which holds the group while it counts children
    /// (`JobQueue._countingGroupRetain`). Found through that queue, so a child needs no side
    /// object to know its group; read only while the job is on it (it leaves at its finish, which
    /// saves the group in the side object if the job is counted down later, when it settles). Call
    /// with `engineLock` held.
    var _countingGroupLocked: GroupJob? {
        _countingGroupUnretainedLocked?.takeUnretainedValue()
    }

    /// `_countingGroupLocked`, not retained: for walking the groups around a job on a hot path (a
    /// group's retain and release are slow ones, through its side table). Valid while the lock is
    /// held.
    var _countingGroupUnretainedLocked: Unmanaged<GroupJob>? {
        guard _isCountedChild else { return nil }
        return _queue?._withUnsafeGuaranteedRef { $0._countingGroupRetain }
    }

    /// Dependents in `_dependents` that finished first (cancelled); compacted away in bulk.
    var _finishedDependents: Int32 {
        get { _details?.finishedDependents ?? 0 }
        set {
            if newValue != 0 || _details != nil { _detailsLocked.finishedDependents = newValue }
        }
    }

    var _name: String? {
        get { _details?.name }
        set {
            if newValue != nil || _details != nil { _detailsLocked.name = newValue }
        }
    }

    /// The batch wait of `addJobs(_:waitUntilFinished: true)` this job counts in, until it settles.
    /// In the side slot itself while the job has no other details.
    var _batch: _BatchWait? {
        get {
            guard let side = _side else { return nil }
            return side.isBatch
                ? unsafeDowncast(side, to: _BatchWait.self) : unsafeDowncast(side, to: _JobDetails.self).batch
        }
        set {
            if let details = _details {
                details.batch = newValue
            } else {
                _side = newValue
            }
        }
    }

    /// The lifecycle's state, read under `engineLock`.
    var _state: JobState { _lifecycle.state }
    /// Whether the job was cancelled, read under `engineLock`.
    var _isCancelled: Bool { _lifecycle.isCancelled }

    // MARK: Dependency graph (guarded by engineLock)
    /// Position in the incremental topological order: every unfinished dependency has a smaller one.
    /// The job's id until Pearce–Kelly moves it; a moved order is kept in `_details`.
    var _order: UInt64 {
        get { _details?.movedOrder ?? id }
        set {
            if let details = _details {
                details.movedOrder = newValue
            } else if newValue != id {
                _detailsLocked.movedOrder = newValue
            }
        }
    }
    /// Jobs this job waits for. Strong, like Foundation's, until this job finishes; then dropped, so
    /// that finished graphs free in any order and without recursion.
    @exclusivity(unchecked) var _dependencies = _JobList()
    /// Unfinished jobs that wait for this one. Dropped when this job finishes.
    @exclusivity(unchecked) var _dependents = _JobList()

    // MARK: Queue membership (guarded by engineLock)
    /// The queue that owns this job until it finishes. Not retained: a queue keeps itself alive
    /// while it has unsettled jobs (see `JobQueue._linkLocked`). `Unmanaged`, used through
    /// `_withUnsafeGuaranteedRef`, so the hot paths do not touch the queue's reference count,
    /// which every worker and producer would otherwise contend on.
    @exclusivity(unchecked) var _queue: Unmanaged<JobQueue>?
    /// While the job is in its queue's ready line, its ticket there (non-zero, below
    /// `_DiagnosticClock.heldMark`); from the moment it starts executing, the time it started,
    /// with `_DiagnosticClock.startStamp` set (`_startedAtLocked`); while it is held behind a
    /// barrier (or is a barrier not yet admitted), the number of that barrier's epoch, with
    /// `_DiagnosticClock.heldMark` set (`JobQueue._epochIndexLocked`). One field for the three,
    /// because a job is in at most one of those places at once, and a separate one would move
    /// `BlockJob` to a larger malloc size class. Tickets and epoch numbers count up from 1 per
    /// queue and never reach those bits. Once the job has finished, nothing reads it.
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
        finishesWhenExecuteReturns = true
    }

    /// Creates a job that finishes when `execute()` returns, or, with `false`, when `_finish()` is
    /// called. `package` so that adapters in this package (ConductorFoundation) can build jobs
    /// whose work completes elsewhere without being ``AsynchronousJob`` subclasses.
    package init(finishesWhenExecuteReturns: Bool) {
        id = nextJobID.wrappingAdd(1, ordering: .relaxed).oldValue
        self.finishesWhenExecuteReturns = finishesWhenExecuteReturns
    }

    #if CONDUCTOR_INVARIANTS
        // A job's deinit releases its body, its callbacks and what they capture, whose deinits are
        // user code: never under the engine lock (the engine hands its last references to
        // `_Actions`, released after unlocking). Debug builds check it on every job.
        deinit {
            _requireFreedOutsideEngineLock("job \(id)")
        }
    #endif

    // MARK: Work

    /// The job's work. Override it; the default does nothing.
    ///
    /// The engine calls it at most once, on a worker of the job's queue or on the thread that
    /// calls ``start()``. It is never called for a job cancelled before it started. A plain `Job`
    /// finishes when this returns; an ``AsynchronousJob`` finishes when it calls `finish()`.
    ///
    /// Throwing fails the job: its ``outcome`` is `.failed` with the error (or, for
    /// `CancellationError`, `.cancelled`), and an asynchronous job that throws finishes at once.
    /// Overrides that cannot fail need not be marked `throws`.
    open func execute() throws {}

    /// ``execute()``, where the engine runs a job it claimed under the engine lock (on a worker, on
    /// the job's ``executionQueue``, or in ``start()``): the job's work belongs to the calling
    /// thread then. ``BlockJob`` and ``AsyncBlockJob`` override it to take their closures without
    /// first asking which thread runs them.
    func _executeClaimed() throws {
        try execute()
    }

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
            _trap(problem)
        }
        if _isExclusive, !_exclusivity.acquireLocked(self, _extras!, joinLine: false, &actions) {
            let message =
                "Job.start(): '\(_describeLocked)' cannot start now: \(_exclusivity.obstacleLocked(_extras!.exclusivityCategories ?? [])); a queue would wait for it"
            engineLock.unlock()
            _trap(message)
        }
        _beginExecutingLocked(&actions)
        let elsewhere = _runsElsewhere
        // A retry job's attempt sees the retry job's queue as `JobQueue.current` there too.
        let queue = elsewhere ? _extras?.retryJob?._attemptQueueLocked : nil
        engineLock.unlock()
        actions.perform()
        if elsewhere {
            return _executeOnExecutionQueue(queue: queue)
        }

        let previousJob = _ThreadContext.job
        _ThreadContext.job = self
        var failure: (any Error)?
        do {
            try _executeClaimed()
        } catch {
            failure = error
        }
        _ThreadContext.job = previousJob
        if finishesWhenExecuteReturns || failure != nil {
            _finish(failure: failure)
        } else {
            _executeReturned()
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
        case .pending where _lifecycle.waits.dependencies == 0:
            return
                "Job.start(): '\(_describeLocked)' is not ready; its conditions have not been satisfied (a queue evaluates them: add the job to one)"
        case .pending:
            return "Job.start(): '\(_describeLocked)' is not ready; it waits for \(_unfinishedDependenciesLocked)"
        }
    }

    /// "1 unfinished dependency: 'A'" or "3 unfinished dependencies: 'A', 'B', 'C'", naming at most
    /// five, for messages about a pending job.
    var _unfinishedDependenciesLocked: String {
        let unfinished = _dependencies.filter { $0._state != .finished }
        let shown = unfinished.prefix(5).map { "'\($0._describeLocked)'" }
        let more = unfinished.count > shown.count ? " and \(unfinished.count - shown.count) more" : ""
        let noun = unfinished.count == 1 ? "dependency" : "dependencies"
        return "\(unfinished.count) unfinished \(noun): \(shown.joined(separator: ", "))\(more)"
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
                if let queue = _queue?.takeUnretainedValue() {
                    queue._jobPriorityChangedLocked(self, &actions)
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
    /// Whether the job was cancelled, before or while it ran, by ``cancel()``, ``cancel(reason:)``
    /// or another cause (its queue's `cancelAllJobs()`, a failed `.requireSuccess` dependency), or
    /// its work threw `CancellationError`.
    public var isCancelled: Bool { engineLock.withLock { _isCancelled } }

    /// How the job ended: `nil` until it has finished, then fixed forever. Set before observers are
    /// told `.finished` and before waiters wake. See ``JobOutcome`` for the rule.
    public var outcome: JobOutcome? { engineLock.withLock { _outcomeLocked } }

    /// Why the job was cancelled (the first reason given), or `nil` if it was not. Known as soon as
    /// it is cancelled, while a running job's work is still ending.
    public var cancellationReason: CancellationReason? { engineLock.withLock { _cancellationReasonLocked } }

    var _outcomeLocked: JobOutcome? {
        switch _lifecycle.outcome {
        case nil: nil
        case .succeeded: .succeeded
        case .failed: .failed(_details!.error!)
        case .cancelled: .cancelled(_cancellationReasonLocked!)
        }
    }

    var _cancellationReasonLocked: CancellationReason? {
        guard let code = _lifecycle.cancellationCode else { return nil }
        return CancellationReason(
            code: code, detail: _details?.detail, responsibleJob: _details?.responsibleJob)
    }

    /// The longest the job may execute, or `nil` (the default) for no limit.
    ///
    /// The clock starts when the job starts executing, not when it is queued, and stops when it
    /// finishes. When it runs out, the job is cancelled with ``CancellationReason/Code/timedOut``
    /// (and its ``cancel()`` override runs, so a ``TaskJob`` or ``ValueJob`` cancels its task). An
    /// asynchronous job that honours cancellation then ends `.cancelled(timedOut)`. A synchronous
    /// `execute()` that never checks ``isCancelled`` cannot be stopped: it runs to its end, and the
    /// job is still cancelled. The timer is cancelled when the job finishes and holds the job only
    /// weakly, so it keeps nothing alive.
    ///
    /// Set it before the job starts. Setting it on an executing job is a programming error and
    /// traps with a message naming the job; on a finished job it has no effect.
    public var timeout: Duration? {
        get { engineLock.withLock { _extras?.timeout } }
        set {
            engineLock.lock()
            if _state == .executing {
                let name = _describeLocked
                engineLock.unlock()
                _trap("Job.timeout: '\(name)' is already executing; set the timeout before it starts")
            }
            if _lifecycle.isUnstarted && (newValue != nil || _extras != nil) {
                _extrasLocked.timeout = newValue
            }
            engineLock.unlock()
        }
    }

    /// The timer counting down ``timeout`` while the job executes, if any. For tests.
    package var _timeoutTimer: DispatchSourceTimer? {
        engineLock.withLock { _extras?.timer as? DispatchSourceTimer }
    }

    /// The job's details, created on first use. Call with `engineLock` held.
    var _detailsLocked: _JobDetails {
        if let details = _details { return details }
        let details = _JobDetails()
        details.batch = _batch  // a batch wait kept in the slot moves into the details
        _side = details
        return details
    }

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
    /// The reason is ``CancellationReason/Code/requested``; ``cancel(reason:)`` gives one of the
    /// caller's.
    ///
    /// Subclasses that override it must call `super.cancel()`. The override runs for every
    /// cancellation, whatever its cause: ``cancel(reason:)``, `cancelAllJobs()` and the engine's own
    /// cancellations call it after the job is already cancelled (so `super.cancel()` then does
    /// nothing more).
    ///
    /// - Complexity: O(1), plus O(dependents) when the job finishes.
    open func cancel() {
        _cancel(CancellationReason(code: .requested))
    }

    /// Cancels the job for `reason`, as ``cancel()`` does. Only the first reason counts: it is the
    /// one ``cancellationReason`` and ``outcome`` report.
    ///
    /// ```swift
    /// job.cancel(reason: .init(code: .requested, detail: "user tapped Stop"))
    /// ```
    ///
    /// - Complexity: O(1), plus O(dependents) when the job finishes.
    public final func cancel(reason: CancellationReason) {
        if _cancel(reason) && _mayOverrideCancel {
            cancel()
        }
    }

    /// The engine's part of a cancellation. Returns whether it cancelled the job (it was neither
    /// finished nor already cancelled).
    @discardableResult
    func _cancel(_ reason: CancellationReason) -> Bool {
        var actions = _Actions()
        engineLock.lock()
        let cancelled = _cancelLocked(reason, &actions)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        return cancelled
    }

    /// Whether `cancel()` may do more than the engine's part (`_cancelLocked`): `false` only for
    /// this module's final job types that do not override it, so that `cancelAllJobs()` need not
    /// call it again for them.
    var _mayOverrideCancel: Bool {
        let type = type(of: self)
        return type != BlockJob.self && type != AsyncBlockJob.self && type != _BarrierJob.self
    }

    @discardableResult
    func _cancelLocked(_ reason: CancellationReason, _ actions: inout _Actions) -> Bool {
        let effect = _lifecycle.cancelled(reason.code)
        if effect == .ignored {
            return false
        }
        if reason.detail != nil || reason.responsibleJob != nil {
            let details = _detailsLocked
            details.detail = reason.detail
            details.responsibleJob = reason.responsibleJob
        }
        _postLocked(.cancelled, &actions)
        if _isTracing.load(ordering: .relaxed) {
            _traceLocked(.cancelled)
        }
        // A queue's barrier keeps its place in line so that later jobs still wait for earlier ones.
        if effect == .finishWithoutRunning && !(_isBarrier && _queue != nil) {
            // A group's children are cancelled in this critical section, before the group
            // finishes: no one can see the group finished while one of its children is not.
            if type(of: self) == GroupJob.self {
                unsafeDowncast(self, to: GroupJob.self)._cancelChildrenLocked(&actions)
            }
            _finishLocked(&actions)
        }
        return true
    }

    // MARK: Engine transitions (call with engineLock held)

    /// The job is about to run: `ready → executing`.
    @inline(__always)
    func _beginExecutingLocked(_ actions: inout _Actions) {
        _readyTicket = _DiagnosticClock.startStamp | _DiagnosticClock.now()
        if _isTracing.load(ordering: .relaxed) {
            _traceLocked(.started)
        }
        if _lifecycle.started() {
            _postLocked(.ready, &actions)
        }
        _postLocked(.started, &actions)
        if let extras = _extras, let timeout = extras.timeout {
            actions.startTimeout(of: self, after: timeout)
        }
    }

    /// Starts the timer of a job that has a ``timeout`` and began executing. Called after
    /// unlocking: the timer is created outside the lock, then kept only if the job still executes.
    func _startTimeout(after timeout: Duration) {
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.setEventHandler { [weak self] in
            self?.cancel(reason: CancellationReason(code: .timedOut, detail: "after \(timeout)"))
        }
        timer.schedule(deadline: .now() + _dispatchInterval(timeout))
        let object = timer as AnyObject  // the timer itself (a class instance), before locking
        engineLock.lock()
        let stillExecuting = _state == .executing
        if stillExecuting {
            _extrasLocked.timer = object
        }
        engineLock.unlock()
        if !stillExecuting {
            timer.cancel()  // finished first: the timer never fires
        }
        // A source must be activated before its last release, cancelled or not.
        timer.resume()
    }

    /// Finishes an executing job from outside the lock, failed if `failure` is an error other than
    /// `CancellationError`; does nothing if it is not executing. `package` for adapters in this
    /// package; users call ``AsynchronousJob/finish()``.
    ///
    /// - Parameters:
    ///   - discardingWork: The job's work never ran (its exclusivity category was refused):
    ///     release it now, as for a job cancelled before it started.
    ///   - unlessCancelled: A job cancelled by then ends cancelled, with its own reason, and
    ///     `failure` is dropped: a composite job's (a group's, a retry job's), decided in the same
    ///     critical section that finishes it, so that a `cancel()` cannot land in between.
    package func _finish(failure: (any Error)? = nil, discardingWork: Bool = false, unlessCancelled: Bool = false) {
        var actions = _Actions()
        engineLock.lock()
        var releasesSpentWork = false
        if _state == .executing {
            if discardingWork {
                _discardWorkLocked(&actions)
            }
            // The work has returned and handed back what it ran: this call releases it.
            releasesSpentWork = _flags.contains(.workReturned)
            _finishLocked(failure: unlessCancelled && _isCancelled ? nil : failure, &actions)
        }
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        if releasesSpentWork {
            _releaseSpentWork()
        }
    }

    /// The job's `execute()` returned on the calling thread, and the job does not finish when it
    /// returns (see `_executeReturnedLocked()`). Call without the lock.
    func _executeReturned() {
        engineLock.lock()
        let releasesSpentWork = _executeReturnedLocked()
        engineLock.unlock()
        if releasesSpentWork {
            _releaseSpentWork()
        }
    }

    /// The job's `execute()` returned, and the job does not finish when it returns. Returns whether
    /// the caller releases what the work ran (`_releaseSpentWork()`, after unlocking): yes if the
    /// job has already finished; otherwise the `finish()` to come does.
    @inline(__always)
    func _executeReturnedLocked() -> Bool {
        if _state == .finished {
            return true
        }
        _flags.insert(.workReturned)
        return false
    }

    /// `pending | ready | executing → finished`: fixes the outcome, frees the slot, leaves the
    /// queue, releases dependents and cancels those whose `.requireSuccess` edge this outcome
    /// breaks. `failure` is the error the work ended with, if any: `CancellationError` cancels,
    /// any other error fails.
    ///
    /// - Complexity: O(dependents), plus, for the first call of a critical section, the whole
    ///   cascade of `.requireSuccess` cancellations it starts, O(edges) in all, iteratively.
    func _finishLocked(failure: (any Error)?, _ actions: inout _Actions) {
        guard let failure else {
            return _finishLocked(&actions)
        }
        if failure is CancellationError {
            if _lifecycle.workReportedCancellation() {
                _postLocked(.cancelled, &actions)
            }
            _finishLocked(&actions)
        } else {
            // A `JobError` may name this job or its group: kept, it must not keep them alive.
            _detailsLocked.error = (failure as? JobError)?._keptLocked() ?? failure
            _finishLocked(failed: true, &actions)
        }
    }

    /// `_finishLocked(failure:)` without an error: the work succeeded, or was cancelled.
    func _finishLocked(failed: Bool = false, _ actions: inout _Actions) {
        let wasExecuting = _lifecycle.finished(failed: failed)
        if wasExecuting && _isTracing.load(ordering: .relaxed) {
            _traceLocked(.finished)
        }
        if !wasExecuting {
            // Finished without running (cancelled): its work will never run, so let it go now. A
            // closure that captured the job would otherwise keep it alive forever.
            _discardWorkLocked(&actions)
            // Unfinished dependencies still list this job as a dependent; let them know so that
            // a long-running dependency does not accumulate cancelled dependents.
            if !_lifecycle.waits.isEmpty {
                for dependency in _dependencies where dependency._state != .finished {
                    dependency._dependentFinishedFirstLocked(&actions)
                }
            }
        }
        var hasCallbacks = false
        var ownProgress: JobProgress?
        #if CONDUCTOR_INVARIANTS
            _require(
                !_isCountedChild || _countingGroupLocked != nil,
                "Conductor: '\(_describeLocked)' is counted by a group but is not on its queue of children as it finishes"
            )
        #endif
        if let extras = _extras {
            // Found through the queue of children, which the job leaves below.
            let countingGroup = _countingGroupLocked
            if _isExclusive {
                _exclusivity.leaveLocked(self, extras, &actions)
            }
            if extras.conditionsEvaluating || !extras.conditions.isEmpty || !extras.generatedDependencies.isEmpty {
                _dropConditionsLocked(extras, &actions)
            }
            if let timer = extras.timer {
                // Finished before its time limit: the timer is cancelled and keeps nothing alive.
                extras.timer = nil
                actions.cancelAfterUnlocking(timer: timer)
            }
            if let progress = extras.progress {
                ownProgress = progress
                progress._finishLocked(&actions)
            }
            if let countingGroup {
                countingGroup._childFinishedInProgressLocked(ownProgress, &actions)
            }
            if extras.hasCallbacks {
                hasCallbacks = true
                // Counted down when it settles, after its callbacks, off its queue of children.
                extras.countingGroup = countingGroup
            } else {
                // Nothing to deliver: its group counts it now (otherwise when it settles).
                _countDownGroupLocked(countingGroup, &actions)
                // Only waiters: nobody to call, so wake them now and settle without a delivery round.
                extras.resumeWaiters(&actions)
                _extras = nil
            }
        } else if _isCountedChild {
            _countDownPlainChildLocked(&actions)
        }
        _callbacksPending = hasCallbacks
        if !hasCallbacks && _batch != nil {
            _countSettledInBatchLocked(&actions)
        }

        if let queue = _queue {
            _queue = nil
            queue._withUnsafeGuaranteedRef { queue in
                if hasCallbacks {
                    _extras!.settleQueue = queue
                }
                queue._jobLeftLocked(self, wasExecuting: wasExecuting, settlesNow: !hasCallbacks, &actions)
                queue._countLeavingLocked(self, ownProgress: ownProgress, &actions)
            }
        }

        let outcome = _lifecycle.outcome!
        // Moved out, not copied: the list keeps the dependents alive while they are visited
        // unretained, and its storage's reference count, which the thread that added the edges
        // last wrote, is not touched under the lock.
        var dependents = _JobList()
        swap(&dependents, &_dependents)
        if case .many(let buffer) = dependents, buffer.count >= JobQueue.reserveForDependents {
            Job._reserveLineLocked(forDependents: buffer)
        }
        dependents.forEachUnretained(prefetchingAhead: Job.dependentsToPrefetch) { dependent in
            dependent._dependencyFinishedLocked(self, outcome, &actions)
        }
        // Drop the edges, but release the jobs after unlocking: a job freed here would run its
        // deinit (and its captures' deinits) under the lock.
        actions.drop(&dependents)
        actions.drop(&_dependencies)
        _postLocked(.finished, &actions)
        if let ownProgress, _extras == nil {
            // After `.finished` was posted, so that a job with nothing to deliver has no delivery
            // round: the job keeps its progress object and nothing else.
            _extras = _JobExtras(keeping: ownProgress)
        }
        actions.cancelDependentsLocked()
    }

    /// A group's child with no side object finished: nothing to deliver, so its group counts it
    /// now. Out of line, so that a plain job's finish pays one flag test for groups.
    @inline(never)
    func _countDownPlainChildLocked(_ actions: inout _Actions) {
        // Not retained: the queue of children holds the group while it counts this job, and
        // hands that reference to `actions` when its count ends. `_countDownGroupLocked`'s two
        // lines are repeated: calling it retained the group, a slow retain (a group has a side
        // table), and `group` counted 7% more instructions in callgrind.
        guard let group = _queue?._withUnsafeGuaranteedRef({ $0._countingGroupRetain }) else { return }
        group._withUnsafeGuaranteedRef { group in
            group._childFinishedInProgressLocked(nil, &actions)
            _isCountedChild = false
            group._childFinishedLocked(self, &actions)
        }
    }

    /// Makes room at once in the ready line that `dependents` are likely to enter, before they are
    /// released one by one: the first dependent's queue and priority level, for all of them. A fan-out
    /// of 10⁴ jobs would otherwise grow that line eleven times, moving its entries each time.
    /// A guess that is wrong (dependents on other queues or levels, or still waiting for other
    /// dependencies) only leaves that line with the capacity a burst of that size would have given it.
    @inline(never)
    static func _reserveLineLocked(forDependents dependents: _JobBuffer) {
        let first = dependents[0]
        guard first._admitted, let queue = first._queue else { return }
        queue._withUnsafeGuaranteedRef { $0._ready.reserve(dependents.count, level: first._priority.bucket) }
    }

    /// For a setting made before the job starts (`member`, with `advice` for the message). With
    /// `engineLock` held: returns `true`, still holding it, while the job has not started.
    /// Otherwise unlocks, and returns `false` for a job cancelled before it started (the setting
    /// has no effect), or traps for one that started.
    func _isUnstartedLocked(_ member: String, _ advice: String) -> Bool {
        if _lifecycle.isUnstarted { return true }
        let started = _lifecycle.didStart
        let name = _describeLocked
        engineLock.unlock()
        if !started { return false }
        _trap("\(member): '\(name)' has already started; \(advice) before it starts")
    }

    /// The runner of the job's `async` body, for jobs that have one (``TaskJob``, ``ValueJob``).
    var _taskRunner: _TaskRunner? { nil }

    /// Whether the job is made of other jobs (``GroupJob``, ``RetryJob``): its long executions are
    /// its children's or attempts', so ``StallWatchdog`` reports those instead.
    var _isComposite: Bool { false }

    /// Whether a blocking wait on the main queue for the job would never return although it has
    /// started: a ``RetryJob`` waiting out its backoff to retry there. Call with `engineLock` held.
    var _waitsForTheMainQueueLocked: Bool { false }

    /// A new progress object for the job (`_progressLocked`), counting nowhere yet: one unit,
    /// complete if the job has finished. A ``GroupJob``'s adds up its children. Call with
    /// `engineLock` held.
    func _newProgressLocked(_ actions: inout _Actions) -> JobProgress {
        _state == .finished
            ? JobProgress(kind: .job, total: 1, completed: 1, finished: true)
            : JobProgress(kind: .job, total: 1, completed: 0)
    }

    /// What an executing job of a composite kind waits for, for ``explain()``; `nil` for plain
    /// jobs. Overridden by ``GroupJob`` and ``RetryJob``. Call with `engineLock` held.
    func _executingDetailLocked(now: UInt64) -> _DeferredText? {
        guard _taskRunner != nil else { return nil }
        return _DeferredText("finish(): its task is running; the job finishes when the task ends")
    }

    /// The job settled: counts it down in its batch wait, and wakes the batch's waiter if it was
    /// the last. Call with `engineLock` held.
    func _countSettledInBatchLocked(_ actions: inout _Actions) {
        guard let batch = _batch else { return }
        _batch = nil
        batch.remaining -= 1
        if batch.remaining == 0 {
            actions.resume([.batch(batch)])
        }
    }

    /// Hands the job's un-run work (closures) to `actions` to be released after unlocking. Called
    /// when the job finishes without having started. Subclasses in this module that store work
    /// override it; a user's `Job` subclass owns its own stored properties.
    func _discardWorkLocked(_ actions: inout _Actions) {}

    /// Releases what an asynchronous job's work ran, once the job has finished and `execute()` has
    /// returned, on the thread that saw the second of the two; without the lock. `AsyncBlockJob`
    /// releases its body, so the thread calling `finish()`, not the worker, frees what it captured.
    func _releaseSpentWork() {}

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

    /// One of this job's dependencies finished with `outcome`. Under a `.requireSuccess` edge, an
    /// outcome other than success cancels this job instead (queued in `actions`, so that a long
    /// cascade is carried out iteratively, never by recursion).
    func _dependencyFinishedLocked(_ dependency: Job, _ outcome: _OutcomeKind, _ actions: inout _Actions) {
        if outcome != .succeeded, _state == .pending, _requiresSuccessLocked(of: dependency) {
            actions.cancelLater(self, because: dependency, outcome)
            // Cancelling finishes the job, so the edge need not be counted; but a queue's barrier
            // is not finished by cancellation (it keeps its place), so it must still be released.
            guard _isBarrier && _queue != nil else { return }
        }
        _carryOut(_lifecycle.dependencyFinished(), &actions)
    }

    /// Whether this job's edge to `dependency` has the `.requireSuccess` policy.
    func _requiresSuccessLocked(of dependency: Job) -> Bool {
        guard let required = _extras?.requiredDependencies else { return false }
        return required.contains(ObjectIdentifier(dependency))
    }

    /// Carries out a released dependency: when the job became ready, posts `.ready` (once) and
    /// tells its queue, which puts it in line if it admitted the job.
    func _carryOut(_ released: _JobLifecycle.DependencyReleased, _ actions: inout _Actions) {
        if case .conditionsDue = released {
            return _conditionsDueLocked(&actions)
        }
        guard case .becameReady(let postReady) = released else { return }
        if postReady {
            _postLocked(.ready, &actions)
        }
        if let queue = _queue {
            queue._withUnsafeGuaranteedRef { $0._jobBecameReadyLocked(self, &actions) }
        }
    }

    // MARK: Descriptions

    /// The job's name (or type and ``id``), state, queue and priority, and for a job that waits, the
    /// first reason it waits: `"fetch: pending (dependency 'login') on 'network', priority normal"`.
    ///
    /// The words are those of ``JobState``, ``JobPriority`` and the outcome; the reason starts with
    /// its keyword (see ``explain()``). Takes the engine lock briefly; no user code runs under it.
    /// Subclasses may override it; ``explain()``, ``JobQueue/dotGraph()`` and the
    /// ``StallWatchdog`` name jobs by ``name`` and do not use it.
    open var description: String { _engineDescription }

    /// The job's type and ``id`` followed by its ``explain()`` text. Subclasses may override it.
    open var debugDescription: String { _engineDebugDescription }

    /// What `dump(_:)`, a `Mirror` and a failed test expectation that names the job show: its
    /// ``id``, ``name``, ``state``, ``isCancelled`` and ``outcome``, read in one critical section.
    /// Subclasses may override it, to add their own.
    ///
    /// Not the stored properties, which a default mirror would read without the engine lock: the
    /// engine changes them under it, and some are links it holds unretained (the job's neighbours
    /// on its queue), which a reflection could follow to a job already freed. Until 2026-11-26 it
    /// did: a failed `#expect` naming a queue or a job could crash the test process.
    open var customMirror: Mirror {
        let (name, state, isCancelled, outcome) = engineLock.withLock {
            (_name, _state, _isCancelled, _outcomeLocked)
        }
        return Mirror(
            self,
            children: [
                "id": id, "name": name as Any, "state": state, "isCancelled": isCancelled, "outcome": outcome as Any,
            ],
            displayStyle: .class, ancestorRepresentation: .suppressed)
    }

    /// The job's name, or its type and ``id`` when it has none.
    public var displayName: String { engineLock.withLock { _describeLocked } }

    var _describeLocked: String { _name ?? "\(type(of: self))#\(id)" }
}
