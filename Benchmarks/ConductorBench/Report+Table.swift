extension Report {
    /// The default output: a fixed-width table per scenario, the chain sweep, then the targets.
    static func table(_ run: BenchmarkRun, targets: [Target]) -> String {
        var lines = ["Conductor benchmarks", header(run), ratioLegend, ""]
        for scenario in run.scenarios {
            lines.append("\(scenario.id): \(scenario.summary)")
            let (rows, notes) = rows(scenario)
            lines += grid([headers(scenario.metric)] + rows.map(\.cells), leftColumns: [0])
            lines += notes.map { "  note: " + $0 }
            lines.append("")
            if scenario.id == "chain", let scaling = run.scaling {
                lines += scalingTable(scaling)
                lines.append("")
            }
        }
        lines.append("Targets (from this run)")
        lines += grid(
            targets.map { [$0.verdict.rawValue, $0.scenario, $0.goal, $0.detail] }, leftColumns: [0, 1, 2, 3])
        if run.configuration.quick {
            lines.append("  note: --quick uses small sizes and one run; judge the targets from a full run")
        }
        lines.append("")
        lines.append("Total wall time: \(Format.seconds(run.wallSeconds))\(run.hasFailure ? "; FAILURES above" : "")")
        return lines.joined(separator: "\n")
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
