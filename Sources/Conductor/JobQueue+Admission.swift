import Synchronization

// Adding a closure to a busy queue without the engine lock.
//
// `addJob(_:)` with a closure creates a `BlockJob` that no one else can reach, so none of the checks
// `_enqueueLocked` makes can fail for it, and nothing but the queue can observe it. When the queue
// is busy, such a job is pushed onto the queue's `_pushed` stack with one compare-and-swap, and
// whoever next takes the engine lock for the queue admits it: the worker claiming its next job, the
// section where a running job finishes, or any queue-level call. On a busy queue the thread adding
// jobs then never contends for the lock with the workers that run them.
//
// The handshake. `_admitsWithoutLock` says a push may skip the lock: while it is true, some thread
// is bound to take the lock for this queue and plan its workers, which admits what was pushed. It is
// true while the queue has unsettled jobs and is suspended, or has no free slot, or has a worker
// dispatched that has not run yet, or has a helper standing by (sent again when its timer fires)
// while a worker runs; each of these ends only in a section that touches the queue and so plans
// its workers (`_shouldStartWorkerLocked(_:)`), which recomputes the flag. A pusher pushes,
// then reads the flag; a section turning the flag off stores it, then reads the stack. Both use
// sequentially consistent ordering, so at least one of them sees the other: either the pusher sees
// the flag off and admits its job itself, under the lock, or the section sees the job and admits
// it. `Model/Admission.pml` checks this handshake for lost jobs.
//
// Consistency. Every section that reads or changes the queue's membership, counts or order admits
// the pushed jobs first (`_admitPushedLocked`): every enqueue, a member becoming ready, changing
// priority or leaving, every claim and queue-level call, and the diagnostics. So a pushed job is a
// member, in push order, for everything that happens after its `addJob(_:)` returned. A pushed
// job's queue is active (on `_activeQueues`): the flag is only on while the queue has unsettled
// jobs, and the section that settles the last of them admits what was pushed before the count
// reaches zero.
extension JobQueue {
    /// Pushes `job`, a `BlockJob` no one else has seen, without the engine lock. Returns whether
    /// it is done; if not, the caller must admit it under the lock.
    ///
    /// - Complexity: O(1); lock-free (one compare-and-swap, retried only while other threads push).
    @inline(__always)
    func _pushWithoutLock(_ job: Job) -> Bool {
        // The stack's manual retain, handed to the membership list when the job is admitted.
        let node = Unmanaged.passRetained(job)
        let bits = UInt(bitPattern: node.toOpaque())
        var head = _pushed.load(ordering: .relaxed)
        while true {
            // The stack links through `_next`, which the job uses for the membership list only once
            // it is admitted.
            job._next = Unmanaged<Job>._fromBits(head)
            let (exchanged, current) = _pushed.compareExchange(
                expected: head, desired: bits, successOrdering: .sequentiallyConsistent, failureOrdering: .relaxed)
            if exchanged { break }
            head = current
        }
        #if CONDUCTOR_INVARIANTS
            _pushedWithoutLockCount.add(1, ordering: .relaxed)
        #endif
        return _admitsWithoutLock.load(ordering: .sequentiallyConsistent)
    }

    /// Admits the jobs pushed without the lock, in the order they were pushed. Call first in every
    /// section that reads or changes the queue's membership, counts or order.
    ///
    /// - Complexity: O(1) when nothing was pushed; O(1) per pushed job.
    ///
    /// - Parameter inLine: `false` only for jobs about to be cancelled in the same section: they
    ///   become members but are not put in line, which would only take them out again.
    @inline(__always)
    func _admitPushedLocked(_ actions: inout _Actions, inLine: Bool = true) {
        if _pushed.load(ordering: .relaxed) != 0 {
            _admitPushedJobsLocked(&actions, inLine: inLine)
        }
    }

