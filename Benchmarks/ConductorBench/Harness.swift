import Conductor
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Runs scenarios: warm-up, then interleaved runs, then medians.
///
/// Within each run every system runs once, and the order rotates from run to run, so drift of a
/// noisy machine (another process, frequency changes) hits every system alike. Foundation is
/// planned by ``FoundationBudget`` first; its probes are its warm-up.
struct Harness {
    let runs: Int
    /// Seconds Foundation may spend per scenario, probes included.
    let foundationBudget: Double
    /// Whether to run Conductor once more per scenario with the engine lock measured.
    var lockProfile = false
    /// The systems to run; the others are reported as not run.
    var systems = Set(System.allCases)

    func measure(_ scenario: Scenario) -> ScenarioResult {
        Console.progress("\(scenario.id): \(scenario.summary)")
        var result = ScenarioResult(
            id: scenario.id, summary: scenario.summary, metric: scenario.metric, measurements: [])
        var bodies: [System: (Int) -> Trial] = [:]
        var plans: [System: RunPlan] = [:]
        var failures: [System: String] = [:]
        var trials: [System: [Trial]] = [:]
        var active: [System] = []

        for (system, workload) in scenario.workloads {
            switch workload {
            case .notApplicable(let reason):
                result.measurements.append(Measurement(system: system, outcome: .notApplicable(reason)))
            case .run where !systems.contains(system):
                result.measurements.append(
                    Measurement(system: system, outcome: .notApplicable("not selected (--systems)")))
            case .run(let method, let body):
                bodies[system] = body
                active.append(system)
                result.measurements.append(Measurement(system: system, outcome: .failed("not run"), method: method))
            }
        }

        // Warm up every system; plan Foundation within its budget.
        for system in active {
            let body = bodies[system]!
            if system == .foundation {
                let outcome = FoundationBudget.plan(
                    size: scenario.size, runs: runs, budget: foundationBudget, label: scenario.id,
                    describe: scenario.describe
                ) { size in
                    execute(body, size: size, label: "\(scenario.id) (Foundation)")
                }
                switch outcome {
                case .plan(let plan): plans[system] = plan
                case .failed(let failure): failures[system] = failure
                }
            } else {
                plans[system] = RunPlan(size: scenario.size, runs: runs)
                let (trial, seconds) = execute(body, size: scenario.size, label: "\(scenario.id) (\(system.rawValue))")
                failures[system] = trial.failure
                Console.progress("  \(scenario.id): \(system.rawValue) warm-up: \(Format.seconds(seconds))")
            }
        }

        // Foundation's runs are stopped when they outlive what is left of its budget.
        var foundationSpent = plans[.foundation]?.probeSeconds ?? 0
        var stopped: String?
        for run in 0..<runs {
            let order = active.indices.map { active[($0 + run) % active.count] }
            let due = order.filter {
                failures[$0] == nil && plans[$0]!.runs > run && !($0 == .foundation && stopped != nil)
            }
            if due.isEmpty { break }
            var line = "  \(scenario.id): run \(run + 1)/\(runs):"
            for system in due {
                // What is left of the budget, plus a tenth of it: the plan already aims at 90% of
                // what is left, so only a run whose estimate was well off is stopped.
                let stop =
                    system == .foundation
                    ? FoundationStop.arm(seconds: foundationBudget * 1.1 - foundationSpent) : nil
                let (trial, seconds) = execute(
                    bodies[system]!, size: plans[system]!.size, label: "\(scenario.id) (\(system.rawValue))")
                if let stop {
                    foundationSpent += seconds
                    // A run the stop caught before it finished gets no figure; one that finished
                    // cleanly anyway is kept, and is the last.
                    let fired = FoundationStop.disarm(stop)
                    if fired, let failure = trial.failure {
                        stopped =
                            "Foundation was stopped at its budget of \(Format.seconds(foundationBudget)) in run "
                            + "\(run + 1) (\(Format.seconds(foundationSpent)) spent, probes included), its operations "
                            + "cancelled: \(failure)"
                        line += " Foundation stopped at its budget;"
                        continue
                    }
                    if fired {
                        stopped =
                            "Foundation ran past its budget of \(Format.seconds(foundationBudget)) in run \(run + 1) "
                            + "(\(Format.seconds(foundationSpent)) spent, probes included); its later runs were skipped"
                    }
                }
                if let failure = trial.failure {
                    failures[system] = failure
                    line += " \(system.rawValue) FAIL;"
                } else {
                    trials[system, default: []].append(trial)
                    line += " \(system.rawValue) \(Format.figure(trial.perJob)) \(scenario.metric.unit);"
                }
            }
            Console.progress(String(line.dropLast()))
        }

        if lockProfile, let body = bodies[.conductor], failures[.conductor] == nil {
            result.lock = profileLock(body, size: scenario.size, label: scenario.id)
        }

        // Summarize. A failure wins over any figures: a wrong result gets no time.
        for index in result.measurements.indices where bodies[result.measurements[index].system] != nil {
            let system = result.measurements[index].system
            if let failure = failures[system] {
                result.measurements[index].outcome = .failed(failure)
            } else if let systemTrials = trials[system], let first = systemTrials.first {
                result.measurements[index].outcome = .measured(Stats(systemTrials, metric: scenario.metric))
                result.measurements[index].jobs = first.jobs
                let blocks = systemTrials.compactMap(\.waiterBlocksPerBatch).sorted()
                if blocks.count == systemTrials.count, let most = blocks.last {
                    result.measurements[index].waiterBlocksPerBatch = (Stats.median(blocks), most)
                }
            }
            if system == .foundation, let stopped {
                if trials[system] == nil {
                    result.measurements[index].outcome = .notApplicable(stopped)
                    result.measurements[index].note = plans[system]?.note
                } else {
                    result.measurements[index].note = [plans[system]?.note, stopped].compactMap { $0 }.joined(
                        separator: "; ")
                }
                continue
            }
            if let plan = plans[system] {
                result.measurements[index].note = plan.note
                result.measurements[index].reducedSize = plan.reducedSize
                result.measurements[index].growthExponent = plan.growthExponent
            }
        }
        return result
    }

