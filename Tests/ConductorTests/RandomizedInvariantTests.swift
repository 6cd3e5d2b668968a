import Conductor
import ConductorTestSupport
import Dispatch
import Synchronization
import Testing

// Randomized invariant tests: a large random dependency graph of mixed jobs runs on two queues
// while other threads cancel jobs (with random reasons, sometimes twice), cancel a whole queue
// (rarely), wait for jobs, change priorities and (in one test) change the queues' limits. Jobs
// succeed, fail (a synchronous job throws from `execute()`, an asynchronous one calls
// `finish(throwing:)` or throws from `execute()`, a `TaskJob`'s body throws) or throw
// `CancellationError`, whether or not they were cancelled; about 30 % of the edges are
// `.requireSuccess`, the rest `.afterFinish`. Every random choice comes from a seed: set `CONDUCTOR_SEED` to replay a run's choices
// (the seed is printed when a round starts and is part of every failure message). Thread
// interleavings are not reproducible, so a replay makes the same graph, job kinds, priorities,
// limits and mutations, but may not hit the same race; repeat it, or raise the scale.
// `CONDUCTOR_STRESS_SCALE` multiplies the number of jobs (default 10,000 per round; each test
// runs `rounds` independent rounds).
//
// What is checked, per job: its work ran at most once, and exactly once unless it was cancelled;
// when its work started, every dependency it had been given had finished; it delivered exactly one
// `.finished`, its completion block ran exactly once and after `.finished`, its events came one at
// a time and in a valid lifecycle order; it ended finished with no dependencies. Its outcome
// (`WorkProbe.checkOutcomeAfterDrain`): it was set when `.finished` was delivered, when the
// completion block ran and when a waiter woke, and never changed; it follows from what the work did
// and the events (work that failed: `.failed` with its error, cancelled or not; work that did not
// run or threw `CancellationError`: `.cancelled`; otherwise `.cancelled` exactly when `.cancelled`
// was delivered); its reason was there at `.cancelled`, stayed the first one seen (a second
// `cancel(reason:)` changes nothing), and was given to it, or comes from `cancelAllJobs()`, or names
// a `.requireSuccess` dependency that failed (`dependencyFailed`) or was cancelled
// (`dependencyCancelled`) while the job had not started. No work started after a `.requireSuccess`
// dependency failed or was cancelled, and such a dependent ended cancelled; `.afterFinish` edges
// never cancel. Per queue: the
// number of jobs whose work is in flight never exceeded the limit (the exact limit when it is
// fixed, the largest limit ever set when it changes at runtime), and the queue drained. Per
// dependency: a refused edge really closed a cycle (the reported cycle is made of existing edges,
// confirmed by a brute-force search for a sample), an accepted edge closed none among unfinished
// jobs (brute-force for a sample), and deliberately cyclic edges are always refused.
//
// Time is never used for synchronization: the mutator threads are paced by job completions
// (semaphores signalled from completion blocks) and the test awaits the queues' drain.
@Suite("Randomized invariants", .serialized)
struct RandomizedInvariantTests {
    /// Jobs per round before `CONDUCTOR_STRESS_SCALE`.
    static let baseJobCount = 10_000
    /// Independent rounds per test, each with its own graph, limits and stream of the seed. Half of
    /// them keep every job alive until the end; the other half hold only weak references once a
    /// job is on its queue, so that the engine's own retains are what keeps unfinished jobs alive.
    static let rounds = 4

    static var jobCount: Int {
        max(1, Int((Double(baseJobCount) * SeededRandom.stressScale).rounded()))
    }

    @Test("Random DAG on two queues; limits changed and jobs cancelled from other threads")
    func randomGraphWithChangingLimits() async {
        for round in 0..<Self.rounds {
            let run = StressRun(
                seed: SeededRandom.runSeed, stream: 0xC0_0000 + UInt64(round),
                label: "changing limits, round \(round + 1)/\(Self.rounds)", jobCount: Self.jobCount,
                changingLimits: true, releaseJobs: round % 2 == 1)
            if await !run.execute() { break }
        }
    }

    @Test("Random DAG on two queues with fixed limits; in-flight work never exceeds the exact limit")
    func randomGraphWithFixedLimits() async {
        for round in 0..<Self.rounds {
            let run = StressRun(
                seed: SeededRandom.runSeed, stream: 0xF1_0000 + UInt64(round),
                label: "fixed limits, round \(round + 1)/\(Self.rounds)", jobCount: Self.jobCount,
                changingLimits: false, releaseJobs: round % 2 == 0)
            if await !run.execute() { break }
        }
    }
}

// MARK: - Probes

/// What the test records about one job: its work (`WorkProbe`, shared with StressTests) and the
/// events its observer saw. Job bodies, observers and completion blocks capture the probe, never the
/// job list, so that the jobs form no reference cycle through the test.
private final class JobProbe: Sendable {
    enum Kind: String, Sendable {
        case block, twoBlocks, sync, asyncLater, asyncInline, asyncThrowing, task
    }

