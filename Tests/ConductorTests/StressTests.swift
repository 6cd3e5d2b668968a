import Conductor
import ConductorTestSupport
import Dispatch
import Synchronization
import Testing

// A randomized stress suite: everything the engine does concurrently, at once, under a seeded
// schedule of random choices. Each round runs a few thousand jobs on three queues while
//
// - three producer threads add a random DAG of jobs (edges across queues, random priorities,
//   about 30 % of them `.requireSuccess`), one by one or in atomic batches, and add barriers;
// - the jobs are synchronous (`BlockJob`, with one or two blocks, and jobs whose `execute()` may
//   throw), asynchronous (`AsyncBlockJob` finished inline, or later from another Dispatch queue,
//   or by a finisher that races a canceller: both wait for each other on two threads and then
//   call `finish()` or `finish(throwing:)` and `cancel(reason:)` at the same moment; and
//   `AsynchronousJob`s whose `execute()` may throw) and `TaskJob`s. Apart from `BlockJob`s, a
//   job's work may succeed, fail, throw `CancellationError`, or throw it only if cancelled;
// - three mutator threads cancel jobs with random reasons (racing their start and finish;
//   sometimes twice), change priorities, add late dependencies (either policy) and barriers, add
//   jobs of their own, wait for jobs, and each owns one queue whose limit it
//   changes and which it briefly suspends (or sets to limit 0) to add jobs that must not start
//   before it resumes, sometimes waiting meanwhile for the jobs that were running to finish;
// - observers (on `.started`) and completion blocks add follow-up jobs, with a bounded depth and
//   a cap per round; an observer's follow-up waits for its parent, with either policy.
//
// Checked during the round, where the thing happens: a job's work runs at most once, in its own
// queue (`JobQueue.current`), after every dependency it was given has finished, after every
// barrier added to its queue before it has finished, never while its queue was suspended (and a
// suspended queue whose running jobs have all finished has no job executing); the
// jobs in flight on a queue never exceed its limit (the exact limit in the fixed-limit test, the
// largest limit set in the other); a barrier block starts after every job added to its queue
// before it has finished and after the previous barrier, alone, and no job starts while it runs;
// a completion block runs once, after every observer got `.finished`; cancelling a job on a
// suspended queue finishes it at once; no work starts after a `.requireSuccess` dependency failed
// or was cancelled; a job has its reason at `.cancelled` and after `cancel(reason:)` returns
// (unless it had finished uncancelled), and its outcome at `.finished`, in the completion block,
// and after `finish()` and `waitUntilFinished()` return, always the first one seen. Checked after
// the round: every job finished, with no dependencies left; its work ran exactly once unless it
// was cancelled; every observer saw exactly one `.finished` and a valid lifecycle sequence; every
// completion block ran exactly once; every barrier ran exactly once; `jobCount` is 0 and `jobs`
// empty on every queue; and the outcome rules of RandomizedInvariantTests
// (`WorkProbe.checkOutcomeAfterDrain`): the outcome follows from the work and the events, the
// reason was given to the job or names a `.requireSuccess` dependency that did not succeed, and
// such a dependency stopped its dependent. `cancelAllJobs()` is not used here: it would cancel
// barriers, whose blocks then never run, which the barrier checks do not model.
//
// Deadlock freedom by construction. A job added before a barrier that (transitively) waits for a
// job added after it can never run (Docs/Concepts.md). So every dependency edge points to a job
// whose `addJob` returned before the dependent's `addJob` began: the producers add in waves (a
// rendezvous between waves) and wire a job only to jobs of earlier waves or earlier jobs of their
// own; late edges compare two publication stamps; a follow-up depends only on the job that
// spawned it, which is already running or finished. Every wait (dependency, barrier, held job)
// then points back in the engine's order of additions, so none can form a cycle.
//
// Which jobs a barrier waits for: the producers add jobs under the read side of a per-queue
// reader–writer lock and barriers under its write side, so the jobs "added before barrier k" are
// exactly those recorded in epochs 0...k, while jobs are still added concurrently.
//
// Synchronization: nothing waits for time. Mutators are paced by completed jobs (a semaphore per
// mutator, signalled from completion blocks) and may block in `waitUntilFinished()` on their own
// threads; producers meet between waves with a `DispatchGroup`; the test's task only awaits
// `waitUntilAllJobsAreFinished()` and continuations resumed from Dispatch threads, never blocks
// the cooperative pool. Job bodies never block; the finish/cancel racers block each other briefly
// on fresh serial Dispatch queues, which get their own threads. The queues' workers run at
// `.utility` so that they never compete with the test's task for the default-QoS pool.
//
// Seeds: `CONDUCTOR_SEED` (or a random seed) fixes every random choice: the graph, the kinds,
// priorities, limits, the producers' additions and batches, each mutator's sequence of operations
// and their parameters, and each follow-up's choices (drawn from its parent's stream). Thread
// interleavings are not reproducible (nor, therefore, which published job a mutator's pick lands
// on, or which follow-ups the cap cuts off), so a replay makes the same choices but may not hit the
// same race; repeat it, or raise `CONDUCTOR_STRESS_SCALE`, which multiplies the rounds (and the jobs per
// round by its square root). The seed is printed when each round starts and is part of every
// failure message. If a round stops making progress (a hang is how some engine bugs show), a
// watchdog prints the stuck jobs and the seed every 30 s; it never fails or unblocks anything.

@Suite("Stress", .serialized)
struct StressTests {
    /// Jobs planned per round (follow-ups and the mutators' jobs come on top), before the scale.
    static let baseJobCount = 4_000
    /// Rounds per test, before the scale.
    static let baseRounds = 12

    static var rounds: Int { max(1, Int((Double(baseRounds) * SeededRandom.stressScale).rounded())) }
    static var jobCount: Int {
        max(100, Int((Double(baseJobCount) * SeededRandom.stressScale.squareRoot()).rounded()))
    }

    @Test("Fixed limits: in-flight work never exceeds each queue's exact limit")
    func fixedLimits() async {
        await Self.run(name: "fixed limits", streamBase: 0x5157_0000, changingLimits: false)
    }

    @Test("Changing limits: limits changed at random; in-flight work never exceeds the largest limit set")
    func changingLimits() async {
        await Self.run(name: "changing limits", streamBase: 0x5C4A_0000, changingLimits: true)
    }

