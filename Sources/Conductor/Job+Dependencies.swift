extension Job {
    /// Makes this job wait until `job` finishes, whatever its outcome (``DependencyPolicy/afterFinish``).
    ///
    /// The same as ``addDependency(_:policy:)`` with `.afterFinish`: Foundation's semantics.
    ///
    /// - Parameter job: The job to wait for.
    /// - Throws: As ``addDependency(_:policy:)``.
    /// - Complexity: As ``addDependency(_:policy:)``.
    public func addDependency(_ job: Job) throws(JobError) {
        try addDependency(job, policy: .afterFinish)
    }

    /// Makes this job wait until `job` finishes; with ``DependencyPolicy/requireSuccess``, only a
    /// successful `job` lets it run.
    ///
    /// Dependencies may be added before or after either job is enqueued, and across queues. A
    /// dependency on a job that has already finished (including one cancelled) is satisfied at
    /// once, except that under `.requireSuccess` a dependency that already failed or was cancelled
    /// cancels this job at once. Adding the same dependency again does nothing, whatever the
    /// policy: the first one stays.
    ///
    /// Under `.requireSuccess`, when `job` fails or is cancelled this job is cancelled without
    /// running, with reason ``CancellationReason/Code/dependencyFailed`` or
    /// ``CancellationReason/Code/dependencyCancelled`` naming `job`; its own `.requireSuccess`
    /// dependents follow, and so on through the graph, across queues, in O(edges).
    ///
    /// - Parameters:
    ///   - job: The job to wait for.
    ///   - policy: Whether this job runs whatever `job`'s outcome (`.afterFinish`), or only if
    ///     `job` succeeds (`.requireSuccess`).
    /// - Throws: `JobError` with code `.dependencyCycle`, naming the jobs on the cycle, if `job`
    ///   already waits (directly or through other jobs) for this one, or is this job, or if one of
    ///   them is a ``GroupJob`` around the other (a group waits for the jobs inside it to finish,
    ///   and they wait for it to start); and
    ///   `.alreadyStarted` if this job has started or finished. The graph is unchanged when it throws.
    /// - Complexity: O(1) amortized when `job` was created before this job, or otherwise already
    ///   ordered before it; otherwise O(size of the affected region) by the Pearce–Kelly algorithm.
    ///   The duplicate check is O(1) amortized. For a job inside a ``GroupJob``, plus O(depth of
    ///   nesting).
    public func addDependency(_ job: Job, policy: DependencyPolicy) throws(JobError) {
        var actions = _Actions()
        engineLock.lock()
        do {
            try _addDependencyLocked(job, policy: policy, &actions)
        } catch {
            engineLock.unlock()
            actions.perform()
            throw error
        }
        // Planning matters only when the edge cancelled this job (a `.requireSuccess` edge to a job
        // that already failed); otherwise nothing was touched and it costs one check.
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
    }

    @inline(__always)
    func _addDependencyLocked(
        _ job: Job, policy: DependencyPolicy, _ actions: inout _Actions
    ) throws(JobError) {
        if job === self {
            throw JobError(code: .dependencyCycle, jobs: [self])
        }
        guard _lifecycle.isUnstarted else {
            let situation =
                _state == .executing
                ? "has already started"
                : _lifecycle.didStart ? "has already finished" : "was cancelled before it started"
            throw JobError(code: .alreadyStarted, jobs: [self, job], situation: situation)
        }
        if _hasDependencyLocked(job) {
            return
        }
        if job._state != .finished {
            // A group's children are not edges of the graph: one flag each, read only for children.
            if _isCountedChild || job._isCountedChild, let cycle = _groupCycleLocked(waitingFor: job) {
                throw JobError(code: .dependencyCycle, jobs: cycle, situation: Job.groupCycleSituation)
            }
            if let cycle = _DependencyGraph.orderLocked(job, before: self) {
                throw JobError(code: .dependencyCycle, jobs: cycle)
            }
            job._dependents.append(self)
            #if CONDUCTOR_INVARIANTS
                _DependencyGraph.checkInvariantsLocked(edgeFrom: job, to: self)
            #endif
            if _lifecycle.dependencyAdded() == .leftReady, let queue = _queue {
                queue._withUnsafeGuaranteedRef { $0._jobLeftReadyLocked(self, &actions) }
            }
            if let extras = _extras {
                if _isExclusive {
                    _leaveExclusivityLineLocked(extras, &actions)
                }
                if extras.conditionsEvaluating {
                    // The conditions must be evaluated after this dependency too.
                    extras.conditionsGeneration &+= 1
                }
            }
            if policy == .requireSuccess {
                // Identities are safe: `_dependencies` holds the job while this one is unfinished.
                let extras = _extrasLocked
                if extras.requiredDependencies == nil {
                    extras.requiredDependencies = []
                }
                extras.requiredDependencies!.insert(ObjectIdentifier(job))
            }
        }
        _dependencies.append(job)
        _extras?.dependencySet?.insert(ObjectIdentifier(job))
        if policy == .requireSuccess, let outcome = job._lifecycle.outcome, outcome != .succeeded {
            // The dependency already failed or was cancelled: this job never runs.
            actions.cancelLater(self, because: job, outcome)
            actions.cancelDependentsLocked()
        }
    }

    /// Why a cycle through a group is one: the graph's edges do not show it.
    static let groupCycleSituation = "a group waits for its children to finish, and they wait for it to start"

    /// The cycle that this job waiting for `job` would close through a group, if it would: `job`
    /// is a group around this job (which waits for this job to finish, and this job would wait
    /// for it), or this job is a group around `job` (which waits for this job to start, and this
    /// job would wait for it to finish). Groups around a job are the groups that count it, then
    /// the groups that count those, and so on. Returns the jobs on the cycle, starting with this
    /// job, each waiting for the next: this job, `job`, then the groups between them. A cycle
    /// through other jobs' edges is not found, nor one through a job on a group's queue of children
    /// that the group does not count (one a child added through `JobQueue.current`, or a generated
    /// dependency that waits for the group, `GroupJob._countGeneratedDependencyLocked`).
    ///
    /// - Complexity: O(depth of nesting), retaining and allocating nothing unless it finds a cycle.
    ///   Call with `engineLock` held, for an unfinished `job`.
    func _groupCycleLocked(waitingFor job: Job) -> [Job]? {
        if Job._isGroup(job, around: self), let path = _groupsAround(self, upTo: job) {
            // `job` finishes after this job: the groups from `job` down to this one, each waiting
            // for the next to finish, the last for this job.
            return [self, job] + path.reversed()
        }
        if Job._isGroup(self, around: job), let path = _groupsAround(job, upTo: self) {
            // This job starts before `job`: `job` waits for its group to start, that group for its
            // own, and so on up to this job.
            return [self, job] + path
        }
        return nil
    }

    /// Whether `outer` is a group around `inner`, walking the groups without retaining them. Call
    /// with `engineLock` held.
    private static func _isGroup(_ outer: Job, around inner: Job) -> Bool {
        let target = Unmanaged.passUnretained(outer).toOpaque()
        var group = inner._countingGroupUnretainedLocked
        while let current = group {
            if current.toOpaque() == target { return true }
            group = current._withUnsafeGuaranteedRef { $0._countingGroupUnretainedLocked }
        }
        return false
    }

    /// The groups around `inner` below `outer`, innermost first, if `outer` is a group around
    /// `inner`; `nil` otherwise. Call with `engineLock` held.
    func _groupsAround(_ inner: Job, upTo outer: Job) -> [Job]? {
        var between: [Job] = []
        var group = inner._countingGroupLocked
        while let current = group {
            if current === outer { return between }
            between.append(current)
            group = current._countingGroupLocked
        }
        return nil
    }

    /// Whether `job` is already a dependency. O(1) amortized: a short list is scanned, a long one
    /// gets a set of identities. Call with `engineLock` held, for a job that has not started (a
    /// started job keeps no edge the answer could rely on).
    ///
    /// While `job` is unfinished (and this job unstarted), an edge between
    /// them is on both ends: `job` is in `_dependencies` exactly when this job is in
    /// `job._dependents`. So when this job's list is long, `job`'s is scanned if it is short, and the
    /// set is built only when both are long (or `job` has finished). A fan-in's last job (10⁴
    /// dependencies, each with at most one dependent) needs no set.
    @inline(__always)
    func _hasDependencyLocked(_ job: Job) -> Bool {
        #if CONDUCTOR_INVARIANTS
            _require(
                _lifecycle.isUnstarted, "Conductor: _hasDependencyLocked on '\(_describeLocked)', which has started")
        #endif
        // No dependency or one, answered inline: a job's first two edges. A set, if the job has
        // one, holds the same identities as the list.
        switch _dependencies {
        case .empty:
            return false
        case .one(let dependency):
            return dependency === job
        case .many:
            return _hasDependencyInBufferLocked(job)
        }
    }

    /// `_hasDependencyLocked(_:)` for a job with two or more dependencies.
    @inline(never)
    func _hasDependencyInBufferLocked(_ job: Job) -> Bool {
        if let set = _extras?.dependencySet {
            return set.contains(ObjectIdentifier(job))
        }
        if _dependencies.count < 16 {
            return _dependencies.containsIdentical(job)
        }
        if job._state != .finished && job._dependents.count < 16 {
            return job._dependents.containsIdentical(self)
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
            _extras?.requiredDependencies?.remove(ObjectIdentifier(job))
            // The edge was counted iff `job` is still unfinished: finishing is terminal, and a job
            // that started had no unfinished dependencies.
            if job._state != .finished, _lifecycle.isUnstarted {
                if let position = job._dependents.firstIndex(where: { $0 === self }) {
                    job._dependents.remove(at: position)
                }
                _carryOut(_lifecycle.dependencyRemoved(), &actions)
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
        engineLock.withLock { Array(_dependencies) }
    }
}
