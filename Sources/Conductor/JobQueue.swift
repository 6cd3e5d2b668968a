internal import ConductorShims
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Runs jobs by priority under a concurrency limit, over Dispatch.
///
/// A queue starts its ready jobs highest priority first and, within a priority, in the order they
/// became ready. At most ``maxConcurrentJobCount`` jobs execute at once; an asynchronous job counts
/// until it calls `finish()`. Workers are Dispatch blocks on ``underlyingQueue`` (or a global queue
/// of the queue's ``qualityOfService``); a worker that finishes a job takes the next ready one
/// itself, so a busy queue pays one Dispatch hop per worker, not per job.
///
/// A queue lives while it has jobs: dropping the last reference to a queue with unfinished jobs
/// lets them finish, and then the queue is freed.
///
/// - Important: Every member may be called from any thread, including from inside jobs, observers
///   and completion blocks. No lock is held while user code runs.
// @unchecked Sendable: every mutable stored property is guarded by `engineLock`; `id` is immutable.
// `@exclusivity(unchecked)` on them: see the note on `Job`.
public final class JobQueue: @unchecked Sendable {
    /// The default for ``maxConcurrentJobCount``: let Conductor choose the width.
    ///
    /// The chosen width is ``systemDefaultWidth``, wide enough that jobs which block (on I/O, or
    /// waiting for other queues) do not starve the queue, as with Foundation's default.
    public static let defaultMaxConcurrentJobCount: Int = -1

