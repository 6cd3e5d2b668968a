import Conductor
import ConductorTestSupport
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

// Randomized invariant tests: a large random dependency graph of mixed jobs runs on two queues
// while other threads cancel jobs, change priorities and (in one test) change the queues'
// limits. Every random choice comes from a seed: set `CONDUCTOR_SEED` to replay a run's choices
// (the seed is printed when a round starts and is part of every failure message). Thread
// interleavings are not reproducible, so a replay makes the same graph, job kinds, priorities,
// limits and mutations, but may not hit the same race; repeat it, or raise the scale.
// `CONDUCTOR_STRESS_SCALE` multiplies the number of jobs (default 10,000 per round; each test
// runs `rounds` independent rounds).
//
// What is checked, per job: its work ran at most once, and exactly once unless it was cancelled;
// when its work started, every dependency it had been given had finished; it delivered exactly one
// `.finished`, its completion block ran exactly once and after `.finished`, its events came one at
// a time and in a valid lifecycle order; it ended finished with no dependencies. Per queue: the
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

// MARK: - Failure log

/// Collects invariant violations from any thread. `#expect` is only used on the test's own task,
/// where Swift Testing can attribute issues to the running test.
private final class FailureLog: Sendable {
    let context: String
    private let state = Locked<(count: Int, messages: [String])>((0, []))

    init(context: String) {
        self.context = context
    }

    func record(_ message: @autoclosure () -> String) {
        let text = message()
        state.withLock { state in
            state.count += 1
            if state.messages.count < 25 {
                state.messages.append(text)
            }
        }
    }

    var count: Int { state.withLock { $0.count } }
    var messages: [String] { state.withLock { $0.messages } }
}

// MARK: - Probes

/// A weak reference to a job. A job that has been freed had finished: the engine keeps every
/// unfinished job alive (its queue retains it, and so do the jobs that wait for it).
// @unchecked Sendable: `job` is only assigned in `init`; loading a weak reference is thread-safe.
private final class WeakJob: @unchecked Sendable {
    weak var job: Job?

    init(_ job: Job) {
        self.job = job
    }
}

/// What the test knows about one queue.
private final class QueueProbe: Sendable {
    let index: Int
    let queueID: ObjectIdentifier
    /// The most jobs whose work may be in flight at once.
    let bound: Int
    /// Jobs whose work has started and not yet ended (for asynchronous jobs: not yet called finish()).
    let inFlight = Atomic<Int>(0)
    let maxInFlight = Atomic<Int>(0)
    let starts = Atomic<Int>(0)
    /// Dependencies found finished when a job's work started (to show the check is not vacuous).
    let dependenciesChecked = Atomic<Int>(0)

    init(index: Int, queue: JobQueue, bound: Int) {
        self.index = index
        queueID = ObjectIdentifier(queue)
        self.bound = bound
    }
}

/// What the test records about one job. Job bodies, observers and completion blocks capture the
/// probe, never the job list, so that the jobs form no reference cycle through the test.
private final class JobProbe: Sendable {
    enum Kind: String, Sendable {
        case block, twoBlocks, asyncLater, asyncInline, task
    }

    let index: Int
    let kind: Kind
    let queue: QueueProbe
    /// For asynchronous jobs: call finish() a second time (it must be ignored).
    let finishTwice: Bool
    let log: FailureLog

    let runs = Atomic<Int>(0)
    let secondBlockRuns = Atomic<Int>(0)
    let completions = Atomic<Int>(0)
    let finishedEvents = Atomic<Int>(0)
    /// Events in order, three bits each (see `code(for:)`), newest in the low bits.
    let events = Atomic<UInt64>(0)
    let eventCount = Atomic<Int>(0)
    /// Observer calls in progress; above 1 means two events were delivered concurrently.
    let delivering = Atomic<Int>(0)
    /// The dependencies the engine accepted for this job, appended only after `addDependency` returned.
    /// Weak, so that the test does not keep finished jobs alive (a freed dependency had finished).
    let dependencies = Locked<[WeakJob]>([])