    let index: Int
    let kind: Kind
    let work: WorkProbe

    let finishedEvents = Atomic<Int>(0)
    /// Events in order, three bits each (see `code(for:)`), newest in the low bits.
    let events = Atomic<UInt64>(0)
    let eventCount = Atomic<Int>(0)
    /// Observer calls in progress; above 1 means two events were delivered concurrently.
    let delivering = Atomic<Int>(0)

    init(
        index: Int, kind: Kind, queue: QueueProbe, finishTwice: Bool, ending: PlannedEnding, timeout: Duration?,
        log: FailureLog
    ) {
        self.index = index
        self.kind = kind
        let planned = ending == .succeed ? "" : ", \(ending.rawValue)"
        work = WorkProbe(
            name: "job\(index)", label: "job\(index) (\(kind.rawValue)\(planned), queue \(queue.index))", queue: queue,
            log: log, finishTwice: finishTwice, plannedEnding: ending, timeout: timeout)
    }

    // MARK: Events

    static func code(for event: JobEvent) -> UInt64 {
        switch event {
        case .ready: 1
        case .started: 2
        case .cancelled: 3
        case .finished: 4
        }
    }

    static func event(for code: UInt64) -> JobEvent? {
        switch code {
        case 1: .ready
        case 2: .started
        case 3: .cancelled
        case 4: .finished
        default: nil
        }
    }

    /// Records `event` of `job` (nil if it was freed, which must not happen while its events are
    /// delivered); at `.cancelled` the job must have its reason, at `.finished` its outcome.
    func observed(_ event: JobEvent, of job: Job?) {
        if delivering.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
            work.fail("event .\(event) delivered concurrently with another event of the same job")
        }
        if let job {
            if event == .cancelled {
                work.seeReason(job.cancellationReason, "at .cancelled")
            } else if event == .finished {
                work.seeOutcome(job.outcome, "at .finished")
            }
        } else {
            work.fail("freed while its event .\(event) was being delivered")
        }
        let code = Self.code(for: event)
        var old = events.load(ordering: .relaxed)
        while true {
            let (exchanged, original) = events.compareExchange(
                expected: old, desired: (old << 3) | code, ordering: .sequentiallyConsistent)
            if exchanged { break }
            old = original
        }
        eventCount.add(1, ordering: .relaxed)
        if event == .finished {
            finishedEvents.add(1, ordering: .sequentiallyConsistent)
        }
        delivering.subtract(1, ordering: .sequentiallyConsistent)
    }

    /// The recorded events, oldest first. At most 21 are kept: with more, the oldest are lost and
    /// `eventCount` differs from the count here.
    var eventSequence: [JobEvent] {
        var packed = events.load(ordering: .sequentiallyConsistent)
        var codes: [UInt64] = []
        while packed != 0 {
            codes.append(packed & 7)
            packed >>= 3
        }
        return codes.reversed().compactMap(Self.event(for:))
    }
}

// MARK: - The run

/// Counters kept by the builder thread and returned to the test.
private struct BuildStats: Sendable {
    var edgesAccepted = 0
    var forwardEdges = 0
    /// Edges whose dependency was created after the dependent (the Pearce–Kelly slow path).
    var backEdgesAccepted = 0
    var backEdgesTried = 0
    var lateEdgesAccepted = 0
    var cyclesRefused = 0
    var cyclesBruteForced = 0
    var deliberateCycles = 0
    var alreadyStarted = 0
    var acceptedEdgesBruteForced = 0
    var cancelledBeforeEnqueue = 0
    var requireSuccessEdges = 0
    /// Deliberate cycles that were none: a `.requireSuccess` edge had already cancelled (finished) a
    /// job of the path, so the edge was refused with `.alreadyStarted` or accepted.
    var deliberateCyclesOnCancelledJobs = 0
    /// Edges not tried because the test had already let go of a job and it had been freed.
    var skippedFreed = 0
}

/// One randomized run: builds the graph on a builder thread while three mutator threads act on the
/// queues, awaits the drain, then checks every invariant. The random choices come from `seed`
/// and `stream`; the interleavings are of course not reproducible.
private final class StressRun: Sendable {
    /// The run's seed (`CONDUCTOR_SEED`) and this round's stream of it.
    let seed: UInt64
    let stream: UInt64
    let jobCount: Int
    let changingLimits: Bool
    /// Whether the builder lets go of its strong references once jobs are on their queues.
    let releaseJobs: Bool
    let log: FailureLog

