import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Re-entrancy: Conductor promises that it never runs user code with the engine lock held
// (Docs/Design.md, "Decide inside, act outside"), and the lock is not recursive: debug builds trap
// when a thread takes it twice ("engine lock acquired recursively"), release builds would deadlock.
// So every public member must be callable from inside every piece of user code Conductor runs. Each
// test here puts a call of `exercise(...)` inside one kind of callback: job bodies (`BlockJob`,
// `AsyncBlockJob`, `TaskJob`, `ValueJob`, a `Job` subclass, work on an execution queue, a barrier),
// each observer event, completion blocks, a condition's `name`, `dependency(for:)` and
// `evaluate(for:)`, progress observers, a `StallWatchdog`'s `onStall`, a `RetryJob`'s attempt
// factory and `shouldRetry`, `cancel()` overrides reached by every cause of cancellation, and a
// `GroupJob` child's work that produces jobs. `exercise` calls a broad set of the public API from
// there: on the callback's own job and queue, on fresh jobs (dependencies, cycles, conditions whose
// name reads the engine, cancellation), on a suspended spare queue (adding jobs, barriers, limits,
// cancelling everything), diagnostics (`description`, `explain()`, `dotGraph()`, a watchdog), and
// the descriptions of failures whose errors name jobs or read the engine themselves. Where
// Docs/Concepts.md says what a callback sees (`JobQueue.current`, the job's state, its outcome, its
// progress, its queue's jobs), it checks that too.
//
// Each scenario runs in a child process (an exit test), so that a trap fails the test that caused
// it instead of ending the run (the scenario then runs once more, observed, to report the trap's
// message and the last part of the exercise it reached); issues recorded in the child are reported
// here. Checks made on other threads go to a `FailureLog`, reported from the scenario's task at its
// end, and every scenario also checks that each of its callbacks ran. The time limits only turn a
// deadlock into a failure; no assertion depends on timing, and no cooperative-pool thread blocks:
// a callback that may run on one (a `TaskJob`'s body, a condition's evaluation) waits with `await`.

// MARK: - The exercise

/// What `JobQueue.current` must be inside a callback (Docs/Concepts.md, "Membership and waiting").
private enum CurrentQueue: Sendable {
    /// The queue running the job whose work this is.
    case queue(JobQueue)
    /// `nil`: observers, completion blocks, progress observers, a condition's evaluation, a watchdog.
    case none
    /// Not specified (for instance a `RetryJob`'s attempt factory).
    case unchecked
}

/// What every scenario's callbacks reach besides their own job and queue: a suspended spare queue to
/// add jobs to, change and cancel; a queue that runs what they wait for; finished jobs whose
/// failures they describe; and the log of what they found.
private final class ReentrancyWorld: Sendable {
    let log: FailureLog
    /// Suspended while the scenario runs; resumed and drained by `finish(expecting:)`.
    let spare: JobQueue
    let runner: JobQueue
    /// Failed with `JobError.invalidAttempt`, as a job keeps a `JobError` (names read when it failed).
    let invalidAttempt: RetryJob
    /// Failed with a `GroupFailure` naming a child that failed with `JobError.dependencyCycle`.
    let failedGroup: GroupJob
    /// Failed with an error whose description reads the engine (`EngineReadingError`).
    let readingFailure: Job
    /// The callbacks that ran, by site.
    let sites = Log<String>()

    private init(_ label: String) {
        let spare = JobQueue(name: "\(label).spare")
        spare.isSuspended = true
        let invalidAttempt = RetryJob(maxAttempts: 1) { _ in
            // An attempt that belongs to a queue: the retry job fails with `invalidAttempt`.
            let attempt = BlockJob {}
            attempt.name = "attempt on the spare queue"
            spare.addJob(attempt)
            return attempt
        }
        invalidAttempt.name = "invalid attempt"
        let witness = BlockJob {}
        witness.name = "witness"
        let readingFailure = ProbeJob { _ in throw EngineReadingError(job: witness) }
        readingFailure.name = "reading failure"
        let child = ProbeJob { _ in
            let loop = BlockJob {}
            loop.name = "loop"
            try loop.addDependency(loop)
        }
        child.name = "failing child"
        log = FailureLog(context: "ReentrancyTests: \(label)")
        self.spare = spare
        runner = JobQueue(name: "\(label).runner")
        self.invalidAttempt = invalidAttempt
        self.readingFailure = readingFailure
        failedGroup = GroupJob(name: "failing group", jobs: [child])
    }

    /// A world whose failed jobs have finished.
    static func make(_ label: String) async -> ReentrancyWorld {
        let world = ReentrancyWorld(label)
        world.invalidAttempt.start()  // fails at once: its attempt is on a queue
        world.runner.addJobs([world.readingFailure, world.failedGroup], waitUntilFinished: false)
        await world.runner.waitUntilAllJobsAreFinished()
        return world
    }

    /// Records a contradiction found at `site`, from any thread.
    func check(_ condition: Bool, _ site: String, _ message: @autoclosure () -> String) {
        if !condition { log.record("\(site): \(message())") }
    }

    /// Drains the spare and runner queues, then expects that each of `sites` ran and that no callback
    /// found anything wrong. Call on the scenario's task once its jobs have finished.
    func finish(expecting expected: [String], sourceLocation: SourceLocation = #_sourceLocation) async {
        spare.isSuspended = false
        await spare.waitUntilAllJobsAreFinished()
        await runner.waitUntilAllJobsAreFinished()
        let visited = Set(sites.values)
        for site in expected where !visited.contains(site) {
            Issue.record("the callback '\(site)' never ran", sourceLocation: sourceLocation)
        }
        log.reportIssues(summary: "callbacks that ran: \(visited.sorted())", sourceLocation: sourceLocation)
    }
}

/// An error whose description reads the engine: describing it under the engine lock would take the
/// lock again.
private struct EngineReadingError: Error, CustomStringConvertible {
    let job: Job
    var description: String { "EngineReadingError('\(job.displayName)' is \(job.state))" }
}