    init(index: Int, kind: Kind, queue: QueueProbe, finishTwice: Bool, log: FailureLog) {
        self.index = index
        self.kind = kind
        self.queue = queue
        self.finishTwice = finishTwice
        self.log = log
    }

    var label: String { "job\(index) (\(kind.rawValue), queue \(queue.index))" }

    // MARK: Work

    /// Called first thing in the job's work.
    func workBegins() {
        let runs = runs.add(1, ordering: .sequentiallyConsistent).newValue
        if runs != 1 {
            log.record("\(label): work ran \(runs) times")
        }
        if let current = JobQueue.current {
            if ObjectIdentifier(current) != queue.queueID {
                log.record("\(label): JobQueue.current is '\(current.name ?? "?")', not the job's queue")
            }
        } else {
            log.record("\(label): JobQueue.current is nil inside the job's work")
        }
        checkDependenciesFinished(where: "work started")
        queue.starts.add(1, ordering: .relaxed)
        let now = queue.inFlight.add(1, ordering: .sequentiallyConsistent).newValue
        if now > queue.bound {
            log.record(
                "\(label): \(now) jobs in flight on queue \(queue.index), more than the limit bound \(queue.bound)")
        }
        queue.maxInFlight.max(now, ordering: .relaxed)
    }

    /// Called last in the job's work; for an asynchronous job, just before it calls finish().
    func workEnds() {
        queue.inFlight.subtract(1, ordering: .sequentiallyConsistent)
    }

