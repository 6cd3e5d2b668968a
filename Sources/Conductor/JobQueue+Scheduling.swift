import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// The queue's scheduling core. Everything named `…Locked` must be called with `engineLock` held.
//
// Slot accounting. `_executing` counts jobs this queue started that have not finished; it never
// exceeds `_limit` at the moment a job is claimed. Workers are Dispatch blocks that claim jobs
// only when a thread runs them ("claim at run"): a worker dispatched while the queue was busy
// claims whatever is then the highest-priority ready job, and a worker that finds nothing exits.
// `_idleWorkers` counts workers dispatched but not yet running, so that one burst of additions
// does not dispatch more workers than there are free slots.
//
// Alternatives rejected: dispatching one block per job (a Dispatch hop per job, and priority order
// fixed at dispatch time); and claiming the job when dispatching the worker (a claimed job shows as
// executing, holding a slot, while it still waits for a thread).
extension JobQueue {
    /// Adds `job` to the queue's membership and, unless a barrier holds it back, admits it, after
    /// the jobs pushed without the lock before it.
    /// - Returns: `nil`, or the message to trap with.
    func _enqueueLocked(_ job: Job, _ actions: inout _Actions) -> String? {
        _admitPushedLocked(&actions)
        return _enqueueAfterPushedLocked(job, &actions)
    }

    /// `_enqueueLocked` without admitting the pushed jobs first: for admitting them, oldest first.
    func _enqueueAfterPushedLocked(_ job: Job, inLine: Bool = true, _ actions: inout _Actions) -> String? {
        if job._queue != nil || !job._lifecycle.isUnstarted {
            // `nil` for a job cancelled before it was added: already finished, nothing to run.
            return _joinProblemLocked(job)
        }
        job._queue = Unmanaged.passUnretained(self)
        _countJoiningLocked(job, &actions)
        _linkLocked(job)
        if let epoch = _epochs.last {
            _holdLocked(job, in: epoch)
        } else {
            _admitLocked(job, inLine: inLine, &actions)
        }
        if let extras = job._extras, !extras.generatedDependencies.isEmpty {
            _enqueueGeneratedDependenciesLocked(of: job, extras, &actions)
        }
        return nil
    }

    /// Why `job` cannot be added to this queue: it is on a queue already, executing, or finished
    /// (`nil` for a job cancelled before it was added, which is accepted and has nothing to run, and
    /// for one on this queue as another job's generated dependency, which is here already).
    /// Call with `engineLock` held, off the hot path.
    @inline(never)
    func _joinProblemLocked(_ job: Job) -> String? {
        if let owner = job._queue?.takeUnretainedValue() {
            if owner === self && job._joinedAsGeneratedDependency {
                // Put here as another job's generated dependency, and not finished (it would have
                // left): it is on this queue already.
                return nil
            }
            return owner === self
                ? "'\(job._describeLocked)' is already on this queue ('\(_displayNameLocked)'); a job is added once"
                : "'\(job._describeLocked)' is already on queue '\(owner._displayNameLocked)'; a job belongs to one queue"
        }
        switch job._state {
        case .finished where job._isCancelled:
            return nil
        case .finished:
            return "'\(job._describeLocked)' has already finished; a finished job cannot be added again"
        case .executing:
            return "'\(job._describeLocked)' is already executing (started with start())"
        case .pending, .ready:
            return nil
        }
    }

    /// Counts `job` in the current epoch and, if it is ready, puts it in line (unless `inLine` is
    /// `false`: a job the same section cancels); if only its conditions hold it back, starts
    /// their evaluation.
    func _admitLocked(_ job: Job, inLine: Bool = true, _ actions: inout _Actions) {
        job._admitted = true
        _activeUnfinished += 1
        if job._state == .ready {
            if job._lifecycle.readyPostDue() {
                job._postLocked(.ready, &actions)
            }
            if inLine {
                _ready.push(job)
                actions.touch(self)
            }
        } else if job._lifecycle.waits.conditions != 0 && job._lifecycle.waits.dependencies == 0 {
            job._conditionsDueLocked(&actions)
        }
    }

