import Conductor

extension Report {
    /// `--json`: machine, configuration, one result per scenario and system, the systems with no
    /// meaningful version of a scenario, the chain sweep and the targets.
    ///
    /// Every result has `scenario`, `system`, `jobs`, `median_ns_per_job`, `min_ns_per_job`,
    /// `max_ns_per_job` and `ok`. A wrong result has `ok: false`, a `failure` and null figures.
    /// `unit` says what the figures are: `ns_per_job`, `latency_ns` (median = p50, min = fastest
    /// sample, max = p99) or `bytes_per_job` (`memory`).
    static func json(_ run: BenchmarkRun, targets: [Target]) -> String {
        var results: [JSON] = []
        var notApplicable: [JSON] = []
        for scenario in run.scenarios {
            for measurement in scenario.measurements {
                var fields: [(String, JSON)] = [
                    ("scenario", .string(scenario.id)), ("system", .string(measurement.system.rawValue)),
                ]
                switch measurement.outcome {
                case .notApplicable(let reason):
                    notApplicable.append(.object(fields + [("reason", .string(reason))]))
                    continue
                case .failed(let failure):
                    fields += [
                        ("jobs", .number(measurement.jobs.map(Double.init))), ("median_ns_per_job", .null),
                        ("min_ns_per_job", .null), ("max_ns_per_job", .null), ("ok", .bool(false)),
                        ("failure", .string(failure)),
                    ]
                case .measured(let stats):
                    fields += [
                        ("jobs", .number(measurement.jobs.map(Double.init))),
                        ("median_ns_per_job", .number(stats.median)),
                        ("min_ns_per_job", .number(stats.min)), ("max_ns_per_job", .number(stats.max)),
                        ("ok", .bool(true)),
                        ("runs", .number(Double(stats.runs))), ("median_total_ms", .number(stats.medianMilliseconds)),
                        ("foundation_over_this", .number(scenario.ratio(of: .foundation, to: measurement.system))),
                        ("dispatch_over_this", .number(scenario.ratio(of: .dispatch, to: measurement.system))),
                    ]
                }
                fields.append(("unit", .string(unitName(scenario.metric))))
                if let method = measurement.method { fields.append(("method", .string(method))) }
                if let note = measurement.note { fields.append(("note", .string(note))) }
                if measurement.reducedSize { fields.append(("reduced_size", .bool(true))) }
                if let blocks = measurement.waiterBlocksPerBatch {
                    fields.append(("waiter_blocks_per_batch", .number(blocks.median)))
                    fields.append(("max_waiter_blocks_per_batch", .number(blocks.max)))
                }
                results.append(.object(fields))
            }
        }

        var document: [(String, JSON)] = [
            (
                "machine",
                .object([
                    ("cores", .number(Double(Machine.cores))), ("swift", .string(Machine.swiftVersion)),
                    ("os", .string(Machine.operatingSystem)), ("arch", .string(Machine.architecture)),
                ])
            ),
            (
                "configuration",
                .object([
                    ("runs", .number(Double(run.configuration.runs))), ("quick", .bool(run.configuration.quick)),
                    ("foundation_budget_seconds", .number(run.configuration.foundationBudget)),
                    (
                        "filter",
                        run.configuration.filter.isEmpty ? .null : .array(run.configuration.filter.map(JSON.string))
                    ),
                    ("wall_seconds", .number(run.wallSeconds)),
                ])
            ),
            ("results", .array(results)),
            ("not_applicable", .array(notApplicable)),
        ]
        if let scaling = run.scaling {
            let points: [JSON] = scaling.points.map { point in
                var fields: [(String, JSON)] = [
                    ("system", .string(point.system.rawValue)), ("jobs", .number(Double(point.jobs))),
                    ("median_ns_per_job", .number(point.stats?.median)), ("min_ns_per_job", .number(point.stats?.min)),
                    ("max_ns_per_job", .number(point.stats?.max)),
                    ("runs", .number(point.stats.map { Double($0.runs) })),
                    ("ok", .bool(point.failure == nil)),
                ]
                if let failure = point.failure { fields.append(("failure", .string(failure))) }
                return .object(fields)
            }
            document.append(
                (
                    "chain_scaling",
                    .object([("points", .array(points)), ("notes", .array(scalingNotes(scaling).map(JSON.string)))])
                ))
        }
        let locks: [JSON] = run.scenarios.compactMap { scenario in
            scenario.lock.map { lock in
                .object([
                    ("scenario", .string(scenario.id)), ("jobs", .number(Double(lock.jobs))),
                    ("acquisitions_per_job", .number(lock.acquisitionsPerJob)),
                    ("held_ns_per_job", .number(lock.heldPerJob)),
                    ("held_ns_per_job_less_clock_reads", .number(lock.correctedHeldPerJob)),
                    ("waited_ns_per_job", .number(lock.waitedPerJob)),
                    ("held_share_of_run", .number(lock.heldShare)),
                    ("clock_read_ns", .number(lock.clockReadNanoseconds)),
                    ("ceiling_jobs_per_second", .number(lock.ceilingJobsPerSecond)),
                ])
            }
        }
        if !locks.isEmpty { document.append(("engine_lock", .array(locks))) }
        if !run.busy.isEmpty {
            let rows: [JSON] = run.busyComparisons.map { comparison in
                let median = comparison.busy.stats?.median
                let quiet = comparison.quietMedian
                return .object([
                    ("scenario", .string(comparison.scenario.id)), ("system", .string(comparison.busy.system.rawValue)),
                    ("unit", .string(unitName(comparison.scenario.metric))), ("quiet_median", .number(quiet)),
                    ("busy_median", .number(median)), ("busy_over_quiet", .number(median.map { $0 / quiet })),
                    ("ok", .bool(comparison.busy.failure == nil)),
                ])
            }
            document.append(("busy", .array(rows)))
        }
        document.append(
            (
                "targets",
                .array(
                    targets.map {
                        .object([
                            ("scenario", .string($0.scenario)), ("target", .string($0.goal)),
                            ("result", .string($0.verdict == .notRun ? "NOT RUN" : $0.verdict.rawValue)),
                            ("detail", .string($0.detail)),
                        ])
                    })
            ))
        document.append(("ok", .bool(!run.hasFailure)))
        document.append(("verdict", .string(Target.verdict(run, targets: targets))))
        return JSON.object(document).rendered()
    }