    /// The number of jobs a queue with the default limit runs at once: 64, or twice the number
    /// of active processors if that is more. Workers claim a job only when a thread runs them, so a
    /// wide queue of CPU-bound jobs does not oversubscribe the processors. The width is a ceiling:
    /// while the running workers each claim a job at least once a microsecond, another worker
    /// stands by rather than contend for the engine lock, and joins once they stop keeping pace.
    public static let systemDefaultWidth: Int = max(64, 2 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))

    let id: UInt64

    // MARK: Configuration (guarded by engineLock)
    @exclusivity(unchecked) var _name: String?
    @exclusivity(unchecked) var _maxConcurrentJobCount: Int
    /// The limit in force: `_maxConcurrentJobCount`, or `systemDefaultWidth` for the default.
    @exclusivity(unchecked) var _limit: Int
    @exclusivity(unchecked) var _isSuspended = false
    @exclusivity(unchecked) var _qualityOfService: DispatchQoS.QoSClass = .default
    @exclusivity(unchecked) var _underlyingQueue: DispatchQueue?

    // MARK: Scheduling (guarded by engineLock)
    /// Jobs started by this queue and not yet finished.
    @exclusivity(unchecked) var _executing = 0
    /// Workers dispatched that have not yet claimed their first job.
    @exclusivity(unchecked) var _idleWorkers = 0
    /// Workers waiting briefly for a slot (see `_runWorker`); each also counts in `_idleWorkers`.
    @exclusivity(unchecked) var _waitingWorkers = 0
    /// Jobs this queue has claimed, ever (wrapping): how a helper measures the running workers' pace.
    @exclusivity(unchecked) var _claims: UInt64 = 0
    /// Bumped, under the lock, whenever capacity or ready work may have changed while a worker
    /// waits; the waiting worker polls it without the lock.
    let _wakeups = Atomic<UInt64>(0)
    /// Bumped when the workers' dispatch target changes. Workers of an older generation neither
    /// count as idle nor take jobs, so a change takes effect even if the old target is busy.
    @exclusivity(unchecked) var _workerGeneration: UInt64 = 0
    @exclusivity(unchecked) var _ready = _ReadyQueue()
    /// Jobs counted by the current barrier epoch (not held behind a barrier) and not yet finished.
    @exclusivity(unchecked) var _activeUnfinished = 0
    /// Barriers not yet finished, oldest first, each with the jobs added after it.
    @exclusivity(unchecked) var _epochs: [_BarrierEpoch] = []
    /// Barriers ever added: the number of the newest epoch. Consecutive epochs have consecutive
    /// numbers, so a held job finds its own in O(1) (`_epochIndexLocked`).
    @exclusivity(unchecked) var _barriersAdded: UInt64 = 0
    /// Entries in the epochs' `held` lists, and how many of them finished (were cancelled) while
    /// held; the lists are compacted when those are many, as a job's cancelled dependents are.
    @exclusivity(unchecked) var _heldCount = 0
    @exclusivity(unchecked) var _heldFinished = 0

    // MARK: Membership and waiting (guarded by engineLock)
    /// The queue's unfinished jobs in insertion order. The list holds one manual retain per member.
    @exclusivity(unchecked) var _head: Unmanaged<Job>?
    @exclusivity(unchecked) var _tail: Unmanaged<Job>?
    @exclusivity(unchecked) var _jobCount = 0
    /// Jobs added and not yet finished with all their callbacks run; waiters wake at zero.
    @exclusivity(unchecked) var _unsettled = 0
    @exclusivity(unchecked) var _waiters: [_Waiter] = []
    // Last, so that the fields above keep the layout the hot path was measured with.
    /// Jobs added since the queue was last idle (`_jobCount` was 0), and the queue's progress once
    /// someone asked for it (``progress``).
    @exclusivity(unchecked) var _addedSinceIdle = 0
    @exclusivity(unchecked) var _progress: JobProgress?
    /// The group whose children this queue runs (a ``GroupJob``'s own queue), for the queue's
    /// progress; `_countingGroup` (below) for everything else. Weak, so its load under the lock
    /// may return the group's last reference: hand what it returns to
    /// `_Actions.releaseAfterUnlocking(_:)`.
    @exclusivity(unchecked) weak var _owningGroup: GroupJob?
    /// Links in the list of queues with unsettled jobs (`_activeQueues`), while the queue is on it.
    @exclusivity(unchecked) var _activeNext: Unmanaged<JobQueue>?
    @exclusivity(unchecked) var _activePrevious: Unmanaged<JobQueue>?
    /// Workers of the current generation between claiming their first job and leaving: running a
    /// job, running a finished job's callbacks before claiming again, or waiting for a slot.
    @exclusivity(unchecked) var _runningWorkers = 0
    /// Helpers standing by (see `_runWorker`): 0 or 1. Not counted in `_idleWorkers`.
    @exclusivity(unchecked) var _standbyWorkers = 0
    /// When the last helper was sent or stood by (`_PreciseClock`), and `_claims` then: the start
    /// of the interval over which it measures the running workers' pace.
    @exclusivity(unchecked) var _helperSentAt: UInt64 = 0
    @exclusivity(unchecked) var _helperSentClaims: UInt64 = 0

    // MARK: Adding without the lock (see JobQueue+Admission.swift)
    /// Jobs `addJob(_:)` (a closure) pushed without the lock and not yet admitted, newest first:
    /// the address of the first, linked through `Job._next`, each holding one manual retain; 0 when
    /// empty. Pushed with compare-and-swap, emptied under the lock. Last, away from the fields the
    /// workers write.
    let _pushed = Atomic<UInt>(0)
    /// Whether a push may skip the lock. Written under the lock, read by pushers.
    let _admitsWithoutLock = Atomic<Bool>(false)
    #if CONDUCTOR_INVARIANTS
        /// How many jobs were pushed without the lock, ever. Debug builds only: for the tests, which
        /// check that the lock-free path was taken whoever admitted the jobs since (any thread's
        /// `explain()` or the watchdog admits on every queue).
        package let _pushedWithoutLockCount = Atomic<Int>(0)
    #endif
    /// The value last stored in `_admitsWithoutLock`, read under the lock without an atomic load.
    @exclusivity(unchecked) var _admitsWithoutLockCached = false

    // After the fields above, so that their layout stays the one the hot path was measured with.
    /// The group whose children this queue runs (`_owningGroup`) while it has unfinished
    /// children, with one manual retain: the group's hold on itself for them, so that it stays
    /// alive for the children it counts (which find it here, `Job._countingGroupLocked`) and for a
    /// group started by hand and let go until they finish. Set when its first unfinished child
    /// joins and taken when its last is counted down, both under the lock, and released after
    /// unlocking: so whatever reads it under the lock, diagnostics included, reads a group that
    /// stays alive until the lock is released. Manual, so that a child counting its group down
    /// reads it without retaining it (the group has a side table for its weak references, which
    /// makes each retain and release of it a slow one).
    @exclusivity(unchecked) var _countingGroupRetain: Unmanaged<GroupJob>?
    /// The queue's ``RetryJob``s waiting out a backoff whose next attempt can run only on the main
    /// queue: a blocking wait on the main queue for the queue traps while there are any.
    @exclusivity(unchecked) var _retryWaitsOnTheMainQueue = 0
    /// Whether this is a ``GroupJob``'s queue of children, whose limit and suspension are the
    /// group's. Set once, as the group is made, before anything else can reach the queue; read
    /// without the lock.
    @exclusivity(unchecked) var _isGroupsChildren = false

    /// How many waits for the queue are pending. For tests: a wait that passed its traps is counted
    /// before it blocks or suspends.
    package var _pendingWaitCount: Int {
        engineLock.withLock { _waiters.count }
    }

    /// `_countingGroupRetain`'s group, retained. Call with `engineLock` held.
    var _countingGroup: GroupJob? {
        _countingGroupRetain?.takeUnretainedValue()
    }

    /// Creates a queue.
    ///
    /// - Parameters:
    ///   - name: A name for diagnostics.
    ///   - maxConcurrentJobCount: The most jobs that may execute at once; 0 or more, or
    ///     ``defaultMaxConcurrentJobCount``. Any other negative value traps.
    public init(name: String? = nil, maxConcurrentJobCount: Int = JobQueue.defaultMaxConcurrentJobCount) {
        JobQueue.validate(maxConcurrentJobCount)
        id = nextJobID.wrappingAdd(1, ordering: .relaxed).oldValue
        _name = name
        _maxConcurrentJobCount = maxConcurrentJobCount
        _limit = maxConcurrentJobCount < 0 ? JobQueue.systemDefaultWidth : maxConcurrentJobCount
    }

    #if CONDUCTOR_INVARIANTS
        // A queue's deinit releases its progress (and that progress's observers) and its waiters.
        deinit {
            _requireFreedOutsideEngineLock("queue \(id)")
        }
    #endif

    private static func validate(_ count: Int) {
        _require(
            count >= 0 || count == defaultMaxConcurrentJobCount,
            "JobQueue.maxConcurrentJobCount: \(count) is not a valid limit; use 0 or more, or JobQueue.defaultMaxConcurrentJobCount (-1)"
        )
    }

    // MARK: Configuration

    /// A name for diagnostics.
    public var name: String? {
        get { engineLock.withLock { _name } }
        set { engineLock.withLock { _name = newValue } }
    }

    /// The most jobs that may execute at once.
    ///
    /// Changes take effect at once: raising the limit starts waiting jobs immediately; lowering it
    /// lets running jobs finish but starts no new job until fewer than the new limit are running.
    /// 0 starts nothing. Setting a negative value other than ``defaultMaxConcurrentJobCount`` traps.
    ///
    /// - Complexity: O(1).
    public var maxConcurrentJobCount: Int {
        get { engineLock.withLock { _maxConcurrentJobCount } }
        set {
            JobQueue.validate(newValue)
            _refuseIfGroupsChildren("JobQueue.maxConcurrentJobCount", "limited") {
                $0._maxConcurrentJobCount != newValue
            }
            _update { queue in
                queue._maxConcurrentJobCount = newValue
                queue._limit = newValue < 0 ? JobQueue.systemDefaultWidth : newValue
            }
        }
    }

    /// Whether the queue is suspended. A suspended queue starts no job (and no barrier); jobs already
    /// running go on, and cancelled jobs still finish at once. Resuming starts waiting jobs immediately.
    public var isSuspended: Bool {
        get { engineLock.withLock { _isSuspended } }
        set {
            _refuseIfGroupsChildren("JobQueue.isSuspended", "suspended or resumed") { $0._isSuspended != newValue }
            _update { $0._isSuspended = newValue }
        }
    }

    /// Traps for a group's queue of children (``JobQueue/current`` inside a child) while the group
    /// has unfinished children, if `changes` (called with the lock held): it runs them as the group
    /// says, and changed from inside, the group would run more children at once than its limit, or
    /// never finish. Setting the value it has changes nothing, and passes.
    private func _refuseIfGroupsChildren(_ property: String, _ change: String, if changes: (JobQueue) -> Bool) {
        guard _isGroupsChildren else { return }
        engineLock.lock()
        guard _countingGroupRetain != nil, changes(self) else { return engineLock.unlock() }
        let name = _displayNameLocked
        engineLock.unlock()
        _trap(
            "\(property): '\(name)' runs a group's children, as the group says; it cannot be \(change) while the group runs them: give the group its limit when you make it, or limit or suspend the group's own queue"
        )
    }

    /// The quality of service of the queue's workers when no ``underlyingQueue`` is set.
    public var qualityOfService: DispatchQoS.QoSClass {
        get { engineLock.withLock { _qualityOfService } }
        set {
            _update { queue in
                queue._qualityOfService = newValue
                queue._dispatchTargetChangedLocked()
            }
        }
    }

    /// The Dispatch queue the workers run on; `nil` (the default) uses a global queue of
    /// ``qualityOfService``. The queue's limit still applies on a concurrent underlying queue; a
    /// serial one runs one job at a time whatever the limit.
    ///
    /// A change takes effect at once for jobs not yet started: workers already sent to the old
    /// queue take no further job, even if the old queue is busy. Jobs already running finish where they are.
    public var underlyingQueue: DispatchQueue? {
        get { engineLock.withLock { _underlyingQueue } }
        set {
            _update { queue in
                queue._underlyingQueue = newValue
                queue._dispatchTargetChangedLocked()
            }
        }
    }

    /// The queue whose worker is running the calling code: inside a job's work (including a
    /// ``TaskJob``'s body), its queue; elsewhere `nil`.
    public static var current: JobQueue? {
        _ThreadContext.queue ?? _taskQueue
    }

    @TaskLocal static var _taskQueue: JobQueue?

    /// Runs `body` with no queue bound to the current task, so that `current` is `nil` there unless
    /// a worker's thread context says otherwise: for the callbacks a ``TaskJob``'s body causes (a job
    /// it cancels, a progress it advances), and the tasks the engine creates there (a condition's
    /// evaluation), which inherit task-locals and otherwise see the body's queue.
    static func _withoutTaskQueue<Result>(_ body: () throws -> Result) rethrows -> Result {
        // Read first: binding a task-local allocates, and most callbacks run outside any task.
        guard _taskQueue != nil else { return try body() }
        return try $_taskQueue.withValue(nil, operation: body)
    }

    // MARK: Adding jobs

    /// Adds a job. It starts when it is ready, a slot is free and no higher-priority job is ready.
    ///
    /// Adding a job that is already on a queue (this one or another), has already started, or has
    /// finished after running is a programming error and traps with a message naming the job. A job
    /// that was cancelled before being added is already finished; adding it does nothing. So does
    /// adding a job that another job's condition generated and put on this queue, until it finishes
    /// (``JobCondition/dependency(for:)``): it is here already.
    ///
    /// - Complexity: O(1) amortized.
    public func addJob(_ job: Job) {
        // Written out rather than through `_update`: this is the enqueue hot path, and the closure
        // form was not inlined once its trap message was built (measured with callgrind).
        var actions = _Actions()
        engineLock.lock()
        if let problem = _enqueueLocked(job, &actions) {
            engineLock.unlock()
            JobQueue._misuse("JobQueue.addJob(_:)", problem)
        }
        actions.touch(self)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
    }

    /// Traps with `problem`, prefixed by the API that found it. Out of line, so that the hot
    /// paths that can trap stay small.
    @inline(never)
    private static func _misuse(_ api: StaticString, _ problem: String) -> Never {
        _trap("\(api): \(problem)")
    }

    /// Adds jobs as one atomic step: no job of the batch starts before all are added, so
    /// priorities apply across the batch. With `waitUntilFinished`, blocks until all have finished
    /// and their completion blocks have run.
    ///
    /// The wait wakes the calling thread once, when the last job of the batch has settled, however
    /// many jobs the batch has.
    ///
    /// - Complexity: O(n) for n jobs.
    public func addJobs(_ jobs: [Job], waitUntilFinished: Bool) {
        if waitUntilFinished {
            // In a section of its own, so that the adding one is the same with or without a wait.
            engineLock.lock()
            _trapIfBatchWaitBlocksTheMainQueueLocked(jobs)
            engineLock.unlock()
        }
        let batch = waitUntilFinished ? _BatchWait() : nil
        // Jobs already counted in another batch: a cancelled job may be added again, to any queue,
        // while its completion block still runs. Waited for one by one after the batch.
        var elsewhere: [Job] = []
        _update { queue, actions in
            for job in jobs {
                if let problem = queue._enqueueLocked(job, &actions) {
                    engineLock.unlock()
                    JobQueue._misuse("JobQueue.addJobs(_:waitUntilFinished:)", problem)
                }
            }
            if let batch {
                // Under the same lock as the enqueue, so no job of the batch has settled yet.
                var unsettled = 0
                for job in jobs where job._state != .finished || job._callbacksPending {
                    if job._batch == nil {
                        job._batch = batch
                        unsettled += 1
                    } else if job._batch !== batch {
                        elsewhere.append(job)
                    }
                }
                batch.remaining = unsettled
                if unsettled == 0 {
                    batch.semaphore.signal()
                }
            }
        }
        batch?.semaphore.wait()
        for job in elsewhere {
            job.waitUntilFinished()
        }
    }

    /// Adds a job that runs `block`.
    ///
    /// While the queue is busy (every slot taken, a worker about to run, a helper standing by, or
    /// suspended), this takes no lock: the job is pushed with one compare-and-swap, and the queue
    /// admits it the next time it is scheduled, before anything can observe the queue. It is a
    /// member, in the order added, for everything that happens after this returns.
    ///
    /// - Complexity: O(1) amortized.
    public func addJob(_ block: @escaping @Sendable () -> Void) {
        let job = BlockJob(block: block)
        // A relaxed look first: while pushing is off, the job is enqueued under the lock at once,
        // without touching the stack. The handshake itself is in `_pushWithoutLock`.
        guard _admitsWithoutLock.load(ordering: .relaxed) else {
            addJob(job)
            return
        }
        if _pushWithoutLock(job) {
            return
        }
        // Pushing was turned off meanwhile: admit it now (with any pushed before it).
        _update { _ in }
    }

    /// Adds a barrier: `barrier` runs after every job added before it has finished, alone, and
    /// every job added after it waits until it has finished. It respects suspension and the limit
    /// (it needs one slot).
    ///
    /// `cancelAllJobs()` cancels a barrier too: its block does not run, but it keeps its place, so
    /// later jobs still wait for the earlier ones.
    ///
    /// - Complexity: O(1) amortized; releasing the jobs held behind it is O(1) each.
    public func addBarrierBlock(_ barrier: @escaping @Sendable () -> Void) {
        let job = _BarrierJob(block: barrier)
        _update { queue, actions in
            job._queue = Unmanaged.passUnretained(queue)
            queue._countJoiningLocked(job, &actions)
            queue._linkLocked(job)
            queue._barriersAdded += 1
            queue._epochs.append(_BarrierEpoch(barrier: job, number: queue._barriersAdded))
            // Marked as a held job is, with its own epoch's number (`_epochIndexLocked`).
            job._readyTicket = _DiagnosticClock.heldMark | queue._barriersAdded
            if queue._activeUnfinished == 0 {
                queue._advanceEpochsLocked(&actions)
            }
        }
    }

    // MARK: Inspecting and controlling

    /// The queue's unfinished jobs, in the order they were added. Finished jobs are dropped.
    ///
    /// - Complexity: O(n) for the snapshot.
    public var jobs: [Job] {
        _update { $0._membersLocked() }
    }

    /// The number of unfinished jobs.
    ///
    /// - Complexity: O(1).
    public var jobCount: Int { _update { $0._jobCount } }

    /// Cancels every job on the queue (see ``Job/cancel()``). Jobs not yet started finish at once;
    /// running ones are told to stop. Jobs added afterwards are not affected.
    ///
    /// All the queue's jobs are cancelled in one step: none of them can start, or be released by
    /// another job finishing, between the first cancellation and the last. Then each job's
    /// ``Job/cancel()`` is called, in the order the jobs were added, so that subclasses' overrides
    /// run (a ``TaskJob`` cancels its task; an ``AsynchronousJob`` may call `finish()`). A job that
    /// finishes in its override therefore finds its dependents on this queue already cancelled.
    ///
    /// - Complexity: O(n). The engine lock is held for the first step, O(n).
    public func cancelAllJobs() {
        _cancelAllJobs(reason: CancellationReason(code: .queueCancelled))
    }

    /// The jobs on the queue, in the order they were added. Call with `engineLock` held.
    ///
    /// - Complexity: O(jobs on the queue).
    func _membersLocked() -> [Job] {
        var members: [Job] = []
        members.reserveCapacity(_jobCount)
        var node = _head
        while let job = node {
            members.append(job.takeUnretainedValue())
            node = job._withUnsafeGuaranteedRef { $0._next }
        }
        return members
    }

    /// `cancelAllJobs()` with `reason` (a ``GroupJob`` cancels its children with
    /// `parentCancelled`).
    func _cancelAllJobs(reason: CancellationReason) {
        var actions = _Actions()
        engineLock.lock()
        // The pushed jobs are fresh `BlockJob`s, ready, with nothing that could refuse the
        // cancellation below: members now, but not put in line only to be taken out again.
        _admitPushedLocked(&actions, inLine: false)
        let members = _membersLocked()
        actions.reserveReleasedBlocks(members.count)
        // Only the jobs this loop cancelled, and only those whose class may override `cancel()`: a
        // member the cascade of another member's cancellation reached first has its override run by
        // `perform()` already. Queues of closures collect nothing here.
        var cancelledHere: [Job] = []
        for job in members where job._cancelLocked(reason, &actions) && job._mayOverrideCancel {
            cancelledHere.append(job)
        }
        #if CONDUCTOR_INVARIANTS
            // No member was left ready but out of line: it would never run.
            for job in members where job._state == .ready && job._admitted {
                _require(job._isInLine, "cancelAllJobs left '\(job._describeLocked)' ready and out of line")
            }
        #endif
        actions.touch(self)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        // The cancelled members left the queue under the lock; `members` may hold the last
        // reference to some, so it lives until here, after unlocking.
        withExtendedLifetime(members) {}
        for job in cancelledHere {
            job.cancel()
        }
    }

    /// Blocks the calling thread until every job added so far has finished and its completion
    /// block has run. Jobs added while waiting are waited for too.
    ///
    /// - Important: Calling it from a job running on this queue would never return, and traps.
    public func waitUntilAllJobsAreFinished() {
        var actions = _Actions()
        engineLock.lock()
        _admitPushedLocked(&actions)
        actions.planWorkersLocked()
        if _unsettled == 0 {
            engineLock.unlock()
            actions.perform()
            return
        }
        _trapIfWaitingForItselfLocked(blocking: true)
        if _jobCount > _executing && _startsOnMainQueueLocked {
            _trapIfBlockingTheMainQueueLocked(
                "JobQueue.waitUntilAllJobsAreFinished(): called on the main queue while '\(_displayNameLocked)' has jobs that have not started"
            )
        }
        if _retryWaitsOnTheMainQueue > 0 {
            JobQueue._trapIfOnTheMainQueueLocked(
                "JobQueue.waitUntilAllJobsAreFinished(): called on the main queue while '\(_displayNameLocked)' has a retry job waiting out its backoff, \(JobQueue._retryWaitProblem)"
            )
        }
        let semaphore = DispatchSemaphore(value: 0)
        _waiters.append(.semaphore(semaphore))
        let waiter = Job._beginBlockedWaitLocked(on: .queue(self))
        engineLock.unlock()
        actions.perform()
        semaphore.wait()
        Job._endBlockedWait(of: waiter, on: self)
    }

    /// Suspends until every job added so far has finished and its completion block has run.
    public func waitUntilAllJobsAreFinished() async {
        var waiter: Job?
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            var actions = _Actions()
            engineLock.lock()
            _admitPushedLocked(&actions)
            actions.planWorkersLocked()
            if _unsettled == 0 {
                engineLock.unlock()
                actions.perform()
                continuation.resume()
                return
            }
            _trapIfWaitingForItselfLocked(blocking: false)
            _waiters.append(.continuation(continuation))
            waiter = Job._beginBlockedWaitLocked(on: .queue(self), blocking: false)
            engineLock.unlock()
            actions.perform()
        }
        Job._endBlockedWait(of: waiter, on: self)
    }

    /// Traps, after unlocking, when the caller is a job of this queue, or a job inside one (a
    /// group's child, a retry job's attempt, at any depth): its work on this thread, or a
    /// ``TaskJob``'s body in the current task; or for a blocking wait, one's callbacks. The wait
    /// would include that job and never return. Call with `engineLock` held, while the queue has
    /// unsettled jobs.
    private func _trapIfWaitingForItselfLocked(blocking: Bool) {
        if blocking, let job = _ThreadContext.delivering, job._isWaitedForLocked(by: self) {
            let (name, jobName) = (_displayNameLocked, job._describeLocked)
            engineLock.unlock()
            _trap(
                "JobQueue.waitUntilAllJobsAreFinished(): called from an observer or completion block of '\(jobName)' on '\(name)'; the queue waits for that job, which settles only after those return, so it would never return"
            )
        }
        // As for a job's own wait (`Job._waitsFromItsWorkLocked`): only a blocking wait is a
        // synchronous job's, and a finished job's work waits for callbacks that end.
        var fromThisThread = false
        if blocking {
            if let job = _ThreadContext.job {
                fromThisThread =
                    job._state != .finished && (_ThreadContext.queue === self || job._isWaitedForLocked(by: self))
            } else {
                fromThisThread = _ThreadContext.queue === self
            }
        }
        let fromTheBody = _TaskRunner.bodyJobOfCurrentTaskLocked().map {
            $0._state != .finished && $0._isWaitedForLocked(by: self)
        }
        guard fromThisThread || fromTheBody == true else { return }
        let name = _displayNameLocked
        engineLock.unlock()
        _trap(
            "JobQueue.waitUntilAllJobsAreFinished(): called from a job running on '\(name)'; it would wait for itself and never return"
        )
    }

    /// Traps, after unlocking, when called on the main queue, or on the main thread (which runs it,
    /// or will once the program calls `dispatchMain()`): `problem` says which wait, for jobs of this
    /// queue that have not started, which start only on the main queue (`_startsOnMainQueueLocked`)
    /// that the wait would block. Call with `engineLock` held, off the hot path.
    func _trapIfBlockingTheMainQueueLocked(_ problem: @autoclosure () -> String) {
        JobQueue._trapIfOnTheMainQueueLocked(
            "\(problem()); the jobs of '\(_displayNameLocked)' start only on the main queue (its underlyingQueue), which this wait blocks, so it would return only if another thread cancelled them or moved the queue off the main queue. Wait from another thread, or with an async wait (await)"
        )
    }

    /// Traps with `message`, after unlocking, when called on the main queue, or on the main thread
    /// (which runs it, or will once the program calls `dispatchMain()`). Call with `engineLock`
    /// held, off the hot path.
    static func _trapIfOnTheMainQueueLocked(_ message: @autoclosure () -> String) {
        guard DispatchQueue.getSpecific(key: JobQueue._mainQueueMark) == true || conductor_is_main_thread() != 0 else {
            return
        }
        let text = message()
        engineLock.unlock()
        _trap(text)
    }

    /// Why a blocking wait on the main queue for a ``RetryJob`` waiting out its backoff, whose next
    /// attempt runs there, would not return.
    static let _retryWaitProblem =
        "whose next attempt runs only on the main queue, which this wait blocks, so it would return only if another thread cancelled the retry job. Wait from another thread, or with an async wait (await)"

    /// `addJobs(_:waitUntilFinished: true)`: traps if the wait would block the main queue that
    /// `jobs` need to start. Checked before any is added: none would start before the wait (an
    /// executing job cannot be added). Call with `engineLock` held.
    func _trapIfBatchWaitBlocksTheMainQueueLocked(_ jobs: [Job]) {
        if _startsOnMainQueueLocked && jobs.contains(where: { $0._state != .finished }) {
            _trapIfBlockingTheMainQueueLocked(
                "JobQueue.addJobs(_:waitUntilFinished:): called with waitUntilFinished: true on the main queue"
            )
        }
    }

    /// Whether this queue's jobs start on the main queue: its `underlyingQueue` is
    /// `DispatchQueue.main` (``JobQueue/main``'s is). Checked when a blocking wait begins, so that
    /// a queue whose underlying queue changes is judged by the current one. Call with `engineLock`
    /// held, off the hot path.
    var _startsOnMainQueueLocked: Bool {
        _underlyingQueue?.getSpecific(key: JobQueue._mainQueueMark) == true
    }

    /// Set on `DispatchQueue.main` when first used: `DispatchQueue.getSpecific(key:)` finds it on
    /// the main queue (and on queues that target it), and `queue.getSpecific(key:)` on the main
    /// queue itself. On Linux after `dispatchMain()`, a thread other than the main thread may run
    /// the main queue, and `DispatchQueue.main` is a new object at each use, so neither the thread
    /// nor the object's identity would tell.
    static let _mainQueueMark: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    // MARK: Helpers

    var _displayNameLocked: String { _name ?? "JobQueue#\(id)" }

    /// Runs `body` under the engine lock, after admitting the jobs pushed without it, then starts
    /// any workers the change (or the admission) made possible.
    func _update<Result>(_ body: (JobQueue, inout _Actions) -> Result) -> Result {
        var actions = _Actions()
        engineLock.lock()
        _admitPushedLocked(&actions)
        let result = body(self, &actions)
        actions.touch(self)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        return result
    }

    func _update<Result>(_ body: (JobQueue) -> Result) -> Result {
        _update { queue, _ in body(queue) }
    }
}

