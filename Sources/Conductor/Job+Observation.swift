import Dispatch

/// A token for removing an observer added with ``Job/observe(_:)``.
public struct JobObserverToken: Hashable, Sendable {
    let id: UInt64
}

/// A job's rarely used state: observers, completion block, waiters and undelivered events.
/// Allocated on first use, so a job that nobody observes pays one pointer for all of it.
// @unchecked Sendable: every stored property is guarded by `engineLock`. For the same reason they
// are `@exclusivity(unchecked)`, like `Job`'s own (see Docs/Design.md, "Costs the hot path avoids").
final class _JobExtras: @unchecked Sendable {
    @exclusivity(unchecked) var observers: [(token: JobObserverToken, handler: @Sendable (JobEvent) -> Void)] = []
    @exclusivity(unchecked) var nextObserverID: UInt64 = 1
    @exclusivity(unchecked) var completionBlock: (@Sendable () -> Void)?
    @exclusivity(unchecked) var waiters: [_Waiter] = []
    /// Events posted but not yet delivered, oldest first.
    @exclusivity(unchecked) var pendingEvents: [JobEvent] = []
    /// Whether some thread is delivering this job's events; it delivers all of them, in order.
    @exclusivity(unchecked) var isDelivering = false
    /// The queue to settle once the `.finished` callbacks have run.
    @exclusivity(unchecked) var settleQueue: JobQueue?
    /// Identities of the dependencies, kept once a job has many, so duplicate checks stay O(1).
    @exclusivity(unchecked) var dependencySet: Set<ObjectIdentifier>?
    /// The dependencies added with `.requireSuccess`, while this job is unfinished.
    @exclusivity(unchecked) var requiredDependencies: Set<ObjectIdentifier>?
    /// The job's conditions, until it finishes, and the dependencies they generated (added to the
    /// job's queue with it). `conditionEvaluation` is the task evaluating them, while it runs.
    @exclusivity(unchecked) var conditions: [any JobCondition] = []
    @exclusivity(unchecked) var generatedDependencies: [Job] = []
    @exclusivity(unchecked) var conditionsEvaluating = false
    @exclusivity(unchecked) var conditionEvaluation: Task<Void, Never>?
    /// Bumped when a condition or, during an evaluation, a dependency is added: an evaluation that
    /// started before cannot satisfy the conditions (a failure still counts).
    @exclusivity(unchecked) var conditionsGeneration: UInt64 = 0
    /// Counts the evaluations started (`_conditionsDueLocked`): names the one whose task to keep.
    @exclusivity(unchecked) var evaluationTicket: UInt64 = 0
    /// The job's exclusivity categories (the set it was given: no copy; `nil` for none, which costs
    /// the many side objects without categories nothing to destroy), and its place with them (see
    /// `_ExclusivityRegistry`): its ticket while it is in line (0 otherwise), whether it was made
    /// ready again because its turn came, and whether it holds them (while it executes).
    @exclusivity(unchecked) var exclusivityCategories: Set<String>?
    @exclusivity(unchecked) var parkTicket: UInt64 = 0
    @exclusivity(unchecked) var exclusivityWoken = false
    @exclusivity(unchecked) var holdsCategories = false
    /// Where the job's work runs, if not on its queue's worker (``Job/executionQueue``).
    @exclusivity(unchecked) var executionQueue: DispatchQueue?
    /// The categories the job is in line for or holds: its own, less those an ancestor group holds,
    /// looked up when it was claimed without them. Read only while it is in line or holds them.
    @exclusivity(unchecked) var lineCategories = _CategoryList()
    /// The group that counts this job among its unfinished children, from the job's finish, which
    /// takes it off the group's queue of children, until the job, its callbacks run, counts it
    /// down as it settles (`Job._settleAfterCallbacks`); before that the job finds its group through
    /// that queue (`Job._countingGroupLocked`). Unowned: a group holds itself while it has
    /// unfinished children (`JobQueue._countingGroupRetain`), which include this job for as long
    /// as the field is set, so it is alive whenever the field is read.
    @exclusivity(unchecked) unowned(unsafe) var countingGroup: GroupJob?
    /// Set when the job was claimed inside a group while naming an exclusivity category that no
    /// group around it holds: the category, and the job's group. The job does not run; it fails
    /// with ``JobError/Code/categoryNotHeldByGroup`` (`Job._refuseToRun`).
    @exclusivity(unchecked) var categoryRefusal: (category: String, group: GroupJob)?
    /// The job's progress, once someone asked for it (``Job/progress``); a group's also once a
    /// progress that counts the group exists (`Job._progressToCountLocked`).
    @exclusivity(unchecked) var progress: JobProgress?
    /// The job's time limit (``Job/timeout``), and the timer counting it down while it executes.
    @exclusivity(unchecked) var timeout: Duration?
    /// Held as the object it is (a timer source is a class instance), not as a `DispatchSourceTimer`
    /// existential: one word instead of five, copied and destroyed with a retain and a release
    /// rather than through the existential's witnesses, in the finish of every job with a side
    /// object (an observed job, a group's child, an exclusive job).
    @exclusivity(unchecked) var timer: AnyObject?
    /// What the job's work is blocked on in `waitUntil…` calls, while it is (diagnostics).
    @exclusivity(unchecked) var blockedOn: [_BlockedOn] = []
    /// For a ``RetryJob``'s attempt: the retry job, which waits for it (`Job._isWaitedForLocked`,
    /// `Job._isInsideLocked`). Strong, so that a load under the lock never returns the last
    /// reference: the field goes with the side object once the attempt has settled (a finished
    /// job keeps none of it), and the side object is released after unlocking. The cycle with the
    /// retry job's `current` ends then.
    @exclusivity(unchecked) var retryJob: RetryJob?