    /// The chain scaling sweep: Conductor at each length of `sizes.chainSweep` (warm-up plus the
    /// usual runs), and Foundation once per length, doubling from `foundationSweepStart` while the
    /// estimated next run fits in what is left of its budget.
    func sweepChain(conductor: (Int) -> Trial, foundation: ((Int) -> Trial)?, sizes: Sizes) -> Scaling {
        var scaling = Scaling()
        for size in sizes.chainSweep {
            let label = "chain sweep (Conductor, \(Format.count(size)))"
            var point = ScalingPoint(system: .conductor, jobs: size)
            var collected: [Trial] = []
            for run in 0...runs {
                let (trial, _) = execute(conductor, size: size, label: label)
                if let failure = trial.failure {
                    point.failure = failure
                    break
                }
                if run > 0 { collected.append(trial) }  // run 0 is the warm-up
            }
            if point.failure == nil {
                point.stats = Stats(collected, metric: .nanosecondsPerJob)
            }
            Console.progress(
                "  chain sweep: Conductor at \(Format.count(size)): "
                    + (point.stats.map { Format.figure($0.median) + " ns/job" } ?? "FAIL"))
            scaling.points.append(point)
        }

        guard let foundation else { return scaling }
        var spent = 0.0
        var measured: [(size: Int, seconds: Double)] = []
        var size = sizes.foundationSweepStart
        while size <= sizes.foundationSweepMax {
            if let last = measured.last {
                // Growth from the last two lengths (time ∝ length^k), or quadratic from one.
                var k = 2.0
                if measured.count >= 2 {
                    let previous = measured[measured.count - 2]
                    let fitted = log(last.seconds / previous.seconds) / log(Double(last.size) / Double(previous.size))
                    k = min(max(fitted.isFinite ? fitted : 2, 1), 2.5)
                }
                let estimate = last.seconds * pow(Double(size) / Double(last.size), k)
                if spent + estimate > foundationBudget {
                    scaling.notes.append(
                        "Foundation: one run per length, doubling from "
                            + "\(Format.count(sizes.foundationSweepStart)) jobs; "
                            + "stopped before \(Format.count(size)) (estimated \(Format.seconds(estimate)); "
                            + "budget \(Format.seconds(foundationBudget)), \(Format.seconds(spent)) spent)")
                    break
                }
            }
            let (trial, seconds) = execute(
                foundation, size: size, label: "chain sweep (Foundation, \(Format.count(size)))")
            spent += seconds
            var point = ScalingPoint(system: .foundation, jobs: size)
            if let failure = trial.failure {
                point.failure = failure
            } else {
                point.stats = Stats([trial], metric: .nanosecondsPerJob)
            }
            scaling.points.append(point)
            Console.progress(
                "  chain sweep: Foundation at \(Format.count(size)): "
                    + (point.stats.map { Format.figure($0.median) + " ns/job" } ?? "FAIL"))
            if point.failure != nil { break }
            measured.append((size, seconds))
            size *= 2
        }
        if size > sizes.foundationSweepMax {
            scaling.notes.append(
                "Foundation: one run per length, doubling from \(Format.count(sizes.foundationSweepStart)) jobs")
        }
        return scaling
    }