    private static func run(name: String, streamBase: UInt64, changingLimits: Bool) async {
        let start = DispatchTime.now()
        var totals = RoundStats()
        var roundsRun = 0
        for index in 0..<rounds {
            let round = StressRound(
                seed: SeededRandom.runSeed, stream: streamBase + UInt64(index),
                label: "\(name), round \(index + 1)/\(rounds)", jobCount: jobCount, changingLimits: changingLimits)
            let (passed, stats) = await round.execute()
            totals.add(stats)
            roundsRun += 1
            if !passed { break }
        }
        printFlushed(
            "StressTests: \(name): \(roundsRun) rounds, \(totals.jobs) jobs (\(totals.followUps) follow-ups, "
                + "\(totals.windowJobs) added while suspended), \(totals.barriers) barriers, \(totals.cancelled) cancelled, "
                + "finish/cancel races won by cancel \(totals.racesCancelWon) and by finish \(totals.racesFinishWon), "
                + "\(totals.dependenciesChecked) dependencies checked at start, \(totals.heldJobsRun) held jobs run, "
                + "\(totals.requireSuccessEdges) .requireSuccess edges, \(totals.waits) waits; outcomes: \(totals.outcomes); "
                + "\(SeededRandom.describe(SeededRandom.runSeed)), streams 0x\(String(streamBase, radix: 16))+0..<\(roundsRun); "
                + "\(secondsElapsed(since: start))s")
        // Sanity: the rounds did what they are meant to exercise (a failed round stops early).
        if roundsRun == rounds && totals.jobs >= 10_000 {
            let outcomes = totals.outcomes
            #expect(
                outcomes.failed > 0 && outcomes.failedAfterCancel > 0 && outcomes.cancelledByDependencies > 0
                    && outcomes.cancelled["\(CancellationReason.Code.timedOut)", default: 0] > 0,
                "no failure, no failure after a cancellation, no cancellation by a .requireSuccess dependency, or no time limit that ran out: \(outcomes) — \(SeededRandom.describe(SeededRandom.runSeed))"
            )
        }
    }
}

// MARK: - Records

/// What the test knows about one queue of a round.
private final class StressQueue: Sendable {
    let index: Int
    let queue: JobQueue
    /// The exact limit in the fixed-limit test; otherwise `nil`.
    let fixedLimit: Int?
    /// The largest limit the round may set on this queue.
    let bound: Int
    /// The largest limit actually set.
    let largestLimitSet: Atomic<Int>
    /// The work in flight (an asynchronous job's ends just before `finish()`), checked against the
    /// largest limit the round may set (the exact limit in the fixed-limit test), and the
    /// dependencies found finished when work started.
    let probe: QueueProbe

    /// Additions take the read side; adding a barrier takes the write side, so that the jobs added
    /// before barrier `k` are exactly those of epochs `0...k`.
    let additions = ReadWriteLock()
    /// Barriers added so far: the epoch of a job being added. Written under the write side.
    let barriersAdded = Atomic<Int>(0)
    /// Barrier blocks that have returned; barrier `k` sets it to `k + 1` as it returns.
    let barriersFinished = Atomic<Int>(0)
    let barrierRuns = Atomic<Int>(0)
    /// Evidence that the barrier checks were not vacuous: jobs that ran after being added while a
    /// barrier before them had not finished.
    let heldJobsRun = Atomic<Int>(0)
    /// The jobs of each epoch (weak: a freed job had finished, since a queue keeps its unfinished jobs).
    let epochs = Locked<[[WeakReference<Job>]]>([[]])

    init(index: Int, queue: JobQueue, fixedLimit: Int?, bound: Int, initialLimit: Int) {
        self.index = index
        self.queue = queue
        self.fixedLimit = fixedLimit
        self.bound = bound
        largestLimitSet = Atomic(initialLimit)
        probe = QueueProbe(index: index, queue: queue, bound: fixedLimit ?? bound)
    }

    func setLimit(_ limit: Int) {
        largestLimitSet.max(limit, ordering: .sequentiallyConsistent)
        queue.maxConcurrentJobCount = limit
    }
}

/// One observer of a job: the events it saw, in order.
private final class ObserverRecord: Sendable {
    let events = Locked<[JobEvent]>([])
    let spawnsOnStart: Bool

    init(spawnsOnStart: Bool) {
        self.spawnsOnStart = spawnsOnStart
    }

    var finishedCount: Int { events.withLock { $0.count { $0 == .finished } } }
}

/// The random choices for one job.
private struct JobSpec: Sendable {
    enum Kind: String, Sendable {
        case block, twoBlocks, sync, asyncInline, asyncLater, asyncThrowing, asyncRace, task
        /// An asynchronous job that ends only when cancelled, with a short time limit: it ends
        /// `.cancelled(timedOut)` unless another cancellation comes first.
        case untilCancelled
    }

    var kind: Kind
    var queue: Int
    var priority: JobPriority
    /// One entry per observer: whether it adds a follow-up job when it sees `.started`.
    var observers: [Bool]
    var hasCompletion: Bool
    var completionSpawns: Bool
    /// An asynchronous job calls `finish()` twice (the second call must be ignored).
    var finishTwice: Bool
    /// How the work ends: succeeds, fails, throws `CancellationError`, or throws it if cancelled (a
    /// `TaskJob`: `try Task.checkCancellation()`). `BlockJob`s always succeed.
    var ending: PlannedEnding
    /// In a finish/cancel race, the finisher is dispatched first (the one dispatched last usually
    /// arrives last, finds the other waiting, and fires first).
    var finisherFirst: Bool
    /// The reason the racing canceller gives (`nil`: a plain `cancel()`).
    var raceReason: CancellationReason?
    /// The job's time limit: short ones run out while much of the work still runs, long ones never
    /// do (see `WorkProbe.checkCause`).
    var timeout: Duration?

    static func random(_ random: inout SeededRandom, queueCount: Int) -> JobSpec {
        let roll = random.int(100)
        let kind: Kind =
            switch roll {
            case 0..<28: .block
            case 28..<34: .twoBlocks
            case 34..<42: .sync
            case 42..<50: .asyncInline
            case 50..<66: .asyncLater
            case 66..<72: .asyncThrowing
            case 72..<84: .asyncRace
            case 84..<87: .untilCancelled
            default: .task
            }
        let queue = random.int(queueCount)
        let priority = JobPriority.allCases[random.int(JobPriority.allCases.count)]
        let observerCount = random.int(in: 0...2)
        let observers = (0..<2).map { _ in random.chance(0.05) }.prefix(observerCount)
        let hasCompletion = random.chance(0.8)
        let completionSpawns = random.chance(0.06)
        let finishTwice = random.chance(0.1)
        let ending = random.plannedEnding(
            failure: 0.12, throwCancellation: 0.03, checkCancellation: kind == .task ? 0.5 : 0.15)
        let finisherFirst = random.chance(0.5)
        let raceReason = random.cancellationReason(detail: "race")
        let drawnTimeout = random.timeout(short: 0.06, long: 0.04)
        let timeout = kind == .untilCancelled ? .microseconds(200) : drawnTimeout
        return JobSpec(
            kind: kind, queue: queue, priority: priority, observers: Array(observers),
            hasCompletion: hasCompletion, completionSpawns: completionSpawns, finishTwice: finishTwice,
            ending: kind == .block || kind == .twoBlocks || kind == .untilCancelled ? .succeed : ending,
            finisherFirst: finisherFirst,
            raceReason: raceReason, timeout: timeout)
    }
}