    let queues: [JobQueue]
    let queueProbes: [QueueProbe]
    /// Weak references to every job, for the mutators and the final checks (a freed job had
    /// finished: the engine keeps every unfinished job alive).
    let weakJobs: [WeakReference<Job>]
    /// The strong references, created in `init` and handed to the builder.
    private let handoff: Locked<[Job]>
    let probes: [JobProbe]
    /// Maps a job's identity to its index, for checking the cycles the engine reports.
    let indexOfJob: [ObjectIdentifier: Int]

    /// Jobs `0..<published` have been added to their queues; mutators pick among them.
    let published = Atomic<Int>(0)
    let pacer: CompletionPacer
    static let mutatorCount = 3
    static let opsPerBurst = 3
    /// The share of dependency edges added with `.requireSuccess`. Kept low enough that a failure
    /// cancels a few dependents, not most of the graph.
    static let requireSuccessShare = 0.3
    let limitChanges = Atomic<Int>(0)
    let cancelCalls = Atomic<Int>(0)
    let priorityChanges = Atomic<Int>(0)
    let queueCancels = Atomic<Int>(0)
    let waits = Atomic<Int>(0)

    init(seed: UInt64, stream: UInt64, label: String, jobCount: Int, changingLimits: Bool, releaseJobs: Bool) {
        self.seed = seed
        self.stream = stream
        self.jobCount = jobCount
        self.changingLimits = changingLimits
        self.releaseJobs = releaseJobs
        let log = FailureLog(
            context:
                "\(label) (\(releaseJobs ? "jobs not retained by the test" : "jobs retained")), \(jobCount) jobs, \(SeededRandom.describe(seed))"
        )
        self.log = log

        var random = SeededRandom(seed: seed, stream: stream, part: 1)
        var queues: [JobQueue] = []
        var queueProbes: [QueueProbe] = []
        for index in 0..<2 {
            let limit = random.int(in: 1...4)
            let queue = JobQueue(name: "random-\(index)", maxConcurrentJobCount: limit)
            queues.append(queue)
            // With changing limits every value set is in 1...4, so 4 bounds the jobs in flight.
            queueProbes.append(QueueProbe(index: index, queue: queue, bound: changingLimits ? 4 : limit))
        }
        self.queues = queues
        self.queueProbes = queueProbes

        let pacer = CompletionPacer(expectedCompletions: jobCount, burstsWanted: 400, mutators: StressRun.mutatorCount)
        self.pacer = pacer

        // Create every job up front; ids (and so the initial topological order) follow the index.
        var jobs: [Job] = []
        var weakJobs: [WeakReference<Job>] = []
        var probes: [JobProbe] = []
        jobs.reserveCapacity(jobCount)
        weakJobs.reserveCapacity(jobCount)
        probes.reserveCapacity(jobCount)
        for index in 0..<jobCount {
            let roll = random.int(100)
            let kind: JobProbe.Kind =
                switch roll {
                case 0..<5: .asyncInline
                case 5..<25: .asyncLater
                case 25..<30: .asyncThrowing
                case 30..<33: .task
                case 33..<36: .twoBlocks
                case 36..<48: .sync
                default: .block
                }
            let queue = queueProbes[random.int(2)]
            let finishTwice = random.chance(0.1)
            // A `BlockJob`'s blocks cannot throw: it always succeeds.
            let drawnEnding = random.plannedEnding(failure: 0.15, throwCancellation: 0.03, checkCancellation: 0.1)
            let ending = kind == .block || kind == .twoBlocks ? .succeed : drawnEnding
            let timeout = random.timeout(short: 0.05, long: 0.05)
            let probe = JobProbe(
                index: index, kind: kind, queue: queue, finishTwice: finishTwice, ending: ending, timeout: timeout,
                log: log)
            let work = probe.work
            let job: Job
            switch kind {
            case .block:
                job = BlockJob {
                    work.workBegins()
                    work.workEnds()
                }
            case .twoBlocks:
                let blockJob = BlockJob {
                    work.workBegins()
                    work.workEnds()
                }
                blockJob.addExecutionBlock {
                    work.checkDependenciesFinished("second block started")
                    work.secondBlockRuns.add(1, ordering: .relaxed)
                }
                job = blockJob
            case .asyncInline:
                job = AsyncBlockJob { job in
                    work.workBegins()
                    work.finish(job)
                }
            case .asyncLater:
                job = AsyncBlockJob { job in
                    work.workBegins()
                    DispatchQueue.global().async { work.finish(job) }
                }
            case .sync:
                job = ProbeJob { job in
                    work.workBegins()
                    try work.endSynchronousWork(job)
                }
            case .asyncThrowing:
                job = ProbeAsyncJob { job in
                    work.workBegins()
                    try work.startAsynchronousWork(job, finishingOn: .global())
                }
            case .task:
                job = TaskJob {
                    work.workBegins()
                    await Task.yield()
                    work.checkDependenciesFinished("TaskJob body resumed")
                    try work.endTaskWork()
                }
            }
            job.name = "job\(index)"
            job.queuePriority = JobPriority.allCases[random.int(JobPriority.allCases.count)]
            job.timeout = timeout
            // Weak: a job's own callbacks must not keep it alive (in release mode every job is freed).
            let weakJob = WeakReference(job)
            job.observe { event in probe.observed(event, of: weakJob.object) }
            job.completionBlock = {
                work.completionBlockRuns()
                work.seeOutcome(weakJob.object?.outcome, "in the completion block")
                let finished = probe.finishedEvents.load(ordering: .sequentiallyConsistent)
                if finished != 1 {
                    work.fail("completion block ran after \(finished) .finished events (expected 1)")
                }
                pacer.jobSettled()
            }
            jobs.append(job)
            weakJobs.append(weakJob)
            probes.append(probe)
        }
        self.weakJobs = weakJobs
        handoff = Locked(jobs)
        self.probes = probes
        var indexOfJob: [ObjectIdentifier: Int] = [:]
        indexOfJob.reserveCapacity(jobCount)
        for (index, job) in jobs.enumerated() {
            indexOfJob[ObjectIdentifier(job)] = index
        }
        self.indexOfJob = indexOfJob
    }