    /// Holds `job`, a new member, behind `epoch`'s barrier, marked with the epoch's number.
    func _holdLocked(_ job: Job, in epoch: _BarrierEpoch) {
        epoch.held.append(job)
        _heldCount += 1
        job._readyTicket = _DiagnosticClock.heldMark | epoch.number
    }

    /// Where `job`, a member, stands among the barrier epochs: -1 if admitted, else the index in
    /// `_epochs` of the epoch it is held in (for a barrier not yet admitted, its own). O(1): a held
    /// job, and a barrier, carries its epoch's number, and the epochs' numbers are consecutive.
    func _epochIndexLocked(of job: Job) -> Int {
        if job._admitted { return -1 }
        guard let index = _heldEpochIndexLocked(of: job) else {
            _trap("Conductor: '\(job._describeLocked)' is held behind no barrier of its queue")
        }
        return index
    }

    /// The index in `_epochs` of the epoch `job`, a member not admitted, is held in (for a barrier,
    /// its own), or `nil` if it is admitted or held in none. `_epochIndexLocked` without its trap,
    /// for diagnostics.
    func _heldEpochIndexLocked(of job: Job) -> Int? {
        guard !job._admitted, job._readyTicket & _DiagnosticClock.heldMark != 0, let first = _epochs.first else {
            return nil
        }
        let index = Int(truncatingIfNeeded: (job._readyTicket & ~_DiagnosticClock.heldMark) &- first.number)
        return _epochs.indices.contains(index) ? index : nil
    }

    /// Adds the dependencies `job`'s conditions generated to this queue, each unless it is on
    /// another queue, started or finished (so two jobs sharing one generated dependency run it once).
    /// On a group's queue of children, for a child the group counts, the group counts each one that
    /// joins as a child (`GroupJob._countGeneratedDependencyLocked`).
    ///
    /// They join no later than `job`: admitted if `job` is, or held behind `job`'s barrier (for a
    /// barrier, behind the one before it). Not behind the newest barrier, as a job added now would
    /// be: a barrier added after `job` would then wait for `job`, `job` for its generated
    /// dependency, and that for the barrier. One already held here behind a later barrier (generated
    /// first for a later job) moves to `job`'s place, and so do the ones it generated.
    ///
    /// - Complexity: O(1) per generated dependency, except a move, which finds the job in its
    ///   epoch's list: O(that list), at most once per barrier a job moves past.
    func _enqueueGeneratedDependenciesLocked(of job: Job, _ extras: _JobExtras, _ actions: inout _Actions) {
        _admitPushedLocked(&actions)
        var target = _epochIndexLocked(of: job)
        if job._isBarrier && !job._admitted {
            target -= 1
        }
        // On a group's queue of children, for a child the group counts: the group counts them too.
        let group = job._countingGroupLocked
        for dependency in extras.generatedDependencies where dependency._lifecycle.isUnstarted {
            if dependency._queue == nil {
                group?._countGeneratedDependencyLocked(dependency, &actions)
                dependency._joinedAsGeneratedDependency = true
                dependency._queue = Unmanaged.passUnretained(self)
                _countJoiningLocked(dependency, &actions)
                _linkLocked(dependency)
            } else if !_unholdLocked(dependency, ifLaterThan: target) {
                continue
            }
            if target >= 0 {
                _holdLocked(dependency, in: _epochs[target])
            } else {
                dependency._readyTicket = 0
                _admitLocked(dependency, &actions)
            }
            if let generated = dependency._extras, !generated.generatedDependencies.isEmpty {
                _enqueueGeneratedDependenciesLocked(of: dependency, generated, &actions)
            }
        }
    }

    /// If `job` is held here in a later epoch than `target` (an index in `_epochs`, -1 for the
    /// admitted jobs), takes it out of that epoch's list, to be placed again; otherwise `false`.
    ///
    /// - Complexity: O(that epoch's list).
    private func _unholdLocked(_ job: Job, ifLaterThan target: Int) -> Bool {
        guard job._queue?.toOpaque() == Unmanaged.passUnretained(self).toOpaque(), !job._isBarrier else {
            return false
        }
        let current = _epochIndexLocked(of: job)
        guard current > target else { return false }
        guard let position = _epochs[current].held.firstIndex(where: { $0 === job }) else {
            _trap("Conductor: '\(job._describeLocked)' is marked as held behind a barrier that does not hold it")
        }
        // Not the last reference: the membership list and the dependent's edge hold it too.
        _epochs[current].held.remove(at: position)
        _heldCount -= 1
        return true
    }

