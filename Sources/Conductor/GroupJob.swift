/// A job made of other jobs: its children run on a queue of the group's own, with the group's own
/// limit, and the group finishes when all of them have.
///
/// ```swift
/// let importAll = GroupJob(name: "import", maxConcurrentJobCount: 4, jobs: files.map(ImportJob.init))
/// try report.addDependency(importAll, policy: .requireSuccess)
/// queue.addJobs([importAll, report], waitUntilFinished: false)
/// ```
///
/// - The children wait until the group starts executing on its queue, then run on the group's
///   queue of children, whose limit is `maxConcurrentJobCount`. The group holds one slot of its own
///   queue from then until it finishes: when every child (and every job they
///   ``Job/produce(_:)``d) has finished. A group with no children finishes as soon as it starts.
///   The engine counts each child once it has finished and its observers, completion block and
///   waiters have run, so whoever waits for the group finds what every child's callbacks did;
///   those callbacks must not wait for the group (`Docs/Concepts.md`, the order when a job
///   finishes).
/// - Its outcome: `.failed` with a ``GroupFailure`` naming each failed child and its error, if any
///   child failed; otherwise `.succeeded`. A child cancelled on its own does not fail the group.
/// - Cancelling the group records its own reason first (its outcome is `.cancelled` with it), then
///   cancels every unfinished child with ``CancellationReason/Code/parentCancelled`` naming the
///   group. A child added to a cancelled group starts cancelled the same way. A group cancelled
///   before it starts has every child, at any depth, cancelled and finished by the time its
///   `.finished` observers and waiters see it finished.
/// - ``addChild(_:)`` may be called until the group finishes; on a finished group it traps, as it
///   does for a job on a queue (another group's child included) or executing. An executing group
///   counts as finished from the moment its last child is counted. A child that has already
///   finished counts as finished (and, if it failed, as a failure). A running child adds to its
///   group with ``Job/produce(_:)``, which counts the new child before the producer can finish, so
///   the group cannot finish in between. A dependency that a child's condition generates
///   (``JobCondition/dependency(for:)``) and that joins the group's queue of children on the
///   child's behalf is counted too, unless it waits for the group: the group waits for it, it takes
///   the categories the group holds through the group and waits in line for any other (it is not
///   refused, as a child would be), and its failure does not fail the group (the child's
///   condition judges it).
/// - A group and a job inside it cannot wait for each other (the group waits for its children to
///   finish, and they for it to start): ``Job/addDependency(_:policy:)`` between them, at any depth,
///   throws ``JobError/Code/dependencyCycle``, and ``addChild(_:)`` traps on a job that already
///   waits for the group or a group around it, or that one of them waits for. A cycle that also
///   runs through another job's edges is not detected.
/// - Exclusivity categories held by a group count as held by its children, at any depth: a child
///   naming one of them runs without waiting for the group to let it go. Inside a group, a job may
///   name only categories a group around it holds; one that names another fails with
///   ``JobError/Code/categoryNotHeldByGroup`` without running, since waiting for it while the
///   group holds its slot and categories could deadlock. (A child's generated dependency waits,
///   as it would outside the group.)
public final class GroupJob: Job, @unchecked Sendable {
    // @unchecked Sendable: `children` is a JobQueue (itself Sendable); every other stored property
    // is guarded by `engineLock`, and so `@exclusivity(unchecked)`, like `Job`'s own.

    /// The queue the children run on, suspended until the group starts.
    private let children: JobQueue
    @exclusivity(unchecked) private var unfinished = 0
    @exclusivity(unchecked) private var failures: [(job: String, error: any Error)] = []
    @exclusivity(unchecked) private var didExecute = false
    /// Set when the group was refused its exclusivity categories (`Job._refuseToRun`): children
    /// added from then on are cancelled, as for a cancelled group.
    @exclusivity(unchecked) private var isRefused = false
    /// Set, in the critical section that finds every child finished after the group executed: the
    /// group is finishing, and takes no more children.
    @exclusivity(unchecked) private var isSealed = false
    /// The units of the children that finished while the group had no progress object: each
    /// child's total (one without a progress of its own is one unit). The progress, made when
    /// first needed, starts from them (`_newProgressLocked`).
    @exclusivity(unchecked) private var finishedUnits: _Units = 0