    /// The generator for one use (`part`) within the round.
    private func random(_ part: UInt64) -> SeededRandom {
        SeededRandom(seed: seed, stream: stream, part: part)
    }

    // MARK: Execute

    /// Runs the round and reports its violations as issues; returns whether there were none.
    func execute() async -> Bool {
        let start = DispatchTime.now()
        // Flushed at once, so that the seed is on record even if the engine traps.
        printFlushed("RandomizedInvariantTests: \(log.context)")

        // Mutators: each on its own serial queue (its own thread), paced by completions.
        let mutators = DispatchGroup()
        for mutator in 0..<StressRun.mutatorCount {
            let queue = DispatchQueue(label: "conductor.random.mutator\(mutator)")
            let random = self.random(100 + UInt64(mutator))
            queue.async(group: mutators) { self.mutate(mutator, random) }
        }

        // Builder: wires the graph batch by batch and adds each batch to the queues. It returns
        // the jobs it still holds (all of them, unless it let go of them).
        let (stats, retained): (BuildStats, [Job?]) = await withCheckedContinuation { continuation in
            DispatchQueue(label: "conductor.random.builder").async {
                continuation.resume(returning: self.build())
            }
        }

        for queue in queues {
            await queue.waitUntilAllJobsAreFinished()
        }
        // Every job is finished; make sure no mutator waits for completions that already came
        // (extra signals are harmless), then wait for them.
        pacer.releaseAll()
        await withCheckedContinuation { continuation in
            mutators.notify(queue: .global()) { continuation.resume() }
        }

        let elapsed = secondsElapsed(since: start)
        let (survivors, outcomes) = checkFinalState(retained)
        let cancelled = probes.reduce(0) { $0 + ($1.eventSequence.contains(.cancelled) ? 1 : 0) }
        let summary =
            "\(log.context): \(elapsed)s; cancelled \(cancelled); "
            + (releaseJobs ? "jobs alive after the drain \(survivors); " : "")
            + "in-flight max \(queueProbes.map { "\($0.inFlight.maximum)/\($0.bound)" }); "
            + "dependencies checked at start \(queueProbes.reduce(0) { $0 + $1.dependenciesChecked.load(ordering: .relaxed) }); "
            + "\(stats); limit changes \(limitChanges.load(ordering: .relaxed)), "
            + "cancel calls \(cancelCalls.load(ordering: .relaxed)), priority changes \(priorityChanges.load(ordering: .relaxed)), "
            + "queue cancels \(queueCancels.load(ordering: .relaxed)), waits \(waits.load(ordering: .relaxed)); outcomes: \(outcomes)"
        printFlushed("RandomizedInvariantTests: \(summary)")

        // Sanity: the run did what it is meant to exercise.
        if jobCount >= 1_000 && stats.deliberateCycles == 0 {
            log.record("no cyclic edge was tried; the graph did not exercise cycle detection")
        }
        if jobCount >= 1_000 && stats.backEdgesAccepted == 0 {
            log.record("no edge to a later-created job was accepted; the Pearce–Kelly reordering was not exercised")
        }
        if jobCount >= 1_000 && (outcomes.failed == 0 || outcomes.cancelledByDependencies == 0) {
            log.record("no job failed, or none was cancelled by a .requireSuccess dependency: \(outcomes)")
        }

        return log.reportIssues(summary: summary)
    }

    // MARK: Mutators