/// What the test records about one job: its work (`WorkProbe`, shared with
/// RandomizedInvariantTests), what its observers saw, and when it was added relative to its queue's
/// barriers. Job bodies capture the probe and never the round, and the probe holds its job weakly: a
/// cancelled job keeps its un-run body, so a strong path from the body back to the job (or to the
/// round's list of jobs) would be a cycle that outlives the round.
private final class JobProbe: Sendable {
    let name: String
    let spec: JobSpec
    let queue: StressQueue
    let work: WorkProbe
    /// Follow-ups of follow-ups are allowed down to `StressRound.maxDepth`.
    let depth: Int
    /// Seeds the follow-ups this job may add, so that their random choices do not depend on timing.
    let followUpStream: UInt64
    /// Set once the job exists (before it is shared with another thread).
    let job = Locked<WeakReference<Job>>(WeakReference(nil))
    let observers: [ObserverRecord]
    /// Must be set when the work starts: the job was added while its queue could start nothing.
    let window: Flag?

    /// The queue's epoch when the job was added: the barriers added to its queue before it.
    let epoch = Atomic<Int>(-1)
    /// Publication stamps: the clock before `addJob` began and after it returned (0: not yet).
    let addStarted = Atomic<Int>(0)
    let added = Atomic<Int>(0)
    /// A barrier added before the job had not finished when the job was added: the job was held.
    let heldWhenAdded = Atomic<Bool>(false)

    init(
        name: String, spec: JobSpec, queue: StressQueue, log: FailureLog, depth: Int, followUpStream: UInt64,
        window: Flag?
    ) {
        self.name = name
        self.spec = spec
        self.queue = queue
        let ending = spec.ending == .succeed ? "" : ", \(spec.ending.rawValue)"
        work = WorkProbe(
            name: name, label: "\(name) (\(spec.kind.rawValue)\(ending), queue \(queue.index))", queue: queue.probe,
            log: log, finishTwice: spec.finishTwice, plannedEnding: spec.ending, timeout: spec.timeout)
        self.depth = depth
        self.followUpStream = followUpStream
        self.window = window
        observers = spec.observers.map(ObserverRecord.init)
    }

    var currentJob: Job? { job.withLock { $0.object } }

    func fail(_ message: String) {
        work.fail(message)
    }

    // MARK: Work

    /// Called first thing in the job's work: the shared checks, and that every barrier added to
    /// its queue before it has finished and that its queue is not stopped.
    func workBegins() {
        work.workBegins {
            let epoch = epoch.load(ordering: .sequentiallyConsistent)
            let finishedBarriers = queue.barriersFinished.load(ordering: .sequentiallyConsistent)
            if epoch < 0 {
                fail("work started before the job was added to its queue")
            } else if finishedBarriers < epoch {
                fail(
                    "work started while barrier \(finishedBarriers) of its queue, added before the job, had not finished (\(epoch) barriers were added before it)"
                )
            }
            if let window, !window.value {
                fail("work started while its queue was suspended (or at limit 0)")
            }
            if heldWhenAdded.load(ordering: .relaxed) {
                queue.heldJobsRun.add(1, ordering: .relaxed)
            }
        }
    }

    // MARK: Callbacks

    /// At `.cancelled` the job must have its reason, at `.finished` its outcome.
    func observed(_ event: JobEvent, by observer: ObserverRecord) {
        observer.events.withLock { $0.append(event) }
        if event == .cancelled {
            work.seeReason(currentJob?.cancellationReason, "at .cancelled")
        } else if event == .finished {
            work.seeOutcome(currentJob?.outcome, "at .finished")
        }
    }

    func completionRuns() {
        work.completionBlockRuns()
        work.seeOutcome(currentJob?.outcome, "in the completion block")
        for (index, observer) in observers.enumerated() where observer.finishedCount != 1 {
            fail("completion block ran when observer \(index) had seen \(observer.finishedCount) .finished events")
        }
    }
}

/// Totals for the summary line.
private struct RoundStats: Sendable {
    var jobs = 0
    var followUps = 0
    var windowJobs = 0
    var barriers = 0
    var cancelled = 0
    var racesCancelWon = 0
    var racesFinishWon = 0
    var dependenciesChecked = 0
    var heldJobsRun = 0
    var lateEdgesTried = 0
    var requireSuccessEdges = 0
    var waits = 0
    var outcomes = OutcomeTally()

    mutating func add(_ other: RoundStats) {
        jobs += other.jobs
        followUps += other.followUps
        windowJobs += other.windowJobs
        barriers += other.barriers
        cancelled += other.cancelled
        racesCancelWon += other.racesCancelWon
        racesFinishWon += other.racesFinishWon
        dependenciesChecked += other.dependenciesChecked
        heldJobsRun += other.heldJobsRun
        lateEdgesTried += other.lateEdgesTried
        requireSuccessEdges += other.requireSuccessEdges
        waits += other.waits
        outcomes.add(other.outcomes)
    }
}

// MARK: - The round

/// The plan for one job of the initial graph.
private struct PlannedJob: Sendable {
    var spec: JobSpec
    var wave: Int
    var producer: Int
    /// Earlier jobs it waits for: of an earlier wave, or earlier jobs of the same producer; and the
    /// edge's policy.
    var dependencies: [(index: Int, policy: DependencyPolicy)]
    /// Added in an atomic batch with the following jobs of the same producer and queue.
    var batchLength: Int
    var cancelBeforeAdding: Bool
    var cancelRightAfterAdding: Bool
    var cancelConcurrentlyAfterAdding: Bool
    /// The reason for those cancellations (`nil`: a plain `cancel()`).
    var cancelReason: CancellationReason?
    /// Adds a barrier to the queue with this index just before adding the job.
    var barrierBefore: Int?
}

