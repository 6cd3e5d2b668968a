/// How much of a job's, a group's or a queue's work is done, as units: ``completedUnitCount`` of
/// ``totalUnitCount``.
///
/// - ``Job/progress``: one unit by default, completed when the job finishes (an asynchronous job's
///   when it calls `finish()`, not when `execute()` returns). The job may set its own total and
///   advance ``completedUnitCount`` from its work. Whatever it reached, a finished job's progress
///   is complete.
/// - ``GroupJob``'s `progress`: the sum over its children (and the jobs they produce), so each child
///   weighs as much as its total. Made when first needed (asked for, or counted by a queue's or a
///   parent group's progress), it starts from the totals its finished children ended with.
/// - ``JobQueue/progress``: the sum over the jobs added since the queue was last idle; adding a job
///   to an idle queue starts a new count.
///
/// A progress counts in one place: a job toward its group, or else its queue, with its total and
/// at most its total completed.
///
/// Reading is cheap: it takes a small lock of the progress object's own, never the engine's, so it
/// never holds up any job. ``fractionCompleted`` never goes backwards while ``totalUnitCount`` is
/// unchanged (unless the owning job sets ``completedUnitCount`` lower itself), and it is exactly
/// 1.0 once everything counted has finished.
///
/// ``observe(_:)`` calls a handler after each change, outside every lock and with no worker context.
/// Changes made on different threads may be reported concurrently, and a report may find values
/// newer than the change it reports: read them from the object passed.
public final class JobProgress: Sendable, CustomReflectable {
    /// Whose progress it is: the sum of a group's or a queue's jobs cannot be set directly.
    enum Kind: Sendable {
        case job, group, queue
    }

    let kind: Kind
    let storage: _ProgressStorage

    init(kind: Kind, total: _Units, completed: _Units, finished: Bool = false) {
        self.kind = kind
        storage = _ProgressStorage(total: total, completed: completed, finished: finished)
    }