    private func mutate(_ mutator: Int, _ seeded: SeededRandom) {
        var random = seeded
        var operation = 0
        for _ in 0..<pacer.bursts {
            pacer.waitForBurst(mutator)
            for _ in 0..<StressRun.opsPerBurst {
                operation += 1
                // Every draw is made whatever happens next, so the sequence depends on the seed only.
                let roll = random.int(100)
                let queueIndex = random.int(2)
                let limit = random.int(in: 1...4)
                let recent = random.chance(0.8)
                let offset = random.int(400)
                let pick = random.next()
                let priority = JobPriority.allCases[random.int(JobPriority.allCases.count)]
                let reasons = [
                    random.cancellationReason(detail: "m\(mutator).\(operation)"),
                    random.cancellationReason(detail: "m\(mutator).\(operation)b"),
                ]
                let cancelTwice = random.chance(0.2)
                let cancelAll = random.int(3_000) == 0
                if cancelAll {
                    // Counted first: from now on its jobs may be cancelled with `queueCancelled`.
                    queueProbes[queueIndex].cancelAllCalls.add(1, ordering: .sequentiallyConsistent)
                    queues[queueIndex].cancelAllJobs()
                    queueCancels.add(1, ordering: .relaxed)
                    continue
                }
                if changingLimits && roll < 35 {
                    queues[queueIndex].maxConcurrentJobCount = limit
                    limitChanges.add(1, ordering: .relaxed)
                    continue
                }
                let count = published.load(ordering: .acquiring)
                guard count > 0 else { continue }
                // Mostly recent jobs, which are more likely to be still waiting or running.
                let index = recent ? max(0, count - 1 - offset) : Int(pick % UInt64(count))
                guard let job = weakJobs[index].object else { continue }  // Freed: it had finished.
                if roll < 68 {
                    // Sometimes twice, with two reasons: the first that takes effect must stay.
                    probes[index].work.cancel(job, with: cancelTwice ? reasons : [reasons[0]])
                    cancelCalls.add(1, ordering: .relaxed)
                } else if roll < 71 {
                    // A waiter wakes only once the outcome is set. Blocks this mutator's own thread.
                    job.waitUntilFinished()
                    probes[index].work.seeOutcome(job.outcome, "after waitUntilFinished() returned")
                    waits.add(1, ordering: .relaxed)
                } else {
                    job.queuePriority = priority
                    priorityChanges.add(1, ordering: .relaxed)
                }
            }
        }
    }

    // MARK: Builder

    /// The test's model of the graph: every edge the engine accepted (`waitsFor[a]` holds `b` when
    /// job `a` waits for job `b`). Finished jobs keep their edges here; the engine drops them.
    private struct Model {
        var waitsFor: [[Int]]
        var mark: [UInt32]
        var stamp: UInt32 = 0

        init(count: Int) {
            waitsFor = Array(repeating: [], count: count)
            mark = Array(repeating: 0, count: count)
        }

        /// Whether `target` can be reached from `start` along waits-for edges; with
        /// `unfinishedOnly`, through unfinished jobs only (`start` and `target` included).
        mutating func reaches(from start: Int, to target: Int, unfinishedOnly: Bool, jobs: [WeakReference<Job>]) -> Bool
        {
            stamp &+= 1
            var stack = [start]
            mark[start] = stamp
            while let node = stack.popLast() {
                if unfinishedOnly && (jobs[node].object?.isFinished ?? true) { continue }
                if node == target { return true }
                for next in waitsFor[node] where mark[next] != stamp {
                    mark[next] = stamp
                    stack.append(next)
                }
            }
            return false
        }
    }

    private enum EdgeKind { case forward, back, late }