/// A barrier and the jobs added after it, which wait until it has finished.
// @unchecked Sendable: every stored property is guarded by `engineLock`, and so
// `@exclusivity(unchecked)`, like `Job`'s own.
final class _BarrierEpoch: @unchecked Sendable {
    let barrier: Job
    /// Its place among the queue's barriers (`JobQueue._barriersAdded` when it was added).
    let number: UInt64
    @exclusivity(unchecked) var held: [Job] = []
    @exclusivity(unchecked) var barrierAdmitted = false

    init(barrier: Job, number: UInt64) {
        self.barrier = barrier
        self.number = number
    }
}

/// The job behind ``JobQueue/addBarrierBlock(_:)``.
///
/// `package` rather than internal only to work around a Swift 6.3 diagnostic: an internal subclass
/// of a class with a `package` designated initializer gets a spurious "function call causes an
/// infinite recursion" warning.
package final class _BarrierJob: Job, @unchecked Sendable {
    // Guarded by engineLock; released when the barrier runs.
    @exclusivity(unchecked) private var block: (@Sendable () -> Void)?

    package init(block: @escaping @Sendable () -> Void) {
        self.block = block
        super.init()
        _isBarrier = true
        _name = "barrier#\(id)"

    }

    package override func execute() {
        engineLock.lock()
        let block = self.block
        self.block = nil
        let cancelled = _isCancelled
        engineLock.unlock()
        if !cancelled {
            block?()
        }
    }
}