    /// Three more runs of Conductor's workload with the engine lock measured; the one with the
    /// median hold per job is reported (holds on a busy machine vary from run to run). Not among
    /// the timed runs: the clock reads slow the lock down.
    private func profileLock(_ body: (Int) -> Trial, size: Int, label: String) -> LockHold? {
        let clockRead = _LockProfiler.clockReadNanoseconds()
        var holds: [LockHold] = []
        for _ in 0..<LockHold.runs {
            _LockProfiler.start()
            let (trial, seconds) = execute(body, size: size, label: "\(label) (Conductor, lock profile)")
            let profile = _LockProfiler.stop()
            guard trial.failure == nil else { return nil }
            holds.append(
                LockHold(
                    jobs: trial.jobs, wallNanoseconds: seconds * 1e9, acquisitions: profile.acquisitions,
                    heldNanoseconds: Double(profile.heldNanoseconds),
                    waitedNanoseconds: Double(profile.waitedNanoseconds), clockReadNanoseconds: clockRead))
        }
        let hold = holds.sorted { $0.heldPerJob < $1.heldPerJob }[holds.count / 2]
        Console.progress("  \(label): engine lock: \(hold.summary)")
        return hold
    }

    /// Runs one trial under the watchdog and returns it with its wall time in seconds (setup and
    /// teardown included, which is what the budget must count).
    private func execute(_ body: (Int) -> Trial, size: Int, label: String) -> (Trial, Double) {
        let ticket = Watchdog.arm(label: label, seconds: max(600, 4 * foundationBudget))
        defer { Watchdog.disarm(ticket) }
        let (trial, nanoseconds) = Clock.measure { body(size) }
        return (trial, nanoseconds / 1e9)
    }
}

/// Ends the process if a trial hangs (an engine bug, or a deadlocked baseline), naming it, rather
/// than leaving CI to time out without a word.
enum Watchdog {
    private static let current = Atomic<Int>(0)

    static func arm(label: String, seconds: Double) -> Int {
        let ticket = current.wrappingAdd(1, ordering: .relaxed).newValue
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            if current.load(ordering: .relaxed) == ticket {
                Console.progress(
                    "conductor-bench: \(label) did not finish within \(Format.seconds(seconds)); giving up")
                exit(3)
            }
        }
        return ticket
    }

    static func disarm(_ ticket: Int) {
        _ = current.compareExchange(expected: ticket, desired: ticket + 1, ordering: .relaxed)
    }
}
