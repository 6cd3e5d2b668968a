extension Job {
    /// Makes this job wait until `job` finishes.
    ///
    /// Dependencies may be added before or after either job is enqueued, and across queues. A
    /// dependency on a job that has already finished (including one cancelled) is satisfied at
    /// once. Adding the same dependency twice does nothing.
    ///
    /// - Parameter job: The job to wait for.
    /// - Throws: `JobError` with code `.dependencyCycle`, naming the jobs on the cycle, if `job`
    ///   already waits (directly or through other jobs) for this one, or is this job; and
    ///   `.alreadyStarted` if this job has started or finished. The graph is unchanged when it throws.
    /// - Complexity: O(1) amortized when `job` was created before this job, or otherwise already
    ///   ordered before it; otherwise O(size of the affected region) by the Pearce–Kelly algorithm.
    ///   Plus O(number of dependencies) for the duplicate check.
    public func addDependency(_ job: Job) throws(JobError) {
        var actions = _Actions()
        engineLock.lock()
        defer {
            engineLock.unlock()
            actions.perform()
        }
        if job === self {
            throw JobError(code: .dependencyCycle, jobs: [self])
        }
        guard _state == .pending || _state == .ready else {
            throw JobError(code: .alreadyStarted, jobs: [self, job])
        }
        if _hasDependencyLocked(job) {
            return
        }
        if job._state != .finished {
            if let cycle = _DependencyGraph.orderLocked(job, before: self) {
                throw JobError(code: .dependencyCycle, jobs: cycle)
            }
            job._dependents.append(self)
            _blockers += 1
            #if CONDUCTOR_INVARIANTS
                _DependencyGraph.checkInvariantsLocked(around: self)
                _DependencyGraph.checkInvariantsLocked(around: job)
            #endif
            if _state == .ready {
                _becomePendingLocked(&actions)
            }
        }
        _dependencies.append(job)
        _extras?.dependencySet?.insert(ObjectIdentifier(job))
    }

    /// Whether `job` is already a dependency. O(1) amortized: a short list is scanned, a long one
    /// gets a set of identities. Call with `engineLock` held.
    private func _hasDependencyLocked(_ job: Job) -> Bool {
        if let set = _extras?.dependencySet {
            return set.contains(ObjectIdentifier(job))
        }
        if _dependencies.count < 16 {
            return _dependencies.contains { $0 === job }
        }
        let set = Set(_dependencies.lazy.map { ObjectIdentifier($0) })
        _extrasLocked.dependencySet = set
        return set.contains(ObjectIdentifier(job))
    }

    /// Stops this job from waiting for `job`. If that was its last unfinished dependency, the job
    /// becomes ready at once (and its queue may start it). Removing a job that is not a dependency
    /// does nothing.
    ///
    /// - Complexity: O(dependencies of this job + dependents of `job`).
    public func removeDependency(_ job: Job) {
        var actions = _Actions()
        engineLock.lock()
        if let index = _dependencies.firstIndex(where: { $0 === job }) {
            _dependencies.remove(at: index)
            _extras?.dependencySet?.remove(ObjectIdentifier(job))
            // The edge was counted iff `job` is still unfinished: finishing is terminal, and a job
            // that started had no unfinished dependencies.
            if job._state != .finished, _state == .pending || _state == .ready {
                if let position = job._dependents.firstIndex(where: { $0 === self }) {
                    job._dependents.remove(at: position)
                }
                _blockers -= 1
                if _blockers == 0 && _state == .pending {
                    _becomeReadyLocked(&actions)
                }
            }
        }
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
    }

    /// The jobs this job waits for, in the order they were added.
    ///
    /// A finished job has dropped its dependencies, so this is empty once ``isFinished`` is `true`:
    /// holding them would keep whole finished graphs alive. Unlike Foundation's.
    public var dependencies: [Job] {
        engineLock.withLock { _dependencies }
    }
}
