import Conductor
import Foundation

/// `--trace FILE`: each selected scenario once, at its `--quick` size, on Conductor only, with a
/// `JobTracer` recording; then the Chrome trace is written to `FILE`.
enum TraceRun {
    static func run(_ configuration: Configuration, to file: String) -> Int32 {
        let tracer = JobTracer()
        tracer.start()
        var traced: [String] = []
        for scenario in Sizes.quick.scenarios() where configuration.selects(scenario.id) {
            guard scenario.metric == .nanosecondsPerJob,
                let workload = scenario.workloads.first(where: { $0.system == .conductor })?.workload,
                case .run(_, let body) = workload
            else { continue }
            Console.progress("conductor-bench: tracing \(scenario.id) (\(scenario.describe(scenario.size)))")
            let trial = body(scenario.size)
            if let failure = trial.failure {
                Console.progress("conductor-bench: FAIL: \(scenario.id): \(failure)")
                return 1
            }
            traced.append(scenario.id)
        }
        tracer.stop()
        do {
            try tracer.chromeTraceJSON().write(toFile: file, atomically: true, encoding: .utf8)
        } catch {
            Console.progress("conductor-bench: could not write the trace to \(file): \(error)")
            return 2
        }
        Console.progress(
            "conductor-bench: wrote \(file): \(traced.joined(separator: ", ")); open it in https://ui.perfetto.dev")
        return 0
    }
}
