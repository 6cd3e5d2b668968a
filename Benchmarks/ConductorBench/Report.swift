/// Renders a ``BenchmarkRun`` as a text table (the default), Markdown or JSON.
enum Report {
    /// One table row, shared by the text and Markdown tables.
    struct Row {
        var system: String
        var jobs = "—"
        var median = "—"
        var min = "—"
        var max = "—"
        var milliseconds = "—"
        var versusFoundation = "—"
        var versusDispatch = "—"
        var ok = "ok"

        var cells: [String] { [system, jobs, median, min, max, milliseconds, versusFoundation, versusDispatch, ok] }
    }

    static func headers(_ metric: Metric) -> [String] {
        let columns = metric.columns
        return [
            "system", "jobs", columns.median, columns.min, columns.max, "median ms", "Foundation/this", "Dispatch/this",
            "ok",
        ]
    }

    /// The rows of a scenario, and the notes to print under it.
    static func rows(_ scenario: ScenarioResult) -> (rows: [Row], notes: [String]) {
        var rows: [Row] = []
        var notes: [String] = []
        let foundationReduced = scenario.measurement(.foundation)?.reducedSize ?? false
        for measurement in scenario.measurements {
            let name = measurement.system.rawValue
            var row = Row(system: name)
            switch measurement.outcome {
            case .notApplicable(let reason):
                row.median = "n/a"
                row.ok = "—"
                notes.append("\(name): n/a, \(reason)")
            case .failed(let failure):
                row.median = "FAIL"
                row.ok = "FAIL"
                notes.append("\(name): FAIL, \(failure)")
            case .measured(let stats):
                row.jobs = Format.count(measurement.jobs ?? 0) + (measurement.reducedSize ? "*" : "")
                row.median = Format.figure(stats.median)
                row.min = Format.figure(stats.min)
                row.max = Format.figure(stats.max)
                row.milliseconds = stats.medianMilliseconds.map(Format.figure) ?? "—"
                if measurement.system != .foundation,
                    let ratio = scenario.ratio(of: .foundation, to: measurement.system)
                {
                    row.versusFoundation = Format.ratio(ratio) + (foundationReduced ? "*" : "")
                }
                if measurement.system != .dispatch, let ratio = scenario.ratio(of: .dispatch, to: measurement.system) {
                    row.versusDispatch =
                        Format.ratio(ratio) + (foundationReduced && measurement.system == .foundation ? "*" : "")
                }
            }
            if let note = measurement.note {
                notes.append(note)
            }
            if let blocks = measurement.waiterBlocksPerBatch {
                notes.append(
                    "\(name): the waiting thread blocked \(Format.figure(blocks.median)) times per batch (median of "
                        + "runs; most \(Format.figure(blocks.max)); its voluntary context switches)")
            }
            rows.append(row)
        }
        if foundationReduced {
            notes.append(
                "* Foundation ran at a smaller size; ratios against it compare per-job figures at different sizes")
        }
        return (rows, notes)
    }

    static func header(_ run: BenchmarkRun) -> String {
        let configuration = run.configuration
        var line =
            "\(Machine.summary); \(configuration.runs) run\(configuration.runs == 1 ? "" : "s") per system "
            + "after a warm-up, "
        line +=
            "order rotating per run; Foundation budget \(Format.seconds(configuration.foundationBudget)) per scenario"
        if configuration.quick { line += "; QUICK (small sizes, smoke test only)" }
        if configuration.withTracer { line += "; a JobTracer records every Conductor job (--tracer)" }
        return line
    }

    static let ratioLegend =
        "Foundation/this and Dispatch/this: that system's median divided by this one's, both from this run "
        + "(35.2× = 35.2 times faster). How each system runs each scenario: --markdown, or Docs/Benchmarks.md."
}