/// A condition whose name reads the engine, and that is satisfied at once: for `explain()`, which
/// describes waiting conditions by name.
private struct NameReadingCondition: JobCondition {
    let subject: Job
    var name: String { "name reading '\(subject.displayName)', \(subject.isCancelled ? "cancelled" : "live")" }
    func evaluate(for job: Job) async throws -> Bool { true }
}

/// Whether `outcome` is `.succeeded`.
private func succeeded(_ outcome: JobOutcome?) -> Bool {
    if case .succeeded? = outcome { return true }
    return false
}

/// Calls a broad set of Conductor's public API from inside the callback `site` and records in
/// `world` whatever contradicts Docs/Concepts.md.
///
/// - Parameters:
///   - job: The callback's own job. Only reads, and changes that leave it as it was, are made on it.
///   - queue: The job's queue, if it has one.
///   - current: What `JobQueue.current` must be here.
///   - started: The job has certainly started: a dependency added to it is refused.
///   - states: The states the job may be in here (all of them if `nil`).
///   - mayBlock: The callback runs on a thread that may block (never a cooperative-pool thread):
///     it also waits, blocking, for jobs of `world.runner`.
private func exercise(
    _ site: String, _ job: Job, on queue: JobQueue? = nil, current: CurrentQueue, started: Bool,
    states: [JobState]? = nil, mayBlock: Bool = true, in world: ReentrancyWorld
) {
    world.sites.append(site)
    let check = { (condition: Bool, message: String) in world.check(condition, site, message) }
    // A trail on the child process's standard output, which a failed scenario reports: where it was.
    let step = { (part: String) in print("exercise: \(site): \(part)") }

    // Where the callback runs.
    step("JobQueue.current")
    let actualCurrent = JobQueue.current
    switch current {
    case .queue(let expected):
        check(actualCurrent === expected, "JobQueue.current is \(actualCurrent?.name ?? "nil"), not \(expected)")
    case .none:
        check(actualCurrent == nil, "JobQueue.current is '\(actualCurrent?.name ?? "?")', not nil")
    case .unchecked:
        break
    }

    // The job itself.
    step("the job itself")
    let state = job.state
    if let states { check(states.contains(state), "'\(job.displayName)' is \(state), not one of \(states)") }
    _ = (job.isReady, job.isExecuting, job.isFinished, job.isCancelled, job.id)
    let outcome = job.outcome
    _ = outcome.map { "\($0)" }
    _ = job.cancellationReason.map { "\($0)" }
    job.name = job.name
    _ = (job.description, job.debugDescription, "\(job)", String(reflecting: job), job.displayName)
    _ = job.explain()
    _ = job.dependencies
    job.queuePriority = job.queuePriority
    _ = (job.qualityOfService, job.timeout, job.executionQueue, job.completionBlock)
    let progress = job.progress
    _ = (progress.fractionCompleted, progress.totalUnitCount, progress.completedUnitCount)
    progress.removeObserver(progress.observe { _ in })
    job.removeObserver(job.observe { _ in })
    if state == .finished {
        // Step 1 of a finish is done before anyone sees the job finished (Concepts).
        check(outcome != nil, "'\(job.displayName)' is finished without an outcome")
        check(job.dependencies.isEmpty, "a finished job keeps its dependencies")
        check(progress.fractionCompleted == 1, "a finished job's progress is \(progress.fractionCompleted)")
        if let queue {
            check(!queue.jobs.contains { $0 === job }, "a finished job is still among its queue's jobs")
        }
    }

    // Its queue.
    step("its queue")
    if let queue {
        _ = (queue.jobs, queue.jobCount, queue.description, queue.debugDescription, queue.explain(), queue.dotGraph())
        _ = (queue.progress.fractionCompleted, queue.isSuspended, queue.qualityOfService, queue.underlyingQueue)
        queue.name = queue.name
        queue.maxConcurrentJobCount = queue.maxConcurrentJobCount
    }

    // Fresh jobs: dependencies, cycles, conditions, cancellation.
    step("fresh jobs")
    let a = BlockJob {}
    let b = BlockJob {}
    a.name = "\(site) a"
    b.name = "\(site) b"
    do {
        try a.addDependency(b)
        a.removeDependency(b)
        try a.addDependency(b, policy: .requireSuccess)
        try a.addDependency(job)  // the callback's own job, whatever its state
        a.removeDependency(job)
    } catch {
        check(false, "unexpected \(error)")
    }
    do {
        try b.addDependency(a)
        check(false, "a cycle was accepted")
    } catch {
        check(error.code == .dependencyCycle, "a cycle threw \(error.code)")
        check("\(error)".contains("'\(site) a'"), "the cycle's error does not name its jobs: \(error)")
        _ = error.jobs.map(\.displayName)
    }
    do {
        try a.addDependency(a)
    } catch {
        check("\(error)".contains("cannot depend on itself"), "\(error)")
    }
    if started {
        do {
            try job.addDependency(a)
            check(false, "a dependency was added to a started job")
        } catch {
            check(error.code == .alreadyStarted, "a started job's dependency threw \(error.code)")
            _ = "\(error)"
        }
    }
    // A condition named by reading the engine: `explain()` describes it by name.
    a.addCondition(NameReadingCondition(subject: a))
    a.addCondition(BlockCondition(name: "never evaluated") { _ in true })
    check(a.explain().contains("name reading '\(site) a'"), "explain() does not name the condition:\n\(a.explain())")
    _ = (a.debugDescription, a.description)
    a.completionBlock = {}
    a.completionBlock = nil
    a.timeout = .seconds(60)
    a.qualityOfService = .utility
    a.queuePriority = .high
    a.cancel()
    b.cancel(reason: CancellationReason(code: .requested, detail: site))
    check(a.isFinished && b.isFinished, "jobs cancelled before they started have not finished")
    _ = (a.outcome.map { "\($0)" }, b.outcome.map { "\($0)" }, a.explain(), b.explain())
    let group = GroupJob(name: "\(site) group")
    let child = BlockJob {}
    group.addChild(child)
    _ = (group.childJobs, group.explain(), group.progress.fractionCompleted)
    group.cancel()
    check(child.isCancelled, "a cancelled group's child is not cancelled")

    // Failures whose errors name jobs or read the engine, described from here.
    step("failures")
    let invalid = world.invalidAttempt.outcome.map { "\($0)" } ?? "nil"
    check(invalid.contains("JobError.invalidAttempt: 'invalid attempt'"), "invalid attempt: \(invalid)")
    let groupFailure = world.failedGroup.outcome.map { "\($0)" } ?? "nil"
    check(groupFailure.contains("'loop' cannot depend on itself"), "group failure: \(groupFailure)")
    let reading = world.readingFailure.outcome.map { "\($0)" } ?? "nil"
    check(reading.contains("EngineReadingError('witness' is ready)"), "reading failure: \(reading)")
    check(world.readingFailure.explain().contains("EngineReadingError"), "explain() lost the error")
    _ = (world.failedGroup.explain(), world.failedGroup.debugDescription, world.invalidAttempt.debugDescription)
    if case .failed(let error as JobError)? = world.invalidAttempt.outcome {
        _ = (error.jobs.map(\.displayName), error.code.description)
    }

    // The spare queue: adding, barriers, limits, suspension, diagnostics, cancelling everything.
    step("the spare queue")
    let spare = world.spare
    let added = BlockJob {}
    spare.isSuspended = true
    spare.maxConcurrentJobCount = 2
    spare.maxConcurrentJobCount = JobQueue.defaultMaxConcurrentJobCount
    spare.addJob(added)
    spare.addJob {}
    spare.addJobs([BlockJob {}, BlockJob {}], waitUntilFinished: false)
    spare.addBarrierBlock {}
    _ = (spare.jobs, spare.jobCount, spare.explain(), spare.dotGraph(), spare.progress.fractionCompleted)
    _ = JobQueue.dotGraph(of: [spare, world.runner] + (queue.map { [$0] } ?? []))
    spare.cancelAllJobs()
    check(added.isCancelled, "cancelAllJobs() did not cancel a job of the spare queue")

    // A watchdog and a tracer started and stopped from here (each scenario has a process of its own,
    // so a tracer here records nothing of another test's).
    step("a watchdog and a tracer")
    let watchdog = StallWatchdog(threshold: .seconds(3_600)) { _ in }
    watchdog.start()
    watchdog.stop()
    let tracer = JobTracer(capacity: 64, queues: [spare])
    tracer.start()
    spare.addJob {}
    tracer.stop()
    _ = tracer.chromeTraceJSON()

    // Waiting for other jobs and queues, where the thread may block.
    step("waits")
    if mayBlock {
        let awaited = BlockJob {}
        world.runner.addJob(awaited)
        awaited.waitUntilFinished()
        world.runner.addJobs([BlockJob {}], waitUntilFinished: true)
        world.runner.waitUntilAllJobsAreFinished()
        check(awaited.isFinished, "waitUntilFinished() returned before the job finished")
    }
}