    /// What `dump(_:)` and a `Mirror` show: ``totalUnitCount``, ``completedUnitCount`` and
    /// ``fractionCompleted``. Not its stored state, which the engine changes under its lock (its
    /// parent, its observers): a default mirror read it without the lock (`Job.customMirror`).
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "totalUnitCount": totalUnitCount, "completedUnitCount": completedUnitCount,
                "fractionCompleted": fractionCompleted,
            ],
            displayStyle: .class)
    }

    /// The units of work in all. Set it from the job's own work; on a group's or a queue's progress,
    /// which add up their jobs, setting it traps, as does a negative value. Setting it after the
    /// job finished has no effect. A group's or a queue's sum past `Int64.max` reads as `Int64.max`
    /// (it is kept exact).
    public var totalUnitCount: Int64 {
        get { storage.read { Int64(clamping: $0.total) } }
        set { set(total: newValue, completed: nil, "totalUnitCount") }
    }

    /// The units of work done. Set it from the job's own work; on a group's or a queue's progress,
    /// setting it traps, as does a negative value. Setting it after the job finished has no effect.
    public var completedUnitCount: Int64 {
        get { storage.read { Int64(clamping: $0.completed) } }
        set { set(total: nil, completed: newValue, "completedUnitCount") }
    }

    /// `completedUnitCount / totalUnitCount`, between 0 and 1: 0 while the total is 0, and 1.0 once
    /// the job (or everything counted) has finished.
    public var fractionCompleted: Double {
        storage.read { values in
            if values.total <= 0 { return values.finished ? 1 : 0 }
            return min(1, Double(max(0, values.completed)) / Double(values.total))
        }
    }

    /// Calls `handler` after every change of the counts, with this object, outside every lock.
    /// Keep the token to remove it with ``removeObserver(_:)``. A job's (or a group's) progress
    /// reports its completion when the job finishes and then releases its observers; observing a
    /// finished progress registers nothing.
    @discardableResult
    public func observe(_ handler: @escaping @Sendable (JobProgress) -> Void) -> JobObserverToken {
        storage.addObserver(handler)
    }

    /// Removes an observer added with ``observe(_:)``; an unknown token is ignored.
    public func removeObserver(_ token: JobObserverToken) {
        storage.removeObserver(token)
    }

    private func set(total: Int64?, completed: Int64?, _ property: String) {
        let value = total ?? completed!
        _require(value >= 0, "JobProgress.\(property): \(value) is negative; unit counts are 0 or more")
        _require(
            kind == .job,
            "JobProgress.\(property): this progress adds up a \(kind == .group ? "group's children" : "queue's jobs"); set the counts on a job's own progress"
        )
        var actions = _Actions()
        engineLock.lock()
        if !storage.read({ $0.finished }) {
            _changeLocked(total: total.map { _Units($0) }, completed: completed.map { _Units($0) }, &actions)
        }
        engineLock.unlock()
        actions.perform()
    }

    // MARK: Engine side (call with `engineLock` held)

    /// The object that sums this one in: a group's or a queue's progress. Guarded by `engineLock`.
    var _parentLocked: JobProgress? {
        get { storage.parent }
        set { storage.parent = newValue }
    }

    /// Sets the counts given, and adds the differences to every progress above this one, noting
    /// each that has observers in `actions`. A finished progress never changes again, and a parent
    /// that has finished takes no more differences (its finish counted everything). A progress
    /// counts toward its parent with at most its total completed. O(depth).
    func _changeLocked(
        total: _Units? = nil, completed: _Units? = nil, finished: Bool = false, _ actions: inout _Actions
    ) {
        guard
            let change = storage.update(
                finishing: finished,
                { values in
                    if let total { values.total = total }
                    if let completed { values.completed = completed }
                })
        else { return }
        if let handlers = change.handlers { actions.notifyProgress(self, handlers) }
        var (deltaTotal, deltaCompleted) = (change.deltaTotal, change.deltaCompleted)
        var node = storage.parent
        while let parent = node, deltaTotal != 0 || deltaCompleted != 0 {
            guard
                let parentChange = parent.storage.update(
                    finishing: false,
                    { values in
                        values.total += deltaTotal
                        values.completed += deltaCompleted
                    })
            else { break }
            if let handlers = parentChange.handlers { actions.notifyProgress(parent, handlers) }
            (deltaTotal, deltaCompleted) = (parentChange.deltaTotal, parentChange.deltaCompleted)
            node = parent.storage.parent
        }
    }

    /// The owning job finished: its progress is complete (one unit of one if its total was 0), and
    /// stays so. Its observers get this last change, and are released after it.
    func _finishLocked(_ actions: inout _Actions) {
        let total = max(storage.read { $0.total }, 1)
        _changeLocked(total: total, completed: total, finished: true, &actions)
    }

    /// What this progress counts toward its parent: its total, and at most its total completed.
    var _countedUnits: (total: _Units, completed: _Units) {
        storage.read { ($0.total, min($0.completed, $0.total)) }
    }

    /// Counts `child`'s units in this one (a group's or a queue's) from now on.
    ///
    /// A finished job given to a group still points to the progress it finished in (its queue's, or
    /// its first group's), which may be held only there once its queue is gone: with its
    /// observers, user code. That reference is released after unlocking.
    func _adoptLocked(_ child: JobProgress, _ actions: inout _Actions) {
        if let previous = child._parentLocked {
            actions.releaseAfterUnlocking(previous)
        }
        child._parentLocked = self
        let (total, completed) = child._countedUnits
        _addLocked(total: total, completed: completed, &actions)
    }

    /// Adds units (a job without a progress of its own counts as one) to this progress and
    /// those above it.
    func _addLocked(total: _Units, completed: _Units, _ actions: inout _Actions) {
        let (current, done) = storage.read { ($0.total, $0.completed) }
        _changeLocked(total: current + total, completed: done + completed, &actions)
    }

    /// A queue's progress starts a new count: the queue was idle and gains a job.
    func _resetLocked(_ actions: inout _Actions) {
        _changeLocked(total: 0, completed: 0, &actions)
    }

    /// The observers to call for a change, taken under the lock; called after unlocking by
    /// `_Actions.perform()`.
    typealias Handler = @Sendable (JobProgress) -> Void
}

/// The counts and observers of a ``JobProgress``.
// @unchecked Sendable: `values` and `observers` are guarded by `lock`; they change only with
// `engineLock` held as well (so a change and its propagation to the parents are one step), while
// readers take `lock` alone. `parent` is guarded by `engineLock`. No user code runs under either.
// Lock-guarded, so `@exclusivity(unchecked)`, like `Job`'s own.
final class _ProgressStorage: @unchecked Sendable {
    struct Values {
        var total: _Units
        var completed: _Units
        var finished: Bool
    }