    /// Creates a group whose children run at most `maxConcurrentJobCount` at a time, starting with
    /// `jobs`, added in one critical section as ``addChild(_:)`` would add each (and trapping as it
    /// would, for a job on a queue or executing, or a job twice among them).
    ///
    /// `maxConcurrentJobCount` is 1 or more, or ``JobQueue/defaultMaxConcurrentJobCount``; anything
    /// else traps. Unlike a queue's, a group's limit cannot be raised later, so with 0 its children
    /// would never start and the group never finish.
    ///
    /// - Complexity: O(`jobs`).
    public init(
        name: String? = nil, maxConcurrentJobCount: Int = JobQueue.defaultMaxConcurrentJobCount, jobs: [Job] = []
    ) {
        _require(
            maxConcurrentJobCount > 0 || maxConcurrentJobCount == JobQueue.defaultMaxConcurrentJobCount,
            "GroupJob(name:maxConcurrentJobCount:jobs:): \(maxConcurrentJobCount) is not a valid limit for '\(name ?? "GroupJob")'; use 1 or more (a group's limit cannot be raised later: with 0 its children would never start), or JobQueue.defaultMaxConcurrentJobCount (-1)"
        )
        children = JobQueue(name: "\(name ?? "GroupJob").children", maxConcurrentJobCount: maxConcurrentJobCount)
        super.init(finishesWhenExecuteReturns: false)
        // All of `jobs` in one critical section, with the group's own setup: the group is new, so
        // nothing else can reach it yet and no child is cancelled; and the line of ready children
        // grows once rather than from 16 up.
        var actions = _Actions()
        engineLock.lock()
        children._isSuspended = true
        children._isGroupsChildren = true
        children._owningGroup = self
        if let name { _name = name }
        if jobs.count > 1 {
            // Room for the jobs that will be in that line at once: those ready now, at the first's
            // level (a hint: a chain of steps needs none, and reserved room stays as long as the group).
            let level = jobs[0]._priority.bucket
            let ready = jobs.count { $0._state == .ready && $0._priority.bucket == level }
            if ready > 1 {
                children._ready.reserve(ready, level: level)
            }
        }
        for job in jobs {
            // No cycle to look for: nothing can wait for a group that is being made, and it is
            // inside no group.
            let cancelled = _addChildLocked(job, lookingForCycles: false, &actions)
            #if CONDUCTOR_INVARIANTS
                _require(!cancelled, "Conductor: a new group cancelled a child it was created with")
            #else
                _ = cancelled
            #endif
        }
        engineLock.unlock()
        actions.perform()
    }

    /// Adds `job` as a child: it runs on the group's queue of children once the group executes, and
    /// the group finishes only after it has. A child added to a cancelled group is cancelled with
    /// ``CancellationReason/Code/parentCancelled``. Adding a child to a finished group traps, as
    /// does adding, to any group, a job that is on a queue (another group's included) or executing,
    /// and one that waits for this group or a group around it, or that one of them waits for (for
    /// a group, any job inside it): a group and the jobs inside it cannot wait for each other.
    /// Adding a job that a child's condition generated, which the group counts on its queue of
    /// children until it finishes, does nothing: it is a child already.
    public func addChild(_ job: Job) {
        var actions = _Actions()
        engineLock.lock()
        let cancelled = _addChildLocked(job, &actions)
        engineLock.unlock()
        actions.perform()
        if cancelled {
            // Nothing will run it: the group is over, or its children are being cancelled.
            job.cancel(reason: parentReason)
        }
    }