    private func build() -> (BuildStats, [Job?]) {
        var random = self.random(2)
        var model = Model(count: jobCount)
        var stats = BuildStats()
        var refusalChecks = 0
        var acceptanceChecks = 0
        var previousBatch = 0..<0
        // The builder's strong references. In release mode it lets go of a batch once the next
        // one is on the queues; from then on only the engine keeps unfinished jobs alive.
        var strong: [Job?] = handoff.withLock { jobs in
            defer { jobs = [] }
            return jobs
        }

        func job(_ index: Int) -> Job? {
            strong[index] ?? weakJobs[index].object
        }

        /// Tries `dependent waits for dependency`, checks the outcome, records accepted edges.
        func tryEdge(_ dependent: Int, _ dependency: Int, _ kind: EdgeKind, _ policy: DependencyPolicy) {
            // Drawn first, so that the random sequence does not depend on the outcome.
            let sampled = random.chance(0.02)
            guard let dependentJob = job(dependent), let dependencyJob = job(dependency) else {
                stats.skippedFreed += 1
                return
            }
            let isPublished = dependent < published.load(ordering: .acquiring)
            do throws(JobError) {
                try dependentJob.addDependency(dependencyJob, policy: policy)
            } catch {
                if error.code == .dependencyCycle {
                    stats.cyclesRefused += 1
                    if checkRefusedCycle(error, dependent, dependency, &model, bruteForce: refusalChecks < 400) {
                        stats.cyclesBruteForced += 1
                    }
                    refusalChecks += 1
                } else if error.code == .alreadyStarted {
                    stats.alreadyStarted += 1
                    let state = dependentJob.state
                    if !isPublished && !dependentJob.isCancelled {
                        log.record(
                            "job\(dependent) refused job\(dependency) with .alreadyStarted, but it was never added to a queue"
                        )
                    } else if state != .executing && state != .finished {
                        log.record("job\(dependent) refused job\(dependency) with .alreadyStarted while \(state)")
                    }
                    if error.jobs.count != 2 || error.jobs[0] !== dependentJob || error.jobs[1] !== dependencyJob {
                        log.record(
                            "job\(dependent) → job\(dependency): .alreadyStarted names \(error.jobs.map(\.displayName))"
                        )
                    }
                } else {
                    log.record("job\(dependent) → job\(dependency): unexpected error \(error)")
                }
                return
            }
            // Accepted. A sample is brute-forced: no path may lead back through unfinished jobs.
            let check = kind != .forward ? acceptanceChecks < 1_500 : sampled && acceptanceChecks < 2_000
            if check {
                acceptanceChecks += 1
                stats.acceptedEdgesBruteForced += 1
                if model.reaches(from: dependency, to: dependent, unfinishedOnly: true, jobs: weakJobs) {
                    log.record(
                        "job\(dependent) → job\(dependency) was accepted, but job\(dependency) already waits (through unfinished jobs) for job\(dependent): a cycle"
                    )
                    dependentJob.removeDependency(dependencyJob)  // Avoid a deadlock; the failure is recorded.
                    return
                }
            }
            stats.edgesAccepted += 1
            switch kind {
            case .forward: stats.forwardEdges += 1
            case .back: stats.backEdgesAccepted += 1
            case .late: stats.lateEdgesAccepted += 1
            }
            if policy == .requireSuccess {
                stats.requireSuccessEdges += 1
            }
            // A duplicate keeps the first edge's policy.
            if !model.waitsFor[dependent].contains(dependency) {
                model.waitsFor[dependent].append(dependency)
                probes[dependent].work.dependencyAccepted(dependencyJob, probe: probes[dependency].work, policy: policy)
            }
        }

        var batchStart = 0
        while batchStart < jobCount {
            let batch = batchStart..<min(jobCount, batchStart + random.int(in: 32...256))
            for index in batch {
                let job = strong[index]!
                // Every draw for this job is made up front, whatever the engine answers, so that the
                // sequence (and so the graph) depends on the seed, not on timing.
                let forwardCount = index > 0 ? random.int(4) : 0
                let forwardPicks = (0..<3).map { _ in
                    (
                        recent: random.chance(0.75), offset: random.int(300), any: random.next(),
                        policy: random.policy(requireSuccess: Self.requireSuccessShare)
                    )
                }
                let tryBackEdge = random.chance(0.08)
                let backPick = random.next()
                let backPolicy = random.policy(requireSuccess: Self.requireSuccessShare)
                let tryLateEdge = random.chance(0.02)
                let latePick = random.next()
                let latePolicy = random.policy(requireSuccess: Self.requireSuccessShare)
                let tryCycle = random.chance(0.15)
                let cycleSteps = random.int(in: 1...4)
                let cyclePicks = (0..<4).map { _ in random.next() }
                let trySelf = random.chance(0.01)
                let tryDuplicate = random.chance(0.02)
                let duplicatePolicy = random.policy(requireSuccess: 0.5)

                // Up to three dependencies on earlier jobs, mostly recent ones, on either queue.
                for pick in forwardPicks.prefix(forwardCount) {
                    let dependency = pick.recent ? max(0, index - 1 - pick.offset) : Int(pick.any % UInt64(index))
                    tryEdge(index, dependency, .forward, pick.policy)
                }
                // An earlier job of the batch waits for this one: the new dependency was created
                // later than its dependent, so the engine must reorder (or find a cycle).
                if index > batch.lowerBound && tryBackEdge {
                    stats.backEdgesTried += 1
                    tryEdge(
                        batch.lowerBound + Int(backPick % UInt64(index - batch.lowerBound)), index, .back, backPolicy)
                }
                // A job already on a queue waits for this one (it may have started: .alreadyStarted).
                if !previousBatch.isEmpty && tryLateEdge {
                    tryEdge(
                        previousBatch.lowerBound + Int(latePick % UInt64(previousBatch.count)), index, .late, latePolicy
                    )
                }
                // A certain cycle: a job of the batch that this one waits for, directly or through up
                // to three more jobs of the batch, must refuse to wait for this one. None is on a
                // queue yet, so none has finished, unless a `.requireSuccess` edge cancelled it.
                if tryCycle {
                    var path = [index]
                    for pick in cyclePicks.prefix(cycleSteps) {
                        let candidates = model.waitsFor[path.last!].filter {
                            $0 >= batch.lowerBound && !path.contains($0)
                        }
                        if candidates.isEmpty { break }
                        path.append(candidates[Int(pick % UInt64(candidates.count))])
                    }
                    if path.count > 1 {
                        stats.deliberateCycles += 1
                        checkDeliberateCycle(along: path, strong, &model, &stats)
                    }
                }
                if trySelf {
                    checkSelfDependency(job, index)
                }
                if tryDuplicate, let existing = model.waitsFor[index].last, let existingJob = self.job(existing, strong)
                {
                    do throws(JobError) {
                        // A duplicate, with either policy: a no-op (the first edge's policy stays).
                        try job.addDependency(existingJob, policy: duplicatePolicy)
                    } catch {
                        // A `.requireSuccess` edge may have cancelled the job already (finishing it).
                        if error.code != .alreadyStarted || !job.isCancelled {
                            log.record("job\(index): adding its dependency job\(existing) again threw \(error)")
                        }
                    }
                }
            }

            // A few jobs are cancelled before they are added: adding them must do nothing.
            for index in batch where random.chance(0.005) {
                let job = strong[index]!
                probes[index].work.cancel(job, with: [random.cancellationReason(detail: "builder.\(index)")])
                stats.cancelledBeforeEnqueue += 1
                if !job.isFinished {
                    log.record("job\(index): cancelled before being added to a queue, but \(job.state)")
                }
            }

            // Add the batch: per queue, either atomically or one by one.
            for queueIndex in 0..<2 {
                let members = batch.filter { probes[$0].work.queue.index == queueIndex }.map { strong[$0]! }
                if random.chance(0.5) {
                    queues[queueIndex].addJobs(members, waitUntilFinished: false)
                } else {
                    for job in members { queues[queueIndex].addJob(job) }
                }
            }
            published.store(batch.upperBound, ordering: .releasing)
            if releaseJobs {
                // Keep the batch just added (late edges point into it); let go of the one before.
                for index in previousBatch { strong[index] = nil }
            }
            previousBatch = batch
            batchStart = batch.upperBound
        }
        if releaseJobs {
            for index in previousBatch { strong[index] = nil }
        }
        return (stats, strong)
    }