    func checkDependenciesFinished(where moment: String) {
        let dependencies = dependencies.withLock { $0 }
        queue.dependenciesChecked.add(dependencies.count, ordering: .relaxed)
        for reference in dependencies {
            guard let dependency = reference.job else { continue }  // Freed, so finished.
            let state = dependency.state
            if state != .finished {
                log.record(
                    "\(label): \(moment) while its dependency '\(dependency.displayName)' was \(state), not finished")
            }
        }
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

    func observed(_ event: JobEvent) {
        if delivering.add(1, ordering: .sequentiallyConsistent).newValue != 1 {
            log.record("\(label): event .\(event) delivered concurrently with another event of the same job")
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

    /// The recorded events, oldest first (at most 21 are kept).
    var eventSequence: [UInt64] {
        var packed = events.load(ordering: .sequentiallyConsistent)
        var codes: [UInt64] = []
        while packed != 0 {
            codes.append(packed & 7)
            packed >>= 3
        }
        return codes.reversed()
    }
}

private func describeEvents(_ codes: [UInt64]) -> String {
    codes.map { code in
        switch code {
        case 1: ".ready"
        case 2: ".started"
        case 3: ".cancelled"
        case 4: ".finished"
        default: "?\(code)"
        }
    }.joined(separator: ", ")
}

// MARK: - The run

/// Paces the mutator threads by progress instead of time: every `pace` completed jobs wake each
/// mutator for one burst of operations.
private final class Pacer: Sendable {
    let pace: Int
    /// Bursts each mutator runs: one per `pace` completions.
    let bursts: Int
    let signals: [DispatchSemaphore]
    private let settled = Atomic<Int>(0)

    init(jobCount: Int, mutators: Int) {
        pace = max(1, jobCount / 400)
        bursts = jobCount / pace
        signals = (0..<mutators).map { _ in DispatchSemaphore(value: 0) }
    }

    /// Called from each job's completion block.
    func jobSettled() {
        if settled.add(1, ordering: .relaxed).newValue % pace == 0 {
            for signal in signals { signal.signal() }
        }
    }

    /// Lets every mutator run its remaining bursts (extra signals are harmless), so that none
    /// waits forever even if completions went missing (which the checks report).
    func releaseAll() {
        for signal in signals {
            for _ in 0..<bursts { signal.signal() }
        }
    }
}

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
    /// Weak references to every job, for the mutators and the final checks.
    let weakJobs: [WeakJob]
    /// The strong references, created in `init` and handed to the builder.
    private let handoff: Locked<[Job]>
    let probes: [JobProbe]
    /// Maps a job's identity to its index, for checking the cycles the engine reports.
    let indexOfJob: [ObjectIdentifier: Int]

    /// Jobs `0..<published` have been added to their queues; mutators pick among them.
    let published = Atomic<Int>(0)
    let pacer: Pacer
    static let mutatorCount = 3
    static let opsPerBurst = 3
    let limitChanges = Atomic<Int>(0)
    let cancelCalls = Atomic<Int>(0)
    let priorityChanges = Atomic<Int>(0)

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

        var random = StressRun.generator(seed, stream, part: 1)
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

        let pacer = Pacer(jobCount: jobCount, mutators: StressRun.mutatorCount)
        self.pacer = pacer

        // Create every job up front; ids (and so the initial topological order) follow the index.
        var jobs: [Job] = []
        var probes: [JobProbe] = []
        jobs.reserveCapacity(jobCount)
        probes.reserveCapacity(jobCount)
        for index in 0..<jobCount {
            let roll = random.int(100)
            let kind: JobProbe.Kind =
                switch roll {
                case 0..<5: .asyncInline
                case 5..<30: .asyncLater
                case 30..<33: .task
                case 33..<36: .twoBlocks
                default: .block
                }
            let probe = JobProbe(
                index: index, kind: kind, queue: queueProbes[random.int(2)], finishTwice: random.chance(0.1), log: log)
            let job: Job
            switch kind {
            case .block:
                job = BlockJob {
                    probe.workBegins()
                    probe.workEnds()
                }
            case .twoBlocks:
                let blockJob = BlockJob {
                    probe.workBegins()
                    probe.workEnds()
                }
                blockJob.addExecutionBlock {
                    probe.checkDependenciesFinished(where: "second block started")
                    probe.secondBlockRuns.add(1, ordering: .relaxed)
                }
                job = blockJob
            case .asyncInline:
                job = AsyncBlockJob { job in
                    probe.workBegins()
                    probe.workEnds()
                    StressRun.finish(job, probe)
                }
            case .asyncLater:
                job = AsyncBlockJob { job in
                    probe.workBegins()
                    DispatchQueue.global().async {
                        probe.workEnds()
                        StressRun.finish(job, probe)
                    }
                }
            case .task:
                job = TaskJob {
                    probe.workBegins()
                    await Task.yield()
                    probe.checkDependenciesFinished(where: "TaskJob body resumed")
                    probe.workEnds()
                }
            }
            job.name = "job\(index)"
            job.queuePriority = JobPriority.allCases[random.int(JobPriority.allCases.count)]
            job.observe { event in probe.observed(event) }
            job.completionBlock = {
                let completions = probe.completions.add(1, ordering: .sequentiallyConsistent).newValue
                if completions != 1 {
                    log.record("\(probe.label): completion block ran \(completions) times")
                }
                let finished = probe.finishedEvents.load(ordering: .sequentiallyConsistent)
                if finished != 1 {
                    log.record("\(probe.label): completion block ran after \(finished) .finished events (expected 1)")
                }
                pacer.jobSettled()
            }
            jobs.append(job)
            probes.append(probe)
        }
        weakJobs = jobs.map(WeakJob.init)
        handoff = Locked(jobs)
        self.probes = probes
        var indexOfJob: [ObjectIdentifier: Int] = [:]
        indexOfJob.reserveCapacity(jobCount)
        for (index, job) in jobs.enumerated() {
            indexOfJob[ObjectIdentifier(job)] = index
        }
        self.indexOfJob = indexOfJob
    }

    /// The generator for one use (`part`) within a round.
    private static func generator(_ seed: UInt64, _ stream: UInt64, part: UInt64) -> SeededRandom {
        SeededRandom(seed: seed, stream: SeededRandom.mix(stream) ^ part)
    }

    private func random(_ part: UInt64) -> SeededRandom {
        StressRun.generator(seed, stream, part: part)
    }

    /// Finishes an asynchronous job from its work, checking that finish() finished it.
    static func finish(_ job: AsyncBlockJob, _ probe: JobProbe) {
        job.finish()
        if !job.isFinished {
            probe.log.record("\(probe.label): still \(job.state) after finish() returned")
        }
        if probe.finishTwice {
            job.finish()  // Must be ignored.
        }
    }

    // MARK: Execute

    /// Runs the round and reports its violations as issues; returns whether there were none.
    func execute() async -> Bool {
        let start = DispatchTime.now()
        // Flushed at once, so that the seed is on record even if the engine traps.
        print("RandomizedInvariantTests: \(log.context)")
        fflush(nil)

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

        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
        let survivors = checkFinalState(retained)
        let cancelled = probes.reduce(0) { $0 + ($1.eventSequence.contains(3) ? 1 : 0) }
        let summary =
            "\(log.context): \(String(format3(elapsed)))s; cancelled \(cancelled); "
            + (releaseJobs ? "jobs alive after the drain \(survivors); " : "")
            + "in-flight max \(queueProbes.map { "\($0.maxInFlight.load(ordering: .relaxed))/\($0.bound)" }); "
            + "dependencies checked at start \(queueProbes.reduce(0) { $0 + $1.dependenciesChecked.load(ordering: .relaxed) }); "
            + "\(stats); limit changes \(limitChanges.load(ordering: .relaxed)), "
            + "cancel calls \(cancelCalls.load(ordering: .relaxed)), priority changes \(priorityChanges.load(ordering: .relaxed))"
        print("RandomizedInvariantTests: \(summary)")
        fflush(nil)

        // Sanity: the run did what it is meant to exercise.
        if jobCount >= 1_000 && stats.deliberateCycles == 0 {
            log.record("no cyclic edge was tried; the graph did not exercise cycle detection")
        }
        if jobCount >= 1_000 && stats.backEdgesAccepted == 0 {
            log.record("no edge to a later-created job was accepted; the Pearce–Kelly reordering was not exercised")
        }

        for message in log.messages {
            Issue.record("\(message) — \(log.context)")
        }
        #expect(log.count == 0, "\(log.count) invariant violations — \(log.context). Summary: \(summary)")
        return log.count == 0
    }

    // MARK: Mutators

    private func mutate(_ mutator: Int, _ seeded: SeededRandom) {
        var random = seeded
        for _ in 0..<pacer.bursts {
            pacer.signals[mutator].wait()
            for _ in 0..<StressRun.opsPerBurst {
                // Every draw is made whatever happens next, so the sequence depends on the seed only.
                let roll = random.int(100)
                let queueIndex = random.int(2)
                let limit = random.int(in: 1...4)
                let recent = random.chance(0.8)
                let offset = random.int(400)
                let pick = random.next()
                let priority = JobPriority.allCases[random.int(JobPriority.allCases.count)]
                if changingLimits && roll < 35 {
                    queues[queueIndex].maxConcurrentJobCount = limit
                    limitChanges.add(1, ordering: .relaxed)
                    continue
                }
                let count = published.load(ordering: .acquiring)
                guard count > 0 else { continue }
                // Mostly recent jobs, which are more likely to be still waiting or running.
                let index = recent ? max(0, count - 1 - offset) : Int(pick % UInt64(count))
                guard let job = weakJobs[index].job else { continue }  // Freed: it had finished.
                if roll < 70 {
                    job.cancel()
                    cancelCalls.add(1, ordering: .relaxed)
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
        mutating func reaches(from start: Int, to target: Int, unfinishedOnly: Bool, jobs: [WeakJob]) -> Bool {
            stamp &+= 1
            var stack = [start]
            mark[start] = stamp
            while let node = stack.popLast() {
                if unfinishedOnly && (jobs[node].job?.isFinished ?? true) { continue }
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
            strong[index] ?? weakJobs[index].job
        }

        /// Tries `dependent waits for dependency`, checks the outcome, records accepted edges.
        func tryEdge(_ dependent: Int, _ dependency: Int, _ kind: EdgeKind) {
            // Drawn first, so that the random sequence does not depend on the outcome.
            let sampled = random.chance(0.02)
            guard let dependentJob = job(dependent), let dependencyJob = job(dependency) else {
                stats.skippedFreed += 1
                return
            }
            let isPublished = dependent < published.load(ordering: .acquiring)
            do throws(JobError) {
                try dependentJob.addDependency(dependencyJob)
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
            if !model.waitsFor[dependent].contains(dependency) {
                model.waitsFor[dependent].append(dependency)
                probes[dependent].dependencies.withLock { $0.append(WeakJob(dependencyJob)) }
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
                    (recent: random.chance(0.75), offset: random.int(300), any: random.next())
                }
                let tryBackEdge = random.chance(0.08)
                let backPick = random.next()
                let tryLateEdge = random.chance(0.02)
                let latePick = random.next()
                let tryCycle = random.chance(0.15)
                let cycleSteps = random.int(in: 1...4)
                let cyclePicks = (0..<4).map { _ in random.next() }
                let trySelf = random.chance(0.01)
                let tryDuplicate = random.chance(0.02)

                // Up to three dependencies on earlier jobs, mostly recent ones, on either queue.
                for pick in forwardPicks.prefix(forwardCount) {
                    let dependency = pick.recent ? max(0, index - 1 - pick.offset) : Int(pick.any % UInt64(index))
                    tryEdge(index, dependency, .forward)
                }
                // An earlier job of the batch waits for this one: the new dependency was created
                // later than its dependent, so the engine must reorder (or find a cycle).
                if index > batch.lowerBound && tryBackEdge {
                    stats.backEdgesTried += 1
                    tryEdge(batch.lowerBound + Int(backPick % UInt64(index - batch.lowerBound)), index, .back)
                }
                // A job already on a queue waits for this one (it may have started: .alreadyStarted).
                if !previousBatch.isEmpty && tryLateEdge {
                    tryEdge(previousBatch.lowerBound + Int(latePick % UInt64(previousBatch.count)), index, .late)
                }
                // A certain cycle: a job of the batch that this one waits for, directly or through up
                // to three more jobs of the batch (none is on a queue yet, so none has finished),
                // must refuse to wait for this one.
                if tryCycle {
                    var end = index
                    for pick in cyclePicks.prefix(cycleSteps) {
                        let candidates = model.waitsFor[end].filter { $0 >= batch.lowerBound && $0 != index }
                        if candidates.isEmpty { break }
                        end = candidates[Int(pick % UInt64(candidates.count))]
                    }
                    if end != index {
                        stats.deliberateCycles += 1
                        checkDeliberateCycle(strong[end]!, end, waitsFor: job, index, &model)
                    }
                }
                if trySelf {
                    checkSelfDependency(job, index)
                }
                if tryDuplicate, let existing = model.waitsFor[index].last, let existingJob = self.job(existing, strong)
                {
                    do throws(JobError) {
                        try job.addDependency(existingJob)  // A duplicate: a no-op.
                    } catch {
                        log.record("job\(index): adding its dependency job\(existing) again threw \(error)")
                    }
                }
            }

            // A few jobs are cancelled before they are added: adding them must do nothing.
            for index in batch where random.chance(0.005) {
                let job = strong[index]!
                job.cancel()
                stats.cancelledBeforeEnqueue += 1
                if !job.isFinished {
                    log.record("job\(index): cancelled before being added to a queue, but \(job.state)")
                }
            }

            // Add the batch: per queue, either atomically or one by one.
            for queueIndex in 0..<2 {
                let members = batch.filter { probes[$0].queue.index == queueIndex }.map { strong[$0]! }
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
        strong[index] ?? weakJobs[index].job
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

    /// `dependent` waits (directly or not) for `dependency`, through jobs none of which is on a queue
    /// yet, so `dependency waits for dependent` must be refused as a cycle listing both first.
    private func checkDeliberateCycle(
        _ dependencyJob: Job, _ dependency: Int, waitsFor dependentJob: Job, _ dependent: Int, _ model: inout Model
    ) {
        do throws(JobError) {
            try dependencyJob.addDependency(dependentJob)
        } catch {
            if error.code != .dependencyCycle {
                log.record("job\(dependency) → job\(dependent) closes a cycle but threw \(error)")
            } else {
                checkRefusedCycle(error, dependency, dependent, &model, bruteForce: true)
            }
            return
        }
        log.record(
            "job\(dependency) → job\(dependent) was accepted although job\(dependent) already waits for job\(dependency)"
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
    private func checkFinalState(_ retained: [Job?]) -> Int {
        for (index, queue) in queues.enumerated() {
            if queue.jobCount != 0 || !queue.jobs.isEmpty {
                log.record(
                    "queue \(index) drained but still counts \(queue.jobCount) jobs: \(queue.jobs.prefix(5).map(\.displayName))"
                )
            }
            let inFlight = queueProbes[index].inFlight.load(ordering: .sequentiallyConsistent)
            if inFlight != 0 {
                log.record("queue \(index): \(inFlight) jobs still in flight after the drain")
            }
        }
        var runsPerQueue = [0, 0]
        var survivors = 0
        for index in 0..<jobCount {
            let probe = probes[index]
            let runs = probe.runs.load(ordering: .sequentiallyConsistent)
            runsPerQueue[probe.queue.index] += runs
            let events = probe.eventSequence
            let cancelledEvent = events.contains(3)
            if !releaseJobs && retained[index] == nil {
                log.record("\(probe.label): the builder lost its reference")
            }
            // A freed job had finished; a live one is checked directly.
            if let job = retained[index] ?? weakJobs[index].job {
                survivors += 1
                if !job.isFinished {
                    log.record("\(probe.label): \(job.state) after both queues drained")
                }
                if !job.dependencies.isEmpty {
                    log.record("\(probe.label): finished but still lists \(job.dependencies.count) dependencies")
                }
                if job.isCancelled != cancelledEvent {
                    log.record(
                        "\(probe.label): isCancelled is \(job.isCancelled) but events were [\(describeEvents(events))]")
                }
            }
            if runs > 1 || (runs == 0 && !cancelledEvent) {
                log.record("\(probe.label): work ran \(runs) times (cancelled: \(cancelledEvent))")
            }
            if probe.kind == .twoBlocks && probe.secondBlockRuns.load(ordering: .relaxed) != runs {
                log.record(
                    "\(probe.label): second block ran \(probe.secondBlockRuns.load(ordering: .relaxed)) times, first \(runs)"
                )
            }
            let completions = probe.completions.load(ordering: .sequentiallyConsistent)
            let finished = probe.finishedEvents.load(ordering: .sequentiallyConsistent)
            if completions != 1 || finished != 1 {
                log.record(
                    "\(probe.label): completion block ran \(completions) times, .finished delivered \(finished) times")
            }
            // Event order: [.ready], .started, [.cancelled], .finished for a job that ran;
            // [.ready], .cancelled, .finished for one cancelled before it started.
            let valid: [[UInt64]] = runs == 1 ? [[1, 2, 4], [1, 2, 3, 4]] : [[3, 4], [1, 3, 4]]
            if !valid.contains(events) || probe.eventCount.load(ordering: .relaxed) != events.count {
                log.record(
                    "\(probe.label): events [\(describeEvents(events))] (\(probe.eventCount.load(ordering: .relaxed)) delivered) for a job whose work ran \(runs) times"
                )
            }
        }
        for (index, queueProbe) in queueProbes.enumerated() {
            let starts = queueProbe.starts.load(ordering: .relaxed)
            if starts != runsPerQueue[index] {
                log.record("queue \(index): \(starts) starts counted but its jobs ran \(runsPerQueue[index]) times")
            }
        }
        return survivors
    }
}

private func format3(_ value: Double) -> String {
    let thousandths = Int((value * 1000).rounded())
    let fraction = String(thousandths % 1000)
    return "\(thousandths / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)"
}