    // MARK: Ready entries (the queue is their only owner)

    /// `job`, a member, became ready: in line if the queue admitted it (a held job is put in line
    /// when its barrier has finished).
    func _jobBecameReadyLocked(_ job: Job, _ actions: inout _Actions) {
        guard job._admitted else { return }
        // Behind the jobs pushed before it became ready.
        _admitPushedLocked(&actions)
        _ready.push(job)
        actions.touch(self)
        // The job will wait in line a while: long enough for the lines its own finish reads first.
        job._prefetchDependentsStorage()
    }

    /// `job`, a member, is no longer ready (it gained a dependency): out of line.
    func _jobLeftReadyLocked(_ job: Job, _ actions: inout _Actions) {
        if job._isInLine {
            _ready.remove(job, &actions)
        }
    }

    /// `job`'s priority changed: if it is in line, it moves to the back of its new priority level.
    func _jobPriorityChangedLocked(_ job: Job, _ actions: inout _Actions) {
        if job._isInLine {
            _admitPushedLocked(&actions)
            _ready.remove(job, &actions)
            _ready.push(job)
        }
    }

    /// `job` finished (or was cancelled before it started) while it belonged to this queue.
    func _jobLeftLocked(_ job: Job, wasExecuting: Bool, settlesNow: Bool, _ actions: inout _Actions) {
        // Before the job leaves: the membership count must not reach zero with jobs pushed, which
        // would start the queue's count of jobs added since it was idle over (`_addedSinceIdle`).
        _admitPushedLocked(&actions)
        if wasExecuting {
            _executing -= 1
        } else if job._isInLine {
            _ready.remove(job, &actions)
        }
        _unlinkLocked(job)
        if job._admitted {
            job._admitted = false
            _activeUnfinished -= 1
            if _activeUnfinished == 0 && !_epochs.isEmpty {
                _advanceEpochsLocked(&actions)
            }
        } else if !job._isBarrier {
            _heldJobFinishedLocked(&actions)
        }
        if settlesNow {
            _settleLocked(&actions)
        }
        actions.touch(self)
    }

    /// A finished job's callbacks have all run; wake the queue's waiters if it was the last.
    func _settleLocked(_ actions: inout _Actions) {
        if _unsettled == 1 {
            _admitBeforeSettlingLocked(&actions)
        }
        _unsettled -= 1
        if _unsettled == 0 {
            if !_waiters.isEmpty {
                actions.resume(_waiters)
                _waiters = []
            }
            // Off the list of active queues, and balance the retain taken in `_linkLocked` when
            // the queue gained its first job.
            if let previous = _activePrevious {
                previous._withUnsafeGuaranteedRef { $0._activeNext = _activeNext }
            } else {
                _activeQueues.head = _activeNext
            }
            _activeNext?._withUnsafeGuaranteedRef { $0._activePrevious = _activePrevious }
            _activeNext = nil
            _activePrevious = nil
            actions.releaseSelfRetainAfterUnlocking(of: self)
        }
    }

    /// Moves through barrier epochs while the current one has no unfinished job: first the
    /// barrier is admitted (alone), then, once it has finished, the jobs held behind it.
    func _advanceEpochsLocked(_ actions: inout _Actions) {
        while _activeUnfinished == 0, let epoch = _epochs.first {
            if !epoch.barrierAdmitted {
                epoch.barrierAdmitted = true
                epoch.barrier._readyTicket = 0
                _admitLocked(epoch.barrier, &actions)
            } else {
                _epochs.removeFirst()
                // Held jobs cancelled while waiting have left the list; free them after unlocking.
                actions.release(epoch.held)
                actions.release([epoch.barrier])
                _heldCount -= epoch.held.count
                for job in epoch.held {
                    if job._state == .finished {
                        _heldFinished -= 1
                    } else {
                        job._readyTicket = 0
                        _admitLocked(job, &actions)
                    }
                }
            }
        }
    }