private final class StressRound: Sendable {
    static let queueCount = 3
    static let producerCount = 3
    static let mutatorCount = 3
    static let waves = 8
    static let maxDepth = 2
    static let opsPerBurst = 4
    /// The share of the initial graph's and the late edges added with `.requireSuccess`. Kept low
    /// enough that a failure cancels a few dependents, not most of the graph.
    static let requireSuccessShare = 0.3

    let seed: UInt64
    let stream: UInt64
    let jobCount: Int
    let changingLimits: Bool
    /// The round's violations; its context names the round, its size and its seed.
    let log: FailureLog

    let queues: [StressQueue]
    let plan: [PlannedJob]
    /// The initial graph's probes and jobs, by index; created before any thread starts.
    let initialProbes: [JobProbe]
    private let initialJobs: Locked<[Job]>

    /// Every job of the round (strong references, for the final checks) and its probe.
    let registry = Locked<[(Job, JobProbe)]>([])
    /// Jobs created: counted before they are added, so a drain that saw no change is final.
    let created = Atomic<Int>(0)
    /// Probes of jobs whose `addJob` returned, for the mutators to pick from.
    let published = Locked<[JobProbe]>([])
    /// The publication clock (see `JobProbe.addStarted`).
    let clock = Atomic<Int>(0)
    let followUps = Atomic<Int>(0)
    let followUpCap: Int
    let windowJobs = Atomic<Int>(0)
    let lateEdges = Atomic<Int>(0)
    let requireSuccessEdges = Atomic<Int>(0)
    let waits = Atomic<Int>(0)
    let quiesceWindows = Atomic<Int>(0)

    /// Paces the mutators: each runs one burst per `pace` completion blocks.
    let pacer: CompletionPacer

    init(seed: UInt64, stream: UInt64, label: String, jobCount: Int, changingLimits: Bool) {
        self.seed = seed
        self.stream = stream
        self.jobCount = jobCount
        self.changingLimits = changingLimits
        log = FailureLog(
            context: "\(label), \(jobCount) jobs, \(SeededRandom.describe(seed)), stream 0x\(String(stream, radix: 16))"
        )
        followUpCap = max(10, jobCount / 10)
        pacer = CompletionPacer(expectedCompletions: jobCount, burstsWanted: 150, mutators: StressRound.mutatorCount)

        var random = SeededRandom(seed: seed, stream: stream, part: 1)
        var queues: [StressQueue] = []
        for index in 0..<StressRound.queueCount {
            let bound = random.int(in: 1...4)
            let initial = changingLimits ? random.int(in: 1...bound) : bound
            let queue = JobQueue(name: "stress-\(index)", maxConcurrentJobCount: initial)
            queue.qualityOfService = .utility
            queues.append(
                StressQueue(
                    index: index, queue: queue, fixedLimit: changingLimits ? nil : bound, bound: bound,
                    initialLimit: initial))
        }
        self.queues = queues

        // The initial graph: waves of jobs, each job owned by a producer.
        var plan: [PlannedJob] = []
        plan.reserveCapacity(jobCount)
        for index in 0..<jobCount {
            let wave = index * StressRound.waves / jobCount
            let producer = random.int(StressRound.producerCount)
            let spec = JobSpec.random(&random, queueCount: StressRound.queueCount)
            let dependencyCount = index > 0 ? random.int(4) : 0
            let picks = (0..<3).map { _ in
                (
                    recent: random.chance(0.8), offset: random.int(200), any: random.next(),
                    policy: random.policy(requireSuccess: StressRound.requireSuccessShare)
                )
            }
            var dependencies: [(index: Int, policy: DependencyPolicy)] = []
            for pick in picks.prefix(dependencyCount) {
                let candidate = pick.recent ? max(0, index - 1 - pick.offset) : Int(pick.any % UInt64(index))
                // Only jobs certain to be added before this one (see the header).
                let safe = plan[candidate].wave < wave || plan[candidate].producer == producer
                if safe && !dependencies.contains(where: { $0.index == candidate }) {
                    dependencies.append((candidate, pick.policy))
                }
            }
            let batched = random.chance(0.3)
            let batchLength = batched ? random.int(in: 2...8) : 1
            let cancelRoll = random.int(1000)
            let barrierRoll = random.int(1000)
            let barrierQueue = random.int(StressRound.queueCount)
            let cancelReason = random.cancellationReason(detail: "producer.\(index)")
            plan.append(
                PlannedJob(
                    spec: spec, wave: wave, producer: producer, dependencies: dependencies, batchLength: batchLength,
                    cancelBeforeAdding: cancelRoll < 10, cancelRightAfterAdding: (10..<20).contains(cancelRoll),
                    cancelConcurrentlyAfterAdding: (20..<50).contains(cancelRoll), cancelReason: cancelReason,
                    barrierBefore: barrierRoll < 4 ? barrierQueue : nil))
        }
        // Every queue gets barriers: the first job of each wave after the first adds one.
        for wave in 1..<StressRound.waves {
            let first = (wave * jobCount + StressRound.waves - 1) / StressRound.waves
            if first < jobCount {
                plan[first].barrierBefore = wave % StressRound.queueCount
            }
        }
        self.plan = plan

        var probes: [JobProbe] = []
        var jobs: [Job] = []
        probes.reserveCapacity(jobCount)
        jobs.reserveCapacity(jobCount)
        let log = self.log
        for (index, planned) in plan.enumerated() {
            let probe = JobProbe(
                name: "job\(index)", spec: planned.spec, queue: queues[planned.spec.queue], log: log,
                depth: 0, followUpStream: SeededRandom.mix(stream ^ 0xF0_0000) &+ UInt64(index), window: nil)
            probes.append(probe)
        }
        initialProbes = probes
        initialJobs = Locked([])
        for probe in probes {
            jobs.append(makeJob(probe))
        }
        initialJobs.withLock { $0 = jobs }
    }

    // MARK: Jobs

