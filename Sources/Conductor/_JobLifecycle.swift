/// Why a job that has not started cannot run yet, one count per kind of reason, so that the engine
/// (and diagnostics) can say what a job waits for rather than only that it waits.
///
/// The reasons are unfinished dependencies, conditions not yet satisfied, and exclusivity
/// categories held by other jobs; groups will join them. A job is `pending` exactly while some
/// reason is non-zero.
package struct _WaitReasons: Equatable, Sendable {
    /// Dependencies that have not finished (edges counted in this job).
    package var dependencies: Int32 = 0
    /// 1 while the job has conditions (``JobCondition``) that have not all been satisfied: they are
    /// evaluated, together, once `dependencies` is 0 and a queue holds the job.
    package var conditions: UInt8 = 0
    /// 1 while the job, claimed by its queue, waits in line for exclusivity categories another job
    /// holds (``Job/exclusivityCategories``). It holds no slot meanwhile.
    package var exclusivity: UInt8 = 0

    package init() {}

    /// Whether nothing holds the job back.
    package var isEmpty: Bool { dependencies == 0 && conditions == 0 && exclusivity == 0 }
}

/// How a job ended, as the lifecycle records it. The payloads (the error, the reason's text) are
/// kept beside it, in the job's `_details`, so that a job that succeeds pays one byte.
package enum _OutcomeKind: UInt8, Sendable {
    case succeeded
    case failed
    case cancelled
}

