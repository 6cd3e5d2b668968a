import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// The stress side of Docs/Composition.md: random graphs over three queues that mix exclusivity
// categories, conditions that pass, fail, throw or take their time, groups with children, jobs
// produced while running (into a queue or into a group), asynchronous jobs and random
// cancellation. Each round must drain, and every job must keep the rules below.

/// What one job of a round recorded about itself.
private final class CompositionProbe: Sendable {
    let name: String
    let categories: Set<String>
    /// Times the job's work ran; at most one.
    let ran = Counter()
    /// `.finished` deliveries; exactly one.
    let finished = Counter()
    /// Conditions that answered `false` or threw.
    let refusals = Counter()
    /// Conditions evaluated while a dependency of the job was unfinished.
    let early = Counter()
    /// Whether the job names a category its group does not hold, so that it must fail with
    /// `categoryNotHeldByGroup` without running.
    let mustBeRefused: Bool

    init(name: String, categories: Set<String>, mustBeRefused: Bool = false) {
        self.name = name
        self.categories = categories
        self.mustBeRefused = mustBeRefused
    }
}

@Suite("Composition stress")
struct CompositionStressTests {
    static let rounds = 4
    static let jobsPerRound = 1_500

    @Test("categories, conditions, groups and produced jobs over three queues: rules hold and every round drains")
    func compositionStress() async throws {
        let seed = SeededRandom.runSeed
        for round in 0..<Self.rounds {
            try await Self.runRound(round, seed: seed)
        }
    }

