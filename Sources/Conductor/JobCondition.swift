/// A requirement a job must meet before it may become ready, such as "the user is logged in".
///
/// Give a job conditions with ``Job/addCondition(_:)``. Once the job is on a queue and its
/// dependencies (including any a condition generated) have finished, its conditions are
/// evaluated, concurrently, in a `Task`. If every one returns `true` the job becomes ready; if one
/// returns `false` or throws, the job is cancelled with
/// ``CancellationReason/Code/conditionFailed``, the reason's detail naming the condition. While
/// they are evaluated the job is `pending` and holds no slot of its queue.
///
/// ```swift
/// struct LoggedIn: JobCondition {
///     let session: Session
///     var name: String { "logged in" }
///     func dependency(for job: Job) -> Job? { session.isLoggedIn ? nil : session.loginJob }
///     func evaluate(for job: Job) async throws -> Bool { await session.isLoggedIn }
/// }
/// upload.addCondition(LoggedIn(session: session))
/// ```
public protocol JobCondition: Sendable {
    /// Names the condition in the cancellation reason when it fails.
    var name: String { get }

    /// A job to run before the condition is evaluated, such as a login prompt; `nil` (the default)
    /// for none. Called once, when the condition is added. The job gains it as a dependency, and
    /// the engine adds it to the job's queue when the job is added (at once if the job is already
    /// on one), unless it is already on a queue, started or finished. So two jobs whose conditions
    /// return the same job share it, and it runs once. On the queue it goes no later than its job, so a
    /// barrier added after the job waits for it too, and one the job waits behind holds it too. For
    /// a child of a ``GroupJob``, the group counts it (see ``GroupJob``): the group waits for it, and
    /// it takes the exclusivity categories the group holds through the group.
    func dependency(for job: Job) -> Job?

    /// Whether `job` may run. Called once the job's dependencies have finished, with no lock held,
    /// concurrently with the job's other conditions. `false` or a thrown error cancels the job. The
    /// task is cancelled if the job is cancelled meanwhile; the job stays alive until this returns.
    func evaluate(for job: Job) async throws -> Bool
}

extension JobCondition {
    public func dependency(for job: Job) -> Job? { nil }
}

/// A condition made from a closure.
///
/// ```swift
/// job.addCondition(BlockCondition(name: "online") { _ in await network.isReachable })
/// ```
public struct BlockCondition: JobCondition {
    public let name: String
    private let body: @Sendable (Job) async throws -> Bool

    /// Creates a condition named `name` that evaluates `evaluate`.
    public init(name: String, _ evaluate: @escaping @Sendable (Job) async throws -> Bool) {
        self.name = name
        body = evaluate
    }

    public func evaluate(for job: Job) async throws -> Bool {
        try await body(job)
    }
}

extension Job {
    /// Adds a condition the job must meet before it may run (see ``JobCondition``).
    ///
    /// Call it before the job starts, as with dependencies; it may be on a queue already (a ready
    /// job then waits again, for its conditions). On a job that was cancelled before it started it
    /// does nothing. If the condition's generated dependency would close a dependency cycle, the
    /// job is cancelled with ``CancellationReason/Code/conditionFailed`` saying so.
    ///
    /// A job with conditions is started by its queue, which evaluates them; ``start()`` by hand
    /// traps while they are unevaluated.
    ///
    /// - Complexity: O(1), plus adding the generated dependency.
    public func addCondition(_ condition: any JobCondition) {
        // User code, before the lock: the generated dependency, and the condition's name for the
        // message should that dependency close a cycle.
        let generated = condition.dependency(for: self)
        let conditionName = generated == nil ? "" : condition.name
        var actions = _Actions()
        engineLock.lock()
        // Cancelled before it started: nothing left to gate.
        guard _isUnstartedLocked("Job.addCondition(_:)", "add conditions") else { return }
        let extras = _extrasLocked
        extras.conditions.append(condition)
        // An evaluation under way did not see this condition: it can no longer satisfy them all.
        extras.conditionsGeneration &+= 1
        if _lifecycle.waits.conditions == 0, _lifecycle.conditionsAdded() == .leftReady, let queue = _queue {
            queue._withUnsafeGuaranteedRef { $0._jobLeftReadyLocked(self, &actions) }
        }
        if _isExclusive {
            _leaveExclusivityLineLocked(extras, &actions)
        }
        var cancelled = false
        if let generated {
            do {
                try _addGeneratedDependencyLocked(generated, extras, &actions)
            } catch {
                // Cancelled in this critical section, so that it cannot start meanwhile. The error is
                // described as a job keeps it (`_keptLocked()`, its names read now): described as
                // thrown, it would read each job's name through the engine lock, held here. It holds
                // the jobs of the cycle; each is unfinished, so the graph holds it too, but the error
                // is released after unlocking all the same, as everything a section drops is.
                let reason = CancellationReason(
                    code: .conditionFailed,
                    detail: "'\(conditionName)' generated a dependency that would close a cycle: \(error._keptLocked())"
                )
                actions.releaseAfterUnlocking(error)
                cancelled = _cancelLocked(reason, &actions)
            }
        }
        if !cancelled && _admitted && _lifecycle.waits.dependencies == 0 {
            _conditionsDueLocked(&actions)
        }
        _endSectionRunningCancelOverride(if: cancelled, &actions)
    }