    /// Creates the job for `probe` with its observers and completion block, and registers it.
    @discardableResult
    func makeJob(_ probe: JobProbe) -> Job {
        let spec = probe.spec
        let work = probe.work
        let job: Job
        switch spec.kind {
        case .block:
            job = BlockJob {
                probe.workBegins()
                work.workEnds()
            }
        case .twoBlocks:
            let blockJob = BlockJob {
                probe.workBegins()
                work.workEnds()
            }
            blockJob.addExecutionBlock {
                work.checkCurrentQueue("second block started")
                work.checkDependenciesFinished("second block started")
                work.secondBlockRuns.add(1, ordering: .sequentiallyConsistent)
            }
            job = blockJob
        case .asyncInline:
            job = AsyncBlockJob { job in
                probe.workBegins()
                work.finish(job)
            }
        case .asyncLater:
            job = AsyncBlockJob { job in
                probe.workBegins()
                DispatchQueue.global(qos: .utility).async { work.finish(job) }
            }
        case .sync:
            job = ProbeJob { job in
                probe.workBegins()
                try work.endSynchronousWork(job)
            }
        case .asyncThrowing:
            job = ProbeAsyncJob { job in
                probe.workBegins()
                try work.startAsynchronousWork(job, finishingOn: .global(qos: .utility))
            }
        case .asyncRace:
            job = AsyncBlockJob { job in
                probe.workBegins()
                StressRound.raceFinishAndCancel(job, probe)
            }
        case .untilCancelled:
            job = AsyncBlockJob { job in
                probe.workBegins()
                // Finishes once, when cancelled: from the `.cancelled` observer, or at once if the
                // job was cancelled before the observer was registered.
                let calls = Counter()
                let finishOnce: @Sendable () -> Void = { if calls.increment() == 1 { work.finish(job) } }
                job.observe { event in
                    if event == .cancelled { finishOnce() }
                }
                if job.isCancelled { finishOnce() }
            }
        case .task:
            job = TaskJob {
                probe.workBegins()
                await Task.yield()
                work.checkCurrentQueue("TaskJob body resumed")
                work.checkDependenciesFinished("TaskJob body resumed")
                try work.endTaskWork()
            }
        }
        job.name = probe.name
        job.queuePriority = spec.priority
        job.timeout = spec.timeout
        for observer in probe.observers {
            job.observe { [self] event in
                probe.observed(event, by: observer)
                if event == .started && observer.spawnsOnStart {
                    spawnFollowUp(of: probe, part: 1, dependsOnParent: true)
                }
            }
        }
        if spec.hasCompletion {
            job.completionBlock = { [self] in
                probe.completionRuns()
                if spec.completionSpawns {
                    spawnFollowUp(of: probe, part: 2, dependsOnParent: false)
                }
                pacer.jobSettled()
            }
        }
        probe.job.withLock { $0 = WeakReference(job) }
        registry.withLock { $0.append((job, probe)) }
        created.add(1, ordering: .sequentiallyConsistent)
        return job
    }

    /// The finisher and the canceller wait for each other on two threads, then call `finish()` and
    /// `cancel()` at the same moment. Each runs on a fresh serial Dispatch queue, which gets a thread
    /// of its own, so the two can always meet.
    static func raceFinishAndCancel(_ job: AsyncBlockJob, _ probe: JobProbe) {
        let finisherArrived = DispatchSemaphore(value: 0)
        let cancellerArrived = DispatchSemaphore(value: 0)
        let finisher: @Sendable () -> Void = {
            finisherArrived.signal()
            cancellerArrived.wait()
            probe.work.finish(job)
        }
        let canceller: @Sendable () -> Void = {
            cancellerArrived.signal()
            finisherArrived.wait()
            probe.work.cancel(job, with: [probe.spec.raceReason])
        }
        let first = DispatchQueue(label: "stress.racer1", qos: .utility)
        let second = DispatchQueue(label: "stress.racer2", qos: .utility)
        if probe.spec.finisherFirst {
            first.async(execute: finisher)
            second.async(execute: canceller)
        } else {
            first.async(execute: canceller)
            second.async(execute: finisher)
        }
    }

    /// Adds a follow-up job (from an observer or a completion block), within the depth and the cap.
    /// Its random choices come from its parent's stream, not from timing.
    func spawnFollowUp(of parent: JobProbe, part: UInt64, dependsOnParent: Bool) {
        guard parent.depth < StressRound.maxDepth,
            followUps.add(1, ordering: .relaxed).newValue <= followUpCap
        else { return }
        var random = SeededRandom(seed: seed, stream: SeededRandom.mix(parent.followUpStream) ^ part)
        let spec = JobSpec.random(&random, queueCount: StressRound.queueCount)
        let probe = JobProbe(
            name: "\(parent.name).\(part == 1 ? "s" : "c")", spec: spec, queue: queues[spec.queue],
            log: log, depth: parent.depth + 1, followUpStream: random.next(), window: nil)
        let policy = random.policy(requireSuccess: 0.5)
        let job = makeJob(probe)
        // The parent is running or finished, so this edge cannot close a wait cycle. Under
        // `.requireSuccess` the follow-up is cancelled if the parent fails or was cancelled, at once
        // if it already has.
        if dependsOnParent, let parentJob = parent.currentJob {
            addDependency(of: probe, job, on: parent, parentJob, policy: policy, expectAlreadyStarted: false)
        }
        add([(job, probe)], to: queues[spec.queue], atomically: false)
    }

    /// Tries `dependent waits for dependency`; records it for the dependent's checks if accepted.
    /// `.alreadyStarted` is expected for a late edge, and for any edge to a job that a
    /// `.requireSuccess` edge already cancelled (which finished it before it was added).
    func addDependency(
        of probe: JobProbe, _ dependent: Job, on dependencyProbe: JobProbe, _ dependency: Job,
        policy: DependencyPolicy, expectAlreadyStarted: Bool
    ) {
        do throws(JobError) {
            try dependent.addDependency(dependency, policy: policy)
            probe.work.dependencyAccepted(dependency, probe: dependencyProbe.work, policy: policy)
            if policy == .requireSuccess {
                requireSuccessEdges.add(1, ordering: .relaxed)
            }
        } catch {
            if error.code == .alreadyStarted && (expectAlreadyStarted || dependent.isCancelled) {
                let state = dependent.state
                if state != .executing && state != .finished {
                    probe.fail("addDependency refused with .alreadyStarted while \(state)")
                }
            } else {
                probe.fail("addDependency(\(dependency.displayName)) threw \(error); no cycle was possible")
            }
        }
    }

