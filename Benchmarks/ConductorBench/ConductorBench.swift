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
        var harness = Harness(runs: configuration.runs, foundationBudget: configuration.foundationBudget)
        harness.lockProfile = configuration.lockProfile
        harness.systems = configuration.systems
        var run = BenchmarkRun(configuration: configuration)
        Console.progress("conductor-bench: \(Report.header(run))")
        let selected = sizes.scenarios().filter { configuration.selects($0.id) }
        for (index, scenario) in selected.enumerated() {
            Console.progress(progressLine(scenario.id, index: index, of: selected.count, since: started))
            run.scenarios.append(harness.measure(scenario))
            if configuration.busy {
                Console.progress("\(scenario.id): again, with one core kept busy (--busy)")
                var busy = harness
                busy.lockProfile = false  // the lock is profiled on the quiet machine only
                let core = BusyCore()
                core.start()
                run.busy.append(busy.measure(scenario))
                core.stop()
            }
            if scenario.id == "chain" && configuration.systems.contains(.conductor) {
                let foundation: ((Int) -> Trial)? =
                    configuration.systems.contains(.foundation) ? { Chain.foundation($0) } : nil
                run.scaling = harness.sweepChain(conductor: Chain.conductor, foundation: foundation, sizes: sizes)
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
        Console.progress("conductor-bench: \(Target.verdict(run, targets: targets))")
        if run.hasFailure {
            exit(1)
        }
    }

    /// "[3/14] chain: 41 s so far, about 2 min 5 s left": which scenario of how many, and an
    /// estimate of the time left from the average of the scenarios so far (none before the first
    /// ends; Foundation's budget bounds the slowest).
    static func progressLine(_ id: String, index: Int, of count: Int, since started: UInt64) -> String {
        let elapsed = Double(Clock.now() - started) / 1e9
        var line = "[\(index + 1)/\(count)] \(id)"
        if index > 0 {
            let left = elapsed / Double(index) * Double(count - index)
            line += ": \(Format.minutes(elapsed)) so far, about \(Format.minutes(left)) left"
        }
        return line
    }
}