    private func _addGeneratedDependencyLocked(
        _ generated: Job, _ extras: _JobExtras, _ actions: inout _Actions
    ) throws(JobError) {
        try _addDependencyLocked(generated, policy: .afterFinish, &actions)
        extras.generatedDependencies.append(generated)
        if let queue = _queue {
            queue._withUnsafeGuaranteedRef { $0._enqueueGeneratedDependenciesLocked(of: self, extras, &actions) }
        }
    }

    /// Only the job's conditions hold it back: starts their evaluation unless one is under way, or
    /// the job is not on a queue yet (its queue starts it on admission). Call with `engineLock` held.
    func _conditionsDueLocked(_ actions: inout _Actions) {
        guard _admitted, let extras = _extras, !extras.conditionsEvaluating else { return }
        extras.conditionsEvaluating = true
        extras.evaluationTicket &+= 1
        actions.evaluateConditions(of: self)
    }

    /// Evaluates the job's conditions in a task, concurrently, then makes it ready or cancels it.
    /// Called after unlocking.
    func _evaluateConditions() {
        let (conditions, generation, ticket) = engineLock.withLock {
            (_extras?.conditions ?? [], _extras?.conditionsGeneration ?? 0, _extras?.evaluationTicket ?? 0)
        }
        // Where no job's work runs, even when a `TaskJob`'s body made the conditions due: its task's
        // queue is not inherited, and `JobQueue.current` is `nil` in `evaluate(for:)`.
        let task = JobQueue._withoutTaskQueue {
            Task { [self] in
                let failure = await Job._firstFailure(of: conditions, for: self)
                _conditionsEvaluated(failure: failure, generation: generation)
            }
        }
        engineLock.lock()
        let finished = _state == .finished
        if !finished, let extras = _extras, extras.conditionsEvaluating, extras.evaluationTicket == ticket {
            extras.conditionEvaluation = task
        }
        engineLock.unlock()
        if finished {
            task.cancel()
        }
    }

    /// The first condition to fail, as a reason's detail, or `nil` if every one was satisfied.
    private static func _firstFailure(of conditions: [any JobCondition], for job: Job) async -> String? {
        await withTaskGroup(of: String?.self) { group in
            for condition in conditions {
                group.addTask {
                    do {
                        return try await condition.evaluate(for: job) ? nil : "'\(condition.name)' was not satisfied"
                    } catch {
                        return "'\(condition.name)' failed: \(error)"
                    }
                }
            }
            for await failure in group {
                if let failure {
                    group.cancelAll()
                    return failure
                }
            }
            return nil
        }
    }

    /// The evaluation of `generation` ended. A failure cancels the job, in this critical section.
    /// Success makes it ready (if nothing else holds it back), unless a condition or a dependency
    /// was added since the evaluation began: then the conditions are evaluated again, now if its
    /// dependencies have finished, otherwise once they have. Ignored if the job finished meanwhile.
    private func _conditionsEvaluated(failure: String?, generation: UInt64) {
        var actions = _Actions()
        engineLock.lock()
        guard let extras = _extras, _state == .pending else {
            engineLock.unlock()
            return
        }
        extras.conditionsEvaluating = false
        extras.conditionEvaluation = nil
        var cancelled = false
        if let failure {
            cancelled = _cancelLocked(CancellationReason(code: .conditionFailed, detail: failure), &actions)
        } else if extras.conditionsGeneration == generation {
            _carryOut(_lifecycle.conditionsSatisfied(), &actions)
        } else if _lifecycle.waits.dependencies == 0 {
            _conditionsDueLocked(&actions)
        }
        _endSectionRunningCancelOverride(if: cancelled, &actions)
    }

    /// Ends a critical section that may have cancelled the job (`cancelled`): plans, unlocks,
    /// carries out `actions`, then runs the job's `cancel()` override, with no lock held.
    private func _endSectionRunningCancelOverride(if cancelled: Bool, _ actions: inout _Actions) {
        actions.planWorkersLocked()
        engineLock.unlock()
        actions.perform()
        if cancelled && _mayOverrideCancel {
            cancel()
        }
    }

    /// The job finished: lets its conditions and generated dependencies go after unlocking, and
    /// cancels an evaluation under way. Call with `engineLock` held.
    func _dropConditionsLocked(_ extras: _JobExtras, _ actions: inout _Actions) {
        if !extras.conditions.isEmpty {
            actions.releaseAfterUnlocking(extras.conditions)
            extras.conditions = []
        }
        if !extras.generatedDependencies.isEmpty {
            actions.releaseAfterUnlocking(extras.generatedDependencies)
            extras.generatedDependencies = []
        }
        if let task = extras.conditionEvaluation {
            extras.conditionEvaluation = nil
            actions.cancelAfterUnlocking(task)
        }
        extras.conditionsEvaluating = false
    }
}