    private func job(_ index: Int, _ strong: [Job?]) -> Job? {
        strong[index] ?? weakJobs[index].object
    }

    /// A refused edge must name a real cycle: `dependent`, `dependency`, then jobs each waiting for
    /// the next, the last waiting for `dependent`, all along edges the engine had accepted.
    /// - Returns: Whether the brute-force search ran.
    @discardableResult
    private func checkRefusedCycle(
        _ error: JobError, _ dependent: Int, _ dependency: Int, _ model: inout Model, bruteForce: Bool
    ) -> Bool {
        let cycle = error.jobs.map { indexOfJob[ObjectIdentifier($0)] ?? -1 }
        let text = cycle.map { "job\($0)" }.joined(separator: " → ")
        if cycle.count < 2 || cycle[0] != dependent || cycle[1] != dependency {
            log.record("job\(dependent) → job\(dependency): refused as a cycle, but the error lists \(text)")
        } else if Set(cycle).count != cycle.count || cycle.contains(-1) {
            log.record("job\(dependent) → job\(dependency): refused cycle \(text) repeats a job or names a foreign one")
        } else {
            for position in 1..<cycle.count {
                let from = cycle[position]
                let to = cycle[(position + 1) % cycle.count]
                if !model.waitsFor[from].contains(to) {
                    log.record(
                        "job\(dependent) → job\(dependency): refused cycle \(text) uses job\(from) → job\(to), which was never accepted"
                    )
                }
            }
        }
        if bruteForce && !model.reaches(from: dependency, to: dependent, unfinishedOnly: false, jobs: weakJobs) {
            log.record(
                "job\(dependent) → job\(dependency): refused as a cycle, but brute force finds no path from job\(dependency) back to job\(dependent)"
            )
        }
        return bruteForce
    }

