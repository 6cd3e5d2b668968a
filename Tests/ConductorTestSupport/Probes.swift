import Conductor
import Dispatch
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// Probes shared by the two randomized harnesses (RandomizedInvariantTests and StressTests). Job
// bodies, observers and completion blocks record into them and check invariants from whatever
// thread runs them, and never block (beyond the short pthread locks of `Locked`); the test's task
// reads them once the queues have drained. A violation found on another thread goes to a
// `FailureLog`, which the test's task turns into issues: Swift Testing attributes an issue to the
// running test only when it is recorded from the test's own task.

// MARK: - Failure log

/// Collects invariant violations from any thread: counts every one and keeps the first
/// `keptMessages` messages. Never blocks beyond a short lock.
package final class FailureLog: Sendable {
    /// How many messages are kept (and reported as issues); `count` covers all of them.
    package static let keptMessages = 25

    /// What the run was (its label, size and seed); ends every issue reported.
    package let context: String
    private let state = Locked<(count: Int, messages: [String])>((0, []))

    package init(context: String) {
        self.context = context
    }

    /// Records a violation; callable from any thread.
    package func record(_ message: @autoclosure () -> String) {
        let text = message()
        state.withLock { state in
            state.count += 1
            if state.messages.count < Self.keptMessages {
                state.messages.append(text)
            }
        }
    }

    /// How many violations were recorded.
    package var count: Int { state.withLock { $0.count } }
    /// The first `keptMessages` violations, in the order they were recorded.
    package var messages: [String] { state.withLock { $0.messages } }

    /// Records each kept message as an issue, expects that no violation was recorded, and returns
    /// whether none was. Call it on the test's own task, once the run is over; it does not block.
    @discardableResult
    package func reportIssues(summary: String, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let (count, messages) = state.withLock { ($0.count, $0.messages) }
        for message in messages {
            Issue.record("\(message) — \(context)", sourceLocation: sourceLocation)
        }
        #expect(
            count == 0, "\(count) invariant violations — \(context). Summary: \(summary)",
            sourceLocation: sourceLocation)
        return count == 0
    }
}

// MARK: - Queue and work probes

/// What a randomized harness knows about one queue: the most jobs whose work may be in flight on it
/// at once, and the work in flight, which job bodies update from any thread without blocking.
package final class QueueProbe: Sendable {
    package let index: Int
    /// The queue's identity, for `JobQueue.current` checks (the probe does not keep the queue alive).
    package let queueID: ObjectIdentifier
    /// The most jobs whose work may be in flight at once: the exact limit when the harness never
    /// changes it, otherwise the largest limit it may set.
    package let bound: Int
    /// Jobs whose work has started and not yet ended (an asynchronous job's ends just before it
    /// calls `finish()`), the most there ever were, and how many started.
    package let inFlight = InFlight()
    /// Dependencies found finished when a job's work started: evidence that the check is not vacuous.
    package let dependenciesChecked = Atomic<Int>(0)
    /// Calls of `cancelAllJobs()` on the queue, counted before each call: its jobs may then be
    /// cancelled with `queueCancelled`.
    package let cancelAllCalls = Atomic<Int>(0)

    package init(index: Int, queue: JobQueue, bound: Int) {
        self.index = index
        queueID = ObjectIdentifier(queue)
        self.bound = bound
    }
}

/// A dependency the engine accepted for a job, with the edge's policy and the dependency's probe.
package struct AcceptedDependency: Sendable {
    /// Weak, so that the probe keeps no finished job alive; a freed dependency had finished, since
    /// the engine keeps every unfinished job alive.
    package let job: WeakReference<Job>
    /// The dependency's probe, for its name and final outcome once the job is freed.
    package let probe: WorkProbe
    package let policy: DependencyPolicy
}