    /// Adds jobs to a queue under the read side of its lock, recording their epoch and stamps.
    func add(_ entries: [(Job, JobProbe)], to queue: StressQueue, atomically: Bool) {
        let stamp = clock.load(ordering: .sequentiallyConsistent)
        queue.additions.withReadLock {
            let epoch = queue.barriersAdded.load(ordering: .sequentiallyConsistent)
            let references = entries.map { WeakReference($0.0) }
            queue.epochs.withLock { $0[epoch].append(contentsOf: references) }
            let held = queue.barriersFinished.load(ordering: .sequentiallyConsistent) < epoch
            for (_, probe) in entries {
                probe.heldWhenAdded.store(held, ordering: .relaxed)
                probe.epoch.store(epoch, ordering: .sequentiallyConsistent)
                probe.addStarted.store(stamp, ordering: .sequentiallyConsistent)
            }
            if atomically {
                queue.queue.addJobs(entries.map(\.0), waitUntilFinished: false)
            } else {
                for (job, _) in entries { queue.queue.addJob(job) }
            }
        }
        let added = clock.add(1, ordering: .sequentiallyConsistent).newValue
        for (_, probe) in entries {
            probe.added.store(added, ordering: .sequentiallyConsistent)
        }
        published.withLock { $0.append(contentsOf: entries.map(\.1)) }
    }

    /// Adds a barrier to `queue` under the write side of its lock: barrier `k` closes epoch `k`.
    func addBarrier(to queue: StressQueue) {
        queue.additions.withWriteLock {
            let barrier = queue.barriersAdded.load(ordering: .sequentiallyConsistent)
            let earlier = queue.epochs.withLock { epochs in
                epochs.append([])
                return epochs[barrier]
            }
            let log = self.log
            queue.queue.addBarrierBlock {
                let label = "queue \(queue.index), barrier \(barrier)"
                let finished = queue.barriersFinished.load(ordering: .sequentiallyConsistent)
                if finished != barrier {
                    log.record("\(label) started when \(finished) barriers had finished (expected \(barrier))")
                }
                let inFlight = queue.probe.inFlight.now
                if inFlight != 0 {
                    log.record("\(label) started with \(inFlight) jobs of its queue in flight")
                }
                for reference in earlier {
                    guard let job = reference.object else { continue }  // Freed, so finished.
                    if !job.isFinished {
                        log.record("\(label) started before '\(job.displayName)', added before it, finished")
                    }
                }
                queue.barrierRuns.add(1, ordering: .sequentiallyConsistent)
                let inFlightAtEnd = queue.probe.inFlight.now
                if inFlightAtEnd != 0 {
                    log.record("\(label): \(inFlightAtEnd) jobs of its queue started while it ran")
                }
                queue.barriersFinished.store(barrier + 1, ordering: .sequentiallyConsistent)
            }
            queue.barriersAdded.store(barrier + 1, ordering: .sequentiallyConsistent)
        }
    }

    // MARK: Producers

    /// Adds producer `producer`'s share of wave `wave`, in index order.
    private func produce(_ producer: Int, wave: Int, jobs: [Job]) {
        let members = plan.indices.filter { plan[$0].wave == wave && plan[$0].producer == producer }
        var position = 0
        while position < members.count {
            let index = members[position]
            let planned = plan[index]
            if let barrierQueue = planned.barrierBefore {
                addBarrier(to: queues[barrierQueue])
            }
            // A batch: this job and the following ones of the same queue, up to its length.
            var batch = [index]
            while batch.count < planned.batchLength, position + batch.count < members.count,
                plan[members[position + batch.count]].spec.queue == planned.spec.queue,
                plan[members[position + batch.count]].barrierBefore == nil
            {
                batch.append(members[position + batch.count])
            }
            for member in batch {
                for (dependency, policy) in plan[member].dependencies {
                    addDependency(
                        of: initialProbes[member], jobs[member], on: initialProbes[dependency], jobs[dependency],
                        policy: policy, expectAlreadyStarted: false)
                }
                if plan[member].cancelBeforeAdding {
                    initialProbes[member].work.cancel(jobs[member], with: [plan[member].cancelReason])
                    if !jobs[member].isFinished {
                        initialProbes[member].fail("cancelled before being added, but \(jobs[member].state)")
                    }
                }
            }
            add(
                batch.map { (jobs[$0], initialProbes[$0]) }, to: queues[planned.spec.queue], atomically: batch.count > 1
            )
            for member in batch {
                let reasons = [plan[member].cancelReason]
                if plan[member].cancelRightAfterAdding {
                    initialProbes[member].work.cancel(jobs[member], with: reasons)
                } else if plan[member].cancelConcurrentlyAfterAdding {
                    let job = jobs[member]
                    let work = initialProbes[member].work
                    DispatchQueue.global(qos: .utility).async { work.cancel(job, with: reasons) }
                }
            }
            position += batch.count
        }
    }

    /// Runs the waves: all producers add their share of a wave, then meet, then the next wave.
    private func runProducers() {
        let jobs = initialJobs.withLock { jobs in
            defer { jobs = [] }
            return jobs
        }
        let producers = (0..<StressRound.producerCount).map { DispatchQueue(label: "stress.producer\($0)") }
        for wave in 0..<StressRound.waves {
            let group = DispatchGroup()
            for (producer, thread) in producers.enumerated() {
                thread.async(group: group) { self.produce(producer, wave: wave, jobs: jobs) }
            }
            group.wait()
        }
    }

    // MARK: Mutators

