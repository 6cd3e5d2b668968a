import Dispatch

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
    /// Adds `job` to the queue's membership and, unless a barrier holds it back, admits it.
    /// - Returns: `nil`, or the message to trap with.
    func _enqueueLocked(_ job: Job, _ actions: inout _Actions) -> String? {
        if let owner = job._queue?.takeUnretainedValue() {
            return owner === self
                ? "'\(job._describeLocked)' is already on this queue ('\(_displayNameLocked)'); a job is added once"
                : "'\(job._describeLocked)' is already on queue '\(owner._displayNameLocked)'; a job belongs to one queue"
        }
        switch job._state {
        case .finished where job._isCancelled:
            return nil  // Cancelled before it was added: already finished, nothing to run.
        case .finished:
            return "'\(job._describeLocked)' has already finished; a finished job cannot be added again"
        case .executing:
            return "'\(job._describeLocked)' is already executing (started with start())"
        case .pending, .ready:
            break
        }
        job._queue = Unmanaged.passUnretained(self)
        _linkLocked(job)
        if let epoch = _epochs.last {
            epoch.held.append(job)
        } else {
            _admitLocked(job, &actions)
        }
        return nil
    }

    /// Counts `job` in the current epoch and, if it is ready, puts it in line.
    func _admitLocked(_ job: Job, _ actions: inout _Actions) {
        job._admitted = true
        _activeUnfinished += 1
        if job._state == .ready {
            if !job._didPostReady {
                job._didPostReady = true
                job._postLocked(.ready, &actions)
            }
            _pushReadyLocked(job)
            actions.touch(self)
        }
    }

    @inline(__always)
    func _pushReadyLocked(_ job: Job) {
        _ready.push(job)
    }

    /// `job` finished (or was cancelled before it started) while it belonged to this queue.
    func _jobLeftLocked(_ job: Job, wasExecuting: Bool, settlesNow: Bool, _ actions: inout _Actions) {
        if wasExecuting {
            _executing -= 1
        } else if job._readyTicket != 0 {
            _ready.remove(job, &actions)
        }
        _unlinkLocked(job)
        if job._admitted {
            job._admitted = false
            _activeUnfinished -= 1
            if _activeUnfinished == 0 && !_epochs.isEmpty {
                _advanceEpochsLocked(&actions)
            }
        }
        if settlesNow {
            _settleLocked(&actions)
        }
        actions.touch(self)
    }

    /// A finished job's callbacks have all run; wake the queue's waiters if it was the last.
    func _settleLocked(_ actions: inout _Actions) {
        _unsettled -= 1
        if _unsettled == 0 {
            if !_waiters.isEmpty {
                actions.resume(_waiters)
                _waiters = []
            }
            // Balance the retain taken in `_linkLocked` when the queue gained its first job.
            actions.releaseAfterUnlocking(self)
        }
    }

    /// Moves through barrier epochs while the current one has no unfinished job: first the
    /// barrier is admitted (alone), then, once it has finished, the jobs held behind it.
    func _advanceEpochsLocked(_ actions: inout _Actions) {
        while _activeUnfinished == 0, let epoch = _epochs.first {
            if !epoch.barrierAdmitted {
                epoch.barrierAdmitted = true
                _admitLocked(epoch.barrier, &actions)
            } else {
                _epochs.removeFirst()
                // Held jobs cancelled while waiting have left the list; free them after unlocking.
                actions.release(epoch.held)
                actions.release([epoch.barrier])
                for job in epoch.held where job._state != .finished {
                    _admitLocked(job, &actions)
                }
            }
        }
    }

    /// Claims the next job to run, if the queue may start one now.
    ///
    /// - Complexity: O(1) amortized.
    @inline(__always)
    func _claimNextLocked(_ actions: inout _Actions) -> Job? {
        guard !_isSuspended, _executing < _limit, let job = _ready.popFirst(&actions) else { return nil }
        _executing += 1
        job._beginExecutingLocked(&actions)
        return job
    }

    /// How many workers to dispatch now, counting them as idle until they run.
    func _workersToStartLocked() -> Int {
        guard !_isSuspended else { return 0 }
        let capacity = _limit - _executing - _idleWorkers
        let wanted = _ready.count - _idleWorkers
        let count = min(capacity, wanted)
        guard count > 0 else { return 0 }
        _idleWorkers += count
        return count
    }

    var _dispatchTargetLocked: DispatchQueue {
        _underlyingQueue ?? DispatchQueue.global(qos: _qualityOfService)
    }

    /// Retires the workers sent to the old target: they stop counting as idle and take no more jobs.
    func _dispatchTargetChangedLocked() {
        _workerGeneration &+= 1
        _idleWorkers = 0
    }

    /// A worker: claims a job, runs it, and keeps taking the next ready job itself until there is
    /// none it may start, or until its generation is retired. Dispatched by `_Actions.perform()`.
    func _runWorker(generation: UInt64) {
        var actions = _Actions()
        engineLock.lock()
        guard generation == _workerGeneration else {
            engineLock.unlock()
            return
        }
        _idleWorkers -= 1
        var next = _claimNextLocked(&actions)
        engineLock.unlock()
        actions.perform()
        guard next != nil else { return }

        let previousQueue = _ThreadContext.queue
        let previousJob = _ThreadContext.job
        _ThreadContext.queue = self
        while let job = next {
            _ThreadContext.job = job
            job.execute()
            var actions = _Actions()
            engineLock.lock()
            if job.finishesWhenExecuteReturns {
                job._finishLocked(&actions)
            }
            if generation == _workerGeneration {
                next = _claimNextLocked(&actions)
            } else {
                next = nil
                actions.touch(self)  // retired: workers on the new target take over
            }
            actions.planWorkersLocked()
            engineLock.unlock()
            actions.perform()
        }
        _ThreadContext.queue = previousQueue
        _ThreadContext.job = previousJob
    }

    #if CONDUCTOR_INVARIANTS
        /// O(1) consistency checks of the queue's counters, run at the end of critical sections in debug builds.
        func _checkInvariantsLocked() {
            let name = _displayNameLocked
            precondition(_executing >= 0 && _idleWorkers >= 0, "Conductor: negative slot count on '\(name)'")
            precondition(
                _ready.count >= 0 && _ready.count <= _activeUnfinished,
                "Conductor: ready count out of range on '\(name)'")
            precondition(_activeUnfinished <= _jobCount, "Conductor: admitted count exceeds members on '\(name)'")
            precondition(_jobCount <= _unsettled, "Conductor: more members than unsettled jobs on '\(name)'")
            precondition((_head == nil) == (_jobCount == 0), "Conductor: membership list out of sync on '\(name)'")
            precondition(
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
            _ = Unmanaged.passRetained(self)
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