/// What a randomized harness records about one job's work, and the checks made while it runs.
///
/// Job bodies, observers and completion blocks capture the probe (never the job, nor the harness's
/// list of jobs, which would be a reference cycle through a cancelled job's un-run body) and call
/// it from whatever thread runs them. Nothing here blocks beyond a short lock; violations go to
/// `log`.
package final class WorkProbe: Sendable {
    /// The job's name (what a `CancellationReason.responsibleJob` naming it says).
    package let name: String
    /// Names the job in failure messages.
    package let label: String
    package let queue: QueueProbe
    package let log: FailureLog
    /// For an asynchronous job: `finish(_:)` calls `finish()` a second time, which must be ignored.
    package let finishTwice: Bool
    /// How the work is planned to end. `BlockJob`s always succeed.
    package let plannedEnding: PlannedEnding
    /// The job's ``Job/timeout``, set before it was added: the only way it may be cancelled with
    /// `timedOut` (and only once its work has started).
    package let timeout: Duration?

    /// Times the work started (for a `BlockJob` with two blocks, its first block).
    package let runs = Atomic<Int>(0)
    /// Times the second block of a two-block `BlockJob` ran.
    package let secondBlockRuns = Atomic<Int>(0)
    /// Times the completion block ran.
    package let completions = Atomic<Int>(0)
    /// How the work ended (a `WorkEnding`), recorded just before it ended.
    package let ended = Atomic<Int>(WorkEnding.notEnded.rawValue)
    /// The dependencies the engine accepted, each appended once `addDependency` has returned.
    package let dependencies = Locked<[AcceptedDependency]>([])

    /// Every reason the harness gave the job (`cancel()` counts as `requested`), each recorded
    /// before the call.
    package let reasonsGiven = Locked<[CancellationReason]>([])
    /// The first cancellation reason seen (at `.cancelled`, or after a `cancel` call returned);
    /// every later sighting must be the same.
    package let reasonSeen = Locked<CancellationReason?>(nil)
    /// The first outcome seen (at `.finished`, in the completion block, after a wait); every later
    /// sighting must be the same. It stands for a job that was freed before the final checks.
    package let outcomeSeen = Locked<JobOutcome?>(nil)
    /// The job's outcome after the drain, set by `recordFinalOutcome(_:)` before the checks that
    /// read its dependents' outcomes.
    package let finalOutcome = Locked<JobOutcome?>(nil)

    package init(
        name: String, label: String, queue: QueueProbe, log: FailureLog, finishTwice: Bool,
        plannedEnding: PlannedEnding = .succeed, timeout: Duration? = nil
    ) {
        self.name = name
        self.label = label
        self.queue = queue
        self.log = log
        self.finishTwice = finishTwice
        self.plannedEnding = plannedEnding
        self.timeout = timeout
    }

    /// Records a violation about this job.
    package func fail(_ message: @autoclosure () -> String) {
        log.record("\(label): \(message())")
    }

    /// Records a dependency the engine accepted (the first edge to it: a duplicate keeps the first
    /// edge's policy), for the checks when the work starts and after the drain.
    package func dependencyAccepted(_ dependency: Job, probe: WorkProbe, policy: DependencyPolicy) {
        let accepted = AcceptedDependency(job: WeakReference(dependency), probe: probe, policy: policy)
        dependencies.withLock { dependencies in
            // The engine ignores an edge to a job that already is a dependency, whatever its
            // policy (Job.addDependency(_:policy:)): so does the record. A late `.requireSuccess`
            // edge repeating an `.afterFinish` one was recorded, and a dependent that rightly ran
            // after that dependency was cancelled was reported as a violation (StressTests, once in
            // CI on 2026-11-25).
            guard !dependencies.contains(where: { $0.job.object === dependency }) else { return }
            dependencies.append(accepted)
        }
    }

    // MARK: While the work runs

    /// Called first thing in the job's work: counts the run (a second one is a violation), checks
    /// that `JobQueue.current` is the job's queue and that every accepted dependency has finished
    /// (and succeeded, under `.requireSuccess`), runs `moreChecks`, then counts the work as in
    /// flight on its queue and checks that count against the queue's bound.
    package func workBegins(_ moreChecks: () -> Void = {}) {
        let runs = runs.add(1, ordering: .sequentiallyConsistent).newValue
        if runs != 1 {
            fail("work ran \(runs) times")
        }
        checkCurrentQueue("work started")
        checkDependenciesFinished("work started")
        moreChecks()
        let now = queue.inFlight.enter()
        if now > queue.bound {
            fail("\(now) jobs in flight on queue \(queue.index), more than its bound \(queue.bound)")
        }
    }

    /// Called last in the job's work, with how it ends; for an asynchronous job, by `finish(_:)`.
    package func workEnds(_ ending: WorkEnding = .succeeded) {
        let previous = ended.exchange(ending.rawValue, ordering: .sequentiallyConsistent)
        if previous != WorkEnding.notEnded.rawValue {
            fail("work ended twice (\(WorkEnding(rawValue: previous)!), then \(ending))")
        }
        queue.inFlight.leave()
    }

    /// How the work ends now, for `plannedEnding`: `.checkCancellation` depends on `isCancelled`.
    package func resolvedEnding(isCancelled: @autoclosure () -> Bool) -> WorkEnding {
        switch plannedEnding {
        case .succeed: .succeeded
        case .fail: .failed
        case .throwCancellation: .threwCancellation
        case .checkCancellation: isCancelled() ? .threwCancellation : .succeeded
        }
    }

    /// The error the work fails with.
    package var failure: ProbeFailure { ProbeFailure(job: name) }

    /// Checks that `job`, whose work is running, is executing and has no outcome yet.
    package func checkRunning(_ job: Job, _ moment: String) {
        let state = job.state
        if state != .executing {
            fail("\(moment): \(state), not executing")
        }
        if let outcome = job.outcome {
            fail("\(moment): already has the outcome \(outcome)")
        }
    }

    /// The end of a synchronous `ProbeJob`'s work: ends as planned, by returning or throwing.
    package func endSynchronousWork(_ job: Job) throws {
        checkRunning(job, "work ending")
        let ending = resolvedEnding(isCancelled: job.isCancelled)
        workEnds(ending)
        switch ending {
        case .failed: throw failure
        case .threwCancellation: throw CancellationError()
        case .succeeded, .notEnded: return
        }
    }

    /// The `execute()` of a `ProbeAsyncJob`: a planned failure or `CancellationError` is thrown at
    /// once (which finishes the job); otherwise the work calls `finish(_:)` later, from `later`, or,
    /// with `finishTwice` and a planned success, calls `finish()` at once and then throws (which
    /// must be ignored: the first way of finishing counts).
    package func startAsynchronousWork(_ job: ProbeAsyncJob, finishingOn later: DispatchQueue) throws {
        checkRunning(job, "execute() began")
        switch plannedEnding {
        case .fail:
            workEnds(.failed)
            throw failure
        case .throwCancellation:
            workEnds(.threwCancellation)
            throw CancellationError()
        case .succeed where finishTwice:
            workEnds(.succeeded)
            job.finish()
            seeOutcome(job.outcome, "after finish() returned")
            throw ProbeFailure(job: name, ignored: true)
        case .succeed, .checkCancellation:
            later.async { self.finish(job) }
        }
    }

    /// The end of a `TaskJob`'s body: ends as planned, by returning or throwing;
    /// `.checkCancellation` is `try Task.checkCancellation()`.
    package func endTaskWork() throws {
        switch plannedEnding {
        case .succeed:
            workEnds(.succeeded)
        case .fail:
            workEnds(.failed)
            throw failure
        case .throwCancellation:
            workEnds(.threwCancellation)
            throw CancellationError()
        case .checkCancellation:
            do {
                try Task.checkCancellation()
            } catch {
                workEnds(.threwCancellation)
                throw error
            }
            workEnds(.succeeded)
        }
    }

    /// Checks that `JobQueue.current` is the job's queue; `moment` says when, for the message.
    package func checkCurrentQueue(_ moment: String) {
        let current = JobQueue.current
        if current.map(ObjectIdentifier.init) != queue.queueID {
            fail("\(moment) with JobQueue.current = \(current?.name ?? "nil"), not its queue")
        }
    }

    /// Checks that every dependency the engine accepted has finished (a freed one had) and that
    /// every `.requireSuccess` one succeeded, and counts them in the queue's `dependenciesChecked`;
    /// `moment` says when, for the message.
    package func checkDependenciesFinished(_ moment: String) {
        let dependencies = dependencies.withLock { $0 }
        queue.dependenciesChecked.add(dependencies.count, ordering: .relaxed)
        for accepted in dependencies {
            // Freed, so finished, and its callbacks have run: the outcome seen there stands for it.
            guard let dependency = accepted.job.object else {
                if accepted.policy == .requireSuccess, let outcome = accepted.probe.outcomeSeen.withLock({ $0 }),
                    !outcome.isSucceeded
                {
                    fail("\(moment) although its .requireSuccess dependency '\(accepted.probe.name)' \(outcome)")
                }
                continue
            }
            let state = dependency.state
            if state != .finished {
                fail("\(moment) while its dependency '\(dependency.displayName)' was \(state), not finished")
            } else if accepted.policy == .requireSuccess, let outcome = dependency.outcome, !outcome.isSucceeded {
                fail("\(moment) although its .requireSuccess dependency '\(dependency.displayName)' \(outcome)")
            }
        }
    }

    /// Ends the work of an asynchronous job as planned and calls `finish()` or `finish(throwing:)`
    /// on it, from its work: checks that the job had no outcome before, and is finished with one
    /// once the call returns; with `finishTwice`, calls it again the other way (which must be
    /// ignored).
    package func finish(_ job: AsynchronousJob) {
        checkRunning(job, "before its work called finish")
        let ending = resolvedEnding(isCancelled: job.isCancelled)
        workEnds(ending)
        switch ending {
        case .failed: job.finish(throwing: failure)
        case .threwCancellation: job.finish(throwing: CancellationError())
        case .succeeded, .notEnded: job.finish()
        }
        if !job.isFinished {
            fail("still \(job.state) after finish() returned")
        }
        seeOutcome(job.outcome, "after finish() returned")
        if finishTwice {
            // Must be ignored.
            if ending == .succeeded {
                job.finish(throwing: ProbeFailure(job: name, ignored: true))
            } else {
                job.finish()
            }
        }
    }

    /// Called from the completion block: counts it; running more than once is a violation.
    package func completionBlockRuns() {
        let count = completions.add(1, ordering: .sequentiallyConsistent).newValue
        if count != 1 {
            fail("completion block ran \(count) times")
        }
    }

    // MARK: Cancellation and outcomes

    /// Cancels `job` with each of `reasons` in turn (`nil`: plain `cancel()`), recording each
    /// before the call. After each call, the job must have a cancellation reason unless it had
    /// already finished without being cancelled, and the reason must be the first one seen (the
    /// first reason that takes effect stays).
    package func cancel(_ job: Job, with reasons: [CancellationReason?]) {
        for reason in reasons {
            reasonsGiven.withLock { $0.append(reason ?? CancellationReason(code: .requested)) }
            if let reason {
                job.cancel(reason: reason)
            } else {
                job.cancel()
            }
            if let now = job.cancellationReason {
                seeReason(now, "after cancel returned")
            } else if let outcome = job.outcome {
                if outcome.isCancelled {
                    fail("cancelled (\(outcome)) but has no cancellation reason")
                }
            } else {
                fail("cancel returned but the job (\(job.state)) has no cancellation reason and no outcome")
            }
        }
    }

    /// Records a sighting of the job's cancellation reason (`moment` says where): it must exist,
    /// and be the first one seen.
    package func seeReason(_ reason: CancellationReason?, _ moment: String) {
        guard let reason else {
            return fail("\(moment): no cancellation reason")
        }
        let first = reasonSeen.withLock { seen in
            if seen == nil { seen = reason }
            return seen!
        }
        if first != reason {
            fail("\(moment): cancellation reason \(reason), but \(first) was seen first")
        }
    }

    /// Records a sighting of the job's outcome (`moment` says where): it must exist, and be the
    /// first one seen.
    package func seeOutcome(_ outcome: JobOutcome?, _ moment: String) {
        guard let outcome else {
            return fail("\(moment): no outcome")
        }
        let first = outcomeSeen.withLock { seen in
            if seen == nil { seen = outcome }
            return seen!
        }
        if !first.isSame(as: outcome) {
            fail("\(moment): outcome \(outcome), but \(first) was seen first")
        }
    }

    // MARK: After the drain

    /// Checks, on the test's task once the queues have drained, that `job` (nil if it was freed,
    /// which means it had finished) is finished with no dependencies left, that the work ran exactly
    /// once unless the job was `cancelled` (and never more than once), and, with `hasSecondBlock`,
    /// that the second block ran as often as the first. Returns how many times the work ran.
    @discardableResult
    package func checkAfterDrain(_ job: Job?, cancelled: Bool, hasSecondBlock: Bool) -> Int {
        if let job {
            let state = job.state
            if state != .finished {
                fail("\(state) after the queues drained")
            }
            if !job.dependencies.isEmpty {
                fail("finished but still lists \(job.dependencies.count) dependencies")
            }
        }
        let runs = runs.load(ordering: .sequentiallyConsistent)
        if runs > 1 || (runs == 0 && !cancelled) {
            fail("work ran \(runs) times (cancelled: \(cancelled))")
        }
        let secondBlockRuns = secondBlockRuns.load(ordering: .sequentiallyConsistent)
        if hasSecondBlock && secondBlockRuns != runs {
            fail("second block ran \(secondBlockRuns) times, the first \(runs)")
        }
        return runs
    }

    /// First pass of the outcome checks, once the queues have drained: records the job's final
    /// outcome (`job` nil if it was freed: then the outcome seen when it finished stands for it),
    /// which must exist and be the one seen before. Returns it.
    @discardableResult
    package func recordFinalOutcome(_ job: Job?) -> JobOutcome? {
        let outcome = job.map { $0.outcome } ?? outcomeSeen.withLock { $0 }
        guard let outcome else {
            fail(job == nil ? "freed, but no outcome was seen when it finished" : "finished with no outcome")
            return nil
        }
        if let job {
            seeOutcome(outcome, "after the drain")
            if let reason = job.cancellationReason {
                seeReason(reason, "after the drain")
            }
        }
        finalOutcome.withLock { $0 = outcome }
        return outcome
    }

    /// Second pass of the outcome checks, after `recordFinalOutcome(_:)` ran for every job. `job` is
    /// nil if it was freed; `cancelledEvent` tells whether `.cancelled` was delivered (for a job
    /// without observers, whether `isCancelled`); `runs` is `checkAfterDrain`'s answer.
    ///
    /// - The outcome follows from the work and the events: work that did not run means
    ///   `.cancelled`; work that failed means `.failed` with its error, cancelled or not; work that
    ///   threw `CancellationError` means `.cancelled`; work that succeeded means `.cancelled` if
    ///   `.cancelled` was delivered, otherwise `.succeeded`.
    /// - `isCancelled`, `cancellationReason` and `.cancelled` agree, and a cancelled outcome has the
    ///   reason; a `TaskJob`'s `error` is the outcome's error.
    /// - The reason is one the job was given, or `queueCancelled` after `cancelAllJobs()` on its
    ///   queue, or `requested` for work that threw `CancellationError`, or a dependency reason for a
    ///   job that did not run, naming a `.requireSuccess` dependency that failed (`dependencyFailed`)
    ///   or was cancelled (`dependencyCancelled`).
    /// - A `.requireSuccess` dependency that did not succeed means the job did not run and was
    ///   cancelled.
    package func checkOutcomeAfterDrain(_ job: Job?, cancelledEvent: Bool, runs: Int) {
        guard let outcome = finalOutcome.withLock({ $0 }) else { return }  // Already reported.
        let ended = WorkEnding(rawValue: ended.load(ordering: .sequentiallyConsistent))!
        if runs == 0 && ended != .notEnded {
            fail("work never ran but ended (\(ended))")
        } else if runs == 1 && ended == .notEnded {
            fail("work ran but never recorded its end")
        }

        // The outcome follows from the work and the events.
        let expected: String
        let matches: Bool
        switch (runs, ended) {
        case (0, _):
            (expected, matches) = ("cancelled (work never ran)", outcome.isCancelled)
        case (_, .failed):
            let error: (any Error)? = if case .failed(let error) = outcome { error } else { nil }
            (expected, matches) = ("failed: \(failure)", (error as? ProbeFailure) == failure)
        case (_, .threwCancellation):
            (expected, matches) = ("cancelled (work threw CancellationError)", outcome.isCancelled)
        default:
            (expected, matches) =
                cancelledEvent
                ? ("cancelled (.cancelled was delivered)", outcome.isCancelled)
                : ("succeeded", outcome.isSucceeded)
        }
        if !matches {
            fail("outcome \(outcome), expected \(expected); work ran \(runs) times, ended \(ended)")
        }
        if outcome.isCancelled && !cancelledEvent {
            fail("outcome \(outcome) but .cancelled was never delivered")
        }

        // The reason agrees with the flag and the events, and has a cause.
        let reason = job.map { $0.cancellationReason } ?? outcome.reason ?? reasonSeen.withLock { $0 }
        if let job, job.isCancelled != (reason != nil) {
            fail("isCancelled \(job.isCancelled) but cancellationReason \(reason.map { "\($0)" } ?? "nil")")
        }
        if (reason != nil) != cancelledEvent {
            fail("cancellation reason \(reason.map { "\($0)" } ?? "nil") but .cancelled delivered: \(cancelledEvent)")
        }
        if let outcomeReason = outcome.reason, outcomeReason != reason {
            fail("outcome \(outcome) but cancellationReason \(reason.map { "\($0)" } ?? "nil")")
        }
        // A `TaskJob` also reports its failure as `error`.
        if let task = job as? TaskJob {
            let error = task.error.map { "\($0)" } ?? "nil"
            let expected = if case .failed(let failure) = outcome { "\(failure)" } else { "nil" }
            if error != expected {
                fail("TaskJob.error is \(error) but the outcome is \(outcome)")
            }
        }
        let dependencies = dependencies.withLock { $0 }
        if let reason {
            checkCause(of: reason, runs: runs, ended: ended, dependencies)
        }

        // A `.requireSuccess` dependency that did not succeed stops the job.
        for accepted in dependencies where accepted.policy == .requireSuccess {
            guard let dependencyOutcome = accepted.probe.finalOutcome.withLock({ $0 }),
                !dependencyOutcome.isSucceeded
            else { continue }
            if runs != 0 || !outcome.isCancelled {
                fail(
                    "its .requireSuccess dependency '\(accepted.probe.name)' \(dependencyOutcome), yet the work ran \(runs) times and the outcome is \(outcome)"
                )
            }
        }
    }

    /// Checks that the job's cancellation reason has a cause (see `checkOutcomeAfterDrain`).
    private func checkCause(
        of reason: CancellationReason, runs: Int, ended: WorkEnding, _ dependencies: [AcceptedDependency]
    ) {
        if reasonsGiven.withLock({ $0.contains(reason) }) {
            return
        }
        if reason == CancellationReason(code: .queueCancelled) && queue.cancelAllCalls.load(ordering: .relaxed) > 0 {
            return
        }
        if reason == CancellationReason(code: .requested) && ended == .threwCancellation {
            return
        }
        // A time limit runs out only while the work runs: the clock starts when the job starts.
        if let timeout, reason == CancellationReason(code: .timedOut, detail: "after \(timeout)") {
            if runs != 1 {
                fail("cancelled for \(reason), but its work ran \(runs) times")
            }
            return
        }
        if reason.code == .dependencyFailed || reason.code == .dependencyCancelled, reason.detail == nil,
            let responsible = reason.responsibleJob
        {
            if runs != 0 {
                fail("cancelled for \(reason) after its work had started")
            }
            let wanted: (JobOutcome) -> Bool = reason.code == .dependencyFailed ? { $0.isFailed } : { $0.isCancelled }
            let candidates = dependencies.filter { $0.probe.name == responsible }
            if candidates.contains(where: {
                $0.policy == .requireSuccess && $0.probe.finalOutcome.withLock { $0 }.map(wanted) == true
            }) {
                return
            }
            let found = candidates.map {
                "\($0.policy), \($0.probe.finalOutcome.withLock { $0 }.map { "\($0)" } ?? "nil")"
            }
            fail("cancelled for \(reason), but its dependencies named '\(responsible)' are \(found)")
            return
        }
        fail("cancelled for \(reason), which nobody gave it (given: \(reasonsGiven.withLock { $0 }))")
    }
}