    private let lock = _Lock()
    @exclusivity(unchecked) private var values: Values
    @exclusivity(unchecked) private var observers:
        [(token: JobObserverToken, handler: @Sendable (JobProgress) -> Void)] = []
    @exclusivity(unchecked) private var nextObserverID: UInt64 = 1
    @exclusivity(unchecked) var parent: JobProgress?

    init(total: _Units, completed: _Units, finished: Bool) {
        values = Values(total: total, completed: completed, finished: finished)
    }

    #if CONDUCTOR_INVARIANTS
        // Observers are user code, and so is what they capture. (A progress made and dropped in
        // one critical section, which nobody could observe, is freed there.)
        deinit {
            if !observers.isEmpty {
                _requireFreedOutsideEngineLock("a progress's observers")
            }
        }
    #endif

    func read<Result>(_ body: (Values) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(values)
    }

    /// What one change did: the differences this progress makes to its parent's counts (its
    /// total, and its completed units up to its total), and the observers to tell, if any.
    struct Change {
        var deltaTotal: _Units
        var deltaCompleted: _Units
        var handlers: [JobProgress.Handler]?
    }

    /// Applies `body` to the values, unless the progress has finished (then `nil`). With
    /// `finishing`, it finishes, and its observers are handed over (and so released after the
    /// last report). Call with `engineLock` held.
    func update(finishing: Bool, _ body: (inout Values) -> Void) -> Change? {
        lock.lock()
        defer { lock.unlock() }
        guard !values.finished else { return nil }
        let old = values
        body(&values)
        let changed = old.total != values.total || old.completed != values.completed
        var handlers: [JobProgress.Handler]?
        if finishing {
            values.finished = true
            if !observers.isEmpty { handlers = observers.map(\.handler) }
            observers = []
        } else if changed && !observers.isEmpty {
            handlers = observers.map(\.handler)
        }
        return Change(
            deltaTotal: values.total - old.total,
            deltaCompleted: min(values.completed, values.total) - min(old.completed, old.total),
            handlers: handlers)
    }

    func addObserver(_ handler: @escaping @Sendable (JobProgress) -> Void) -> JobObserverToken {
        engineLock.lock()
        lock.lock()
        let token = JobObserverToken(id: nextObserverID)
        nextObserverID += 1
        // A finished progress never changes again: nothing to register.
        if !values.finished {
            observers.append((token, handler))
        }
        lock.unlock()
        engineLock.unlock()
        return token
    }

    func removeObserver(_ token: JobObserverToken) {
        engineLock.lock()
        lock.lock()
        let removed = observers.firstIndex { $0.token == token }.map { observers.remove(at: $0) }
        lock.unlock()
        engineLock.unlock()
        _ = removed  // the handler is released here, after unlocking
    }
}

extension Job {
    /// The job's progress: one unit by default, completed when the job finishes. Set its
    /// ``JobProgress/totalUnitCount`` and advance its ``JobProgress/completedUnitCount`` from the
    /// job's work to report finer steps; a finished job's progress is complete whatever it reached.
    /// A ``GroupJob``'s progress adds up its children's.
    ///
    /// The object is created on first use and the job keeps it; a job nobody asks pays nothing. For
    /// a job that finished before anyone asked, it is a complete one-unit progress (a group's, its
    /// children's units, complete).
    public var progress: JobProgress {
        var actions = _Actions()
        engineLock.lock()
        let progress = _progressLocked(&actions)
        engineLock.unlock()
        actions.perform()
        return progress
    }

    /// The job's progress object, created if it has none: linked to whatever counted the job as one
    /// unit (its group's progress, or else its queue's), if that exists. Call with `engineLock`
    /// held.
    func _progressLocked(_ actions: inout _Actions) -> JobProgress {
        if let progress = _extras?.progress { return progress }
        let progress = _newProgressLocked(&actions)
        if _state == .finished { return progress }
        let extras = _extrasLocked
        extras.progress = progress
        // A group's child counts in its group, never in the progress of its group's queue of
        // children. Whatever counts a group made the group's progress first
        // (`_progressToCountLocked`), so a new one here, a group's included, counts as the one unit
        // that was counted for the job, if anything counted it.
        if let group = _countingGroupLocked {
            progress._parentLocked = group._extras?.progress
        } else {
            progress._parentLocked = _queue?._withUnsafeGuaranteedRef { $0._progress }
        }
        return progress
    }