    private func mutate(_ mutator: Int) {
        var random = SeededRandom(seed: seed, stream: stream, part: 100 + UInt64(mutator))
        let owned = queues[mutator % queues.count]
        var operation = 0
        for _ in 0..<pacer.bursts {
            pacer.waitForBurst(mutator)
            for _ in 0..<StressRound.opsPerBurst {
                operation += 1
                // Every draw is made whatever happens next, so the sequence depends on the seed only.
                let roll = random.int(100)
                let recent = random.chance(0.8)
                let offset = random.int(300)
                let pick = random.next()
                let otherPick = random.next()
                let priority = JobPriority.allCases[random.int(JobPriority.allCases.count)]
                let queueIndex = random.int(queues.count)
                let limit = random.int(in: 1...owned.bound)
                let windowSize = random.int(in: 1...3)
                let useSuspension = random.chance(0.5)
                let cancelInWindow = random.chance(0.3)
                let quiesce = random.chance(0.5)
                let windowStream = random.next()
                let reasons = [
                    random.cancellationReason(detail: "m\(mutator).\(operation)"),
                    random.cancellationReason(detail: "m\(mutator).\(operation)b"),
                ]
                let cancelTwice = random.chance(0.2)
                let latePolicy = random.policy(requireSuccess: StressRound.requireSuccessShare)

                func pickJob(_ value: UInt64) -> JobProbe? {
                    published.withLock { published in
                        guard !published.isEmpty else { return nil }
                        let count = published.count
                        return published[recent ? max(0, count - 1 - offset) : Int(value % UInt64(count))]
                    }
                }

                switch roll {
                case 0..<20:
                    // Sometimes twice, with two reasons: the first that takes effect must stay.
                    if let probe = pickJob(pick), let job = probe.currentJob {
                        probe.work.cancel(job, with: cancelTwice ? reasons : [reasons[0]])
                    }
                case 20..<33:
                    pickJob(pick)?.currentJob?.queuePriority = priority
                case 33..<53:
                    // A late edge: a job already on a queue waits for one published before it was added.
                    guard let dependent = pickJob(pick), let dependency = pickJob(otherPick),
                        dependency.added.load(ordering: .sequentiallyConsistent) != 0,
                        dependency.added.load(ordering: .sequentiallyConsistent)
                            <= dependent.addStarted.load(ordering: .sequentiallyConsistent),
                        let dependentJob = dependent.currentJob, let dependencyJob = dependency.currentJob
                    else { continue }
                    addDependency(
                        of: dependent, dependentJob, on: dependency, dependencyJob, policy: latePolicy,
                        expectAlreadyStarted: true)
                    lateEdges.add(1, ordering: .relaxed)
                case 53..<56:
                    addBarrier(to: queues[queueIndex])
                case 56..<76:
                    if changingLimits {
                        owned.setLimit(limit)
                    }
                case 76..<88:
                    window(
                        on: owned, size: windowSize, suspend: useSuspension, cancelOne: cancelInWindow,
                        quiesce: quiesce, stream: windowStream, restoreLimit: changingLimits ? limit : nil)
                case 88..<91:
                    // A waiter wakes only once the outcome is set. Blocks this mutator's own thread;
                    // every queue this mutator stopped has been resumed.
                    if let probe = pickJob(pick), let job = probe.currentJob {
                        job.waitUntilFinished()
                        probe.work.seeOutcome(job.outcome, "after waitUntilFinished() returned")
                        waits.add(1, ordering: .relaxed)
                    }
                default:
                    // One more producer: a job with no dependencies, to a random queue.
                    var jobRandom = SeededRandom(seed: seed, stream: windowStream)
                    let spec = JobSpec.random(&jobRandom, queueCount: queues.count)
                    let probe = JobProbe(
                        name: "m\(mutator).\(windowStream % 100_000)", spec: spec, queue: queues[spec.queue],
                        log: log, depth: StressRound.maxDepth, followUpStream: 0, window: nil)
                    add([(makeJob(probe), probe)], to: queues[spec.queue], atomically: false)
                }
            }
        }
    }

    /// Stops `queue` from starting jobs (suspension, or limit 0), adds jobs that must not start
    /// until it resumes, optionally cancels one (which must finish at once), then resumes it.
    /// Only the queue's owner changes its suspension and limit, so nothing else can resume it.
    ///
    /// With `quiesce`, it also waits (blocking this mutator's thread) until every job that was
    /// executing when the queue stopped has finished, and then checks that none is executing: the
    /// workers that finished those jobs must not have taken another.
    private func window(
        on queue: StressQueue, size: Int, suspend: Bool, cancelOne: Bool, quiesce: Bool, stream: UInt64,
        restoreLimit: Int?
    ) {
        let closed = Flag()
        let previousLimit = queue.queue.maxConcurrentJobCount
        if suspend {
            queue.queue.isSuspended = true
        } else {
            queue.queue.maxConcurrentJobCount = 0
        }
        // Claiming a job makes it executing under the engine lock, so these are all the jobs the
        // queue started before it stopped.
        let running = quiesce ? queue.queue.jobs.filter(\.isExecuting) : []
        var random = SeededRandom(seed: seed, stream: stream)
        var entries: [(Job, JobProbe)] = []
        for number in 0..<size {
            var spec = JobSpec.random(&random, queueCount: queues.count)
            spec.queue = queue.index
            let probe = JobProbe(
                name: "w\(queue.index).\(stream % 100_000).\(number)", spec: spec, queue: queue, log: log,
                depth: StressRound.maxDepth, followUpStream: 0, window: closed)
            entries.append((makeJob(probe), probe))
        }
        windowJobs.add(size, ordering: .relaxed)
        add(entries, to: queue, atomically: random.chance(0.5))
        let reason = random.cancellationReason(detail: "window.\(stream % 100_000)")
        if cancelOne, let (job, probe) = entries.last {
            probe.work.cancel(job, with: [reason])
            if !job.isFinished {
                probe.fail("cancelled on a suspended queue, but \(job.state)")
            }
        }
        if quiesce {
            for job in running {
                job.waitUntilFinished()
                if job.outcome == nil {
                    log.record("'\(job.displayName)' has no outcome after waitUntilFinished() returned")
                }
            }
            let started = queue.queue.jobs.filter(\.isExecuting)
            if !started.isEmpty {
                log.record(
                    "queue \(queue.index) \(suspend ? "suspended" : "at limit 0"): \(started.map(\.displayName)) executing after the \(running.count) jobs running when it stopped had finished"
                )
            }
            quiesceWindows.add(1, ordering: .relaxed)
        }
        closed.set()
        if suspend {
            queue.queue.isSuspended = false
        } else {
            queue.setLimit(restoreLimit ?? previousLimit)
        }
    }

    // MARK: Execute

    /// Runs the round, reports its violations as issues, and returns whether there were none.
    func execute() async -> (Bool, RoundStats) {
        let start = DispatchTime.now()
        printFlushed("StressTests: \(log.context)")  // So that the seed is on record even if the engine traps.
        let watchdog = Watchdog(round: self)

        let mutators = DispatchGroup()
        for mutator in 0..<StressRound.mutatorCount {
            DispatchQueue(label: "stress.mutator\(mutator)").async(group: mutators) { self.mutate(mutator) }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue(label: "stress.producers").async {
                self.runProducers()
                continuation.resume()
            }
        }
        await waitUntilAllQueuesSettle()
        // Let every mutator run its remaining bursts, then wait again: they may have added jobs.
        pacer.releaseAll()
        await withCheckedContinuation { continuation in
            mutators.notify(queue: .global()) { continuation.resume() }
        }
        await waitUntilAllQueuesSettle()
        watchdog.stop()

        let stats = checkFinalState()
        let summary =
            "\(secondsElapsed(since: start))s; \(stats.jobs) jobs (\(stats.followUps) follow-ups, \(stats.windowJobs) added while suspended), "
            + "\(stats.barriers) barriers, \(stats.cancelled) cancelled; in flight at most "
            + "\(queues.map { "\($0.probe.inFlight.maximum)/\($0.fixedLimit ?? $0.largestLimitSet.load(ordering: .relaxed))" }); "
            + "finish/cancel races won by cancel \(stats.racesCancelWon), by finish \(stats.racesFinishWon); "
            + "dependencies checked at start \(stats.dependenciesChecked), late edges tried \(stats.lateEdgesTried), "
            + "suspensions that waited for the running jobs \(quiesceWindows.load(ordering: .relaxed)), "
            + "jobs run after being held behind a barrier \(stats.heldJobsRun), "
            + ".requireSuccess edges \(stats.requireSuccessEdges), waits \(stats.waits); outcomes: \(stats.outcomes)"
        printFlushed("StressTests: \(log.context): \(summary)")
        return (log.reportIssues(summary: summary), stats)
    }

