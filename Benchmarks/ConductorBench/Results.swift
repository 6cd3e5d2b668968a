/// Median, min and max of one system's figures in one scenario.
struct Stats {
    var median: Double
    var min: Double
    var max: Double
    /// Median wall time of a run, in milliseconds; `nil` for `latency` and `memory`.
    var medianMilliseconds: Double?
    var runs: Int

    /// Summarizes runs. For `latency`, the samples of all runs are pooled: the median is p50,
    /// min the fastest sample and max p99.
    init(_ trials: [Trial], metric: Metric) {
        runs = trials.count
        switch metric {
        case .latency:
            let samples = trials.flatMap(\.samples).sorted()
            median = Stats.percentile(samples, 0.50)
            min = samples.first ?? .nan
            max = Stats.percentile(samples, 0.99)
            medianMilliseconds = nil
        case .nanosecondsPerJob, .bytesPerJob:
            let figures = trials.map(\.perJob).sorted()
            median = Stats.median(figures)
            min = figures.first ?? .nan
            max = figures.last ?? .nan
            medianMilliseconds =
                metric == .bytesPerJob ? nil : Stats.median(trials.map(\.nanoseconds).sorted()) / 1_000_000
        }
    }

    init(median: Double, min: Double, max: Double, medianMilliseconds: Double?, runs: Int) {
        self.median = median
        self.min = min
        self.max = max
        self.medianMilliseconds = medianMilliseconds
        self.runs = runs
    }

    static func median(_ sorted: [Double]) -> Double {
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    /// Nearest-rank percentile of sorted samples.
    static func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[Swift.min(Swift.max(rank, 1), sorted.count) - 1]
    }
}

/// One system's result in one scenario.
struct Measurement {
    enum Outcome {
        case measured(Stats)
        /// A check failed: the result is wrong, so no time is reported.
        case failed(String)
        case notApplicable(String)
    }

    let system: System
    var outcome: Outcome
    /// How the system runs the scenario.
    var method: String?
    /// Jobs per run at the size it ran.
    var jobs: Int?
    /// Why the system ran fewer runs or a smaller size than the others.
    var note: String?
    /// It ran at a smaller size than the scenario's, so its figure is for that size.
    var reducedSize = false
    /// How Foundation's time grew with size between its two largest probes (time ∝ size^k).
    var growthExponent: Double?
    /// How many times the waiting thread blocked per batch, where counted: the median and the most
    /// over the runs.
    var waiterBlocksPerBatch: (median: Double, max: Double)?

    var stats: Stats? {
        if case .measured(let stats) = outcome { stats } else { nil }
    }

    var failure: String? {
        if case .failed(let message) = outcome { message } else { nil }
    }
}

/// Every system's result in one scenario.
struct ScenarioResult {
    let id: String
    let summary: String
    let metric: Metric
    var measurements: [Measurement]
    /// The engine lock in Conductor's profiled runs (`--lock-profile`).
    var lock: LockHold?

    func measurement(_ system: System) -> Measurement? {
        measurements.first { $0.system == system }
    }

    /// How many times `baseline`'s median is of `system`'s: "Foundation / Conductor = 35.2×".
    func ratio(of baseline: System, to system: System) -> Double? {
        guard let base = measurement(baseline)?.stats?.median, let value = measurement(system)?.stats?.median,
            value > 0, base.isFinite, value.isFinite
        else { return nil }
        return base / value
    }
}

/// One point of the chain scaling curve.
struct ScalingPoint {
    let system: System
    let jobs: Int
    var stats: Stats?
    var failure: String?
}

/// The chain scaling sweep: ns per job against chain length.
struct Scaling {
    var points: [ScalingPoint] = []
    var notes: [String] = []

    func points(for system: System) -> [ScalingPoint] {
        points.filter { $0.system == system }
    }
}

/// Everything one invocation measured.
struct BenchmarkRun {
    var configuration: Configuration
    var scenarios: [ScenarioResult] = []
    /// `--busy`: the scenarios measured again with one core kept busy.
    var busy: [ScenarioResult] = []
    var scaling: Scaling?
    /// Wall time of the whole invocation.
    var wallSeconds = 0.0

    func scenario(_ id: String) -> ScenarioResult? {
        scenarios.first { $0.id == id }
    }

    /// `--busy`: a system's measurement with one core kept busy, and its quiet median.
    struct BusyComparison {
        let scenario: ScenarioResult
        let busy: Measurement
        let quietMedian: Double
    }

    /// Each busy measurement with the same system's quiet median, where it has one.
    var busyComparisons: [BusyComparison] {
        var comparisons: [BusyComparison] = []
        for loaded in busy {
            for measurement in loaded.measurements {
                guard let quiet = scenario(loaded.id)?.measurement(measurement.system)?.stats?.median else { continue }
                comparisons.append(BusyComparison(scenario: loaded, busy: measurement, quietMedian: quiet))
            }
        }
        return comparisons
    }

    /// Whether any check failed.
    var hasFailure: Bool {
        (scenarios + busy).contains { $0.measurements.contains { $0.failure != nil } }
            || (scaling?.points.contains { $0.failure != nil } ?? false)
    }
}

/// How the engine lock was used in one Conductor run of a scenario (`--lock-profile`).
struct LockHold {
    /// Profiled runs per scenario; the median (by hold per job) is reported.
    static let runs = 3

    /// Jobs the profiled run ran.
    let jobs: Int
    /// The profiled run's own wall time, setup and teardown included, as the holds are (slower
    /// than a timed run: the clock reads).
    let wallNanoseconds: Double
    let acquisitions: Int
    let heldNanoseconds: Double
    let waitedNanoseconds: Double
    /// What one clock read costs: each measured hold includes about one.
    let clockReadNanoseconds: Double

    var acquisitionsPerJob: Double { Double(acquisitions) / Double(max(jobs, 1)) }
    var heldPerJob: Double { heldNanoseconds / Double(max(jobs, 1)) }
    var waitedPerJob: Double { waitedNanoseconds / Double(max(jobs, 1)) }
    /// The hold per job less one clock read per acquisition: the estimate of the real hold.
    var correctedHeldPerJob: Double { max(heldPerJob - acquisitionsPerJob * clockReadNanoseconds, 0) }
    /// The share of the profiled run's wall time the lock was held.
    var heldShare: Double { heldNanoseconds / max(wallNanoseconds, 1) }
    /// Jobs per second the lock allows at any number of cores: one over the hold per job.
    var ceilingJobsPerSecond: Double { 1e9 / max(correctedHeldPerJob, 1) }

    /// "3.0 acquisitions, held 212 ns (about 150 ns less the clock reads), waited 14 ns per job;
    /// ceiling 6.7 M jobs/s".
    var summary: String {
        "\(Format.fixed(acquisitionsPerJob, 1)) acquisitions, held \(Format.figure(heldPerJob)) ns "
            + "(about \(Format.figure(correctedHeldPerJob)) ns less the clock reads), waited "
            + "\(Format.figure(waitedPerJob)) ns per job; ceiling \(Format.fixed(ceilingJobsPerSecond / 1e6, 1)) M jobs/s "
            + "at any core count; held \(Format.fixed(heldShare * 100, 0))% of the run "
            + "(\(Format.count(jobs)) jobs, median of \(LockHold.runs) profiled runs)"
    }
}
