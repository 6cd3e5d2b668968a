/// The performance targets, judged from figures measured in this run.
struct Target {
    enum Verdict: String {
        case pass = "PASS"
        case miss = "MISS"
        /// A system involved gave a wrong result, so there is no figure to judge.
        case fail = "FAIL"
        /// The scenario was filtered out, or a system has no figure.
        case notRun = "—"
    }

    let scenario: String
    let goal: String
    let verdict: Verdict
    let detail: String

    static func evaluate(_ run: BenchmarkRun) -> [Target] {
        var targets: [Target] = []
        for id in ["noop", "serial"] {
            targets.append(faster(run, id, than: .foundation, by: 10))
            targets.append(fasterPerJob(run, id, than: .dispatch))
        }
        targets.append(faster(run, "chain", than: .foundation, by: 1_000))
        targets.append(faster(run, "fan", than: .foundation, by: 1_000))
        targets.append(chainScaling(run))
        targets.append(batchAsCheap(run, "batch-chain", as: "chain", within: 1.5))
        targets.append(batchAsCheap(run, "batch-fan", as: "fan", within: 1.5))
        targets.append(batchWaiterBlocks(run, "batch-chain", atMost: 2))
        targets.append(batchWaiterBlocks(run, "batch-fan", atMost: 2))
        targets.append(faster(run, "cancel", than: .foundation, by: 10))
        targets.append(faster(run, "async", than: .foundation, by: 5))
        targets.append(memory(run, atMost: 250))
        // At or below the raw Dispatch floor on every scenario that has a Dispatch row.
        for id in ["chain", "fan", "dag", "cancel", "async", "producers"] {
            targets.append(fasterPerJob(run, id, than: .dispatch))
        }
        targets.append(atMost(run, "noop", nanoseconds: 350))
        targets.append(atMost(run, "chain", nanoseconds: 200))
        targets.append(spread(run))
        return targets
    }

    /// One line a reader trusts at a glance: whether every result was right, and the targets
    /// passed, missed and not judged.
    static func verdict(_ run: BenchmarkRun, targets: [Target]) -> String {
        let count = { (verdict: Verdict) in targets.count { $0.verdict == verdict } }
        var line =
            run.hasFailure
            ? "Verdict: WRONG RESULTS (see FAIL above); " : "Verdict: every result was checked and right; "
        line += "targets: \(count(.pass)) passed, \(count(.miss)) missed"
        if count(.fail) > 0 { line += ", \(count(.fail)) not judged (a wrong result)" }
        if count(.notRun) > 0 { line += ", \(count(.notRun)) not run" }
        let missed = targets.filter { $0.verdict == .miss }.map(\.scenario)
        if !missed.isEmpty {
            var seen: Set<String> = []
            line += " (missed: " + missed.filter { seen.insert($0).inserted }.joined(separator: ", ") + ")"
        }
        if run.configuration.quick { line += "; --quick: judge targets from a full run" }
        return line
    }

    /// Conductor's median is at most `nanoseconds` per job.
    private static func atMost(_ run: BenchmarkRun, _ id: String, nanoseconds: Double) -> Target {
        let goal = "Conductor ≤ \(Format.count(Int(nanoseconds))) ns/job"
        guard let scenario = run.scenario(id) else {
            return Target(scenario: id, goal: goal, verdict: .notRun, detail: "not run")
        }
        if let problem = problem(scenario, [.conductor]) {
            return Target(scenario: id, goal: goal, verdict: problem.0, detail: problem.1)
        }
        let median = scenario.measurement(.conductor)!.stats!.median
        return Target(
            scenario: id, goal: goal, verdict: median <= nanoseconds ? .pass : .miss,
            detail: "\(Format.figure(median)) ns/job")
    }

    /// In every scenario with a Dispatch row, the spread of Conductor's runs (max / min) is no
    /// wider than Dispatch's in the same run.
    private static func spread(_ run: BenchmarkRun) -> Target {
        let goal = "Conductor's max/min no wider than Dispatch's, every scenario with both"
        var wider: [String] = []
        var judged = 0
        for scenario in run.scenarios where scenario.metric == .nanosecondsPerJob {
            guard let conductor = scenario.measurement(.conductor)?.stats,
                let dispatch = scenario.measurement(.dispatch)?.stats, conductor.runs > 1, dispatch.runs > 1
            else { continue }
            judged += 1
            let ours = conductor.max / conductor.min
            let theirs = dispatch.max / dispatch.min
            if ours > theirs {
                wider.append("\(scenario.id) \(Format.ratio(ours)) vs \(Format.ratio(theirs))")
            }
        }
        guard judged > 0 else {
            return Target(scenario: "all", goal: goal, verdict: .notRun, detail: "needs --runs 2 or more")
        }
        return Target(
            scenario: "all", goal: goal, verdict: wider.isEmpty ? .pass : .miss,
            detail: wider.isEmpty
                ? "\(judged) scenarios" : "wider in " + wider.joined(separator: ", ") + " (of \(judged) scenarios)")
    }