    /// A job held behind a barrier finished (it was cancelled). Out of line: rare, and it keeps
    /// `_jobLeftLocked`, on every job's finish, small enough to be inlined.
    @inline(never)
    func _heldJobFinishedLocked(_ actions: inout _Actions) {
        _heldFinished += 1
        if _heldFinished >= 16 && _heldFinished * 2 >= _heldCount {
            _compactHeldLocked(&actions)
        }
    }

    /// Removes the jobs cancelled while held from every epoch's `held` list and frees them after
    /// unlocking. Runs once they are at least 16 and half the entries, so it costs O(1) amortized
    /// per cancelled job, and the lists never hold more dead entries than live ones (plus 16).
    func _compactHeldLocked(_ actions: inout _Actions) {
        var finished: [Job] = []
        for epoch in _epochs {
            epoch.held.removeAll { job in
                guard job._state == .finished else { return false }
                finished.append(job)
                return true
            }
        }
        _heldCount -= finished.count
        _heldFinished = 0
        actions.release(finished)
    }

    /// Claims the next job to run, if the queue may start one now.
    ///
    /// - Complexity: O(1) amortized.
    @inline(__always)
    func _claimNextLocked(_ actions: inout _Actions) -> Job? {
        _admitPushedLocked(&actions)
        guard !_isSuspended, _executing < _limit, var job = _ready.popFirst(&actions) else { return nil }
        if job._isExclusive {
            guard let exclusive = _claimExclusiveLocked(job, &actions) else { return nil }
            job = exclusive
        }
        _executing += 1
        _claims &+= 1
        job._beginExecutingLocked(&actions)
        // Its dependents' fields, which its finish reads, load while it runs.
        job._prefetchDependents()
        return job
    }

    /// `first` has exclusivity categories: returns it if it takes them, or else the next job in
    /// line that may start (a job whose categories are taken waits in their lines, without a slot).
    @inline(never)
    private func _claimExclusiveLocked(_ first: Job, _ actions: inout _Actions) -> Job? {
        var job = first
        while job._isExclusive && !job._takeCategoriesLocked(&actions) {
            guard let next = _ready.popFirst(&actions) else { return nil }
            job = next
        }
        return job
    }

    /// Whether to dispatch a worker now, counting it as idle until it runs.
    ///
    /// At most one worker per queue waits to run at any time. When it runs and claims a job, it
    /// plans again, so if more work and slots remain it hands the baton to one more worker before
    /// it runs its job. Workers thus ramp up one at a time, each dispatched from a worker thread
    /// rather than from the thread adding jobs, and a burst of `finish()` calls from asynchronous
    /// jobs wakes one worker, which claims every job it may start, instead of one worker each.
    ///
    /// Liveness: whenever the queue is not suspended, has a free slot and a ready job, either a
    /// worker is waiting to run (and will claim), or one is running a job (and will claim after
    /// it), or this returns `true`. `Model/Lifecycle.pml` checks this rule for deadlocks.
    func _shouldStartWorkerLocked() -> Bool {
        if _waitingWorkers > 0 && _executing < _limit {
            _wakeups.add(1, ordering: .releasing)  // a slot is free: wake the waiting worker
        }
        guard !_isSuspended, _idleWorkers == 0, _executing < _limit, _ready.count > 0 else { return false }
        if _runningWorkers > 0 {
            // A helper. If one stands by, it checks in on its own; otherwise this one measures the
            // running workers' pace from now.
            guard _standbyWorkers == 0 else { return false }
            _helperSentAt = _PreciseClock.now()
            _helperSentClaims = _claims
        }
        _idleWorkers = 1
        return true
    }

    /// The pace at or above which the running workers need no help: one job per this many
    /// nanoseconds per worker. Below it, jobs are so short that the engine lock, not the number of
    /// workers, bounds throughput, and another worker would only contend for it (measured on two
    /// cores: empty jobs ran 1.4 to 1.7 times slower on two workers than on one; jobs of 1 µs ran
    /// at the same speed on either; longer jobs ran faster on two).
    static let helperPace: UInt64 = 1_000