    /// `addChild(_:)`'s critical section: returns whether `job` must be cancelled after unlocking
    /// (the group is cancelled or refused). Traps, after unlocking, for a finished group or a job
    /// that belongs elsewhere. Call with `engineLock` held.
    @inline(__always)
    private func _addChildLocked(_ job: Job, lookingForCycles: Bool = true, _ actions: inout _Actions) -> Bool {
        if (_state == .finished || isSealed) && !_isCancelled && !isRefused {
            let name = _describeLocked
            engineLock.unlock()
            _trap("GroupJob.addChild(_:): '\(name)' has already finished; add children before it finishes")
        }
        // Checked before anything changes.
        if let problem = _childProblemLocked(job) {
            engineLock.unlock()
            _trap("GroupJob.addChild(_:): \(problem)")
        }
        if job._queue != nil && job._isCountedChild {
            // On the queue of children already, put there as a child's generated dependency, and
            // counted then. One left out (it waits for this group) goes on, to trap on its cycle.
            return false
        }
        let cancelled = _isCancelled || isRefused
        if lookingForCycles && !cancelled && job._state != .finished, let cycle = _childCycleLocked(job) {
            let chain = JobError._cycleText(cycle.map { "'\($0._describeLocked)'" })
            engineLock.unlock()
            _trap(
                "GroupJob.addChild(_:): the child would close the cycle \(chain) (\(Job.groupCycleSituation)); remove that dependency first"
            )
        }
        _countChildInProgressLocked(job, settled: cancelled || job._state == .finished, &actions)
        // Counted and put on the queue of children in one critical section, counted first: its
        // finish counts the group down in whatever section it happens (the engine does, not an
        // observer), and a cancellation or refusal of the group, which cancels what is on that
        // queue under the same lock, cannot miss it. A job that already finished counts as a
        // finished child.
        if !cancelled {
            if job._state != .finished {
                if unfinished == 0 {
                    // The group's hold on itself while it has unfinished children: one reference
                    // per stretch of them, not one per child.
                    children._countingGroupRetain = .passRetained(self)
                }
                unfinished += 1
                // Counted while it is on the queue of children, which says which group counts it:
                // no side object for that (`Job._countingGroupLocked`).
                job._isCountedChild = true
                // Cannot fail: the job is on no queue and has not started (checked above).
                _ = children._enqueueLocked(job, &actions)
                actions.touch(children)
                actions.planWorkersLocked()
            } else {
                _recordFailureLocked(of: job)
            }
        }
        return cancelled
    }

    /// A condition of a child this group counts generated `dependency`, which joins the queue of
    /// children now, on the child's behalf (`JobQueue._enqueueGeneratedDependenciesLocked`): the
    /// group counts it. So the group waits for it, also when the child is cancelled meanwhile, and
    /// it takes the categories a group around it holds through that group; it waits in line for any
    /// other, as it would outside the group, instead of being refused as a child would be
    /// (`_ExclusivityRegistry.acquireLocked`). Its failure is not the group's: the child's
    /// condition judges it, as for a job outside any group. Until 2026-11-26 it was not counted:
    /// one that named a category the group held waited in line for it, while the group waited for
    /// the child and the child for it.
    ///
    /// Not counted: one that waits for this group or a group around it, which would then wait for
    /// it (a cycle through the child's own edge, not refused, as other cycles through other jobs'
    /// edges are not). Call with `engineLock` held, before the dependency joins the queue.
    func _countGeneratedDependencyLocked(_ dependency: Job, _ actions: inout _Actions) {
        guard _childCycleLocked(dependency) == nil else { return }
        #if CONDUCTOR_INVARIANTS
            // The child that needs it is counted and unfinished: the group holds itself already.
            _require(
                unfinished > 0, "Conductor: '\(_describeLocked)' counts a generated dependency with no unfinished child"
            )
        #endif
        _countChildInProgressLocked(dependency, settled: false, &actions)
        unfinished += 1
        dependency._isCountedChild = true
    }

    /// Why `job` cannot become a child, whatever this group's state: it is on a queue (another
    /// group's included) or was started by hand, and belongs elsewhere. A finished job may join (it
    /// counts as a finished child). Call with `engineLock` held.
    @inline(__always)
    func _childProblemLocked(_ job: Job) -> String? {
        // Most children pass on two loads, without the call.
        guard job._queue != nil || job._state == .executing else { return nil }
        return children._joinProblemLocked(job)
    }