    /// Conductor is at least `factor` times faster per job than `baseline`.
    private static func faster(_ run: BenchmarkRun, _ id: String, than baseline: System, by factor: Double) -> Target {
        let goal = "Conductor ≥ \(Format.count(Int(factor)))× faster than \(baseline.rawValue)"
        guard let scenario = run.scenario(id) else {
            return Target(scenario: id, goal: goal, verdict: .notRun, detail: "not run")
        }
        if let problem = problem(scenario, [.conductor, baseline]) {
            return Target(scenario: id, goal: goal, verdict: problem.0, detail: problem.1)
        }
        let ratio = scenario.ratio(of: baseline, to: .conductor)!
        var detail = "\(baseline.rawValue) / Conductor = \(Format.ratio(ratio))"
        let conductorJobs = scenario.measurement(.conductor)?.jobs ?? 0
        if let base = scenario.measurement(baseline), base.reducedSize {
            detail +=
                " with \(baseline.rawValue) at \(Format.count(base.jobs ?? 0)) jobs, Conductor at "
                + "\(Format.count(conductorJobs))"
            if let k = base.growthExponent, k > 1.1 {
                detail +=
                    "; conservative: \(baseline.rawValue)'s time grows as size^\(Format.fixed(k, 2)), so its "
                    + "ns/job at full size is higher"
            }
        } else {
            detail += " at \(Format.count(conductorJobs)) jobs"
        }
        return Target(scenario: id, goal: goal, verdict: ratio >= factor ? .pass : .miss, detail: detail)
    }

    /// Conductor's median ns per job is below `baseline`'s.
    private static func fasterPerJob(_ run: BenchmarkRun, _ id: String, than baseline: System) -> Target {
        let goal = "Conductor at or below \(baseline.rawValue) per job"
        guard let scenario = run.scenario(id) else {
            return Target(scenario: id, goal: goal, verdict: .notRun, detail: "not run")
        }
        if let problem = problem(scenario, [.conductor, baseline]) {
            return Target(scenario: id, goal: goal, verdict: problem.0, detail: problem.1)
        }
        let conductor = scenario.measurement(.conductor)!.stats!.median
        let other = scenario.measurement(baseline)!.stats!.median
        return Target(
            scenario: id, goal: goal, verdict: conductor <= other ? .pass : .miss,
            detail:
                "\(Format.figure(conductor)) vs \(Format.figure(other)) ns/job (\(baseline.rawValue) / "
                + "Conductor = \(Format.ratio(other / conductor)))"
        )
    }

    /// Conductor's ns per job in a batch scenario (`addJobs(_:waitUntilFinished: true)`) is within
    /// `factor` of its ns per job in the plain scenario (`addJobs` then `waitUntilAllJobsAreFinished()`),
    /// both from this run: a batch wait wakes its waiter once, not once per job.
    private static func batchAsCheap(_ run: BenchmarkRun, _ id: String, as plainID: String, within factor: Double)
        -> Target
    {
        let goal =
            "Conductor's ns/job within \(Format.ratio(factor)) of its \(plainID) ns/job "
            + "(waitUntilAllJobsAreFinished)"
        guard let scenario = run.scenario(id) else {
            return Target(scenario: id, goal: goal, verdict: .notRun, detail: "not run")
        }
        guard let plain = run.scenario(plainID) else {
            return Target(
                scenario: id, goal: goal, verdict: .notRun,
                detail: "\(plainID) not run (--filter \(id),\(plainID) runs both)")
        }
        for candidate in [scenario, plain] {
            if let problem = problem(candidate, [.conductor]) {
                return Target(scenario: id, goal: goal, verdict: problem.0, detail: "\(candidate.id): \(problem.1)")
            }
        }
        let batch = scenario.measurement(.conductor)!.stats!.median
        let reference = plain.measurement(.conductor)!.stats!.median
        let ratio = batch / reference
        return Target(
            scenario: id, goal: goal, verdict: ratio <= factor ? .pass : .miss,
            detail:
                "\(Format.figure(batch)) vs \(Format.figure(reference)) ns/job (\(id) / \(plainID) = "
                + "\(Format.ratio(ratio)))")
    }

