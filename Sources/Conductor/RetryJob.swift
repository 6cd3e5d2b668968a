import Dispatch

/// How long a ``RetryJob`` waits after a failed attempt before it makes the next one.
public enum Backoff: Sendable, Equatable {
    /// No wait: the next attempt starts as soon as the failure is known.
    case none
    /// The same wait before every retry.
    case constant(Duration)
    /// `initial` before the second attempt, doubling for each attempt after it, never more than
    /// `maximum`. With `jitter`, each wait is instead drawn uniformly between zero and that value
    /// ("full jitter"), so that many jobs retrying at once spread out.
    case exponential(initial: Duration, maximum: Duration, jitter: Bool = false)

    /// The longest wait before attempt `attempt` (2 for the first retry): the wait itself, or with
    /// jitter, the bound it is drawn under. A negative duration counts as zero, and an attempt
    /// below 2 (`Int.min` included) as the first retry.
    public func maximumDelay(beforeAttempt attempt: Int) -> Duration {
        switch self {
        case .none:
            return .zero
        case .constant(let delay):
            return max(delay, .zero)
        case .exponential(let initial, let maximum, _):
            let retries = attempt > 2 ? attempt - 2 : 0  // not `attempt - 2`, which overflows for Int.min
            var delay = max(initial, .zero)
            for _ in 0..<min(retries, 40) where delay < maximum {
                // Doubling past `maximum` gives `maximum` (as `min` below would): never `delay * 2`
                // beyond it, which overflows near Duration's own limit.
                delay = delay <= maximum - delay ? delay * 2 : maximum
            }
            return min(delay, max(maximum, .zero))
        }
    }

    /// The wait before attempt `attempt` (2 for the first retry), with jitter applied if asked for.
    /// With jitter, a bound beyond `Int64.max` nanoseconds (292 years) draws under that.
    public func delay(beforeAttempt attempt: Int) -> Duration {
        let bound = maximumDelay(beforeAttempt: attempt)
        guard case .exponential(_, _, true) = self, bound > .zero else { return bound }
        let nanoseconds = min(_saturatingNanoseconds(bound), UInt64(Int64.max))
        return .nanoseconds(Int64.random(in: 0...Int64(nanoseconds)))
    }
}

/// A job that makes attempts until one succeeds, up to a limit, waiting between them as its
/// ``Backoff`` says.
///
/// ```swift
/// let fetch = RetryJob(maxAttempts: 4, backoff: .exponential(initial: .milliseconds(100), maximum: .seconds(2))) { attempt in
///     TaskJob { try await cache.store(client.fetch(page)) }   // a fresh job for every attempt
/// }
/// queue.addJob(fetch)
/// ```
///
/// Each attempt is a fresh job from `makeAttempt`, called with 1 for the first. The retry job holds
/// one slot of its queue from its first attempt to its last, and starts each attempt itself (as
/// ``Job/start()`` does), so an attempt counts in no queue's limit of its own: give `makeAttempt` a
/// job that is on no queue, waits for nothing (no dependency, no condition) and has no exclusivity
/// categories (give those to the
/// retry job). Otherwise the retry job fails with ``JobError/Code/invalidAttempt`` and leaves that
/// job alone.
///
/// After an attempt fails, the retry job makes another if it has attempts left and
/// `shouldRetry(error)` returns `true`. Its ``Job/outcome`` is the last attempt's: succeeded, failed
/// with the last error, or cancelled with the attempt's reason. Cancelling the retry job cancels the
/// attempt in flight (with ``CancellationReason/Code/parentCancelled``) or the pending wait; its
/// outcome is then `.cancelled` with its own reason, even if the attempt then fails. A retry job
/// has no value of its own: an attempt hands on what it makes itself (a ``ValueJob`` attempt's
/// `value` is the attempt's).
///
/// Every attempt runs where the retry job's own work runs: its ``Job/executionQueue`` if it has
/// one, otherwise its queue's workers' Dispatch queue (on ``JobQueue/main``, the main queue); a
/// retry job started by hand makes its later attempts on a global queue. Inside an attempt,
/// ``JobQueue/current`` is the retry job's queue.
///
/// `makeAttempt` and `shouldRetry` run with no lock held, never two at once for one retry job:
/// `makeAttempt(1)` on the thread that started the retry job, `shouldRetry` on the thread that saw
/// an attempt fail, and each later `makeAttempt` where the attempts run, once the backoff's wait is
/// over.
///
/// An attempt must not wait for its retry job, or for the retry job's queue: the retry job waits
/// for it, and those waits trap. A blocking wait on the main queue for a retry job whose attempts
/// run there, or for its queue, traps while the retry job waits out its backoff.
public final class RetryJob: Job, @unchecked Sendable {
    // @unchecked Sendable: the settings are immutable and Sendable; `pending` and the closures are
    // guarded by `engineLock` (and only read or changed while holding it), and so
    // `@exclusivity(unchecked)`, like `Job`'s own.