/// A job's lifecycle as a pure value: its state, whether it was cancelled and whether its work
/// started, which `.ready` event is still due, the reasons it waits, and its outcome.
///
///     pending ⇄ ready → executing → finished
///        │        │                   ↑
///        └────────┴───────────────────┘   cancelled before it started
///
/// There is one mutating method per event, named for what happened, and each returns what the
/// engine must do; an impossible transition traps with the state in its message. The machine
/// touches no lock, queue or other job: `Job` keeps it under `engineLock` and carries out the
/// returned decision (posting events, handing ready entries to its queue, releasing dependents),
/// so it can be tested event by event without threads (`JobLifecycleTests`).
/// `Model/Lifecycle.pml` mirrors it; Docs/Reliability.md maps the two.
///
/// Kept in the job itself (not in a side table) and mutated in place: the hot path pays no more
/// than it did for the separate fields this replaced.
package struct _JobLifecycle: Sendable {
    /// Where the job is in its lifecycle.
    package private(set) var state: JobState = .ready
    /// Whether the job was cancelled, before or while it ran.
    package private(set) var isCancelled = false
    /// Whether the work started (`ready → executing`); `false` for a job cancelled before it ran.
    package private(set) var didStart = false
    /// Whether `.ready` has been posted. It is posted at most once, and before `.started`.
    package private(set) var didPostReady = false
    /// Why a job that has not started is waiting.
    package private(set) var waits = _WaitReasons()
    /// The code of the first cancellation, if it was cancelled.
    package private(set) var cancellationCode: CancellationReason.Code?
    /// How it ended; `nil` until it has finished, then fixed.
    package private(set) var outcome: _OutcomeKind?

    package init() {}

    /// Whether the job has neither started nor finished, so it may still gain dependencies.
    package var isUnstarted: Bool { state == .pending || state == .ready }

    // MARK: Dependencies

    /// What a new dependency does to the job.
    package enum DependencyAdded: Equatable, Sendable {
        /// It was already pending; it waits for one more.
        case keepsWaiting
        /// It was ready and is now pending: its ready entry, if any, must go.
        case leftReady
    }

    /// An unfinished dependency was added (the edge is counted).
    @inline(__always)
    package mutating func dependencyAdded() -> DependencyAdded {
        _require(isUnstarted, "Conductor lifecycle: a dependency added to a job in state \(state)")
        waits.dependencies += 1
        guard state == .ready else { return .keepsWaiting }
        state = .pending
        return .leftReady
    }

    /// What releasing a counted dependency does to the job.
    package enum DependencyReleased: Equatable, Sendable {
        /// The job had already finished (it was cancelled while it waited); nothing to count.
        case ignored
        /// Other reasons still hold it back.
        case stillWaiting
        /// It is ready now; `postReady` tells whether `.ready` is due (it is posted once).
        case becameReady(postReady: Bool)
        /// Its dependencies have all finished, and only its conditions hold it back: they are due
        /// for evaluation (if a queue holds the job and no evaluation is under way).
        case conditionsDue
    }

    /// A counted dependency finished.
    @inline(__always)
    package mutating func dependencyFinished() -> DependencyReleased {
        // A job cancelled while it waited finished without waiting for its dependencies.
        guard state == .pending else {
            _require(state == .finished, "Conductor lifecycle: a dependency finished for a job in state \(state)")
            return .ignored
        }
        return release()
    }

    /// A counted dependency was removed with `removeDependency(_:)`.
    package mutating func dependencyRemoved() -> DependencyReleased {
        _require(state == .pending, "Conductor lifecycle: a counted dependency removed from a job in state \(state)")
        return release()
    }

    @inline(__always)
    private mutating func release() -> DependencyReleased {
        _require(waits.dependencies > 0, "Conductor lifecycle: a dependency released with none counted")
        waits.dependencies -= 1
        guard waits.isEmpty else {
            return waits.dependencies == 0 && waits.conditions != 0 ? .conditionsDue : .stillWaiting
        }
        return becomeReady()
    }

    @inline(__always)
    private mutating func becomeReady() -> DependencyReleased {
        state = .ready
        return .becameReady(postReady: readyPostDue())
    }

    /// Clears the one-byte wait `reason` (conditions, exclusivity) after `event`; a job that
    /// finished meanwhile (it was cancelled) is ignored.
    private mutating func waitCleared(
        _ reason: WritableKeyPath<_WaitReasons, UInt8>, _ event: String
    ) -> DependencyReleased {
        guard state == .pending else {
            _require(state == .finished, "Conductor lifecycle: \(event) in state \(state)")
            return .ignored
        }
        _require(waits[keyPath: reason] == 1, "Conductor lifecycle: \(event) with nothing to wait for")
        waits[keyPath: reason] = 0
        guard waits.isEmpty else { return .stillWaiting }
        return becomeReady()
    }

    // MARK: Conditions

    /// The job gained conditions: it waits for them to be satisfied (once, however many there are).
    package mutating func conditionsAdded() -> DependencyAdded {
        _require(isUnstarted, "Conductor lifecycle: conditions added to a job in state \(state)")
        waits.conditions = 1
        guard state == .ready else { return .keepsWaiting }
        state = .pending
        return .leftReady
    }

    /// Every condition was satisfied. A result that arrives after the job finished (it was
    /// cancelled meanwhile) is ignored.
    package mutating func conditionsSatisfied() -> DependencyReleased {
        waitCleared(\.conditions, "conditions satisfied")
    }

    // MARK: Exclusivity

    /// Its queue took it from the ready line, but a category it needs is taken: `ready → pending`
    /// until the categories are its turn.
    package mutating func exclusivityWaitBegan() {
        _require(state == .ready, "Conductor lifecycle: an exclusivity wait began in state \(state)")
        waits.exclusivity = 1
        state = .pending
    }

    /// Its categories are its turn now (or it stopped waiting in line, when it gained another
    /// reason to wait). A job that finished meanwhile is ignored.
    package mutating func exclusivityCleared() -> DependencyReleased {
        waitCleared(\.exclusivity, "exclusivity cleared")
    }

    // MARK: Readiness

    /// Marks `.ready` as posted if it was not; returns whether the caller must post it now. Called
    /// when a queue admits a ready job, and by the transitions that make a job ready or start it.
    @inline(__always)
    package mutating func readyPostDue() -> Bool {
        guard !didPostReady else { return false }
        didPostReady = true
        return true
    }

    // MARK: Running

    /// The job was claimed by a queue or started by hand: `ready → executing`. Returns whether
    /// `.ready` is due before `.started` (a job started by hand was never admitted).
    @inline(__always)
    package mutating func started() -> Bool {
        _require(state == .ready, "Conductor lifecycle: started in state \(state)")
        state = .executing
        didStart = true
        return readyPostDue()
    }

    /// What a cancellation does.
    package enum Cancelled: Equatable, Sendable {
        /// Already cancelled, or finished: nothing happens.
        case ignored
        /// It had not started: it is cancelled and must finish now without running (a queue's
        /// barrier is the one exception: it keeps its place and finishes when its turn comes).
        case finishWithoutRunning
        /// It is running: only the flag is set; it keeps its slot until its work ends.
        case flagged
    }

    /// `cancel()` was called, or a cause outside the job cancelled it. Only the first
    /// cancellation counts: its code is the one the outcome reports.
    @inline(__always)
    package mutating func cancelled(_ code: CancellationReason.Code) -> Cancelled {
        guard !isCancelled, state != .finished else { return .ignored }
        isCancelled = true
        cancellationCode = code
        return state == .executing ? .flagged : .finishWithoutRunning
    }

    /// The running work reported cancellation itself (it threw `CancellationError`). Returns whether
    /// this was news, so that `.cancelled` must be posted; the code is then `requested`.
    package mutating func workReportedCancellation() -> Bool {
        _require(state == .executing, "Conductor lifecycle: work reported cancellation in state \(state)")
        guard !isCancelled else { return false }
        isCancelled = true
        cancellationCode = .requested
        return true
    }

    /// The job finished: its work ended (`failed` if it ended with an error other than
    /// `CancellationError`), or it was cancelled before it started. Fixes the outcome: failed if the
    /// work failed, otherwise cancelled if the job was cancelled, otherwise succeeded. Returns
    /// whether it had been executing (and so held a slot).
    @inline(__always)
    package mutating func finished(failed: Bool = false) -> Bool {
        _require(state != .finished, "Conductor lifecycle: finished twice")
        _require(
            state == .executing || isCancelled,
            "Conductor lifecycle: finished in state \(state) without running or being cancelled")
        _require(!failed || state == .executing, "Conductor lifecycle: failed in state \(state) without running")
        let wasExecuting = state == .executing
        state = .finished
        outcome = failed ? .failed : isCancelled ? .cancelled : .succeeded
        return wasExecuting
    }
}