    /// How long a helper that found the running workers keeping pace stands by before it checks
    /// again (at least: Dispatch may fire the timer up to about 1 ms late). When every running
    /// worker gets stuck in a long job, a ready job waits for the helper to join for two stand-by
    /// periods at most (given a Dispatch thread to run it).
    static let helperStandby: UInt64 = 500_000

    /// How many of its own claims apart a worker checks, while others run, whether they could do
    /// without it (`_othersKeepPaceLocked`).
    static let paceWindow: UInt64 = 256

    /// Whether the other running workers, without the calling one, claimed at least one job per
    /// `helperPace` each over the caller's `window`; starts a new window. Reads the clock only while
    /// others run. Counting only the others' claims keeps a fast worker from leaving while the
    /// others are stuck in long jobs.
    private func _othersKeepPaceLocked(_ window: inout _PaceWindow) -> Bool {
        guard _runningWorkers > 1 else {
            // Alone: nothing to compare. The next window starts at an older time, so its first
            // check, if others run by then, errs toward staying.
            window = _PaceWindow(start: window.start, claims: _claims, own: 0)
            return false
        }
        let now = _PreciseClock.now()
        let others = (_claims &- window.claims) &- window.own
        let keepPace = JobQueue._keepPace(claims: others, from: window.start, to: now, workers: _runningWorkers - 1)
        window = _PaceWindow(start: now, claims: _claims, own: 0)
        return keepPace
    }

    /// Whether `workers` workers that claimed `claims` jobs between `start` and `end` claimed at
    /// least one per `helperPace` each. `start` may be later than `end` when it was read under the
    /// lock and `end` before it: no time has passed then.
    private static func _keepPace(claims: UInt64, from start: UInt64, to end: UInt64, workers: Int) -> Bool {
        let elapsed = end > start ? end - start : 0
        return claims > 0 && elapsed &* UInt64(workers) < claims &* helperPace
    }

    /// Counts the calling worker as the helper standing by from `now`, and returns where to send
    /// it; or returns `nil` if a helper already stands by, which will check, and the caller leaves.
    private func _standByLocked(now: UInt64) -> DispatchQueue? {
        guard _standbyWorkers == 0 else { return nil }
        _standbyWorkers = 1
        _helperSentAt = now
        _helperSentClaims = _claims
        return _dispatchTargetLocked
    }

    /// Sends the helper standing by to check again after `helperStandby`. Call without the lock.
    private func _standBy(on target: DispatchQueue, generation: UInt64) {
        // Weakly: a queue with work keeps itself alive, and one without needs no helper.
        target.asyncAfter(deadline: .now() + .nanoseconds(Int(JobQueue.helperStandby))) { [weak self] in
            self?._runWorker(generation: generation, fromStandby: true)
        }
    }

    /// Whether a helper arriving at `now` should stand by rather than join: it could claim a job,
    /// but the running workers claimed at least one job per `helperPace` per worker since it was
    /// sent (or last stood by). A worker stuck in a long job claims nothing, so a helper then joins.
    private func _helperShouldStandByLocked(now: UInt64, _ actions: inout _Actions) -> Bool {
        _admitPushedLocked(&actions)
        guard _runningWorkers > 0, !_isSuspended, _executing < _limit, _ready.count > 0 else { return false }
        // `now` was read before locking: another section may have restarted the interval since.
        return JobQueue._keepPace(
            claims: _claims &- _helperSentClaims, from: _helperSentAt, to: now, workers: _runningWorkers)
    }

    var _dispatchTargetLocked: DispatchQueue {
        _underlyingQueue ?? DispatchQueue.global(qos: _qualityOfService)
    }

    /// Retires the workers sent to the old target: they stop counting as idle and take no more jobs.
    func _dispatchTargetChangedLocked() {
        _workerGeneration &+= 1
        // Workers waiting for a slot still count until they wake, see the new generation and leave.
        _idleWorkers = _waitingWorkers
        // The old generation's running workers and helper take no more jobs and no longer count.
        _runningWorkers = 0
        _standbyWorkers = 0
        if _waitingWorkers > 0 {
            _wakeups.add(1, ordering: .releasing)
        }
    }

