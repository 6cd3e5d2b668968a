extension Report {
    /// The default output: a fixed-width table per scenario, the chain sweep, then the targets.
    static func table(_ run: BenchmarkRun, targets: [Target]) -> String {
        var lines = ["Conductor benchmarks", header(run), ratioLegend, ""]
        for scenario in run.scenarios {
            lines.append("\(scenario.id): \(scenario.summary)")
            let (rows, notes) = rows(scenario)
            lines += grid([headers(scenario.metric)] + rows.map(\.cells), leftColumns: [0])
            lines += notes.map { "  note: " + $0 }
            if let lock = scenario.lock {
                lines.append("  engine lock: " + lock.summary)
            }
            lines.append("")
            if scenario.id == "chain", let scaling = run.scaling {
                lines += scalingTable(scaling)
                lines.append("")
            }
        }
        lines += busyTable(run)
        lines += lockTable(run)
        lines.append("Targets (from this run)")
        lines += grid(
            targets.map { [$0.verdict.rawValue, $0.scenario, $0.goal, $0.detail] }, leftColumns: [0, 1, 2, 3])
        if run.configuration.quick {
            lines.append("  note: --quick uses small sizes and one run; judge the targets from a full run")
        }
        lines.append("")
        lines.append("Total wall time: \(Format.seconds(run.wallSeconds))")
        lines.append(Target.verdict(run, targets: targets))
        return lines.joined(separator: "\n")
    }

    /// `--busy`: each system's median with one core kept busy against its median without.
    static func busyTable(_ run: BenchmarkRun) -> [String] {
        guard !run.busy.isEmpty else { return [] }
        var lines = [
            "With one core kept busy (--busy): each system's median against its own median on the quiet machine, same run"
        ]
        lines += grid(busyRows(run), leftColumns: [0, 1])
        lines.append("")
        return lines
    }

    /// Header, then per scenario and system: quiet median, busy median, and busy / quiet.
    static func busyRows(_ run: BenchmarkRun) -> [[String]] {
        var rows = [["scenario", "system", "quiet", "busy", "busy/quiet"]]
        for comparison in run.busyComparisons {
            let (scenario, busy, quiet) = (comparison.scenario, comparison.busy, comparison.quietMedian)
            let cell: (String, String) =
                switch busy.outcome {
                case .measured(let stats): (Format.figure(stats.median), Format.ratio(stats.median / quiet))
                case .failed: ("FAIL", "—")
                case .notApplicable: ("n/a", "—")
                }
            rows.append([
                scenario.id, busy.system.rawValue, Format.figure(quiet) + " " + scenario.metric.unit, cell.0, cell.1,
            ])
        }
        return rows
    }

    /// `--lock-profile`: the engine lock per job in every scenario, and the ceiling it sets.
    static func lockTable(_ run: BenchmarkRun) -> [String] {
        let profiled = run.scenarios.filter { $0.lock != nil }
        guard !profiled.isEmpty else { return [] }
        var lines = [
            "Engine lock per job (median of \(LockHold.runs) profiled Conductor runs per scenario; holds less one clock read each)"
        ]
        var rows = [["scenario", "acquisitions", "held ns", "waited ns", "held % of run", "ceiling M jobs/s"]]
        for scenario in profiled {
            let lock = scenario.lock!
            rows.append([
                scenario.id, Format.fixed(lock.acquisitionsPerJob, 1), Format.figure(lock.correctedHeldPerJob),
                Format.figure(lock.waitedPerJob), Format.fixed(lock.heldShare * 100, 0),
                Format.fixed(lock.ceilingJobsPerSecond / 1e6, 1),
            ])
        }
        lines += grid(rows, leftColumns: [0])
        let clock = profiled[0].lock!.clockReadNanoseconds
        lines.append(
            "  note: a clock read costs about \(Format.figure(clock)) ns here; each acquisition's measured hold "
                + "includes about one, subtracted above")
        lines.append("")
        return lines
    }

    static func scalingTable(_ scaling: Scaling) -> [String] {
        var lines = [
            "chain scaling: ns per job by chain length (Conductor: median of its runs; Foundation: one run per length)"
        ]
        lines += grid(scalingRows(scaling), leftColumns: [])
        lines += scalingNotes(scaling).map { "  note: " + $0 }
        return lines
    }

    /// The sweep as rows, header first: jobs, Conductor ns/job, Foundation ns/job, their ratio.
    static func scalingRows(_ scaling: Scaling) -> [[String]] {
        var rows = [["jobs", "Conductor ns/job", "Foundation ns/job", "Foundation/Conductor"]]
        for jobs in Set(scaling.points.map(\.jobs)).sorted() {
            let conductor = scaling.points.first { $0.system == .conductor && $0.jobs == jobs }
            let foundation = scaling.points.first { $0.system == .foundation && $0.jobs == jobs }
            func cell(_ point: ScalingPoint?) -> String {
                guard let point else { return "—" }
                return point.failure != nil ? "FAIL" : point.stats.map { Format.figure($0.median) } ?? "—"
            }
            var ratio = "—"
            if let c = conductor?.stats?.median, let f = foundation?.stats?.median { ratio = Format.ratio(f / c) }
            rows.append([Format.count(jobs), cell(conductor), cell(foundation), ratio])
        }
        return rows
    }

    static func scalingNotes(_ scaling: Scaling) -> [String] {
        scaling.notes
            + scaling.points.compactMap { point in
                point.failure.map { "\(point.system.rawValue) at \(Format.count(point.jobs)): FAIL, \($0)" }
            }
    }

    /// Aligns rows into columns two spaces apart, indented by two; columns not in `leftColumns` are right-aligned.
    private static func grid(_ rows: [[String]], leftColumns: Set<Int>) -> [String] {
        let widths = rows.reduce(into: [Int]()) { widths, row in
            for (index, cell) in row.enumerated() {
                if index >= widths.count { widths.append(0) }
                widths[index] = max(widths[index], cell.count)
            }
        }
        return rows.map { row in
            var line = ""
            for (index, cell) in row.enumerated() {
                let last = index == row.count - 1
                line +=
                    "  "
                    + (leftColumns.contains(index) && last
                        ? cell : Format.pad(cell, widths[index], right: !leftColumns.contains(index)))
            }
            return line
        }
    }
}
