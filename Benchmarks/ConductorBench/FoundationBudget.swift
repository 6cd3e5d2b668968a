import Conductor
import Dispatch
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The size and number of runs a system is measured at.
struct RunPlan {
    var size: Int
    var runs: Int
    var note: String?
    var reducedSize = false
    var growthExponent: Double?
    /// Seconds the probes took, out of the budget.
    var probeSeconds = 0.0
}

/// Keeps Foundation within its time budget per scenario.
///
/// swift-corelibs-foundation's `OperationQueue` walks its queued operations on each scheduling
/// event, so chains, fans and DAGs cost it time quadratic in their size (a 10⁴ chain takes many
/// seconds). Before measuring, Foundation runs the scenario at doubling probe sizes until a probe
/// takes `probeTarget(budget:)` or reaches full size. The two largest probes give the growth exponent k
/// (time ∝ size^k, clamped to 1...2.5), which estimates a full-size run. If the runs do not fit in
/// what is left of the budget, Foundation runs fewer times, and if one run does not fit, once at the
/// largest size that does. The probes double as its warm-up. The plan is always reported in a note.
enum FoundationBudget {
    /// How long the largest probe should take: a thirtieth of the budget (2 s of the default
    /// 60 s), at least 0.25 s. Extrapolating from a probe close to the size that will run keeps the
    /// estimate honest: corelibs' growth exponent rises with size (a `dag` plan made from 0.25 s
    /// probes underestimated the run by several times, and the stop had to end it).
    static func probeTarget(budget: Double) -> Double {
        max(0.25, budget / 30)
    }

    enum Outcome {
        case plan(RunPlan)
        case failed(String)
    }

    /// - Parameters:
    ///   - trial: Runs the workload at a size and returns its trial and wall seconds.
    static func plan(
        size fullSize: Int, runs: Int, budget: Double, label: String, describe: (Int) -> String,
        trial: (Int) -> (Trial, Double)
    ) -> Outcome {
        var size = min(fullSize, max(64, fullSize / 64))
        var probes: [(size: Int, seconds: Double)] = []
        var spent = 0.0
        while true {
            let (result, seconds) = trial(size)
            if let failure = result.failure { return .failed(failure) }
            spent += seconds
            probes.append((size, seconds))
            Console.progress("  \(label): Foundation probe at \(describe(size)): \(Format.seconds(seconds))")
            if size >= fullSize || seconds >= probeTarget(budget: budget) || spent >= budget / 4 { break }
            size = size * 3 > fullSize ? fullSize : size * 2
        }

        let last = probes[probes.count - 1]
        var exponent: Double?
        if probes.count >= 2, probes[probes.count - 2].seconds >= 0.005 {
            let previous = probes[probes.count - 2]
            exponent = log(last.seconds / previous.seconds) / log(Double(last.size) / Double(previous.size))
        }
        let k = min(max(exponent ?? 2, 1), 2.5)
        func estimate(_ size: Int) -> Double {
            last.size == size ? last.seconds : last.seconds * pow(Double(size) / Double(last.size), k)
        }

        // Plan against 90% of what is left: at quadratic growth, a 5% error in size is 10% in time.
        let remaining = (budget - spent) * 0.9
        let perRun = estimate(fullSize)
        let budgetText = "budget \(Format.seconds(budget))"
        if perRun * Double(runs) <= remaining {
            return .plan(RunPlan(size: fullSize, runs: runs, growthExponent: exponent, probeSeconds: spent))
        }
        if perRun <= remaining {
            let fitting = max(1, Int(remaining / perRun))
            return .plan(
                RunPlan(
                    size: fullSize, runs: fitting,
                    note:
                        "Foundation ran \(fitting) of \(runs) runs at \(describe(fullSize)) (\(budgetText); "
                        + "about \(Format.seconds(perRun)) per run)",
                    growthExponent: exponent, probeSeconds: spent))
        }
        // A reduced size is extrapolated far past the probes, and corelibs' growth steepens with
        // size (a `dag` planned to fill what was left ran several times longer), so it is planned
        // to take a third of what is left.
        let fits = Double(last.size) * pow(max(remaining, 0) / 3 / last.seconds, 1 / k)
        let reduced = min(max(niceFloor(fits), last.size), fullSize)
        let growth = exponent.map { ", time ∝ size^\(Format.fixed($0, 2))" } ?? ""
        return .plan(
            RunPlan(
                size: reduced, runs: 1,
                note: "Foundation ran 1 run at \(describe(reduced)), not \(describe(fullSize)) (\(budgetText); "
                    + "full size estimated at \(Format.seconds(perRun)) per run from probes\(growth)); "
                    + "its figures are for that size",
                reducedSize: true, growthExponent: exponent, probeSeconds: spent))
    }

    /// Rounds down to two significant digits: 6,843 → 6,800.
    static func niceFloor(_ value: Double) -> Int {
        guard value >= 100 else { return max(1, Int(value)) }
        var magnitude = 1
        while Double(magnitude) * 100 <= value { magnitude *= 10 }
        return Int(value) / magnitude * magnitude
    }
}

/// Stops a Foundation run that outlives what is left of its budget, when the plan's estimate was
/// wrong: from the deadline on, every 10 ms until the run ends, it cancels every operation of the
/// run's queues (workloads that add operations one at a time keep adding them), so that the run
/// drains at once, and the harness reports how far it got instead of a time.
enum FoundationStop {
    // @unchecked Sendable: the queues are only touched under the box's lock, and
    // `cancelAllOperations()` may be called from any thread.
    private struct Queues: @unchecked Sendable {
        var queues: [OperationQueue] = []
        var ticket = 0
        var fired = false
    }

    private static let state = _LockedValue(Queues())

    /// An `OperationQueue` for a Foundation workload; the stop cancels its operations.
    static func queue() -> OperationQueue {
        let queue = OperationQueue()
        let stopped = state.withLock { state in
            state.queues.append(queue)
            return state.fired
        }
        if stopped { queue.cancelAllOperations() }
        return queue
    }

    /// Arms the stop for the next run: `seconds` from now it cancels that run's queues.
    static func arm(seconds: Double) -> Int {
        let ticket = state.withLock { state in
            state.ticket += 1
            state.queues = []
            state.fired = false
            return state.ticket
        }
        cancel(ticket, after: max(seconds, 0.001))
        return ticket
    }

    /// Cancels the run's operations `seconds` from now, and again every 10 ms until it is disarmed.
    private static func cancel(_ ticket: Int, after seconds: Double) {
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            let queues: [OperationQueue]? = state.withLock { state in
                guard state.ticket == ticket else { return nil }
                state.fired = true
                return state.queues
            }
            guard let queues else { return }
            for queue in queues {
                queue.cancelAllOperations()
            }
            cancel(ticket, after: 0.01)
        }
    }

    /// Disarms the stop; returns whether it fired during the run.
    static func disarm(_ ticket: Int) -> Bool {
        state.withLock { state in
            let fired = state.ticket == ticket && state.fired
            state.ticket += 1
            state.queues = []
            state.fired = false
            return fired
        }
    }
}