    /// A worker: claims a job, runs it, and keeps taking the next ready job itself until there is
    /// none it may start, or until its generation is retired. Dispatched by `_Actions.perform()`,
    /// or after standing by (`fromStandby`).
    ///
    /// A worker sent while others run is a helper. If the running workers keep pace with the jobs
    /// (`_helperShouldStandByLocked`), it stands by instead of claiming, and checks again after
    /// `helperStandby`: on short jobs one worker holding the engine lock is faster than two
    /// contending for it.
    func _runWorker(generation: UInt64, fromStandby: Bool = false) {
        let now = _PreciseClock.now()
        var actions = _Actions()
        var standbyTarget: DispatchQueue?
        var next: _Claim?
        engineLock.lock()
        guard generation == _workerGeneration else {
            engineLock.unlock()
            return
        }
        if fromStandby {
            _standbyWorkers -= 1
        } else {
            _idleWorkers -= 1
        }
        if _helperShouldStandByLocked(now: now, &actions) {
            standbyTarget = _standByLocked(now: now)
        } else {
            next = _claimLocked(&actions)
            if next != nil {
                _runningWorkers += 1
            }
        }
        var window = _PaceWindow(start: now, claims: _claims, own: 0)
        // Hand the baton: if more work and slots remain, the next worker starts while this one works.
        actions.touch(self)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        if let standbyTarget {
            _standBy(on: standbyTarget, generation: generation)
            return
        }
        guard next != nil else { return }

        let context = _ThreadContext.slot()
        let previousContext = context.pointee
        context.pointee.queue = Unmanaged.passUnretained(self)
        var waitBudget = JobQueue.slotWaitBudget
        while let claim = next {
            let job = claim.job
            context.pointee.job = Unmanaged.passUnretained(job)
            var failure: (any Error)?
            let ranHere = !claim.runsElsewhere
            if ranHere {
                do {
                    try job._executeClaimed()
                } catch {
                    failure = error
                }
            } else {
                // On its execution queue, holding its slot; it finishes there.
                job._executeOnExecutionQueue(queue: self)
            }
            // Unretained: not left pointing at a job that may be freed before the next one runs.
            context.pointee.job = nil
            var actions = _Actions()
            var waitFrom: UInt64?
            var claimAfterCallbacks = false
            var standbyTarget: DispatchQueue?
            var releasesSpentWork = false
            engineLock.lock()
            if let failure {
                // A job whose `execute()` threw has failed (or, with `CancellationError`, is
                // cancelled) and finishes now, an asynchronous one included, unless it already did.
                if job._state == .executing {
                    job._finishLocked(failure: failure, &actions)
                }
            } else if ranHere {
                if job.finishesWhenExecuteReturns {
                    job._finishLocked(&actions)
                } else {
                    releasesSpentWork = job._executeReturnedLocked()
                }
            }
            if generation != _workerGeneration {
                next = nil
                actions.touch(self)  // retired: workers on the new target take over
            } else if actions.hasDeliveries {
                // Callbacks first, and only then the next job: a claimed job would show as
                // executing and wait behind them, so a completion block or observer that waits for
                // it (a dependent, the next job of a limit-1 queue) would deadlock. The freed slot
                // is planned for below, so another worker can run that job meanwhile.
                next = nil
                claimAfterCallbacks = true
            } else if window.own >= JobQueue.paceWindow && _othersKeepPaceLocked(&window) {
                // The others keep pace without this worker: it leaves, and stands by unless
                // another helper already does.
                next = nil
                _runningWorkers -= 1
                standbyTarget = _standByLocked(now: window.start)
                actions.touch(self)
            } else {
                next = _claimLocked(&actions)
                if next == nil && waitBudget > 0 && _onlyTheLimitStopsWorkLocked {
                    waitFrom = _beginWaitingForSlotLocked()
                }
                if next == nil && waitFrom == nil {
                    _runningWorkers -= 1  // leaves
                    actions.touch(self)
                }
            }
            actions.planWorkersLocked()
            engineLock.unlock()
            actions.perform()
            if releasesSpentWork {
                job._releaseSpentWork()
            }
            if let standbyTarget {
                _standBy(on: standbyTarget, generation: generation)
            } else if claimAfterCallbacks {
                next = _claimAfterCallbacks(generation: generation)
            } else if let waitFrom {
                next = _waitForSlot(from: waitFrom, generation: generation, budget: &waitBudget)
            }
            if next != nil {
                window.own &+= 1
            }
        }
        context.pointee = previousContext
    }