    /// Conductor's waiting thread blocks at most `limit` times per batch in
    /// `addJobs(_:waitUntilFinished: true)`, in every run: the batch wait wakes it once, not once per
    /// job. Unlike ``batchAsCheap(_:_:as:within:)``, this depends little on the machine's load. It
    /// judges the most of the runs because a wait that goes job by job does not always block: when
    /// the workers stay ahead of it, it finds each job finished.
    private static func batchWaiterBlocks(_ run: BenchmarkRun, _ id: String, atMost limit: Double) -> Target {
        let goal = "Conductor's waiting thread blocks ≤ \(Format.count(Int(limit))) times per batch in every run"
        guard let scenario = run.scenario(id) else {
            return Target(scenario: id, goal: goal, verdict: .notRun, detail: "not run")
        }
        if let problem = problem(scenario, [.conductor]) {
            return Target(scenario: id, goal: goal, verdict: problem.0, detail: problem.1)
        }
        guard let blocks = scenario.measurement(.conductor)?.waiterBlocksPerBatch else {
            return Target(
                scenario: id, goal: goal, verdict: .notRun, detail: "not counted on this platform (Linux only)")
        }
        var detail = "most \(Format.figure(blocks.max)), median \(Format.figure(blocks.median)) times per batch"
        let others = [System.dispatch, .foundation].compactMap { system in
            scenario.measurement(system)?.waiterBlocksPerBatch.map { "\(system.rawValue) \(Format.figure($0.max))" }
        }
        if !others.isEmpty { detail += " (most: " + others.joined(separator: ", ") + ")" }
        return Target(scenario: id, goal: goal, verdict: blocks.max <= limit ? .pass : .miss, detail: detail)
    }

    /// Conductor's chain ns per job stays within 2× across the sweep.
    private static func chainScaling(_ run: BenchmarkRun) -> Target {
        let goal = "Conductor's chain ns/job within 2× of itself from 10³ to 10⁶ jobs"
        guard let scaling = run.scaling else {
            return Target(scenario: "chain", goal: goal, verdict: .notRun, detail: "not run")
        }
        let points = scaling.points(for: .conductor)
        if let failed = points.first(where: { $0.failure != nil }) {
            return Target(
                scenario: "chain", goal: goal, verdict: .fail,
                detail: "\(Format.count(failed.jobs)) jobs: \(failed.failure!)")
        }
        let medians = points.compactMap { point in point.stats.map { (point.jobs, $0.median) } }
        guard let fastest = medians.min(by: { $0.1 < $1.1 }), let slowest = medians.max(by: { $0.1 < $1.1 }) else {
            return Target(scenario: "chain", goal: goal, verdict: .notRun, detail: "no figures")
        }
        let spread = slowest.1 / fastest.1
        var detail = medians.map { "\(Format.count($0.0)): \(Format.figure($0.1))" }.joined(separator: ", ")
        detail += " ns/job; slowest / fastest = \(Format.ratio(spread))"
        if medians.first?.0 != 1_000 || medians.last?.0 != 1_000_000 {
            detail += " (sweep covered \(Format.count(medians.first!.0)) to \(Format.count(medians.last!.0)) only)"
        }
        return Target(scenario: "chain", goal: goal, verdict: spread <= 2 ? .pass : .miss, detail: detail)
    }

    private static func memory(_ run: BenchmarkRun, atMost bytes: Double) -> Target {
        let goal = "≤ \(Format.count(Int(bytes))) bytes per queued BlockJob"
        guard let scenario = run.scenario("memory") else {
            return Target(scenario: "memory", goal: goal, verdict: .notRun, detail: "not run")
        }
        if let problem = problem(scenario, [.conductor]) {
            return Target(scenario: "memory", goal: goal, verdict: problem.0, detail: problem.1)
        }
        let measured = scenario.measurement(.conductor)!.stats!.median
        return Target(
            scenario: "memory", goal: goal, verdict: measured <= bytes ? .pass : .miss,
            detail:
                "\(Format.figure(measured)) B/job at \(Format.count(scenario.measurement(.conductor)?.jobs ?? 0)) jobs")
    }

    /// Why the systems' figures cannot be compared, if they cannot.
    private static func problem(_ scenario: ScenarioResult, _ systems: [System]) -> (Verdict, String)? {
        for system in systems {
            guard let measurement = scenario.measurement(system) else { return (.notRun, "\(system.rawValue) not run") }
            switch measurement.outcome {
            case .measured: continue
            case .failed(let failure): return (.fail, "\(system.rawValue): \(failure)")
            case .notApplicable(let reason): return (.notRun, "\(system.rawValue) n/a: \(reason)")
            }
        }
        return nil
    }
}