    /// The progress to count when something starts counting this job (its queue's or its group's
    /// progress is made, or the job joins a queue or group whose progress exists): its own if it
    /// has one, unlinked or not; and a group's, made now if needed, since what counts a group must
    /// see its children's units. `nil` for a job without one, which counts as one unit. Call with
    /// `engineLock` held.
    func _progressToCountLocked(_ actions: inout _Actions) -> JobProgress? {
        if let progress = _extras?.progress { return progress }
        guard self is GroupJob else { return nil }
        let progress = _newProgressLocked(&actions)
        if _state != .finished {
            _extrasLocked.progress = progress
        }
        return progress
    }
}

extension JobQueue {
    /// The progress of the jobs added since the queue was last idle: their units added up (one per
    /// job that has no progress of its own). Adding a job to an idle queue starts a new count, so a
    /// finished batch reads 1.0 until the next job is added.
    ///
    /// The object is created on first use; until then the queue only counts the jobs added since it
    /// was last idle. Jobs of that count that finished before it was created count as one unit each.
    public var progress: JobProgress {
        // `_update` admits the jobs pushed without the lock first, so they count; its planning,
        // after the progress exists, turns pushing off: from then on every job is counted as added.
        _update { $0._progress ?? $0._makeProgressLocked(&$1) }
    }

    private func _makeProgressLocked(_ actions: inout _Actions) -> JobProgress {
        let finishedSinceIdle = _Units(_addedSinceIdle - _jobCount)
        var total = _Units(_addedSinceIdle)
        var completed = finishedSinceIdle
        var adopted: [JobProgress] = []
        // O(jobs) once: members with a progress of their own that counts nowhere else count with
        // their units.
        if let group = _owningGroup {
            // A group's queue of children: the group's progress counts them with their units;
            // made first, it takes every child's own progress, and this one counts plain units.
            _ = group._progressLocked(&actions)
            // The weak load's reference may be the group's last: released after unlocking.
            actions.releaseAfterUnlocking(group)
        }
        for job in _membersLocked() {
            guard let own = job._progressToCountLocked(&actions), own._parentLocked == nil else { continue }
            adopted.append(own)
            let (ownTotal, ownCompleted) = own._countedUnits
            total += ownTotal - 1
            completed += ownCompleted
        }
        let progress = JobProgress(kind: .queue, total: total, completed: completed)
        for own in adopted { own._parentLocked = progress }
        _progress = progress
        return progress
    }

    /// `job` joins the queue: counts it in the queue's progress, starting a new count if the queue
    /// was idle. Call with `engineLock` held.
    @inline(__always)
    func _countJoiningLocked(_ job: Job, _ actions: inout _Actions) {
        if _jobCount == 0 { _addedSinceIdle = 0 }
        _addedSinceIdle += 1
        if let progress = _progress {
            _countJoiningInProgressLocked(progress, job, &actions)
        }
    }

    @inline(never)
    private func _countJoiningInProgressLocked(_ progress: JobProgress, _ job: Job, _ actions: inout _Actions) {
        if _jobCount == 0 { progress._resetLocked(&actions) }
        // A progress counts toward one parent: a group's child, on its group's queue of children,
        // counts in its group's progress, so here it is a plain unit.
        if let own = job._progressToCountLocked(&actions), own._parentLocked == nil {
            progress._adoptLocked(own, &actions)
        } else {
            progress._addLocked(total: 1, completed: 0, &actions)
        }
    }

    /// `job` finished and leaves the queue: unless its own progress counts here (and completed
    /// when it finished), its one unit completes now. Call with `engineLock` held.
    @inline(__always)
    func _countLeavingLocked(_ job: Job, ownProgress: JobProgress?, _ actions: inout _Actions) {
        if let progress = _progress, ownProgress?._parentLocked !== progress {
            progress._addLocked(total: 0, completed: 1, &actions)
        }
    }
}

/// Unit counts as the engine keeps them: wider than the `Int64` the API shows, so that a group's or
/// a queue's sum of its jobs' counts, which users set, is exact however large they are (two jobs
/// of `Int64.max` units each). Read through the API, a count past `Int64.max` shows as `Int64.max`.
typealias _Units = Int128