    /// After running a finished job's callbacks, claims the next job if one may start, handing the
    /// baton as a freshly dispatched worker would. A worker planned meanwhile for the slot finds
    /// nothing and exits.
    private func _claimAfterCallbacks(generation: UInt64) -> _Claim? {
        var actions = _Actions()
        engineLock.lock()
        var claimed: _Claim?
        if generation == _workerGeneration {
            claimed = _claimLocked(&actions)
            if claimed == nil {
                _runningWorkers -= 1  // leaves
            }
        }
        actions.touch(self)
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        return claimed
    }

    /// How many times a worker stopped by the limit yields its processor while it waits for a slot
    /// before it gives its thread back.
    ///
    /// Asynchronous jobs return from `execute()` at once and free their slot later, from another
    /// thread. Without a short wait, every `finish()` would have to wake a parked thread (two
    /// wake-ups per round of jobs); with it, a steady stream of finishes is picked up by a worker
    /// that is still awake. The wait is bounded and only happens when ready work is waiting for a
    /// slot, so an idle queue never spins.
    static let slotWaitBudget = 64

    /// From how many dependents on a finishing job the ready line is grown once for all of them
    /// (`Job._reserveLineLocked(forDependents:)`), rather than as they are released.
    static let reserveForDependents = 64

    /// Whether a worker should wait for a slot: ready work waits only because every slot is taken.
    ///
    /// Not with an `underlyingQueue`: it may be serial, and then the `finish()` that would free a
    /// slot is queued behind the waiting worker.
    var _onlyTheLimitStopsWorkLocked: Bool {
        !_isSuspended && _ready.count > 0 && _executing >= _limit && _limit > 0 && _underlyingQueue == nil
    }

    /// Registers the calling worker as waiting: it counts as idle, so a freed slot does not
    /// dispatch another worker. Returns the wake-up count to wait from.
    private func _beginWaitingForSlotLocked() -> UInt64 {
        _waitingWorkers += 1
        _idleWorkers += 1
        return _wakeups.load(ordering: .relaxed)
    }

    /// Waits, yielding the processor, until a slot frees or the budget runs out; then claims a job.
    /// Each yield and each failed claim spends budget, so the wait is bounded. Returns the claimed
    /// job, or `nil` when the worker should give its thread back.
    private func _waitForSlot(from wakeup: UInt64, generation: UInt64, budget: inout Int) -> _Claim? {
        var wakeup = wakeup
        while true {
            // Yielding, not spinning: on a small machine the thread that will free the slot may
            // need this processor (measured: spinning made the `async` benchmark slower).
            while budget > 0 && _wakeups.load(ordering: .acquiring) == wakeup {
                budget -= 1
                sched_yield()
            }
            budget -= 1
            var actions = _Actions()
            var keepWaiting = false
            engineLock.lock()
            _waitingWorkers -= 1
            _idleWorkers -= 1
            var claimed: _Claim?
            if generation == _workerGeneration {
                claimed = _claimLocked(&actions)
                if claimed == nil && budget > 0 && _onlyTheLimitStopsWorkLocked {
                    wakeup = _beginWaitingForSlotLocked()
                    keepWaiting = true
                } else if claimed == nil {
                    _runningWorkers -= 1  // leaves
                }
            }
            // Claimed: hand the baton if more work fits. Gave up: re-plan, since this worker no
            // longer counts as idle and work may be waiting.
            actions.touch(self)
            actions.planWorkersLocked()
            engineLock.unlock()
            actions.perform()
            if !keepWaiting {
                return claimed
            }
        }
    }