/// `exercise(...)` for a callback that may run on a cooperative-pool thread, and may await: it
/// waits for jobs of `world.runner` with `await` instead of blocking.
private func exerciseAsync(
    _ site: String, _ job: Job, on queue: JobQueue? = nil, current: CurrentQueue, started: Bool,
    states: [JobState]? = nil, in world: ReentrancyWorld
) async {
    exercise(site, job, on: queue, current: current, started: started, states: states, mayBlock: false, in: world)
    let awaited = BlockJob {}
    world.runner.addJob(awaited)
    await awaited.waitUntilFinished()
    await world.runner.waitUntilAllJobsAreFinished()
    let value = ValueJob { 7 }
    world.runner.addJob(value)
    let seven = try? await value.value
    world.check(seven == 7, site, "a ValueJob's value read from here is \(String(describing: seven))")
}

// MARK: - Jobs that exercise

/// A job whose synchronous work exercises the API.
private final class ExercisingJob: Job, @unchecked Sendable {
    // @unchecked Sendable: every stored property is immutable and Sendable.
    let site: String
    let queue: JobQueue
    let world: ReentrancyWorld

    init(_ site: String, on queue: JobQueue, in world: ReentrancyWorld) {
        self.site = site
        self.queue = queue
        self.world = world
        super.init()
    }

    override func execute() {
        exercise(site, self, on: queue, current: .queue(queue), started: true, states: [.executing], in: world)
    }
}

/// An asynchronous job whose `cancel()` override exercises the API, then finishes the job. Its
/// `execute()` fires `started` and leaves the job executing until it is cancelled.
private final class CancelExercisingJob: AsynchronousJob, @unchecked Sendable {
    // @unchecked Sendable: every stored property is immutable and Sendable.
    let site: String
    let queue: JobQueue
    let world: ReentrancyWorld
    let mayBlock: Bool
    let started = Signal()

    init(_ site: String, on queue: JobQueue, mayBlock: Bool = true, in world: ReentrancyWorld) {
        self.site = site
        self.queue = queue
        self.mayBlock = mayBlock
        self.world = world
        super.init()
        name = site
    }

    override func execute() {
        exercise("\(site): execute()", self, on: queue, current: .queue(queue), started: true, in: world)
        started.fire()
    }

    override func cancel() {
        super.cancel()
        // Whatever cancelled it, the override sees the job cancelled (Concepts, "Cancellation").
        world.check(isCancelled, site, "the cancel() override does not see the job cancelled")
        exercise(site, self, on: queue, current: .unchecked, started: false, mayBlock: mayBlock, in: world)
        finish()
    }
}

