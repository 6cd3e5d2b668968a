extension JobQueue: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The queue's name (or `JobQueue#id`), limit, and how many jobs execute, are ready and wait:
    /// `"network: limit 4, 4 executing, 2 ready, 7 waiting"`, with `", suspended"` when it is.
    public var description: String {
        _update { "\($0._displayNameLocked): \($0._summaryLocked)" }
    }

    /// What `dump(_:)`, a `Mirror` and a failed test expectation that names the queue show: its
    /// ``name``, ``maxConcurrentJobCount``, ``isSuspended`` and ``jobCount``, read in one critical
    /// section. Not its stored properties, which a default mirror would read without the engine
    /// lock, following links to its jobs that the engine holds unretained (`Job.customMirror`).
    public var customMirror: Mirror {
        let (name, limit, isSuspended, jobCount) = _update {
            ($0._name, $0._maxConcurrentJobCount, $0._isSuspended, $0._jobCount)
        }
        return Mirror(
            self,
            children: [
                "name": name as Any, "maxConcurrentJobCount": limit, "isSuspended": isSuspended, "jobCount": jobCount,
            ],
            displayStyle: .class)
    }

    /// The ``description`` with the queue's number and quality of service.
    public var debugDescription: String {
        _update { queue in
            "JobQueue#\(queue.id) '\(queue._displayNameLocked)': \(queue._summaryLocked), quality of service \(queue._qualityOfService)"
        }
    }

    /// The queue's limit, its executing jobs (for how long each has run), its ready jobs by
    /// priority, and its other jobs grouped by the reason they wait (the keywords of
    /// ``Job/explain()``). Several lines, for people; a consistent snapshot taken in one critical
    /// section.
    ///
    /// - Complexity: O(jobs on the queue).
    public func explain() -> String {
        _update { $0._explanationLocked(now: _DiagnosticClock.now()) }
    }

    // MARK: Engine snapshots (call with engineLock held)

    /// "limit 4, 4 executing, 2 ready, 7 waiting, suspended": waiting counts every unfinished job
    /// that is neither executing nor in the ready line (pending jobs, and ready ones held behind a
    /// barrier or an unstarted group).
    var _summaryLocked: String {
        let limit = _maxConcurrentJobCount < 0 ? "default limit \(_limit)" : "limit \(_limit)"
        let waiting = _jobCount - _executing - _ready.count
        return "\(limit), \(_executing) executing, \(_ready.count) ready, \(waiting) waiting"
            + (_isSuspended ? ", suspended" : "")
    }

    /// The jobs executing on the queue, in the order they were added.
    func _executingJobsLocked() -> [Job] {
        // Up to the last executing member only: executing jobs are usually the oldest.
        var executing: [Job] = []
        var remaining = _executing
        var node = _head
        while remaining > 0, let current = node {
            let job = current.takeUnretainedValue()
            node = job._next
            if job._state == .executing {
                executing.append(job)
                remaining -= 1
            }
        }
        return executing
    }

    /// Why `job`, a ready member, has not started: the barrier it waits behind, its unstarted
    /// group, suspension, or the full limit; or that a worker is about to start it.
    func _readyJobObstacleLocked(_ job: Job, now: UInt64, detailed: Bool = true) -> _WaitReason? {
        // The barrier of the epoch the job is held in (for a barrier, the one before its own), not
        // the first one (until 2026-11-25 a job added after the second barrier was said to wait
        // for the first). Read without `_epochIndexLocked`'s trap: a diagnostic.
        if let own = _heldEpochIndexLocked(of: job), case let held = own - (job._isBarrier ? 1 : 0), held >= 0 {
            let barrier = _epochs[held].barrier
            let name = barrier._describeLocked
            return _WaitReason(
                keyword: "barrier", short: "barrier '\(name)'",
                long: _DeferredText(
                    "it was added after barrier '\(name)' (\(barrier._statusLocked(now: now, withQueue: false))), which runs once every job added before it has finished"
                ))
        }
        if job._isBarrier && !job._admitted {
            let count = _activeUnfinished
            let jobs = count == 1 ? "job" : "jobs"
            return _WaitReason(
                keyword: "barrier", short: "barrier waiting for \(count) earlier \(jobs)",
                long: _DeferredText(
                    "it is a barrier: it runs once the \(count) unfinished \(jobs) added before it \(count == 1 ? "has" : "have") finished"
                ))
        }
        // The group read where it holds itself, not through the weak `_owningGroup`, whose strong
        // reference could be the group's last and free it under the lock. A group that has no
        // unfinished child left and has not started is not named: its queue is only suspended.
        if _isSuspended, let group = _countingGroup, group._lifecycle.isUnstarted {
            let name = group._describeLocked
            return _WaitReason(
                keyword: "group", short: "group '\(name)' has not started",
                long: _DeferredText(
                    "its group '\(name)' has not started (\(group._statusLocked(now: now))); children run while their group executes"
                ))
        }
        if _isSuspended {
            return _WaitReason(
                keyword: "suspended", short: "suspended queue",
                long: _DeferredText("queue '\(_displayNameLocked)' is suspended; set isSuspended to false to resume it")
            )
        }
        if _executing >= _limit {
            let short = "limit: \(_executing) of \(_limit) slots taken"
            if _limit == 0 {
                return _WaitReason(
                    keyword: "limit", short: short,
                    long: _DeferredText("queue '\(_displayNameLocked)' has a limit of 0 and starts nothing"))
            }
            // Only the long text lists the executing jobs: descriptions stay O(1).
            guard detailed else { return _WaitReason(keyword: "limit", short: short, long: _DeferredText()) }
            let executing = _executingJobsLocked()
            let list = _listing(executing) { "'\($0._describeLocked)' \($0._runningTimeLocked(now: now))" }
            return _WaitReason(
                keyword: "limit", short: short,
                long: _DeferredText(
                    "\(_limit == 1 ? "the only slot" : "all \(_limit) slots") of queue '\(_displayNameLocked)' \(_limit == 1 ? "is" : "are") taken by \(executing.count) executing \(executing.count == 1 ? "job" : "jobs"): \(list)"
                ))
        }
        guard job._isInLine else { return nil }
        return _WaitReason(
            keyword: "ready", short: "a worker is about to start it",
            long: _DeferredText(
                "nothing holds it back: a worker is about to start it (if this lasts, Dispatch has no thread free to run the worker)"
            ))
    }

    /// The whole explanation (see ``explain()``).
    func _explanationLocked(now: UInt64) -> String {
        var lines = ["Queue '\(_displayNameLocked)': \(_summaryLocked)."]
        if _isSuspended, let group = _countingGroup, group._lifecycle.isUnstarted {
            lines.append("It runs the children of group '\(group._describeLocked)', which has not started: group.")
        } else if _isSuspended {
            lines.append("It is suspended: it starts no job until it is resumed.")
        }
        let members = _membersLocked()
        let executing = members.filter { $0._state == .executing }
        if !executing.isEmpty {
            lines.append("Executing (\(executing.count)):")
            for job in executing.prefix(16) {
                lines.append("  - '\(job._describeLocked)' \(job._statusLocked(now: now, withQueue: false))")
            }
            if executing.count > 16 { lines.append("  - and \(executing.count - 16) more") }
        }
        let inLine = members.filter { $0._isInLine }.sorted {
            ($0._priority.bucket, $0._readyTicket) < ($1._priority.bucket, $1._readyTicket)
        }
        if !inLine.isEmpty {
            lines.append("Ready (\(inLine.count)), in the order they will start:")
            for priority in JobPriority.allCases.sorted(by: { $0.bucket < $1.bucket }) {
                let jobs = inLine.filter { $0._priority == priority }
                if jobs.isEmpty { continue }
                lines.append("  - \(priority): " + _listing(jobs) { "'\($0._describeLocked)'" })
            }
            if let obstacle = inLine.first.flatMap({ _readyJobObstacleLocked($0, now: now) }) {
                lines.append("  They wait: \(obstacle.keyword): \(obstacle.long.plainText)")
            }
        }
        var waiting: [String: [(Job, String)]] = [:]
        var order: [String] = []
        for job in members where job._lifecycle.isUnstarted && !job._isInLine {
            let reason = job._waitReasonsLocked(now: now, detailed: false).first
            let keyword = reason?.keyword ?? "other"
            if waiting[keyword] == nil { order.append(keyword) }
            waiting[keyword, default: []].append((job, reason?.short ?? "\(job._state)"))
        }
        if !order.isEmpty {
            let count = waiting.values.reduce(0) { $0 + $1.count }
            lines.append("Waiting (\(count)), by reason:")
            for keyword in order {
                let jobs = waiting[keyword]!
                lines.append(
                    "  - \(keyword) (\(jobs.count)): " + _listing(jobs) { "'\($0.0._describeLocked)' (\($0.1))" })
            }
        }
        return lines.joined(separator: "\n")
    }
}