    /// The most attempts it makes, at least 1.
    public let maxAttempts: Int
    /// The wait between a failed attempt and the next.
    public let backoff: Backoff

    @exclusivity(unchecked) private var makeAttempt: (@Sendable (Int) -> Job)?
    @exclusivity(unchecked) private var shouldRetry: (@Sendable (any Error) -> Bool)?
    /// The attempt in flight, or the timer of the wait before the next one.
    @exclusivity(unchecked) private var current: Job?
    @exclusivity(unchecked) private var delayTimer: DispatchSourceTimer?
    @exclusivity(unchecked) private var attemptsMade = 0
    /// `JobQueue.current` inside the attempts: the retry job's queue, or for a retry job that is
    /// itself an attempt, its retry job's; none for one started by hand.
    @exclusivity(unchecked) private weak var runningQueue: JobQueue?
    /// While the pending wait's next attempt can run only on the main queue: `true`, and the queue
    /// that counts the wait in `_retryWaitsOnTheMainQueue` (none for a retry job on no queue), for
    /// the traps of blocking waits on the main queue.
    @exclusivity(unchecked) private var waitsForTheMainQueue = false
    @exclusivity(unchecked) private var countingQueue: JobQueue?

    /// Creates a retry job. `maxAttempts` below 1 counts as 1.
    public init(
        maxAttempts: Int, backoff: Backoff = .none,
        shouldRetry: @escaping @Sendable (any Error) -> Bool = { _ in true },
        makeAttempt: @escaping @Sendable (Int) -> Job
    ) {
        self.maxAttempts = max(maxAttempts, 1)
        self.backoff = backoff
        self.makeAttempt = makeAttempt
        self.shouldRetry = shouldRetry
        super.init(finishesWhenExecuteReturns: false)
    }

    /// How many attempts it has made so far.
    public var attemptCount: Int {
        engineLock.withLock { attemptsMade }
    }

    override var _isComposite: Bool { true }

    /// The attempt in flight, if any. Call with `engineLock` held.
    var _currentAttemptLocked: Job? { delayTimer == nil ? current : nil }

    override func _executingDetailLocked(now: UInt64) -> _DeferredText? {
        if delayTimer != nil {
            return _DeferredText(
                "finish(): attempt \(attemptsMade) of \(maxAttempts) failed; it waits out the backoff before the next")
        }
        guard let current else { return nil }
        return _DeferredText(
            "finish(): it waits for attempt \(attemptsMade) of \(maxAttempts), '\(current._describeLocked)' (\(current._statusLocked(now: now)))"
        )
    }

    public override func execute() {
        engineLock.lock()
        let queue = _queue?.takeUnretainedValue() ?? _extras?.retryJob?.runningQueue
        runningQueue = queue
        engineLock.unlock()
        // Released here, not under the lock.
        withExtendedLifetime(queue) {}
        startAttempt(1)
    }

    /// Where the attempts run: the retry job's `executionQueue`, else its queue's workers' Dispatch
    /// queue (read at each attempt, so that a changed `underlyingQueue` counts), else, for a retry
    /// job that is itself an attempt, where its retry job's attempts run; `nil` (a global queue)
    /// for one started by hand. Call with `engineLock` held.
    private var _attemptTargetLocked: DispatchQueue? {
        if let target = _extras?.executionQueue { return target }
        if let queue = _queue { return queue.takeUnretainedValue()._dispatchTargetLocked }
        return _extras?.retryJob?._attemptTargetLocked
    }