/// A job that, until it is finished by hand, executes; for the watchdog and the observers.
private final class OpenJob: AsynchronousJob, @unchecked Sendable {
    // @unchecked Sendable: `started` is immutable and Sendable.
    let started = Signal()

    init(name: String) {
        super.init()
        self.name = name
    }

    override func execute() {
        started.fire()
    }
}

/// Observes every event of `job`, recording them in `events` and exercising the API from each
/// handler (with no current queue, Concepts, "Observers, completion blocks and waiters").
private func observeEvents(_ job: Job, on queue: JobQueue, _ events: Log<JobEvent>, in world: ReentrancyWorld) {
    let label = job.name ?? "job"
    job.observe { event in
        events.append(event)
        let site = "\(label): .\(event) observer"
        switch event {
        case .ready:
            exercise(
                site, job, on: queue, current: .none, started: false, states: [.ready, .executing, .finished],
                in: world)
        case .started:
            exercise(site, job, on: queue, current: .none, started: true, states: [.executing, .finished], in: world)
        case .cancelled:
            world.check(job.isCancelled && job.cancellationReason != nil, site, "not cancelled, or no reason")
            exercise(site, job, on: queue, current: .none, started: false, in: world)
        case .finished:
            exercise(site, job, on: queue, current: .none, started: true, states: [.finished], in: world)
        }
    }
}

// MARK: - Scenarios (run in a child process each)

private enum ReentrancyScenarios {
    static func jobBodies() async {
        let world = await ReentrancyWorld.make("bodies")
        let queue = JobQueue(name: "bodies")
        // A BlockJob with two blocks, which may run on different threads: both see the queue.
        let own = Locked<Job?>(nil)
        let block = BlockJob {
            exercise(
                "BlockJob's first block", own.withLock { $0 }!, on: queue, current: .queue(queue), started: true,
                states: [.executing], in: world)
        }
        block.addExecutionBlock {
            exercise(
                "BlockJob's second block", own.withLock { $0 }!, on: queue, current: .queue(queue), started: true,
                states: [.executing], in: world)
        }
        own.withLock { $0 = block }
        let subclass = ExercisingJob("Job subclass's execute()", on: queue, in: world)
        // Work on an execution queue: its queue is still the current one there (Job.executionQueue).
        let elsewhere = ExercisingJob("execute() on an executionQueue", on: queue, in: world)
        elsewhere.executionQueue = DispatchQueue(label: "ReentrancyTests.executionQueue")
        queue.addJobs([block, subclass, elsewhere], waitUntilFinished: false)
        // A barrier: a member of its queue while it runs (Concepts, "Barriers").
        queue.addBarrierBlock {
            let barrier = queue.jobs.first { $0.isExecuting }
            world.check(barrier != nil, "barrier block", "the running barrier is not among its queue's jobs")
            if let barrier {
                exercise(
                    "barrier block", barrier, on: queue, current: .queue(queue), started: true, states: [.executing],
                    in: world)
            }
        }
        await queue.waitUntilAllJobsAreFinished()
        for job in [block, subclass, elsewhere] {
            #expect(succeeded(job.outcome), "\(job.displayName): \(String(describing: job.outcome))")
        }
        await world.finish(expecting: [
            "BlockJob's first block", "BlockJob's second block", "Job subclass's execute()",
            "execute() on an executionQueue", "barrier block",
        ])
    }