    /// Whether finishing has user code to run (observers, a completion block) or must go through the
    /// delivery already running on another thread, so that events keep their order.
    var hasCallbacks: Bool {
        !observers.isEmpty || completionBlock != nil || isDelivering
    }

    /// Hands the waiters to `actions`, to be woken after unlocking.
    func resumeWaiters(_ actions: inout _Actions) {
        actions.resume(waiters)
        waiters = []
    }

    /// What a finished job keeps of its extras: only its progress, if it has one (so that the
    /// object stays the job's; it has released its observers); everything else is released.
    var _keptAfterFinishing: _JobExtras? {
        progress.map(_JobExtras.init(keeping:))
    }

    /// Extras that hold only `progress`: a finished job's.
    convenience init(keeping progress: JobProgress) {
        self.init()
        self.progress = progress
    }

    #if CONDUCTOR_INVARIANTS
        // Observers and a completion block are user code, and so is what they capture.
        deinit {
            if !observers.isEmpty || completionBlock != nil {
                _requireFreedOutsideEngineLock("a job's observers or completion block")
            }
        }
    #endif
}

extension Job {
    /// The job's extras, created on first use. Call with `engineLock` held.
    var _extrasLocked: _JobExtras {
        if let extras = _extras { return extras }
        let extras = _JobExtras()
        _extras = extras
        return extras
    }

    /// Whether the job counts in the batch wait of an `addJobs(_:waitUntilFinished: true)`. For tests.
    package var _countsInABatchWait: Bool {
        engineLock.withLock { _batch != nil }
    }

    /// How many waits for the job are pending. For tests: a wait that passed its traps is counted
    /// before it blocks or suspends.
    package var _pendingWaitCount: Int {
        engineLock.withLock { _extras?.waiters.count ?? 0 }
    }

    /// Calls `handler` with each lifecycle event that happens after this call.
    ///
    /// Events reach each observer at most once and in lifecycle order (`.ready`, `.started`,
    /// `.finished`, with `.cancelled` where it happened). A job's events are delivered one at a
    /// time, never concurrently, on the thread that caused them or on the thread already delivering
    /// an earlier event of the same job. `.finished` is last; after it the observers are released.
    /// Observing a finished job registers nothing.
    ///
    /// - Returns: A token for ``removeObserver(_:)``.
    /// - Complexity: O(1) amortized.
    @discardableResult
    public func observe(_ handler: @escaping @Sendable (JobEvent) -> Void) -> JobObserverToken {
        engineLock.withLock {
            let extras = _extrasLocked
            let token = JobObserverToken(id: extras.nextObserverID)
            extras.nextObserverID += 1
            if _state != .finished {
                extras.observers.append((token, handler))
            }
            return token
        }
    }

    /// Registers `handler` unless the job has finished; returns whether it did. Lets the engine's
    /// own composite jobs check a job and observe it in one critical section. Call with
    /// `engineLock` held.
    func _observeLocked(_ handler: @escaping @Sendable (JobEvent) -> Void) -> Bool {
        guard _state != .finished else { return false }
        let extras = _extrasLocked
        let token = JobObserverToken(id: extras.nextObserverID)
        extras.nextObserverID += 1
        extras.observers.append((token, handler))
        return true
    }

    /// Removes an observer. An event already being delivered may still reach it.
    ///
    /// - Complexity: O(observers).
    public func removeObserver(_ token: JobObserverToken) {
        // The removed handler is released after unlocking.
        let removed = engineLock.withLock { () -> [@Sendable (JobEvent) -> Void] in
            guard let extras = _extras, let index = extras.observers.firstIndex(where: { $0.token == token }) else {
                return []
            }
            return [extras.observers.remove(at: index).handler]
        }
        _ = removed
    }