    @inline(never)
    private func _admitPushedJobsLocked(_ actions: inout _Actions, inLine: Bool = true) {
        // The stack is newest first: reverse it, then admit oldest first.
        var node = Unmanaged<Job>._fromBits(_pushed.exchange(0, ordering: .acquiring))
        var oldestFirst: Unmanaged<Job>?
        while let current = node {
            node = current._withUnsafeGuaranteedRef { job in
                let next = job._next
                job._next = oldestFirst
                return next
            }
            oldestFirst = current
        }
        while let current = oldestFirst {
            let job = current.takeUnretainedValue()
            oldestFirst = job._next
            job._next = nil
            if let problem = _enqueueAfterPushedLocked(job, inLine: inLine, &actions) {
                _trap("Conductor: a job added without the lock could not be admitted: \(problem)")
            }
            // The membership list took its own retain: this releases the stack's, never the last.
            current.release()
        }
        actions.touch(self)
    }

    /// Whether to dispatch a worker now (see `_shouldStartWorkerLocked()`), after admitting the
    /// pushed jobs, and with `_admitsWithoutLock` brought up to date: the handshake above.
    func _shouldStartWorkerLocked(_ actions: inout _Actions) -> Bool {
        var start = false
        while true {
            _admitPushedLocked(&actions)
            if _shouldStartWorkerLocked() {
                start = true
            }
            let admitsWithoutLock =
                _unsettled > 0 && _progress == nil
                && (_isSuspended || _executing >= _limit || _idleWorkers > 0
                    || (_standbyWorkers > 0 && _runningWorkers > 0))
            if admitsWithoutLock == _admitsWithoutLockCached {
                return start
            }
            _admitsWithoutLockCached = admitsWithoutLock
            _admitsWithoutLock.store(admitsWithoutLock, ordering: .sequentiallyConsistent)
            // Turned off: a push that read the flag still on may have landed since the admission
            // above. Read the stack after the store, and admit what is there.
            if admitsWithoutLock || _pushed.load(ordering: .sequentiallyConsistent) == 0 {
                return start
            }
        }
    }

    /// The last unsettled job is settling: turns pushing off, then admits what was pushed, so the
    /// count reaches zero only with nothing pushed. A job pushed before this is waited for by the
    /// queue's waiters and keeps the queue active; a push after it finds pushing off and admits
    /// its job under the lock, after this section, so its `addJob(_:)` returns after the waiters
    /// were woken. The same handshake as in `_shouldStartWorkerLocked(_:)`.
    func _admitBeforeSettlingLocked(_ actions: inout _Actions) {
        if _admitsWithoutLockCached {
            _admitsWithoutLockCached = false
            _admitsWithoutLock.store(false, ordering: .sequentiallyConsistent)
        }
        if _pushed.load(ordering: .sequentiallyConsistent) != 0 {
            _admitPushedJobsLocked(&actions)
        }
    }

    /// Runs `body` under the engine lock once the jobs pushed onto every queue are admitted, then
    /// starts the workers admission calls for. For diagnostics, which may read any queue.
    ///
    /// - Complexity: O(active queues) besides `body`.
    static func _withEveryQueuesPushedAdmitted<Result>(_ body: () -> Result) -> Result {
        var actions = _Actions()
        engineLock.lock()
        // A queue with pushed jobs is active (see the note at the top of this file).
        for queue in _activeQueues.allLocked() {
            queue._admitPushedLocked(&actions)
        }
        let result = body()
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        return result
    }
}

extension Unmanaged where Instance == Job {
    /// The job whose address is `bits`, or `nil` for 0.
    @inline(__always)
    fileprivate static func _fromBits(_ bits: UInt) -> Unmanaged<Job>? {
        UnsafeRawPointer(bitPattern: bits).map { Unmanaged<Job>.fromOpaque($0) }
    }
}

extension JobQueue {
    /// Whether jobs pushed without the lock are waiting to be admitted. For the tests, which check
    /// that the lock-free path was taken: nothing else may depend on it.
    package var _hasPushedJobs: Bool {
        _pushed.load(ordering: .sequentiallyConsistent) != 0
    }
}