    #if CONDUCTOR_INVARIANTS
        /// O(1) consistency checks of the queue's counters, run at the end of critical sections in debug builds.
        func _checkInvariantsLocked() {
            let name = _displayNameLocked
            _require(_executing >= 0 && _idleWorkers >= 0, "Conductor: negative slot count on '\(name)'")
            _require(
                _ready.count >= 0 && _ready.count <= _activeUnfinished,
                "Conductor: ready count out of range on '\(name)'")
            _require(_activeUnfinished <= _jobCount, "Conductor: admitted count exceeds members on '\(name)'")
            _require(_jobCount <= _unsettled, "Conductor: more members than unsettled jobs on '\(name)'")
            _require((_head == nil) == (_jobCount == 0), "Conductor: membership list out of sync on '\(name)'")
            _require(
                _heldFinished >= 0 && _heldFinished <= _heldCount && (_heldCount == 0 || !_epochs.isEmpty),
                "Conductor: jobs held behind barriers miscounted on '\(name)'")
            _require(
                _waitingWorkers >= 0 && _waitingWorkers <= _idleWorkers,
                "Conductor: waiting workers miscounted on '\(name)'")
            _require(
                _runningWorkers >= 0 && _standbyWorkers >= 0,
                "Conductor: running or helper workers miscounted on '\(name)'")
            _require(
                _epochs.isEmpty || _epochs[0].barrierAdmitted || _activeUnfinished > 0,
                "Conductor: barrier epoch stalled on '\(name)'")
        }
    #endif

    // MARK: Membership list

    /// Makes `job` a member. The queue takes one manual retain of the job, released in
    /// `_unlinkLocked`, so the list links need no reference counting. While it has unsettled jobs
    /// the queue also retains itself, which is what keeps a queue its owner dropped alive until its
    /// jobs are done (and lets jobs point to their queue without retaining it).
    func _linkLocked(_ job: Job) {
        let node = Unmanaged.passRetained(job)
        if _unsettled == 0 {
            let this = Unmanaged.passRetained(self)
            // Active: first in the list of queues with unsettled jobs.
            _activeNext = _activeQueues.head
            _activeQueues.head?._withUnsafeGuaranteedRef { $0._activePrevious = this }
            _activeQueues.head = this
        }
        job._previous = _tail
        job._next = nil
        if let tail = _tail {
            tail._withUnsafeGuaranteedRef { $0._next = node }
        } else {
            _head = node
        }
        _tail = node
        _jobCount += 1
        _unsettled += 1
    }

    func _unlinkLocked(_ job: Job) {
        let next = job._next
        let previous = job._previous
        if let previous {
            previous._withUnsafeGuaranteedRef { $0._next = next }
        } else {
            _head = next
        }
        if let next {
            next._withUnsafeGuaranteedRef { $0._previous = previous }
        } else {
            _tail = previous
        }
        job._next = nil
        job._previous = nil
        _jobCount -= 1
        // The caller holds its own reference, so this never frees the job under the lock.
        Unmanaged.passUnretained(job).release()
    }
}

/// A job a worker claimed, and whether its work runs on its execution queue. The flag is read in the
/// claim's critical section: it shares a byte with flags the job's finish writes under the lock,
/// and an asynchronous job may be finished from another thread (by a `cancel()` override, say)
/// before the worker starts its work.
struct _Claim {
    let job: Job
    let runsElsewhere: Bool
}

extension JobQueue {
    /// `_claimNextLocked`, for a worker. Call with `engineLock` held.
    @inline(__always)
    func _claimLocked(_ actions: inout _Actions) -> _Claim? {
        guard let job = _claimNextLocked(&actions) else { return nil }
        return _Claim(job: job, runsElsewhere: job._runsElsewhere)
    }
}

/// A worker's interval for measuring whether the other workers keep pace without it: when it
/// started (`_PreciseClock`), the queue's `_claims` then, and how many of those claims since were
/// the worker's own.
struct _PaceWindow {
    var start: UInt64
    var claims: UInt64
    var own: UInt64
}