    /// Waits until every queue is empty and no job was created meanwhile: jobs are counted before
    /// they are added, and a follow-up is added before its parent settles, so when a full pass over
    /// the queues saw no new job, none can be pending anywhere.
    private func waitUntilAllQueuesSettle() async {
        while true {
            let before = created.load(ordering: .sequentiallyConsistent)
            for queue in queues {
                await queue.queue.waitUntilAllJobsAreFinished()
            }
            if created.load(ordering: .sequentiallyConsistent) == before { return }
        }
    }

    // MARK: Final checks

    private func checkFinalState() -> RoundStats {
        var stats = RoundStats()
        let entries = registry.withLock { $0 }
        stats.jobs = entries.count
        stats.followUps = min(followUps.load(ordering: .relaxed), followUpCap)
        stats.windowJobs = windowJobs.load(ordering: .relaxed)
        stats.lateEdgesTried = lateEdges.load(ordering: .relaxed)
        if created.load(ordering: .sequentiallyConsistent) != entries.count {
            log.record("\(created.load(ordering: .relaxed)) jobs counted, \(entries.count) registered")
        }
        for queue in queues {
            let count = queue.queue.jobCount
            let members = queue.queue.jobs
            if count != 0 || !members.isEmpty {
                log.record(
                    "queue \(queue.index) drained but jobCount is \(count) and jobs lists \(members.prefix(5).map(\.displayName))"
                )
            }
            let inFlight = queue.probe.inFlight
            if inFlight.now != 0 {
                log.record("queue \(queue.index): \(inFlight.now) jobs in flight after the drain")
            }
            let limit = queue.fixedLimit ?? queue.largestLimitSet.load(ordering: .sequentiallyConsistent)
            if inFlight.maximum > limit {
                log.record("queue \(queue.index): \(inFlight.maximum) jobs were in flight, limit \(limit)")
            }
            let barriers = queue.barriersAdded.load(ordering: .sequentiallyConsistent)
            let runs = queue.barrierRuns.load(ordering: .sequentiallyConsistent)
            let finished = queue.barriersFinished.load(ordering: .sequentiallyConsistent)
            if runs != barriers || finished != barriers {
                log.record("queue \(queue.index): \(barriers) barriers added, \(runs) ran, \(finished) returned")
            }
            stats.barriers += barriers
            stats.dependenciesChecked += queue.probe.dependenciesChecked.load(ordering: .relaxed)
            stats.heldJobsRun += queue.heldJobsRun.load(ordering: .relaxed)
        }
        stats.requireSuccessEdges = requireSuccessEdges.load(ordering: .relaxed)
        stats.waits = waits.load(ordering: .relaxed)
        // First every job's final outcome, which the checks of its dependents read.
        for (job, probe) in entries {
            probe.work.recordFinalOutcome(job)
        }
        for (job, probe) in entries {
            check(job, probe, &stats)
        }
        return stats
    }

    private func check(_ job: Job, _ probe: JobProbe, _ stats: inout RoundStats) {
        let cancelled = job.isCancelled
        if cancelled { stats.cancelled += 1 }
        let runs = probe.work.checkAfterDrain(job, cancelled: cancelled, hasSecondBlock: probe.spec.kind == .twoBlocks)
        if probe.spec.kind == .asyncRace && runs == 1 {
            if cancelled { stats.racesCancelWon += 1 } else { stats.racesFinishWon += 1 }
        }
        if probe.spec.hasCompletion {
            let completions = probe.work.completions.load(ordering: .sequentiallyConsistent)
            if completions != 1 {
                probe.fail("completion block ran \(completions) times")
            }
        }
        for (index, observer) in probe.observers.enumerated() {
            let events = observer.events.withLock { $0 }
            if !isValidLifecycle(events, workRan: runs == 1) {
                probe.fail("observer \(index) saw \(events) (work ran \(runs) times)")
            }
            if events.contains(.cancelled) != cancelled {
                probe.fail("isCancelled is \(cancelled) but observer \(index) saw \(events)")
            }
        }
        // Every job is alive (the registry holds it); `isCancelled` stands for `.cancelled`, which
        // the observers, if any, were checked against above.
        probe.work.checkOutcomeAfterDrain(job, cancelledEvent: cancelled, runs: runs)
        stats.outcomes.add(probe.work.finalOutcome.withLock { $0 }, wasCancelled: cancelled)
    }
}

// MARK: - Watchdog

/// Prints what a stalled round is waiting for. It never fails the test and never unblocks anything;
/// it only makes a hang (the way some engine bugs show) diagnosable, with the seed.
private final class Watchdog: Sendable {
    private let done = DispatchSemaphore(value: 0)

    init(round: StressRound) {
        let done = self.done
        DispatchQueue(label: "stress.watchdog").async { [weak round] in
            var last = -1
            while done.wait(timeout: .now() + .seconds(30)) == .timedOut {
                guard let round else { return }
                let progress = round.pacer.settledCount + round.clock.load(ordering: .relaxed)
                if progress == last {
                    var report = ["StressTests: no progress for 30 s — \(round.log.context)"]
                    for queue in round.queues {
                        let members = queue.queue.jobs
                        report.append(
                            "  queue \(queue.index): suspended \(queue.queue.isSuspended), limit \(queue.queue.maxConcurrentJobCount), "
                                + "\(members.count) jobs: \(members.prefix(8).map { "\($0.displayName) \($0.state)" }), "
                                + "barriers added \(queue.barriersAdded.load(ordering: .relaxed)), "
                                + "finished \(queue.barriersFinished.load(ordering: .relaxed))")
                    }
                    printFlushed(report.joined(separator: "\n"))
                }
                last = progress
            }
        }
    }

    func stop() { done.signal() }
}