    /// `path` runs along accepted edges: its first job (`dependent`) waits for the second, and so on
    /// to its last (`dependency`), through jobs none of which is on a queue yet, so `dependency waits
    /// for dependent` must be refused as a cycle listing both first. Unless a job of the path has
    /// finished: a `.requireSuccess` edge to a job that failed or was cancelled finishes a job at
    /// once, even off a queue, and a finished job closes no cycle.
    private func checkDeliberateCycle(
        along path: [Int], _ strong: [Job?], _ model: inout Model, _ stats: inout BuildStats
    ) {
        let dependent = path.first!
        let dependency = path.last!
        let dependentJob = strong[dependent]!
        let dependencyJob = strong[dependency]!
        do throws(JobError) {
            try dependencyJob.addDependency(dependentJob)
        } catch {
            if error.code == .alreadyStarted && dependencyJob.isCancelled {
                // A `.requireSuccess` edge cancelled it (finishing it) before the cycle check.
                stats.deliberateCyclesOnCancelledJobs += 1
            } else if error.code != .dependencyCycle {
                log.record("job\(dependency) → job\(dependent) closes a cycle but threw \(error)")
            } else {
                checkRefusedCycle(error, dependency, dependent, &model, bruteForce: true)
            }
            return
        }
        // Finishing is final: a job of the path that is finished now was finished when the edge was
        // accepted. Then no cycle through unfinished jobs may remain (brute force).
        let finished = path.filter { job($0, strong)?.isFinished ?? true }
        if !finished.isEmpty && !model.reaches(from: dependent, to: dependency, unfinishedOnly: true, jobs: weakJobs) {
            stats.deliberateCyclesOnCancelledJobs += 1
            model.waitsFor[dependency].append(dependent)
            probes[dependency].work.dependencyAccepted(
                dependentJob, probe: probes[dependent].work, policy: .afterFinish)
            return
        }
        log.record(
            "job\(dependency) → job\(dependent) was accepted although job\(dependent) already waits for job\(dependency) (path \(path.map { "job\($0)" }), finished: \(finished))"
        )
        dependencyJob.removeDependency(dependentJob)  // Avoid a deadlock; the failure is recorded.
    }

    private func checkSelfDependency(_ job: Job, _ index: Int) {
        do throws(JobError) {
            try job.addDependency(job)
        } catch {
            if error.code != .dependencyCycle || error.jobs.count != 1 || error.jobs[0] !== job {
                log.record("job\(index): depending on itself threw \(error)")
            }
            return
        }
        log.record("job\(index): a dependency on itself was accepted")
        job.removeDependency(job)
    }

    // MARK: Final checks

    /// Checks every job and both queues after the drain.
    /// - Returns: How many jobs were still alive (in release mode, kept only by stragglers such as
    ///   an asynchronous job's finishing block that has not returned yet).
    private func checkFinalState(_ retained: [Job?]) -> (survivors: Int, outcomes: OutcomeTally) {
        for (index, queue) in queues.enumerated() {
            if queue.jobCount != 0 || !queue.jobs.isEmpty {
                log.record(
                    "queue \(index) drained but still counts \(queue.jobCount) jobs: \(queue.jobs.prefix(5).map(\.displayName))"
                )
            }
            let inFlight = queueProbes[index].inFlight.now
            if inFlight != 0 {
                log.record("queue \(index): \(inFlight) jobs still in flight after the drain")
            }
        }
        // First every job's final outcome, which the checks of its dependents read.
        for index in 0..<jobCount {
            probes[index].work.recordFinalOutcome(retained[index] ?? weakJobs[index].object)
        }
        var runsPerQueue = [0, 0]
        var survivors = 0
        var outcomes = OutcomeTally()
        for index in 0..<jobCount {
            let probe = probes[index]
            let work = probe.work
            let events = probe.eventSequence
            let cancelledEvent = events.contains(.cancelled)
            if !releaseJobs && retained[index] == nil {
                work.fail("the builder lost its reference")
            }
            // A freed job had finished; a live one is checked directly.
            let job = retained[index] ?? weakJobs[index].object
            if let job {
                survivors += 1
                if job.isCancelled != cancelledEvent {
                    work.fail("isCancelled is \(job.isCancelled) but events were \(events)")
                }
            }
            let runs = work.checkAfterDrain(job, cancelled: cancelledEvent, hasSecondBlock: probe.kind == .twoBlocks)
            runsPerQueue[work.queue.index] += runs
            let completions = work.completions.load(ordering: .sequentiallyConsistent)
            let finished = probe.finishedEvents.load(ordering: .sequentiallyConsistent)
            if completions != 1 || finished != 1 {
                work.fail("completion block ran \(completions) times, .finished delivered \(finished) times")
            }
            let delivered = probe.eventCount.load(ordering: .relaxed)
            if !isValidLifecycle(events, workRan: runs == 1) || delivered != events.count {
                work.fail("events \(events) (\(delivered) delivered) for a job whose work ran \(runs) times")
            }
            work.checkOutcomeAfterDrain(job, cancelledEvent: cancelledEvent, runs: runs)
            outcomes.add(work.finalOutcome.withLock { $0 }, wasCancelled: cancelledEvent)
        }
        for (index, queueProbe) in queueProbes.enumerated() {
            let starts = queueProbe.inFlight.starts
            if starts != runsPerQueue[index] {
                log.record("queue \(index): \(starts) starts counted but its jobs ran \(runsPerQueue[index]) times")
            }
        }
        return (survivors, outcomes)
    }
}