    /// A block run exactly once after the job finishes, then released.
    ///
    /// It runs after the observers have been told `.finished` and before
    /// ``waitUntilFinished()-4wm0y`` returns and before the queue counts the job as settled for
    /// ``JobQueue/waitUntilAllJobsAreFinished()-2gk69``. It may run concurrently with the job's
    /// dependents, which are released when the job finishes. Setting it on a finished job releases
    /// the block without running it.
    public var completionBlock: (@Sendable () -> Void)? {
        get { engineLock.withLock { _extras?.completionBlock } }
        set {
            // The replaced block (or, on a finished job, the new one) is released after unlocking.
            let released: (@Sendable () -> Void)? = engineLock.withLock {
                if _state == .finished { return newValue }
                if newValue == nil && _extras == nil { return nil }
                let extras = _extrasLocked
                let previous = extras.completionBlock
                extras.completionBlock = newValue
                return previous
            }
            _ = released
        }
    }

    /// Blocks the calling thread until the job has finished and its completion block has run.
    ///
    /// - Important: This blocks a thread. From Swift concurrency, use the `async` overload, which
    ///   suspends instead. Waiting for the job from inside its own work would never return and traps.
    public func waitUntilFinished() {
        engineLock.lock()
        if _state == .finished && !_callbacksPending {
            engineLock.unlock()
            return
        }
        _trapIfWaitingForItselfLocked(blocking: true)
        if _state != .executing && _state != .finished, let queue = _queue?.takeUnretainedValue(),
            queue._startsOnMainQueueLocked
        {
            queue._trapIfBlockingTheMainQueueLocked(
                "Job.waitUntilFinished(): called on the main queue for '\(_describeLocked)', which has not started"
            )
        }
        if _waitsForTheMainQueueLocked {
            JobQueue._trapIfOnTheMainQueueLocked(
                "Job.waitUntilFinished(): called on the main queue for '\(_describeLocked)', a retry job waiting out its backoff, \(JobQueue._retryWaitProblem)"
            )
        }
        let semaphore = DispatchSemaphore(value: 0)
        _extrasLocked.waiters.append(.semaphore(semaphore))
        let waiter = Job._beginBlockedWaitLocked(on: .job(self))
        engineLock.unlock()
        semaphore.wait()
        Job._endBlockedWait(of: waiter, on: self)
    }