    /// The cycle that making `job` a child would close, if it would: `job`, or a job inside it if
    /// it is a group, waits for this group or a group around it (which would wait for it to
    /// finish), or one of those groups waits for it (and it would wait for them to start). Returns
    /// the jobs on the cycle, each waiting for the next. A cycle through other jobs' edges is not
    /// found, as in `Job._groupCycleLocked`.
    ///
    /// - Complexity: O(depth of nesting × the unfinished jobs in `job`), each edge looked up in
    ///   O(1) amortized, when this group or a group around it has edges; O(1) for a job with no
    ///   edges that is not a group, and O(depth) when those groups have none. Call with `engineLock`
    ///   held, for an unfinished `job`.
    private func _childCycleLocked(_ job: Job) -> [Job]? {
        // Most children: no edges, and nothing inside.
        if job._dependencies.isEmpty && job._dependents.isEmpty && !job._isComposite {
            return nil
        }
        // This group and the groups around it, innermost first: each finishes after `job` would,
        // and starts before it.
        var around: [Job] = []
        var outer: Job? = self
        var withEdges = false
        while let group = outer {
            around.append(group)
            withEdges = withEdges || !group._dependencies.isEmpty || !group._dependents.isEmpty
            outer = group._countingGroupLocked
        }
        // An edge is on both of its jobs while they are unfinished, as these groups are: with
        // none on them, nothing inside `job` can close a cycle through them.
        guard withEdges else { return nil }
        // `job`, then the unfinished jobs inside it, each with the groups from `job` down to it.
        var pending: [(job: Job, down: [Job])] = [(job, [])]
        while let (inner, down) = pending.popLast() {
            #if CONDUCTOR_INVARIANTS
                _require(inner._lifecycle.isUnstarted, "Conductor: a job joining a group has started")
            #endif
            for (index, group) in around.enumerated() {
                // The groups from this one up to the one inside `group`.
                let between = around[..<index]
                if inner._hasDependencyLocked(group) {
                    // `inner` would wait for `group`, which waits for the groups down to this one,
                    // this one for `job`, and `job` for those down to `inner`.
                    return [inner, group] + Array(between.reversed()) + down
                }
                if group._lifecycle.isUnstarted && group._hasDependencyLocked(inner) {
                    // `group` waits for `inner`, which would wait for the groups up to `job` to
                    // start, `job` for this group, and this one for those up to `group`.
                    return [group, inner] + Array(down.reversed()) + Array(between)
                }
            }
            if let nested = inner as? GroupJob {
                for child in nested.children._membersLocked() where child._isCountedChild {
                    pending.append((child, down + [nested]))
                }
            }
        }
        return nil
    }

    override var _isComposite: Bool { true }

    /// The queue the children run on. Call with `engineLock` held.
    var _childrenLocked: JobQueue { children }

    override func _executingDetailLocked(now: UInt64) -> _DeferredText? {
        let waiting = children._membersLocked()
        let list = _listing(waiting) { "'\($0._describeLocked)' \($0._statusLocked(now: now, withQueue: false))" }
        return _DeferredText(
            "group: it waits for \(unfinished) unfinished \(unfinished == 1 ? "child" : "children") on '\(children._displayNameLocked)' (\(children._summaryLocked)): \(list)"
        )
    }

    /// The jobs of the group that have not finished yet (children and produced jobs).
    public var childJobs: [Job] { children.jobs }

    private var parentReason: CancellationReason {
        CancellationReason(code: .parentCancelled, detail: nil, responsibleJob: displayName)
    }

    public override func execute() {
        engineLock.lock()
        didExecute = true
        let done = unfinished == 0
        if done { isSealed = true }
        engineLock.unlock()
        if done {
            return _end()
        }
        children._update { $0._isSuspended = false }
    }

    public override func cancel() {
        super.cancel()
        // A group that finished without being cancelled stays as it is: a job a child left on the
        // queue of children (added to `JobQueue.current`) is not the group's to cancel any more.
        guard isCancelled else { return }
        // All children in one critical section: one cancelled child finishing must not let the
        // next one start before it is cancelled too. The finish of the last counted one ends an
        // executing group (`_childFinishedLocked`).
        children._cancelAllJobs(reason: parentReason)
    }