    /// Whether the retry job, or a retry job that is its attempt in flight, is waiting out its
    /// backoff and its next attempt can run only on the main queue (a blocking wait there for it
    /// would never return). Call with `engineLock` held.
    override var _waitsForTheMainQueueLocked: Bool {
        waitsForTheMainQueue || _currentAttemptLocked?._waitsForTheMainQueueLocked == true
    }

    public override func cancel() {
        super.cancel()
        engineLock.lock()
        let attempt = current
        let timer = delayTimer
        delayTimer = nil
        var counting: JobQueue?
        if timer != nil {
            current = nil
            counting = _endWaitLocked()
        }
        engineLock.unlock()
        _ = counting
        if let timer {
            // The wait was pending: no attempt is in flight, so the retry job ends now.
            timer.cancel()
            end()
        } else if let attempt {
            attempt.cancel(
                reason: CancellationReason(code: .parentCancelled, detail: nil, responsibleJob: displayName))
        }
    }

    override func _discardWorkLocked(_ actions: inout _Actions) {
        actions.releaseAfterUnlocking(makeAttempt as Any)
        actions.releaseAfterUnlocking(shouldRetry as Any)
        makeAttempt = nil
        shouldRetry = nil
    }

    // MARK: Attempts

    /// Makes attempt `number` and starts it, unless the retry job was cancelled meanwhile.
    private func startAttempt(_ number: Int) {
        engineLock.lock()
        let make = makeAttempt
        let cancelled = _isCancelled
        engineLock.unlock()
        guard let make, !cancelled else { return end() }

        let attempt = make(number)
        let handler: @Sendable (JobEvent) -> Void = { [self] event in
            if event == .finished { attemptFinished(attempt, number) }
        }
        // Checked and observed in one critical section: an attempt cancelled in between would
        // otherwise finish unobserved, and the retry job with it never.
        engineLock.lock()
        if let problem = attempt._attemptProblemLocked() {
            engineLock.unlock()
            return end(failure: JobError(code: .invalidAttempt, jobs: [self, attempt], situation: problem))
        }
        _ = attempt._observeLocked(handler)
        attempt._extrasLocked.retryJob = self
        attemptsMade = number
        current = attempt
        let queue = runningQueue
        let cancelledNow = _isCancelled
        engineLock.unlock()
        if cancelledNow {
            // Cancelled while the attempt was made: it never runs; its `.finished` ends the retry job.
            attempt.cancel(
                reason: CancellationReason(code: .parentCancelled, detail: nil, responsibleJob: displayName))
            return
        }
        if number == 1 {
            // On the thread that started the retry job, in its context: a worker's, or for a
            // retry job started by hand, its starter's, as for any job started by hand.
            attempt.start()
        } else {
            _ThreadContext.withContext(queue: queue, job: nil) {
                attempt.start()
            }
        }
    }

    /// `JobQueue.current` inside an attempt that runs on its own `executionQueue`. Call with
    /// `engineLock` held; release the result after unlocking.
    var _attemptQueueLocked: JobQueue? { runningQueue }

    /// Decides, once attempt `number` has finished, between ending and another attempt.
    private func attemptFinished(_ attempt: Job, _ number: Int) {
        engineLock.lock()
        if current === attempt { current = nil }
        let cancelled = _isCancelled
        let retry = shouldRetry
        engineLock.unlock()
        switch attempt.outcome {
        case .succeeded?, nil:
            end()
        case .cancelled(let reason)?:
            // The retry job's own cancellation stands; an attempt cancelled on its own (by its time
            // limit, say) gives the retry job its reason.
            if !cancelled { cancel(reason: reason) }
            end()
        case .failed(let error)?:
            // Cancelled, the retry job keeps its own reason, as a group does over its children's
            // failures: an attempt that answers its cancellation by failing (a cancelled network
            // call's own error) does not make the retry job fail.
            if cancelled { return end() }
            guard number < maxAttempts, let retry, retry(error) else {
                return end(failure: error)
            }
            scheduleAttempt(number + 1)
        }
    }

