/// What a job's work is blocked on in a `waitUntil…` call, while it waits (see ``Job/explain()``
/// and ``StallWatchdog``).
enum _BlockedOn {
    case job(Job)
    case queue(JobQueue)

    var object: AnyObject {
        switch self {
        case .job(let job): job
        case .queue(let queue): queue
        }
    }
}

/// One reason an unstarted job is not running: its keyword (`dependency`, `condition`,
/// `category`, `barrier`, `group`, `suspended`, `limit`) and what it waits for.
struct _WaitReason {
    let keyword: String
    /// A few words, for descriptions and labels: "dependency 'login'".
    let short: String
    /// A sentence or more, for ``Job/explain()``.
    let long: _DeferredText
}

extension Job: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// ``description``, as the engine writes it.
    var _engineDescription: String {
        JobQueue._withEveryQueuesPushedAdmitted {
            "\(_describeLocked): \(_statusLocked(now: _DiagnosticClock.now())), priority \(_priority)"
        }
    }

    /// ``debugDescription``, as the engine writes it.
    var _engineDebugDescription: String {
        let text = JobQueue._withEveryQueuesPushedAdmitted {
            var text = _DeferredText("\(type(of: self))#\(id) ")
            text.append(_explanationLocked(now: _DiagnosticClock.now()))
            return text
        }
        return text.rendered()
    }

    /// Every reason the job is not running, each naming what it waits for, or, for a job that runs
    /// or has finished, how long it has run or how it ended. Several lines, for people.
    ///
    /// - A job that waits lists each reason, starting with its keyword:
    ///   - `dependency`: its unfinished dependencies, each with its state and queue, following the
    ///     chain of unfinished dependencies to the first job that does not wait for one, and why
    ///     that job is not done;
    ///   - `condition`: its conditions, and whether they are being evaluated or wait for the
    ///     dependencies or for a queue;
    ///   - `category`: each exclusivity category it waits for, and the job that holds it or is
    ///     ahead in line;
    ///   - `barrier`: the barrier it was added after, or, for a barrier, the jobs before it;
    ///   - `group`: its group, which has not started;
    ///   - `suspended`: its suspended queue;
    ///   - `limit`: its queue's full limit, with the executing jobs and for how long each has run.
    /// - An executing job says for how long it has run; an asynchronous job that it runs until its
    ///   work calls `finish()`; a group, which children it waits for; and a job whose work is
    ///   blocked in `waitUntilFinished()` or `waitUntilAllJobsAreFinished()`, on what.
    /// - A finished job gives its outcome: `succeeded`, `failed` with the error, or `cancelled`
    ///   with the reason.
    ///
    /// The text is built in one critical section, so it is a consistent snapshot. Errors and
    /// condition names are described after the lock is released.
    ///
    /// - Complexity: O(the job's dependencies and the chains they lead to, plus the jobs of its
    ///   queue when the limit is what it waits for).
    public func explain() -> String {
        JobQueue._withEveryQueuesPushedAdmitted { _explanationLocked(now: _DiagnosticClock.now()) }.rendered()
    }

    // MARK: Engine snapshots (call with engineLock held)

    /// Whether the job has a live entry in its queue's ready line (see `_readyTicket`).
    var _isInLine: Bool { _readyTicket != 0 && _readyTicket < _DiagnosticClock.heldMark }

    /// When the job started executing, if it is executing.
    var _startedAtLocked: UInt64? {
        guard _state == .executing, _readyTicket >= _DiagnosticClock.startStamp else { return nil }
        return _readyTicket & ~_DiagnosticClock.startStamp
    }

    /// "for 3.2 s", for an executing job.
    func _runningTimeLocked(now: UInt64) -> String {
        guard let started = _startedAtLocked else { return "" }
        return "for \(_DiagnosticClock.format(now &- min(started, now)))"
    }

    /// How the job ended, in the outcome's words, without user values: "cancelled (timedOut)".
    var _outcomeWordLocked: String {
        switch _lifecycle.outcome {
        case nil: ""
        case .succeeded: "succeeded"
        case .failed: "failed"
        case .cancelled: "cancelled (\(_lifecycle.cancellationCode?.description ?? "requested"))"
        }
    }

    /// The state with its short reason and queue: "pending (dependency 'login') on 'network'",
    /// "executing for 3.2 s on 'network', until finish()", "finished (succeeded)".
    func _statusLocked(now: UInt64, withQueue: Bool = true) -> String {
        var status = "\(_state)"
        switch _state {
        case .pending, .ready:
            if let reason = _waitReasonsLocked(now: now, detailed: false).first {
                status += " (\(reason.short))"
            }
        case .executing:
            let time = _runningTimeLocked(now: now)
            if !time.isEmpty { status += " \(time)" }
        case .finished:
            status += " (\(_outcomeWordLocked))"
        }
        if withQueue, let queue = _queue?.takeUnretainedValue() {
            status += " on '\(queue._displayNameLocked)'"
        }
        if _state == .executing && !finishesWhenExecuteReturns {
            status += ", until finish()"
        }
        return status
    }

    /// The whole explanation (see ``explain()``).
    func _explanationLocked(now: UInt64) -> _DeferredText {
        var text = _DeferredText("'\(_describeLocked)' is \(_state)")
        if let queue = _queue?.takeUnretainedValue() {
            text.append(" on queue '\(queue._displayNameLocked)'")
        }
        if _state == .executing {
            let time = _runningTimeLocked(now: now)
            if !time.isEmpty { text.append(" \(time)") }
        }
        text.append(", priority \(_priority)")
        switch _state {
        case .finished:
            text.append(": ")
            switch _lifecycle.outcome {
            case .failed:
                text.append("failed: ")
                if let error = _details?.error { text.append(.error(error)) }
            case .cancelled:
                text.append("cancelled (\(_cancellationReasonLocked?.description ?? "requested"))")
            default:
                text.append(_outcomeWordLocked)
            }
            text.append(".")
        case .executing:
            text.append(".")
            if let detail = _executingDetailLocked(now: now) {
                text.append("\n  - ")
                text.append(detail)
            } else if !finishesWhenExecuteReturns {
                text.append(
                    "\n  - finish(): its work has not signalled its end; an asynchronous job runs until it calls finish()"
                )
            }
            for blocked in _extras?.blockedOn ?? [] {
                text.append("\n  - its work is blocked in ")
                switch blocked {
                case .job(let job):
                    text.append("waitUntilFinished() on '\(job._describeLocked)' (\(job._statusLocked(now: now)))")
                case .queue(let queue):
                    text.append(
                        "waitUntilAllJobsAreFinished() on queue '\(queue._displayNameLocked)' (\(queue._summaryLocked))"
                    )
                }
            }
        case .pending, .ready:
            let reasons = _waitReasonsLocked(now: now, detailed: true)
            text.append(reasons.isEmpty ? "." : ". It is not running because:")
            for reason in reasons {
                text.append("\n  - \(reason.keyword): ")
                text.append(reason.long)
            }
        }
        return text
    }

    /// Every reason the unstarted job is not running, the most fundamental first. `detailed`
    /// builds the long texts too (following dependency chains); otherwise only the short ones.
    func _waitReasonsLocked(now: UInt64, detailed: Bool) -> [_WaitReason] {
        var reasons: [_WaitReason] = []
        let waits = _lifecycle.waits
        let queue = _queue?.takeUnretainedValue()
        if _state == .pending {
            if waits.dependencies > 0 {
                reasons.append(_dependencyReasonLocked(now: now, detailed: detailed))
            }
            if waits.conditions != 0 {
                reasons.append(_conditionReasonLocked(queue: queue))
            }
            if waits.exclusivity != 0, let extras = _extras {
                reasons.append(_categoryReasonLocked(extras, now: now, detailed: detailed))
            }
            return reasons
        }
        guard _state == .ready else { return [] }
        guard let queue else {
            return [
                _WaitReason(
                    keyword: "queue", short: "not on a queue",
                    long: _DeferredText("it is on no queue; add it to a JobQueue, or call start()"))
            ]
        }
        if let reason = queue._readyJobObstacleLocked(self, now: now, detailed: detailed) {
            reasons.append(reason)
        }
        return reasons
    }

    private func _dependencyReasonLocked(now: UInt64, detailed: Bool) -> _WaitReason {
        // The first unfinished dependency, found without listing the rest (for `description`),
        // and how many there are, which the lifecycle counts.
        let first = _dependencies.first { $0._state != .finished }.map { "'\($0._describeLocked)'" } ?? "?"
        let count = Int(_lifecycle.waits.dependencies)
        let short = "dependency \(first)" + (count > 1 ? " and \(count - 1) more" : "")
        guard detailed else { return _WaitReason(keyword: "dependency", short: short, long: _DeferredText()) }
        let unfinished = _dependencies.filter { $0._state != .finished }
        var long = _DeferredText(
            "it waits for \(unfinished.count) unfinished \(unfinished.count == 1 ? "dependency" : "dependencies") of \(_dependencies.count):"
        )
        for dependency in unfinished.prefix(8) {
            long.append("\n      '\(dependency._describeLocked)' \(dependency._statusLocked(now: now))")
            long.append(Job._chainLocked(from: dependency, now: now))
        }
        if unfinished.count > 8 {
            long.append("\n      and \(unfinished.count - 8) more")
        }
        return _WaitReason(keyword: "dependency", short: short, long: long)
    }

    /// Follows `job`'s unfinished dependencies, one each, to the first job that waits for none:
    /// " → 'B' → … 3 more … → 'Z' executing for 2 s on 'net'". Empty when `job` waits for no
    /// dependency. Iterative: chains may be long.
    static func _chainLocked(from job: Job, now: UInt64) -> String {
        var hops: [Job] = []
        var current = job
        while current._state == .pending, current._lifecycle.waits.dependencies > 0,
            let next = current._dependencies.first(where: { $0._state != .finished })
        {
            hops.append(next)
            current = next
        }
        guard let last = hops.last else { return "" }
        var chain = ""
        for hop in hops.dropLast().prefix(2) {
            chain += " → '\(hop._describeLocked)'"
        }
        if hops.count > 3 {
            chain += " → … \(hops.count - 3) more …"
        }
        return chain + " → '\(last._describeLocked)' \(last._statusLocked(now: now))"
    }

    private func _conditionReasonLocked(queue: JobQueue?) -> _WaitReason {
        var long = _DeferredText()
        let extras = _extras
        long.append(.conditionNames(extras?.conditions ?? []))
        let short: String
        if extras?.conditionsEvaluating == true {
            short = "condition being evaluated"
            long.append(": being evaluated")
        } else if _lifecycle.waits.dependencies > 0 {
            short = "condition"
            long.append(": evaluated once its dependencies have finished")
        } else if queue == nil {
            short = "condition"
            long.append(": evaluated once the job is on a queue")
        } else {
            short = "condition"
            long.append(_admitted ? ": about to be evaluated" : ": evaluated once the barrier before it has finished")
        }
        return _WaitReason(keyword: "condition", short: short, long: long)
    }

    private func _categoryReasonLocked(_ extras: _JobExtras, now: UInt64, detailed: Bool) -> _WaitReason {
        var short = "category"
        var details: [String] = []
        for category in extras.lineCategories.array.sorted(by: { $0.name < $1.name }) {
            let name = category.name
            if let holder = category.holder, holder !== self {
                if details.isEmpty { short = "category '\(name)' held by '\(holder._describeLocked)'" }
                // Only the long text gives the other job's status: a short one must not recurse
                // through a line of jobs each waiting for the next.
                guard detailed else { break }
                details.append("'\(name)' is held by '\(holder._describeLocked)' (\(holder._statusLocked(now: now)))")
            } else if let first = category.first(), first !== self {
                if details.isEmpty { short = "category '\(name)' behind '\(first._describeLocked)'" }
                guard detailed else { break }
                details.append(
                    "'\(name)': '\(first._describeLocked)' is ahead in line (\(first._statusLocked(now: now)))")
            }
        }
        let long = details.isEmpty ? "it is in line for its categories" : details.joined(separator: "; ")
        return _WaitReason(keyword: "category", short: short, long: _DeferredText(long))
    }

    /// Records that the caller, if it is a job's work, blocks in a wait on `target` until
    /// `_endBlockedWait` (for ``StallWatchdog`` and ``explain()``). Returns the waiting job. Call
    /// with `engineLock` held. A job's work may wait in several places at once (the blocks of a
    /// ``BlockJob`` run concurrently): each wait is recorded.
    static func _beginBlockedWaitLocked(on target: _BlockedOn, blocking: Bool = true) -> Job? {
        // An `await` is never a synchronous job's own: from its thread, it is in a task the work
        // started (`Task.immediate`), which is another task.
        guard let waiter = (blocking ? _ThreadContext.job : nil) ?? _TaskRunner.bodyJobOfCurrentTaskLocked(),
            waiter._state == .executing
        else { return nil }
        waiter._extrasLocked.blockedOn.append(target)
        _blockedWaits.waiters[ObjectIdentifier(waiter)] = waiter
        return waiter
    }

    /// The wait on `target` that `_beginBlockedWaitLocked` recorded for `waiter` returned.
    static func _endBlockedWait(of waiter: Job?, on target: AnyObject) {
        guard let waiter else { return }
        // Nothing is freed under the lock: the target is held by the waiting call's own `self`,
        // and the waiter by the caller's `waiter`.
        engineLock.withLock {
            // An asynchronous job may finish while its work waits, and a finished job lets its
            // side object go, its blocked waits with it: it then has none left to record.
            let extras = waiter._extras
            if let extras, let index = extras.blockedOn.firstIndex(where: { $0.object === target }) {
                extras.blockedOn.remove(at: index)
            }
            if extras?.blockedOn.isEmpty ?? true {
                _blockedWaits.waiters[ObjectIdentifier(waiter)] = nil
            }
        }
    }
}