    /// Every child counts in the group's progress with its units, a finished one (or one this
    /// cancelled group cancels at once) as complete. Until the group has a progress object, a
    /// child only counts when it finishes (`finishedUnits`), and costs nothing before; except a
    /// group, whose progress is made now, so that it carries its children's units when it finishes
    /// (one object per nested group). A finished group counts nothing more.
    private func _countChildInProgressLocked(_ job: Job, settled: Bool, _ actions: inout _Actions) {
        if let progress = _extras?.progress {
            guard progress.storage.read({ !$0.finished }) else { return }
            if let own = job._progressToCountLocked(&actions) {
                progress._adoptLocked(own, &actions)
            } else {
                progress._addLocked(total: 1, completed: settled ? 1 : 0, &actions)
            }
        } else if _state != .finished {
            let own = job._progressToCountLocked(&actions)
            if settled {
                finishedUnits += own.map { max($0.storage.read { $0.total }, 1) } ?? 1
            }
        }
    }

    /// `child`, which this group counts, has finished: its units complete in the group's progress,
    /// or, while the group has none, add to `finishedUnits`. `own` is the child's progress, if it
    /// has one (finished, so its total is at least 1). Call with `engineLock` held, in the child's
    /// finish.
    func _childFinishedInProgressLocked(_ own: JobProgress?, _ actions: inout _Actions) {
        if let progress = _extras?.progress {
            // A child's own progress counts here and completed as it finished; one without counts
            // one unit.
            if own?._parentLocked !== progress {
                progress._addLocked(total: 0, completed: 1, &actions)
            }
        } else {
            finishedUnits += own?.storage.read { $0.total } ?? 1
        }
    }

    /// The group's progress: its children's units added up, finished ones complete, each child's
    /// own progress taken to count here. Made when first needed, counting nowhere yet.
    override func _newProgressLocked(_ actions: inout _Actions) -> JobProgress {
        var (total, completed) = (finishedUnits, finishedUnits)
        if _state == .finished {
            let units = max(total, 1)
            return JobProgress(kind: .group, total: units, completed: units, finished: true)
        }
        var adopted: [JobProgress] = []
        // O(children) once. Every unfinished child is on the queue of children until it finishes;
        // so are jobs the group does not count (a job a child added to `JobQueue.current`, a
        // generated dependency left uncounted), which count in that queue's progress only.
        for child in children._membersLocked() where child._isCountedChild {
            if let own = child._progressToCountLocked(&actions) {
                adopted.append(own)
                let (ownTotal, ownCompleted) = own._countedUnits
                total += ownTotal
                completed += ownCompleted
            } else {
                total += 1
            }
        }
        let progress = JobProgress(kind: .group, total: total, completed: completed)
        for own in adopted { own._parentLocked = progress }
        return progress
    }

    /// `child`, which this group counts, has finished and been told so: counts the group down,
    /// keeping its failure unless it is a child's generated dependency. At
    /// its last unfinished child the group lets go of itself (`JobQueue._countingGroupRetain`): if
    /// it is executing, it seals, and `actions` finishes it (`_end()`) after unlocking with that
    /// reference; otherwise the reference is released after unlocking (it may be the last). Call
    /// with `engineLock` held, from `Job._countDownGroupLocked` or `_countDownPlainChildLocked`.
    func _childFinishedLocked(_ child: Job, _ actions: inout _Actions) {
        unfinished -= 1
        if child._joinedAsGeneratedDependency {
            child._joinedAsGeneratedDependency = false
        } else {
            _recordFailureLocked(of: child)
        }
        guard unfinished == 0, let retain = children._countingGroupRetain.take() else { return }
        let counting = retain.takeRetainedValue()
        if didExecute && !isSealed {
            isSealed = true
            actions.endAfterCallbacks(counting)
        } else {
            actions.releaseAfterUnlocking(counting)
        }
    }

    /// Adds `child`'s error to the group's failures if it failed. Call with `engineLock` held.
    private func _recordFailureLocked(of child: Job) {
        if child._lifecycle.outcome == .failed, let error = child._details?.error {
            failures.append((child._describeLocked, error))
        }
    }

