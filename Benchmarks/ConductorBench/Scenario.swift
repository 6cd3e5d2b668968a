/// The systems compared, in table order. The raw values are the names in every output.
enum System: String, CaseIterable, Sendable {
    case conductor = "Conductor"
    case foundation = "Foundation"
    case dispatch = "Dispatch"
    case taskGroup = "TaskGroup"
}

/// What a scenario's figures measure.
enum Metric: Sendable {
    /// Wall time from the first job created to the last finished, divided by the jobs.
    case nanosecondsPerJob
    /// Nanoseconds from adding one job to an idle queue until its body runs, over many samples:
    /// the median column holds p50, the min column the fastest sample and the max column p99.
    case latency
    /// Bytes allocated per job held on a suspended queue.
    case bytesPerJob

    var unit: String {
        switch self {
        case .nanosecondsPerJob: "ns/job"
        case .latency: "ns"
        case .bytesPerJob: "B/job"
        }
    }

    /// Headers of the median, min and max columns.
    var columns: (median: String, min: String, max: String) {
        switch self {
        case .nanosecondsPerJob: ("median ns/job", "min ns/job", "max ns/job")
        case .latency: ("p50 ns", "min ns", "p99 ns")
        case .bytesPerJob: ("median B/job", "min B/job", "max B/job")
        }
    }
}

/// One execution of a workload.
struct Trial {
    /// Wall time of the measured region.
    var nanoseconds: Double
    /// The jobs the trial ran.
    var jobs: Int
    /// The figure per job: nanoseconds per job, or bytes per job for `memory`.
    var perJob: Double
    /// Latency samples in nanoseconds (`latency` only).
    var samples: [Double] = []
    /// How many times the waiting thread blocked per batch (`batch-chain` and `batch-fan`, where
    /// ``ThreadBlocks`` counts them).
    var waiterBlocksPerBatch: Double?
    /// Why the result is wrong, or `nil` when every check passed.
    var failure: String?

    /// A throughput trial: `nanoseconds` over `jobs`.
    init(nanoseconds: Double, jobs: Int, failure: String?) {
        self.nanoseconds = nanoseconds
        self.jobs = jobs
        self.perJob = nanoseconds / Double(max(jobs, 1))
        self.failure = failure
    }

    init(nanoseconds: Double, jobs: Int, perJob: Double, samples: [Double] = [], failure: String?) {
        self.nanoseconds = nanoseconds
        self.jobs = jobs
        self.perJob = perJob
        self.samples = samples
        self.failure = failure
    }
}

/// How one system runs a scenario.
enum Workload {
    /// Runs the workload at a size (the scenario's size parameter) and checks its result.
    case run(method: String, (Int) -> Trial)
    /// The system has no meaningful version of the scenario.
    case notApplicable(reason: String)
}

/// A workload run by every system, with a stable id.
struct Scenario {
    let id: String
    /// One line saying what is measured.
    let summary: String
    let metric: Metric
    /// The size parameter: jobs, except `fan` and `batch-fan` (the fan's width), `batch-chain` (the
    /// chain's length) and `latency` (samples).
    let size: Int
    /// How a size reads in notes: "10,000 jobs", "fan width 10,000".
    let describe: (Int) -> String
    let workloads: [(system: System, workload: Workload)]

    init(
        id: String, summary: String, metric: Metric = .nanosecondsPerJob, size: Int,
        describe: @escaping (Int) -> String = { "\(Format.count($0)) jobs" },
        workloads: [(system: System, workload: Workload)]
    ) {
        self.id = id
        self.summary = summary
        self.metric = metric
        self.size = size
        self.describe = describe
        self.workloads = workloads
    }
}

/// The stable scenario ids, in run order.
let scenarioIDs = [
    "noop", "serial", "chain", "fan", "dag", "batch-chain", "batch-fan", "cancel", "async", "producers", "exclusive",
    "group", "latency", "memory",
]

/// Scenario sizes: the full defaults, or small ones for a CI smoke run (`--quick`).
struct Sizes {
    var noop = 100_000
    var serial = 100_000
    var chain = 10_000
    var fanWidth = 10_000
    var dag = 100_000
    /// The chain length and fan width of the batch scenarios; each runs `Batch.repetitions` batches.
    var batchChain = 2_000
    var batchFanWidth = 2_000
    var cancel = 100_000
    var async = 100_000
    /// Jobs added by each of the two producer threads.
    var producerJobs = 100_000
    /// Jobs of `exclusive`, and groups (of `Groups.children` children) of `group`.
    var exclusive = 100_000
    var groups = 1_000
    var latencySamples = 10_000
    var memory = 1_000_000
    /// Conductor's chain lengths for the scaling sweep.
    var chainSweep = [1_000, 10_000, 100_000, 1_000_000]
    /// Foundation's sweep doubles from this length while its budget allows, up to `foundationSweepMax`.
    var foundationSweepStart = 1_000
    var foundationSweepMax = 1_000_000

    static let full = Sizes()

    static let quick = Sizes(
        noop: 2_000, serial: 2_000, chain: 500, fanWidth: 500, dag: 2_000, batchChain: 500, batchFanWidth: 500,
        cancel: 2_000, async: 2_000,
        producerJobs: 1_000, exclusive: 2_000, groups: 20, latencySamples: 500, memory: 10_000,
        chainSweep: [1_000, 10_000],
        foundationSweepStart: 250, foundationSweepMax: 1_000)

    func scenarios() -> [Scenario] {
        [
            .noop(size: noop), .serial(size: serial), .chain(size: chain), .fan(width: fanWidth), .dag(size: dag),
            .batchChain(length: batchChain), .batchFan(width: batchFanWidth), .cancel(size: cancel),
            .async(size: async), .producers(perThread: producerJobs), .exclusive(size: exclusive),
            .group(groups: groups), .latency(samples: latencySamples), .memory(size: memory),
        ]
    }
}