    static func asynchronousBodies() async {
        let world = await ReentrancyWorld.make("asynchronous bodies")
        let queue = JobQueue(name: "asynchronous bodies")
        let asyncBlock = AsyncBlockJob { job in
            exercise(
                "AsyncBlockJob's body", job, on: queue, current: .queue(queue), started: true, states: [.executing],
                in: world)
            // Finished later, from a thread that runs no job.
            DispatchQueue.global().async {
                exercise(
                    "AsyncBlockJob finished from another thread", job, on: queue, current: .none, started: true,
                    states: [.executing], in: world)
                job.finish()
            }
        }
        let own = Locked<Job?>(nil)
        let task = TaskJob {
            await exerciseAsync(
                "TaskJob's body", own.withLock { $0 }!, on: queue, current: .queue(queue), started: true,
                states: [.executing], in: world)
        }
        own.withLock { $0 = task }
        let ownValue = Locked<Job?>(nil)
        let value = ValueJob<Int> {
            await exerciseAsync(
                "ValueJob's body", ownValue.withLock { $0 }!, on: queue, current: .queue(queue), started: true,
                states: [.executing], in: world)
            return 42
        }
        ownValue.withLock { $0 = value }
        let ownDependent = Locked<Job?>(nil)
        let dependent = ValueJob<Int> {
            // The dependency has finished: its value is there at once.
            let read = try await value.value
            await exerciseAsync(
                "dependent ValueJob's body", ownDependent.withLock { $0 }!, on: queue, current: .queue(queue),
                started: true, states: [.executing], in: world)
            return read + 1
        }
        ownDependent.withLock { $0 = dependent }
        try? dependent.addDependency(value, policy: .requireSuccess)
        queue.addJobs([asyncBlock, task, value, dependent], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(succeeded(asyncBlock.outcome) && succeeded(task.outcome))
        #expect((try? await dependent.value) == 43)
        await world.finish(expecting: [
            "AsyncBlockJob's body", "AsyncBlockJob finished from another thread", "TaskJob's body",
            "ValueJob's body", "dependent ValueJob's body",
        ])
    }

    static func observers() async {
        let world = await ReentrancyWorld.make("observers")
        let queue = JobQueue(name: "observed")
        let runs = BlockJob {}
        runs.name = "runs"
        let open = OpenJob(name: "cancelled while it runs")
        let cancelledFirst = BlockJob {}
        cancelledFirst.name = "cancelled before it starts"
        let suspended = JobQueue(name: "observed, suspended")
        suspended.isSuspended = true
        let (runsEvents, openEvents, firstEvents) = (Log<JobEvent>(), Log<JobEvent>(), Log<JobEvent>())
        observeEvents(runs, on: queue, runsEvents, in: world)
        observeEvents(open, on: queue, openEvents, in: world)
        observeEvents(cancelledFirst, on: suspended, firstEvents, in: world)
        // Every event is caused on a Dispatch thread, so that the handlers may block there.
        await runOnDispatchThread {
            queue.addJobs([runs, open], waitUntilFinished: false)
            suspended.addJob(cancelledFirst)
        }
        await open.started.wait()
        await runOnDispatchThread { open.cancel() }
        await runOnDispatchThread { open.finish() }
        await runOnDispatchThread { cancelledFirst.cancel() }
        await queue.waitUntilAllJobsAreFinished()
        await suspended.waitUntilAllJobsAreFinished()
        // Each event once, in lifecycle order (Concepts, "Observers, completion blocks and waiters").
        #expect(runsEvents.values == [.ready, .started, .finished])
        #expect(openEvents.values == [.ready, .started, .cancelled, .finished])
        #expect(firstEvents.values.suffix(2) == [.cancelled, .finished])
        await world.finish(expecting: [
            "runs: .ready observer", "runs: .started observer", "runs: .finished observer",
            "cancelled while it runs: .cancelled observer", "cancelled while it runs: .finished observer",
            "cancelled before it starts: .cancelled observer", "cancelled before it starts: .finished observer",
        ])
    }

    static func completionBlocks() async {
        let world = await ReentrancyWorld.make("completion blocks")
        let queue = JobQueue(name: "completion blocks")
        let ok = BlockJob {}
        ok.name = "succeeds"
        let failing = ProbeJob { _ in
            let loop = BlockJob {}
            loop.name = "self-loop"
            try loop.addDependency(loop)
        }
        failing.name = "fails with a JobError"
        let cancelled = BlockJob {}
        cancelled.name = "cancelled"
        let child = BlockJob {}
        let group = GroupJob(name: "group", jobs: [child])
        for (job, site) in [
            (ok, "succeeded job's completion block"), (failing, "failed job's completion block"),
            (cancelled, "cancelled job's completion block"), (group, "group's completion block"),
        ] as [(Job, String)] {
            job.completionBlock = {
                exercise(site, job, on: queue, current: .none, started: false, states: [.finished], in: world)
                // A completion block may describe the job's outcome, whose error names a job.
                if job === failing {
                    let text = job.outcome.map { "\($0)" } ?? "nil"
                    world.check(text.contains("'self-loop' cannot depend on itself"), site, "outcome: \(text)")
                }
            }
        }
        group.observe { event in
            guard event == .finished else { return }
            world.check(child.isFinished, "group's .finished observer", "the group finished before its child")
            exercise(
                "group's .finished observer", group, on: queue, current: .none, started: true, states: [.finished],
                in: world)
        }
        await runOnDispatchThread {
            cancelled.cancel()  // its completion block runs here, on a thread that may block
            queue.addJobs([ok, failing, cancelled, group], waitUntilFinished: false)
        }
        await queue.waitUntilAllJobsAreFinished()
        await world.finish(expecting: [
            "succeeded job's completion block", "failed job's completion block", "cancelled job's completion block",
            "group's completion block", "group's .finished observer",
        ])
    }

    static func conditions() async {
        let world = await ReentrancyWorld.make("conditions")
        let queue = JobQueue(name: "conditions")
        // Satisfied, with a generated dependency: `name` is read when the condition is added.
        let gated = BlockJob {}
        gated.name = "gated"
        let login = BlockJob {}
        login.name = "login"
        gated.addCondition(ExercisingCondition("satisfied", subject: gated, generates: login, in: world))
        // Not satisfied, and throwing a JobError: the cancellation's detail describes both.
        let refused = BlockJob {}
        refused.name = "refused"
        refused.addCondition(ExercisingCondition("unsatisfied", subject: refused, verdict: .no, in: world))
        let throwing = BlockJob {}
        throwing.name = "throwing"
        throwing.addCondition(ExercisingCondition("throwing", subject: throwing, verdict: .throwsJobError, in: world))
        // A generated dependency that would close a cycle (the bug fixed in 3472946): the job is
        // cancelled, its detail naming the condition (whose name reads the engine) and the cycle.
        let closing = BlockJob {}
        closing.name = "closing"
        let waiter = BlockJob {}
        waiter.name = "waiter"
        try? waiter.addDependency(closing)
        closing.addCondition(ExercisingCondition("cycle-closing", subject: closing, generates: waiter, in: world))
        // A condition on a job that has not started: explain() names it, reading the engine.
        #expect(gated.explain().contains("'satisfied on 'gated'"), "\(gated.explain())")
        await runOnDispatchThread { queue.addJobs([gated, refused, throwing, closing], waitUntilFinished: false) }
        await queue.waitUntilAllJobsAreFinished()
        #expect(succeeded(gated.outcome) && login.isFinished)
        let expectations = [
            (refused, "'unsatisfied on 'refused'"), (throwing, "'self' cannot depend on itself"),
            (closing, "JobError.dependencyCycle"),
        ]
        for (job, part) in expectations {
            let text = job.outcome.map { "\($0)" } ?? "nil"
            #expect(text.contains("conditionFailed") && text.contains(part), "\(job.displayName): \(text)")
        }
        await world.finish(expecting: [
            "satisfied: dependency(for:)", "satisfied: evaluate(for:)", "unsatisfied: evaluate(for:)",
            "throwing: evaluate(for:)", "cycle-closing: dependency(for:)",
        ])
    }

    static func conditionOfAJobAddedFromATaskJob() async {
        let world = await ReentrancyWorld.make("condition of a job added from a TaskJob")
        let queue = JobQueue(name: "task queue")
        let other = JobQueue(name: "gated queue")
        let gated = BlockJob {}
        gated.name = "added from a TaskJob"
        gated.addCondition(ExercisingCondition("from a TaskJob", subject: gated, in: world))
        queue.addJob(TaskJob { other.addJob(gated) })
        await queue.waitUntilAllJobsAreFinished()
        await gated.waitUntilFinished()
        #expect(succeeded(gated.outcome))
        await world.finish(expecting: ["from a TaskJob: evaluate(for:)"])
    }

    static func progressObservers() async {
        let world = await ReentrancyWorld.make("progress observers")
        let queue = JobQueue(name: "progress")
        let reporting = ProbeJob { job in
            job.progress.totalUnitCount = 2
            job.progress.completedUnitCount = 1
        }
        reporting.name = "reports progress"
        reporting.progress.observe { progress in
            // Reported from inside the job's work, on its worker, with no worker context.
            if progress.completedUnitCount == 1 {
                exercise(
                    "job progress observer", reporting, on: queue, current: .none, started: true,
                    states: [.executing], in: world)
            }
        }
        let queueProgress = queue.progress
        let once = Flag()
        queueProgress.observe { _ in
            guard !once.value else { return }
            once.set()
            exercise("queue progress observer", reporting, on: queue, current: .none, started: false, in: world)
        }
        await runOnDispatchThread { queue.addJob(reporting) }
        await queue.waitUntilAllJobsAreFinished()
        #expect(reporting.progress.fractionCompleted == 1 && queueProgress.fractionCompleted == 1)
        await world.finish(expecting: ["job progress observer", "queue progress observer"])
    }

    static func callbacksCausedByATaskJobsBody() async {
        let world = await ReentrancyWorld.make("callbacks caused by a TaskJob's body")
        let queue = JobQueue(name: "task bodies")
        let other = BlockJob {}
        other.name = "cancelled by a TaskJob"
        let otherEvents = Log<JobEvent>()
        other.observe { event in
            otherEvents.append(event)
            exercise(
                "observer of a job a TaskJob cancels (.\(event))", other, current: .none, started: false,
                mayBlock: false, in: world)
        }
        other.completionBlock = {
            exercise(
                "completion block of a job a TaskJob cancels", other, current: .none, started: false, mayBlock: false,
                in: world)
        }
        let own = Locked<Job?>(nil)
        let task = TaskJob {
            let job = own.withLock { $0 }!
            other.cancel()
            job.progress.completedUnitCount = 1
        }
        own.withLock { $0 = task }
        task.progress.totalUnitCount = 2
        task.progress.observe { progress in
            guard progress.completedUnitCount == 1, progress.totalUnitCount == 2 else { return }
            exercise(
                "progress observer of a TaskJob's body", task, on: queue, current: .none, started: true,
                mayBlock: false, in: world)
        }
        queue.addJob(task)
        await queue.waitUntilAllJobsAreFinished()
        #expect(otherEvents.values == [.cancelled, .finished])
        await world.finish(expecting: [
            "observer of a job a TaskJob cancels (.cancelled)", "observer of a job a TaskJob cancels (.finished)",
            "completion block of a job a TaskJob cancels", "progress observer of a TaskJob's body",
        ])
    }

    static func stallWatchdog() async {
        let world = await ReentrancyWorld.make("stall watchdog")
        let queue = JobQueue(name: "watched")
        let stuck = OpenJob(name: "stuck")
        queue.addJob(stuck)
        await stuck.started.wait()
        let reported = Signal()
        let own = Locked<StallWatchdog?>(nil)
        let watchdog = StallWatchdog(threshold: .milliseconds(20)) { report in
            guard report.kind == .longExecution, report.jobs.contains(where: { $0 === stuck }) else { return }
            world.check(report.description.contains("'stuck'"), "onStall", "the report does not name the job")
            exercise("onStall", stuck, on: queue, current: .none, started: true, states: [.executing], in: world)
            // Stopped from inside its own report.
            own.withLock { $0 }?.stop()
            reported.fire()
        }
        own.withLock { $0 = watchdog }
        watchdog.start()
        await reported.wait()
        own.withLock { $0 = nil }
        stuck.finish()
        await queue.waitUntilAllJobsAreFinished()
        await world.finish(expecting: ["onStall"])
    }

    static func retryJobs() async {
        let world = await ReentrancyWorld.make("retry jobs")
        let queue = JobQueue(name: "retries")
        let own = Locked<RetryJob?>(nil)
        let retry = RetryJob(
            maxAttempts: 2,
            shouldRetry: { error in
                // Called in the failed attempt's `.finished` delivery.
                exercise(
                    "shouldRetry", own.withLock { $0 }!, on: queue, current: .none, started: true,
                    states: [.executing], in: world)
                return "\(error)".contains("first attempt")
            },
            makeAttempt: { number in
                exercise(
                    "attempt factory (\(number))", own.withLock { $0 }!, on: queue, current: .unchecked, started: true,
                    states: [.executing], in: world)
                if number == 1 {
                    return ProbeJob { _ in throw ProbeFailure(job: "first attempt") }
                }
                return ProbeJob { attempt in
                    // A later attempt runs with its retry job's queue as the current one.
                    exercise(
                        "second attempt's work", attempt, current: .queue(queue), started: true, states: [.executing],
                        in: world)
                }
            })
        own.withLock { $0 = retry }
        // A factory that cancels its own retry job.
        let cancelling = Locked<RetryJob?>(nil)
        let selfCancelling = RetryJob(maxAttempts: 3) { _ in
            let retry = cancelling.withLock { $0 }!
            retry.cancel()
            exercise(
                "attempt factory cancelling its retry job", retry, on: queue, current: .unchecked, started: true,
                states: [.executing], in: world)
            return BlockJob {}
        }
        cancelling.withLock { $0 = selfCancelling }
        queue.addJobs([retry, selfCancelling], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(succeeded(retry.outcome) && retry.attemptCount == 2, "\(String(describing: retry.outcome))")
        if case .cancelled(let reason)? = selfCancelling.outcome {
            #expect(reason.code == .requested)
        } else {
            Issue.record("the self-cancelling retry job: \(String(describing: selfCancelling.outcome))")
        }
        own.withLock { $0 = nil }
        cancelling.withLock { $0 = nil }
        await world.finish(expecting: [
            "shouldRetry", "attempt factory (1)", "attempt factory (2)", "second attempt's work",
            "attempt factory cancelling its retry job",
        ])
    }

    static func cancelOverrides() async {
        let world = await ReentrancyWorld.make("cancel overrides")
        let queue = JobQueue(name: "cancel overrides")
        // Running jobs, cancelled by cancel(), cancel(reason:), cancelAllJobs() and a timeout.
        let direct = CancelExercisingJob("cancel()", on: queue, in: world)
        let reasoned = CancelExercisingJob("cancel(reason:)", on: queue, in: world)
        let timed = CancelExercisingJob("timeout", on: queue, in: world)
        timed.timeout = .milliseconds(1)
        queue.addJobs([direct, reasoned, timed], waitUntilFinished: false)
        for job in [direct, reasoned, timed] { await job.started.wait() }
        await runOnDispatchThread { direct.cancel() }
        await runOnDispatchThread { reasoned.cancel(reason: CancellationReason(code: .requested, detail: "test")) }
        await timed.waitUntilFinished()
        let all = JobQueue(name: "cancelled all")
        let running = CancelExercisingJob("cancelAllJobs(), running", on: all, in: world)
        let waiting = CancelExercisingJob("cancelAllJobs(), waiting", on: all, in: world)
        let gate = BlockJob {}
        try? waiting.addDependency(gate)
        all.addJobs([running, waiting], waitUntilFinished: false)
        await running.started.wait()
        await runOnDispatchThread { all.cancelAllJobs() }
        await all.waitUntilAllJobsAreFinished()
        // The engine's own cancellations: a `.requireSuccess` cascade, a group's children, a failed
        // condition (whose override runs in the condition's task: it must not block).
        let failing = ProbeJob { _ in throw ProbeFailure(job: "failing") }
        let cascaded = CancelExercisingJob("requireSuccess cascade", on: queue, in: world)
        try? cascaded.addDependency(failing, policy: .requireSuccess)
        let child = CancelExercisingJob("group's child", on: queue, in: world)
        let group = GroupJob(name: "cancelled group", jobs: [child])
        let conditioned = CancelExercisingJob("failed condition", on: queue, mayBlock: false, in: world)
        conditioned.addCondition(BlockCondition(name: "no") { _ in false })
        queue.addJobs([failing, cascaded, conditioned], waitUntilFinished: false)
        await runOnDispatchThread { group.cancel() }
        await queue.waitUntilAllJobsAreFinished()
        for (job, code) in [
            (direct, CancellationReason.Code.requested), (reasoned, .requested), (timed, .timedOut),
            (running, .queueCancelled), (waiting, .queueCancelled), (cascaded, .dependencyFailed),
            (child, .parentCancelled), (conditioned, .conditionFailed),
        ] {
            #expect(job.cancellationReason?.code == code, "\(job.displayName): \(String(describing: job.outcome))")
        }
        await world.finish(expecting: [
            "cancel()", "cancel(reason:)", "timeout", "cancelAllJobs(), running", "cancelAllJobs(), waiting",
            "requireSuccess cascade", "group's child", "failed condition",
        ])
    }

    static func groupChildren() async {
        let world = await ReentrancyWorld.make("group children")
        let queue = JobQueue(name: "groups")
        let ownGroup = Locked<GroupJob?>(nil)
        let producedFinished = Flag()
        let child = ProbeJob { job in
            let group = ownGroup.withLock { $0 }!
            // A child runs on its group's queue of children, which is the current queue there.
            let children = JobQueue.current
            world.check(children?.name == "G.children", "child", "JobQueue.current is \(String(describing: children))")
            guard let children else { return }
            exercise(
                "group child's work", job, on: children, current: .queue(children), started: true,
                states: [.executing], in: world)
            exercise(
                "group, from its child's work", group, on: queue, current: .queue(children), started: true,
                states: [.executing], in: world)
            let produced = ProbeJob { produced in
                exercise(
                    "produced job's work", produced, on: children, current: .queue(children), started: true,
                    states: [.executing], in: world)
            }
            produced.completionBlock = { producedFinished.set() }
            job.produce(produced)
            group.addChild(BlockJob {})
        }
        let group = GroupJob(name: "G", maxConcurrentJobCount: 2, jobs: [child])
        ownGroup.withLock { $0 = group }
        group.completionBlock = {
            // Whoever waits for a group finds every child's callbacks run (Concepts).
            world.check(producedFinished.value, "group's completion block", "the produced job's callbacks had not run")
            exercise(
                "group's completion block", group, on: queue, current: .none, started: true, states: [.finished],
                in: world)
        }
        queue.addJob(group)
        await queue.waitUntilAllJobsAreFinished()
        #expect(succeeded(group.outcome), "\(String(describing: group.outcome))")
        ownGroup.withLock { $0 = nil }
        await world.finish(expecting: [
            "group child's work", "group, from its child's work", "produced job's work", "group's completion block",
        ])
    }
}

/// A condition that exercises the API from `dependency(for:)` and `evaluate(for:)`, and whose name
/// reads the engine.
private struct ExercisingCondition: JobCondition {
    enum Verdict: Sendable {
        case yes, no, throwsJobError
    }

    let label: String
    let subject: Job
    let generates: Job?
    let verdict: Verdict
    let world: ReentrancyWorld

    init(_ label: String, subject: Job, generates: Job? = nil, verdict: Verdict = .yes, in world: ReentrancyWorld) {
        self.label = label
        self.subject = subject
        self.generates = generates
        self.verdict = verdict
        self.world = world
    }

    var name: String { "\(label) on '\(subject.displayName)' (\(subject.state))" }

    func dependency(for job: Job) -> Job? {
        guard let generates else { return nil }
        // Called by `addCondition`, on the caller's thread (here, the scenario's).
        exercise("\(label): dependency(for:)", job, current: .unchecked, started: false, mayBlock: false, in: world)
        return generates
    }

    func evaluate(for job: Job) async throws -> Bool {
        // A condition's evaluation runs in a task of its own, where no job's work runs.
        await exerciseAsync(
            "\(label): evaluate(for:)", job, current: .none, started: false, states: [.pending], in: world)
        switch verdict {
        case .yes:
            return true
        case .no:
            return false
        case .throwsJobError:
            let loop = BlockJob {}
            loop.name = "self"
            try loop.addDependency(loop)
            return true
        }
    }
}

// MARK: - Tests

/// A scenario, by name, for a child process to run.
private enum Scenario: String, Codable, Sendable {
    case jobBodies, asynchronousBodies, observers, completionBlocks, conditions, conditionOfAJobAddedFromATaskJob
    case progressObservers, callbacksCausedByATaskJobsBody, stallWatchdog, retryJobs, cancelOverrides
    case groupChildren

    func run() async {
        switch self {
        case .jobBodies: await ReentrancyScenarios.jobBodies()
        case .asynchronousBodies: await ReentrancyScenarios.asynchronousBodies()
        case .observers: await ReentrancyScenarios.observers()
        case .completionBlocks: await ReentrancyScenarios.completionBlocks()
        case .conditions: await ReentrancyScenarios.conditions()
        case .conditionOfAJobAddedFromATaskJob: await ReentrancyScenarios.conditionOfAJobAddedFromATaskJob()
        case .progressObservers: await ReentrancyScenarios.progressObservers()
        case .callbacksCausedByATaskJobsBody: await ReentrancyScenarios.callbacksCausedByATaskJobsBody()
        case .stallWatchdog: await ReentrancyScenarios.stallWatchdog()
        case .retryJobs: await ReentrancyScenarios.retryJobs()
        case .cancelOverrides: await ReentrancyScenarios.cancelOverrides()
        case .groupChildren: await ReentrancyScenarios.groupChildren()
        }
    }
}

/// Runs `scenario` in a child process, which must end normally; the issues it records are reported
/// here. If it traps, it runs once more, observed, to report the trap's message (a second
/// acquisition of the engine lock by one thread traps in debug builds).
private func runInChildProcess(_ scenario: Scenario, sourceLocation: SourceLocation = #_sourceLocation) async {
    let result = await #expect(processExitsWith: .success, sourceLocation: sourceLocation) { [scenario] in
        await scenario.run()
    }
    guard result == nil else { return }
    let failure = await #expect(
        processExitsWith: .failure, observing: [\.standardOutputContent, \.standardErrorContent],
        sourceLocation: sourceLocation
    ) { [scenario] in
        await scenario.run()
    }
    let trail = String(decoding: failure?.standardOutputContent ?? [], as: UTF8.self).split(separator: "\n")
    let last = trail.last { $0.hasPrefix("exercise: ") } ?? "no exercise"
    Issue.record(
        "'\(scenario)' did not end normally (last: \(last)):\n\(standardErrorText(failure).prefix(400))",
        sourceLocation: sourceLocation)
}

