import Conductor

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `conductor-bench`: Conductor side by side with Foundation, Dispatch and TaskGroup, in one process.
/// See `Docs/Benchmarks.md`.
@main
struct ConductorBench {
    static func main() {
        let configuration: Configuration
        do {
            configuration = try Configuration.parse(Array(CommandLine.arguments.dropFirst()))
        } catch {
            Console.progress("conductor-bench: \(error.message)\n\n\(Configuration.usage)")
            exit(2)
        }
        if configuration.help {
            print(Configuration.usage)
            return
        }
        if let jobs = configuration.soakJobs {
            exit(Soak.run(jobs: jobs))
        }
        if let file = configuration.traceFile {
            exit(TraceRun.run(configuration, to: file))
        }
        // Measuring the tracer's cost: it records every Conductor job of the run.
        let tracer = configuration.withTracer ? JobTracer() : nil
        tracer?.start()
        defer { tracer?.stop() }

        let started = Clock.now()
        let sizes = configuration.quick ? Sizes.quick : Sizes.full
        precondition(sizes.scenarios().map(\.id) == scenarioIDs, "scenarioIDs must list the scenarios in run order")
        let harness = Harness(runs: configuration.runs, foundationBudget: configuration.foundationBudget)
        var run = BenchmarkRun(configuration: configuration)
        Console.progress("conductor-bench: \(Report.header(run))")
        for scenario in sizes.scenarios() where configuration.selects(scenario.id) {
            run.scenarios.append(harness.measure(scenario))
            if scenario.id == "chain" {
                run.scaling = harness.sweepChain(conductor: Chain.conductor, foundation: Chain.foundation, sizes: sizes)
            }
        }
        run.wallSeconds = Double(Clock.now() - started) / 1e9

        let targets = Target.evaluate(run)
        switch configuration.output {
        case .table: print(Report.table(run, targets: targets))
        case .json: print(Report.json(run, targets: targets))
        case .markdown: print(Report.markdown(run, targets: targets))
        }
        if let directory = configuration.svgDirectory {
            do {
                for path in try SVG.write(run, to: directory) {
                    Console.progress("conductor-bench: wrote \(path)")
                }
            } catch {
                Console.progress("conductor-bench: could not write the charts to \(directory): \(error)")
                exit(2)
            }
        }
        if run.hasFailure {
            Console.progress("conductor-bench: FAIL: at least one result was wrong (see the table)")
            exit(1)
        }
    }
}