    /// The group was cancelled before it ran, and finishes in this critical section: queues the
    /// cancellation of every child, which the group's `_finishLocked` carries out before it
    /// returns (iteratively, so nested groups use constant stack). Their `cancel()` overrides run
    /// after unlocking. Call with `engineLock` held.
    func _cancelChildrenLocked(_ actions: inout _Actions) {
        let reason = CancellationReason(code: .parentCancelled, detail: nil, responsibleJob: _describeLocked)
        for child in children._membersLocked() {
            actions.cancelLater(child, reason: reason)
        }
    }

    /// The group was refused its exclusivity categories and fails without running
    /// (`Job._refuseToRun`): it takes no more children, and cancels those it has, which have not
    /// started, before it finishes.
    func _cancelChildrenBecauseRefused() {
        engineLock.lock()
        isSealed = true
        isRefused = true
        engineLock.unlock()
        children._cancelAllJobs(reason: parentReason)
    }

    /// Finishes the group: failed if a child failed, unless the group was cancelled, whose own
    /// reason then stands.
    func _end() {
        engineLock.lock()
        let failures = _isCancelled ? [] : self.failures
        let name = _describeLocked
        engineLock.unlock()
        // `unlessCancelled`: a `cancel()` after the read above finds the group executing and only
        // marks it; its own reason still stands.
        _finish(failure: failures.isEmpty ? nil : GroupFailure(group: name, failures: failures), unlessCancelled: true)
    }
}

/// The error a ``GroupJob`` fails with: each child that failed, by name, with its error.
public struct GroupFailure: Error, CustomStringConvertible {
    /// The group's name.
    public let group: String
    /// The failed children's names and errors, in the order they finished.
    public let failures: [(job: String, error: any Error)]

    public var description: String {
        let list = failures.map { "'\($0.job)': \($0.error)" }.joined(separator: "; ")
        return "'\(group)': \(failures.count) \(failures.count == 1 ? "child" : "children") failed: \(list)"
    }
}

extension Job {
    /// Adds `job`, made by this job while it runs, to this job's group if it is a group's child, or
    /// else to this job's queue, before this job can finish: a group cannot finish in between. A
    /// ``RetryJob``'s attempt, which is on no queue, produces as its retry job would: to the retry
    /// job's group or queue.
    ///
    /// Call it from the job's own work, while it executes (an asynchronous job until it calls
    /// `finish()`); otherwise it traps, as it does for a job started by hand outside any queue or
    /// group, for the job itself, and for a job the group or queue would refuse (one on a queue or
    /// executing; for a queue, also one that has finished, unless it was cancelled before it was
    /// added). A job that would close a cycle with the group traps as ``GroupJob/addChild(_:)``
    /// does.
    public func produce(_ job: Job) {
        engineLock.lock()
        guard _state == .executing else {
            let name = _describeLocked
            let state = _state
            engineLock.unlock()
            _trap("Job.produce(_:): '\(name)' is \(state); a job produces jobs only while it executes")
        }
        let group = _countingGroupLocked
        let queue = _queue?.takeUnretainedValue()
        // An attempt's retry job executes until the attempt has finished, so it can produce too.
        let retryJob = group == nil && queue == nil ? _extras?.retryJob : nil
        let name = _describeLocked
        // What `addChild(_:)` or `addJob(_:)` would trap on, named here (either still checks).
        var problem: String?
        if job === self {
            problem = "'\(name)' cannot produce itself; produce a new job"
        } else if let group {
            problem = group._childProblemLocked(job)
        } else if let queue {
            problem = queue._joinProblemLocked(job)
        }
        if let problem {
            engineLock.unlock()
            _trap("Job.produce(_:): \(problem)")
        }
        engineLock.unlock()
        if let group {
            group.addChild(job)
        } else if let queue {
            queue.addJob(job)
        } else if let retryJob {
            retryJob.produce(job)
        } else {
            _trap("Job.produce(_:): '\(name)' was started by hand, outside any queue or group; add the job yourself")
        }
    }
}