    /// Suspends until the job has finished and its completion block has run.
    ///
    /// Cancelling the waiting task does not end the wait; cancel the job instead.
    public func waitUntilFinished() async {
        var waiter: Job?
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            engineLock.lock()
            if _state == .finished && !_callbacksPending {
                engineLock.unlock()
                continuation.resume()
                return
            }
            _trapIfWaitingForItselfLocked(blocking: false)
            _extrasLocked.waiters.append(.continuation(continuation))
            waiter = Job._beginBlockedWaitLocked(on: .job(self), blocking: false)
            engineLock.unlock()
        }
        Job._endBlockedWait(of: waiter, on: self)
    }

    /// Traps, after unlocking, when the caller is this job's own work (a synchronous job's
    /// `execute()` on this thread, or a ``TaskJob``'s body in the current task), or the work of a
    /// job inside it, which it waits for: a child, if it is a group, an attempt, if it is a
    /// ``RetryJob``, at any depth. A blocking wait also traps in the callbacks of this job or of a
    /// job inside it. Call with `engineLock` held, for a job that has not settled.
    private func _trapIfWaitingForItselfLocked(blocking: Bool) {
        if blocking, let delivering = _ThreadContext.delivering, delivering === self || delivering._isInsideLocked(self)
        {
            let name = _describeLocked
            let message =
                delivering === self
                ? "Job.waitUntilFinished(): '\(name)' is waited for from its own observer or completion block; its waiters are woken only after those return, so it would never return"
                : "Job.waitUntilFinished(): '\(name)' is waited for from an observer or completion block of '\(delivering._describeLocked)', inside it; it waits for that job, which settles only after those return, so it would never return"
            engineLock.unlock()
            _trap(message)
        }
        let caller: Job
        if blocking, let job = _ThreadContext.job, job._waitsFromItsWorkLocked(for: self) {
            caller = job
        } else if let job = _TaskRunner.bodyJobOfCurrentTaskLocked(), job._waitsFromItsWorkLocked(for: self) {
            caller = job
        } else {
            return
        }
        let name = _describeLocked
        let message =
            caller === self
            ? "Job.waitUntilFinished(): '\(name)' waits for itself from its own work; it would never return"
            : "Job.waitUntilFinished(): '\(name)' is waited for from the work of '\(caller._describeLocked)', inside it (a group's child, a retry job's attempt), which it waits for; it would never return"
        engineLock.unlock()
        _trap(message)
    }

    /// Whether a wait for `job` from this job's work would never return: `job` is this job, or one
    /// this job is inside, and this job has not finished. Only a blocking wait is a synchronous
    /// job's own (`_ThreadContext.job`): its work reaches an `await` only through a task it starts
    /// (`Task.immediate` runs its first part on this thread), which is another task and may wait. A
    /// job that finished, its callbacks delivered by another thread, settles once they return.
    /// Call with `engineLock` held.
    func _waitsFromItsWorkLocked(for job: Job) -> Bool {
        _state != .finished && (self === job || _isInsideLocked(job))
    }

    /// The job that waits for this one besides its queue: the ``RetryJob`` it is an attempt of, or
    /// the group that counts it as a child (until it is counted down, after its `.finished`
    /// callbacks). Call with `engineLock` held: the result is alive until the lock is released (an
    /// attempt's side object holds its retry job; a group holds itself while it counts a child).
    var _outerJobLocked: Job? {
        if let extras = _extras {
            if let retryJob = extras.retryJob { return retryJob }
            if let group = extras.countingGroup { return group }
        }
        return _countingGroupLocked
    }

    /// Whether this job is inside `outer`, which waits for it: an attempt of it, or a child it
    /// counts, at any depth through retry jobs and groups. Call with `engineLock` held.
    func _isInsideLocked(_ outer: Job) -> Bool {
        var job = _outerJobLocked
        while let current = job {
            if current === outer { return true }
            job = current._outerJobLocked
        }
        return false
    }

    /// Whether `queue` waits for this job: it is the job's queue (or the queue it settles once its
    /// callbacks have run), or that of a job it is inside (`_isInsideLocked`). Call with
    /// `engineLock` held.
    func _isWaitedForLocked(by queue: JobQueue) -> Bool {
        let target = Unmanaged.passUnretained(queue).toOpaque()
        var job: Job? = self
        while let current = job {
            if current._queue?.toOpaque() == target || current._extras?.settleQueue === queue { return true }
            job = current._outerJobLocked
        }
        return false
    }

    // MARK: Delivery

    /// Queues `event` for the observers; if no delivery is running, this thread will run it.
    /// Call with `engineLock` held.
    @inline(__always)
    func _postLocked(_ event: JobEvent, _ actions: inout _Actions) {
        // Most jobs have no extras: nobody to tell, nothing to allocate.
        guard let extras = _extras else { return }
        _postLocked(event, to: extras, &actions)
    }

    private func _postLocked(_ event: JobEvent, to extras: _JobExtras, _ actions: inout _Actions) {
        // `.finished` always goes through delivery: it carries the completion block and waiters.
        guard event == .finished || !extras.observers.isEmpty else { return }
        extras.pendingEvents.append(event)
        if !extras.isDelivering {
            extras.isDelivering = true
            actions.deliver(self)
        }
    }

    /// Delivers queued events in order until none is left. Call without `engineLock`.
    func _deliverEvents() {
        engineLock.lock()
        let extras = _extras!
        while !extras.pendingEvents.isEmpty {
            let event = extras.pendingEvents.removeFirst()
            var observers = extras.observers
            if event == .finished {
                extras.observers = []
                let completion = extras.completionBlock
                extras.completionBlock = nil
                engineLock.unlock()
                _ThreadContext.whileDelivering(self) {
                    for observer in observers { observer.handler(event) }
                    completion?()
                }
                _settleAfterCallbacks(extras)
                return
            }
            engineLock.unlock()
            _ThreadContext.whileDelivering(self) {
                for observer in observers { observer.handler(event) }
            }
            // Released before locking: an observer removed meanwhile may be held only here.
            observers = []
            engineLock.lock()
        }
        extras.isDelivering = false
        engineLock.unlock()
    }

    /// Counts the job down in the group that counts it, if any, once the job has finished and its
    /// `.finished` has been delivered (in its finish when it has nothing to deliver, else when it
    /// settles): so the group, which ends after its last child is counted, ends after every child's
    /// observers, completion block and waiters. Call with `engineLock` held.
    func _countDownGroupLocked(_ group: GroupJob?, _ actions: inout _Actions) {
        guard let group else { return }
        _isCountedChild = false
        group._childFinishedLocked(self, &actions)
    }

    /// The last step of finishing a job with callbacks: wake its waiters and settle its queue.
    private func _settleAfterCallbacks(_ extras: _JobExtras) {
        var actions = _Actions()
        engineLock.lock()
        _callbacksPending = false
        extras.resumeWaiters(&actions)
        _countSettledInBatchLocked(&actions)
        extras.isDelivering = false
        let countingGroup = extras.countingGroup
        extras.countingGroup = nil
        _countDownGroupLocked(countingGroup, &actions)
        if let queue = extras.settleQueue {
            extras.settleQueue = nil
            queue._settleLocked(&actions)
        }
        // Nothing can be posted after `.finished`; the extras are no longer needed, except a progress.
        _extras = extras._keptAfterFinishing
        engineLock.unlock()
        actions.perform()
    }
}
