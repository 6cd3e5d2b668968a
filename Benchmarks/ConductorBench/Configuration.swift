/// The command line.
struct Configuration {
    enum Output {
        case table
        case json
        case markdown
    }

    var runs = 5
    var quick = false
    /// Tokens from `--filter`; a scenario runs when one of them is part of its id.
    var filter: [String] = []
    /// `--systems`: the systems to run (all by default), for profiling one of them.
    var systems: Set<System> = Set(System.allCases)
    var output = Output.table
    var svgDirectory: String?
    /// Seconds Foundation may spend per scenario, probes included.
    var foundationBudget = 60.0
    /// `--soak N`: push N jobs through one queue and report resident memory instead of the scenarios.
    var soakJobs: Int?
    /// `--trace FILE`: instead of the scenarios, write a trace of a small run of each.
    var traceFile: String?
    /// `--tracer`: run the scenarios with a `JobTracer` recording, to measure what it costs.
    var withTracer = false
    /// `--lock-profile`: after each scenario, three more Conductor runs with the engine lock measured.
    var lockProfile = false
    /// `--busy`: each scenario a second time while another thread keeps one core busy.
    var busy = false
    var help = false

    static let usage = """
        Usage: swift run -c release conductor-bench [options]

        Runs every scenario on Conductor, Foundation (OperationQueue), Dispatch and TaskGroup in one
        process and prints a table per scenario, then the targets with PASS or MISS, then a verdict
        line. A wrong result prints FAIL instead of a time, and the process exits with status 1.

        Options:
          --filter IDS              Scenarios to run: a substring of an id, or a comma-separated list.
                                    Ids: \(scenarioIDs.joined(separator: ", ")).
          --runs N                  Measured runs per system after a warm-up (default 5).
          --systems NAMES           Systems to run, comma-separated (default all): conductor,
                                    foundation, dispatch, taskgroup. For profiling one of them.
          --quick                   Small sizes and one run, for a CI smoke test.
          --foundation-budget SEC   Seconds Foundation may take per scenario, probes included
                                    (default 60). Over budget, it runs fewer times or smaller, and
                                    a note says so.
          --json                    Print the results as JSON on standard output.
          --markdown                Print the results as Markdown tables on standard output.
          --svg DIR                 Also write SVG charts into DIR.
          --soak N                  Instead of the scenarios: push N jobs (e.g. 10000000) through one
                                    queue and report resident memory as it goes.
          --trace FILE              Instead of the scenarios: run each once, small (the --quick
                                    sizes), on Conductor only, with a JobTracer, and write the
                                    Chrome trace to FILE (open it in https://ui.perfetto.dev).
          --tracer                  Run the scenarios with a JobTracer recording, to measure its
                                    cost (compare with a run without it).
          --busy                    Run each scenario a second time while a thread of its own keeps
                                    one core busy (as on a shared machine or a phone), and report
                                    how much each system slows down.
          --lock-profile            After each scenario's runs, run Conductor three more times with
                                    the engine lock measured, and report (median run) per job how
                                    often it was taken and how long it was held and waited for;
                                    one over the hold time is the throughput ceiling at any core
                                    count.
          -h, --help                Show this help.

        Progress goes to standard error: which scenario of how many is running, an estimate of the
        time left, each run's figures, and at the end the verdict.

        Exit status: 0 when every result was right, whatever the timings (a missed target is a
        finding, not an error); 1 when a result was wrong (FAIL); 2 for a usage error or charts
        that could not be written; 3 when a run hung and was given up.
        """

    struct UsageError: Error {
        let message: String
    }

    static func parse(_ arguments: [String]) throws(UsageError) -> Configuration {
        var configuration = Configuration()
        var runsGiven = false
        var remaining = arguments[...]
        func value(for option: String) throws(UsageError) -> String {
            guard let value = remaining.popFirst() else { throw UsageError(message: "\(option) needs a value") }
            return value
        }
        while let argument = remaining.popFirst() {
            switch argument {
            case "--filter":
                let tokens = try value(for: argument).split(separator: ",").map {
                    String($0).trimmingSpaces().lowercased()
                }.filter { !$0.isEmpty }
                for token in tokens where !scenarioIDs.contains(where: { $0.contains(token) }) {
                    throw UsageError(
                        message: "--filter: '\(token)' matches no scenario; ids: \(scenarioIDs.joined(separator: ", "))"
                    )
                }
                configuration.filter += tokens
            case "--systems":
                var systems: Set<System> = []
                for token in try value(for: argument).split(separator: ",") {
                    let name = String(token).trimmingSpaces().lowercased()
                    guard let system = System.allCases.first(where: { $0.rawValue.lowercased() == name }) else {
                        throw UsageError(
                            message: "--systems: '\(name)' is not one of conductor, foundation, dispatch, taskgroup")
                    }
                    systems.insert(system)
                }
                configuration.systems = systems
            case "--runs":
                let text = try value(for: argument)
                guard let runs = Int(text), runs >= 1 else {
                    throw UsageError(message: "--runs: '\(text)' is not a whole number of at least 1")
                }
                configuration.runs = runs
                runsGiven = true
            case "--quick":
                configuration.quick = true
            case "--soak":
                let text = try value(for: argument)
                guard let jobs = Int(text), jobs >= 1 else {
                    throw UsageError(message: "--soak: '\(text)' is not a whole number of at least 1")
                }
                configuration.soakJobs = jobs
            case "--foundation-budget":
                let text = try value(for: argument)
                guard let seconds = Double(text), seconds >= 0, seconds.isFinite else {
                    throw UsageError(message: "--foundation-budget: '\(text)' is not a number of seconds")
                }
                configuration.foundationBudget = seconds
            case "--json", "--markdown":
                let output: Output = argument == "--json" ? .json : .markdown
                guard configuration.output == .table || configuration.output == output else {
                    throw UsageError(message: "--json and --markdown both write to standard output; choose one")
                }
                configuration.output = output
            case "--svg":
                configuration.svgDirectory = try value(for: argument)
            case "--trace":
                configuration.traceFile = try value(for: argument)
            case "--tracer":
                configuration.withTracer = true
            case "--busy":
                configuration.busy = true
            case "--lock-profile":
                configuration.lockProfile = true
            case "-h", "--help":
                configuration.help = true
            default:
                throw UsageError(message: "unknown option '\(argument)'")
            }
        }
        if configuration.quick && !runsGiven {
            configuration.runs = 1
        }
        return configuration
    }

    func selects(_ id: String) -> Bool {
        filter.isEmpty || filter.contains { id.contains($0) }
    }
}

extension String {
    fileprivate func trimmingSpaces() -> String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