    private static func unitName(_ metric: Metric) -> String {
        switch metric {
        case .nanosecondsPerJob: "ns_per_job"
        case .latency: "latency_ns"
        case .bytesPerJob: "bytes_per_job"
        }
    }
}

/// Just enough JSON to write the report, with keys kept in order.
enum JSON {
    case object([(String, JSON)])
    case array([JSON])
    case string(String)
    case number(Double?)
    case bool(Bool)
    case null

    func rendered(indent: String = "") -> String {
        let inner = indent + "  "
        switch self {
        case .object(let fields):
            guard !fields.isEmpty else { return "{}" }
            let body = fields.map { inner + JSON.quote($0.0) + ": " + $0.1.rendered(indent: inner) }
            return "{\n" + body.joined(separator: ",\n") + "\n" + indent + "}"
        case .array(let elements):
            guard !elements.isEmpty else { return "[]" }
            return "[\n" + elements.map { inner + $0.rendered(indent: inner) }.joined(separator: ",\n") + "\n" + indent
                + "]"
        case .string(let text):
            return JSON.quote(text)
        case .number(let value):
            guard let value, value.isFinite else { return "null" }
            let rounded = (value * 1_000).rounded() / 1_000
            if rounded == rounded.rounded(), rounded.magnitude < 1e15 { return String(Int(rounded)) }
            return String(rounded)
        case .bool(let value):
            return value ? "true" : "false"
        case .null:
            return "null"
        }
    }

    private static func quote(_ text: String) -> String {
        _json(text)
    }
}