/// Whether `events`, as seen by an observer registered before the job was added to its queue, are
/// a valid lifecycle: `.ready, .started, [.cancelled], .finished` for a job whose work ran;
/// `[.ready], .cancelled, .finished` for one cancelled before it started. Blocks no thread.
package func isValidLifecycle(_ events: [JobEvent], workRan: Bool) -> Bool {
    let valid: [[JobEvent]] =
        workRan
        ? [[.ready, .started, .finished], [.ready, .started, .cancelled, .finished]]
        : [[.cancelled, .finished], [.ready, .cancelled, .finished]]
    return valid.contains(events)
}

// MARK: - Pacing

/// Paces mutator threads by progress instead of time: every `pace` jobs settled (`jobSettled()`,
/// called from completion blocks on any thread) wake each mutator for one burst of operations.
///
/// A mutator blocks in `waitForBurst(_:)`, so it must run on a Dispatch thread of its own (a fresh
/// serial queue), never on the cooperative pool.
package final class CompletionPacer: Sendable {
    /// Completions per burst.
    package let pace: Int
    /// Bursts each mutator runs: one per `pace` completions.
    package let bursts: Int
    private let signals: [DispatchSemaphore]
    private let settled = Atomic<Int>(0)

    /// A pacer for `mutators` mutators that gives each about `burstsWanted` bursts over
    /// `expectedCompletions` completion blocks.
    package init(expectedCompletions: Int, burstsWanted: Int, mutators: Int) {
        pace = max(1, expectedCompletions / burstsWanted)
        bursts = expectedCompletions / pace
        signals = (0..<mutators).map { _ in DispatchSemaphore(value: 0) }
    }

    /// Counts one completion, and every `pace` of them wakes every mutator. Never blocks.
    package func jobSettled() {
        if settled.add(1, ordering: .relaxed).newValue % pace == 0 {
            for signal in signals { signal.signal() }
        }
    }

    /// The completions counted so far (for progress reports).
    package var settledCount: Int { settled.load(ordering: .relaxed) }

    /// Blocks the calling thread (a mutator's Dispatch thread) until mutator `mutator` may run its
    /// next burst.
    package func waitForBurst(_ mutator: Int) {
        signals[mutator].wait()
    }

    /// Lets every mutator run all its remaining bursts (extra signals are harmless), so that none
    /// waits forever once the jobs are done, even if completions went missing (which the checks
    /// report). Never blocks.
    package func releaseAll() {
        for signal in signals {
            for _ in 0..<bursts { signal.signal() }
        }
    }
}

// MARK: - Reporting

/// Writes `line` to standard output at once, so that it is on record even if the process traps
/// right after (a randomized run prints its seed this way before it starts). Blocks the calling
/// thread only while the line is written.
///
/// One `write(2)` of the whole line, not `print` and `fflush`: `fflush(nil)` locks every open
/// stream and blocks for as long as another thread holds one, as Swift Testing's exit tests do
/// while they read a child's output; and one write keeps concurrent lines whole.
package func printFlushed(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { buffer in
            write(1, buffer.baseAddress! + offset, buffer.count - offset)
        }
        if written <= 0 { return }
        offset += written
    }
}

/// The time since `start`, in seconds with three decimals (truncated to the millisecond), for run
/// summaries; never for assertions. Blocks no thread.
package func secondsElapsed(since start: DispatchTime) -> String {
    let milliseconds = (DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000
    let fraction = String(milliseconds % 1000)
    return "\(milliseconds / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)"
}