    private static func runRound(_ round: Int, seed: UInt64) async throws {
        var random = SeededRandom(seed: seed, stream: 0xC057_0000 + UInt64(round))
        let replay = "round \(round), \(SeededRandom.describe(seed))"
        let names = (0..<6).map { "stress-r\(round)-c\($0)" }
        let guardian = CategoryGuard(names)
        let problems = Log<String>()
        let queues = (0..<3).map { JobQueue(name: "composition-\(round)-\($0)", maxConcurrentJobCount: 1 + $0 * 2) }
        let probes = Log<(Job, CompositionProbe)>()

        func drawCategories(from pool: [String]) -> Set<String> {
            var drawn: Set<String> = []
            for _ in 0..<random.int(in: 0...2) where !pool.isEmpty { drawn.insert(pool[random.int(pool.count)]) }
            return drawn
        }

        /// A leaf job: synchronous, or asynchronous and finished from another thread; it may
        /// produce one or two follow-ups while it runs, which are registered when produced (a
        /// producer that never runs produces nothing). Its categories are drawn from `pool`; inside
        /// a group with categories it enters the group's in the guard (`within`), since it shares
        /// them, and with `refusedCategory` it also names one the group does not hold.
        func makeLeaf(
            _ name: String, produces: Int, categories pool: [String], within groupCategories: Set<String>? = nil,
            refusedCategory: String? = nil
        ) -> (Job, CompositionProbe) {
            let probe = CompositionProbe(
                name: name, categories: drawCategories(from: pool), mustBeRefused: refusedCategory != nil)
            let guarded = groupCategories ?? probe.categories
            let followUps: [(Job, CompositionProbe)] = (0..<produces).map { index in
                makeLeaf("\(name).p\(index)", produces: 0, categories: pool, within: groupCategories)
            }
            let job: Job
            if random.chance(0.3) {
                job = AsyncBlockJob { job in
                    guardian.enter(guarded, name)
                    _ = probe.ran.increment()
                    for (followUp, followUpProbe) in followUps {
                        Self.register(followUp, followUpProbe, in: probes)
                        job.produce(followUp)
                    }
                    DispatchQueue.global().async {
                        guardian.leave(guarded)
                        job.finish()
                    }
                }
            } else {
                let box = _JobBox()
                job = BlockJob {
                    guardian.enter(guarded, name)
                    _ = probe.ran.increment()
                    for (followUp, followUpProbe) in followUps {
                        Self.register(followUp, followUpProbe, in: probes)
                        box.job?.produce(followUp)
                    }
                    guardian.leave(guarded)
                }
                box.job = job
            }
            job.name = name
            job.exclusivityCategories = probe.categories.union(refusedCategory.map { [$0] } ?? [])
            return (job, probe)
        }

        func register(_ job: Job, _ probe: CompositionProbe) {
            Self.register(job, probe, in: probes)
        }

        var jobs: [Job] = []
        for index in 0..<jobsPerRound {
            let name = "r\(round)-j\(index)"
            let job: Job
            if random.chance(0.1) {
                // A group of leaves. Its children share its categories: with any, it runs them one
                // at a time, and each enters all of them in the guard.
                let probe = CompositionProbe(name: name, categories: drawCategories(from: names))
                let group = GroupJob(
                    name: name, maxConcurrentJobCount: probe.categories.isEmpty ? 1 + random.int(3) : 1)
                group.exclusivityCategories = probe.categories
                for child in 0..<random.int(in: 1...5) {
                    // Children share the group's categories (and may name only those); now and
                    // then one names another and must be refused.
                    let outside = names.filter { !probe.categories.contains($0) }
                    let leaf = makeLeaf(
                        "\(name).c\(child)", produces: random.chance(0.2) ? 1 : 0,
                        categories: probe.categories.sorted(),
                        within: probe.categories,
                        refusedCategory: random.chance(0.1) ? outside[random.int(outside.count)] : nil)
                    register(leaf.0, leaf.1)
                    group.addChild(leaf.0)
                }
                group.observe { event in
                    guard event == .finished else { return }
                    let unfinished = group.childJobs.filter { !$0.isFinished }
                    if !unfinished.isEmpty {
                        problems.append(
                            "\(name): the group finished before its children \(unfinished.map { "\($0.displayName) \($0.state) \($0.isCancelled)" }) group cancelled \(String(describing: group.cancellationReason))"
                        )
                    }
                }
                register(group, probe)
                job = group
            } else {
                let leaf = makeLeaf(name, produces: random.chance(0.1) ? random.int(in: 1...2) : 0, categories: names)
                register(leaf.0, leaf.1)
                job = leaf.0
            }
            for _ in 0..<random.int(in: 0...2) where !jobs.isEmpty {
                try job.addDependency(jobs[random.int(jobs.count)])
            }
            if random.chance(0.2) {
                let probe = probes.values.last { $0.0 === job }!.1
                let answer = random.int(4)
                let dependencies = job.dependencies
                job.addCondition(
                    BlockCondition(name: "\(name)-condition") { _ in
                        if !dependencies.allSatisfy(\.isFinished) { _ = probe.early.increment() }
                        switch answer {
                        case 0:
                            _ = probe.refusals.increment()
                            return false
                        case 1:
                            _ = probe.refusals.increment()
                            throw ConditionRefused()
                        case 2:
                            await Task.yield()
                            return true
                        default:
                            return true
                        }
                    })
            }
            jobs.append(job)
        }

        for (index, job) in jobs.enumerated() {
            queues[index % queues.count].addJob(job)
            if random.chance(0.02) {
                jobs[random.int(index + 1)].cancel()
            }
        }
        for queue in queues { await queue.waitUntilAllJobsAreFinished() }
        // Groups finish after their children, and produced jobs are added (and registered) before
        // their producer finishes, so once the queues are idle every registered job has finished.

        var refused = 0
        for (job, probe) in probes.values {
            if !job.isFinished { problems.append("\(probe.name): not finished (\(job.state))") }
            if probe.finished.value != 1 {
                problems.append("\(probe.name): .finished delivered \(probe.finished.value) times")
            }
            if probe.ran.value > 1 { problems.append("\(probe.name): its work ran \(probe.ran.value) times") }
            if probe.early.value > 0 {
                problems.append("\(probe.name): a condition was evaluated before its dependencies finished")
            }
            if probe.refusals.value > 0 {
                if probe.ran.value > 0 { problems.append("\(probe.name): its work ran although a condition refused") }
                if !job.isCancelled { problems.append("\(probe.name): a condition refused but it was not cancelled") }
                if let reason = job.cancellationReason, reason.code != .conditionFailed, reason.code != .requested,
                    reason.code != .parentCancelled
                {
                    problems.append("\(probe.name): a condition refused, yet cancelled for \(reason)")
                }
            }
            if probe.mustBeRefused {
                if probe.ran.value > 0 {
                    problems.append("\(probe.name): ran although it named a category its group lacks")
                }
                if case .failed(let error as JobError)? = job.outcome, error.code == .categoryNotHeldByGroup {
                    refused += 1
                } else if !job.isCancelled {
                    problems.append(
                        "\(probe.name): named a category its group lacks, yet ended \(String(describing: job.outcome))")
                }
            } else if !job.isCancelled && !(job is GroupJob) && probe.ran.value != 1 {
                problems.append("\(probe.name): not cancelled, yet its work ran \(probe.ran.value) times")
            }
        }
        #expect(guardian.violations.values.isEmpty, "\(guardian.violations.values.prefix(5)) — \(replay)")
        #expect(
            problems.values.isEmpty, "\(problems.count) problems; the first: \(problems.values.prefix(5)) — \(replay)")
        #expect(JobQueue._exclusivityCategoriesInUse(among: names) == 0, "\(replay)")
        #expect(probes.count > jobsPerRound)
        #expect(refused > 0, "no job was refused a category its group lacks — \(replay)")
    }
}

extension CompositionStressTests {
    fileprivate static func register(_ job: Job, _ probe: CompositionProbe, in probes: Log<(Job, CompositionProbe)>) {
        job.observe { event in
            if event == .finished { _ = probe.finished.increment() }
        }
        probes.append((job, probe))
    }
}

private struct ConditionRefused: Error {}

/// Lets a `BlockJob`'s work reach its own job, to produce follow-ups.
// @unchecked Sendable: `job` is written once, before the job is added to a queue, and read only by
// its work, which the queue starts after that write.
private final class _JobBox: @unchecked Sendable {
    weak var job: Job?
}
