extension Report {
    /// `--markdown`: a section per scenario with a table, its notes and each system's method.
    static func markdown(_ run: BenchmarkRun, targets: [Target]) -> String {
        var lines = ["## Results", "", "Machine: \(header(run)).", "", ratioLegend, ""]
        for scenario in run.scenarios {
            lines.append("### `\(scenario.id)`")
            lines.append("")
            lines.append(scenario.summary.prefix(1).uppercased() + scenario.summary.dropFirst() + ".")
            lines.append("")
            let (rows, notes) = rows(scenario)
            lines += table([headers(scenario.metric)] + rows.map(\.cells), rightAligned: Set(1...7))
            lines.append("")
            for note in notes {
                lines.append("- " + escape(note))
            }
            if let lock = scenario.lock {
                lines.append("- Engine lock: " + escape(lock.summary))
            }
            for measurement in scenario.measurements {
                if let method = measurement.method {
                    lines.append("- \(measurement.system.rawValue): \(escape(method))")
                }
            }
            lines.append("")
            if scenario.id == "chain", let scaling = run.scaling {
                lines.append("#### Chain scaling")
                lines.append("")
                lines.append(
                    "ns per job by chain length (Conductor: median of its runs; Foundation: one run per length).")
                lines.append("")
                lines += table(scalingRows(scaling), rightAligned: [0, 1, 2, 3])
                lines.append("")
                lines += scalingNotes(scaling).map { "- " + escape($0) }
                lines.append("")
            }
        }
        if !run.busy.isEmpty {
            lines.append("### With one core kept busy")
            lines.append("")
            lines.append("Each system's median with another thread spinning on one core, against its quiet median.")
            lines.append("")
            lines += table(busyRows(run), rightAligned: [2, 3, 4])
            lines.append("")
        }
        lines.append("### Targets")
        lines.append("")
        lines += table(
            [["result", "scenario", "target", "measured"]]
                + targets.map { [$0.verdict.rawValue, "`\($0.scenario)`", $0.goal, $0.detail] },
            rightAligned: [])
        lines.append("")
        lines.append(escape(Target.verdict(run, targets: targets)))
        return lines.joined(separator: "\n")
    }

    private static func table(_ rows: [[String]], rightAligned: Set<Int>) -> [String] {
        guard let header = rows.first else { return [] }
        var lines = ["| " + header.map(escape).joined(separator: " | ") + " |"]
        lines.append(
            "|" + header.indices.map { rightAligned.contains($0) ? "---:" : "---" }.joined(separator: "|") + "|")
        for row in rows.dropFirst() {
            lines.append("| " + row.map(escape).joined(separator: " | ") + " |")
        }
        return lines
    }

    private static func escape(_ text: String) -> String {
        text.replacingPipes()
    }
}

extension String {
    fileprivate func replacingPipes() -> String {
        split(separator: "|", omittingEmptySubsequences: false).joined(separator: "\\|")
    }
}