@Suite("Public API called from inside every callback")
struct ReentrancyTests {
    @Test("job bodies: BlockJob blocks, a Job subclass, work on an execution queue, a barrier", .hangLimit)
    func jobBodies() async {
        await runInChildProcess(.jobBodies)
    }

    @Test("asynchronous bodies: AsyncBlockJob, TaskJob, ValueJob", .hangLimit)
    func asynchronousBodies() async {
        await runInChildProcess(.asynchronousBodies)
    }

    @Test("observers of every event: ready, started, cancelled, finished", .hangLimit)
    func observers() async {
        await runInChildProcess(.observers)
    }

    @Test(
        "completion blocks, of jobs that succeeded, failed with a JobError, or were cancelled, and a group's",
        .hangLimit)
    func completionBlocks() async {
        await runInChildProcess(.completionBlocks)
    }

    @Test(
        "conditions: name reading the engine, dependency(for:), evaluate(for:), a failure, a cycle",
        .hangLimit)
    func conditions() async {
        await runInChildProcess(.conditions)
    }

    @Test(
        "a condition's evaluate(for:) has no current queue, even for a job added from a TaskJob's body",
        .hangLimit)
    func conditionOfAJobAddedFromATaskJob() async {
        await runInChildProcess(.conditionOfAJobAddedFromATaskJob)
    }

    @Test("progress observers, of a job's progress and of its queue's", .hangLimit)
    func progressObservers() async {
        await runInChildProcess(.progressObservers)
    }

    @Test(
        "observers, completion and progress observers a TaskJob's body causes have no current queue",
        .hangLimit)
    func callbacksCausedByATaskJobsBody() async {
        await runInChildProcess(.callbacksCausedByATaskJobsBody)
    }

    @Test("a StallWatchdog's onStall, which stops its watchdog", .hangLimit)
    func stallWatchdog() async {
        await runInChildProcess(.stallWatchdog)
    }

    @Test(
        "a RetryJob's attempt factory, shouldRetry and a later attempt; a factory cancelling its retry job",
        .hangLimit)
    func retryJobs() async {
        await runInChildProcess(.retryJobs)
    }

    @Test(
        "cancel() overrides, whatever the cause: cancel, reason, timeout, cancelAllJobs, cascade, group, condition",
        .hangLimit)
    func cancelOverrides() async {
        await runInChildProcess(.cancelOverrides)
    }

    @Test(
        "a GroupJob child's work that produces a job and adds a child; the group's completion block",
        .hangLimit)
    func groupChildren() async {
        await runInChildProcess(.groupChildren)
    }
}