    /// Starts attempt `number` after the backoff's wait, where the retry job's own work ran: never
    /// inside the previous attempt's delivery, so that many immediate failures do not deepen the
    /// stack.
    private func scheduleAttempt(_ number: Int) {
        let delay = backoff.delay(beforeAttempt: number)
        let qos = qualityOfService
        engineLock.lock()
        let target = _attemptTargetLocked ?? .global(qos: qos)
        engineLock.unlock()
        let timer = DispatchSource.makeTimerSource(queue: target)
        timer.schedule(deadline: .now() + _dispatchInterval(delay))
        let onTheMainQueue = target.getSpecific(key: JobQueue._mainQueueMark) == true
        engineLock.lock()
        let cancelled = _isCancelled
        if !cancelled {
            delayTimer = timer
            if onTheMainQueue {
                waitsForTheMainQueue = true
                countingQueue = _waitingQueueLocked?.takeUnretainedValue()
                countingQueue?._retryWaitsOnTheMainQueue += 1
            }
        }
        engineLock.unlock()
        if cancelled {
            // Never armed, and given no handler: cancelled and activated (a Dispatch source must not
            // be released inactive), it holds nothing of the retry job.
            timer.cancel()
            timer.activate()
            return end()
        }
        // Holds the retry job strongly: during the wait nothing else may (started by hand, it has
        // no queue, and no attempt's observer holds it), and freed while executing it would never
        // finish. The cycle (job, timer, handler) ends when the handler runs or `cancel()` cancels
        // the timer, which releases the handler.
        timer.setEventHandler { [self] in
            engineLock.lock()
            let due = delayTimer.map { $0 as AnyObject } === timer as AnyObject
            var counting: JobQueue?
            if due {
                delayTimer = nil
                counting = _endWaitLocked()
            }
            engineLock.unlock()
            _ = counting
            timer.cancel()
            if due { startAttempt(number) }
        }
        timer.activate()
    }

    /// Ends the pending wait's count of waits on the main queue, if it was counted. Returns the
    /// counting queue, to be released after unlocking. Call with `engineLock` held.
    private func _endWaitLocked() -> JobQueue? {
        waitsForTheMainQueue = false
        guard let queue = countingQueue else { return nil }
        queue._retryWaitsOnTheMainQueue -= 1
        countingQueue = nil
        return queue
    }

    /// Finishes the retry job, releasing what it holds.
    private func end(failure: (any Error)? = nil) {
        engineLock.lock()
        let released = (makeAttempt, shouldRetry)
        makeAttempt = nil
        shouldRetry = nil
        current = nil
        engineLock.unlock()
        _ = released
        // `unlessCancelled`: cancelled by now, even after `attemptFinished` looked, the retry job
        // ends cancelled with its own reason.
        _finish(failure: failure, unlessCancelled: true)
    }
}

extension Job {
    /// The queue that waits for this job: its own, or for a ``RetryJob``'s attempt, the queue that
    /// waits for the retry job (however deeply attempts nest); `nil` for a job started by hand.
    /// Call with `engineLock` held.
    var _waitingQueueLocked: Unmanaged<JobQueue>? {
        var job = self
        while true {
            if let own = job._queue { return own }
            guard let retryJob = job._extras?.retryJob else { return nil }
            job = retryJob
        }
    }

    /// Why this job cannot be a ``RetryJob``'s attempt, or `nil` if it can: it must be on no queue,
    /// not started or finished, wait for nothing (no dependency, no condition), and have no
    /// exclusivity categories. Call with `engineLock` held.
    func _attemptProblemLocked() -> String? {
        do {
            if let queue = _queue?.takeUnretainedValue() {
                return "belongs to queue '\(queue._displayNameLocked)'"
            }
            if _isExclusive {
                return "has exclusivity categories (give them to the retry job, which holds them across its attempts)"
            }
            switch _state {
            case .ready: return nil
            case .pending where _lifecycle.waits.dependencies == 0:
                return "has conditions (only a queue evaluates them)"
            case .pending: return "waits for \(_unfinishedDependenciesLocked)"
            case .executing: return "has already started"
            case .finished: return _isCancelled ? "was cancelled before it started" : "has already finished"
            }
        }
    }
}
