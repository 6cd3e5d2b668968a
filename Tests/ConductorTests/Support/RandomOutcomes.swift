import Conductor
import ConductorTestSupport

// Random outcomes for the randomized harnesses: how a job's work ends, and the reasons it is
// cancelled with.

extension SeededRandom {
    /// Every cancellation code a caller may give.
    static let cancellationCodes: [CancellationReason.Code] = [
        .requested, .queueCancelled, .timedOut, .dependencyFailed, .dependencyCancelled,
    ]

    /// How a job's work ends: it fails with probability `failure`, throws `CancellationError`
    /// regardless with probability `throwCancellation`, throws it only if cancelled with probability
    /// `checkCancellation`, and otherwise succeeds. Always three draws.
    mutating func plannedEnding(failure: Double, throwCancellation: Double, checkCancellation: Double) -> PlannedEnding
    {
        let fails = chance(failure)
        let throwsCancellation = chance(throwCancellation)
        let checksCancellation = chance(checkCancellation)
        return fails
            ? .fail : throwsCancellation ? .throwCancellation : checksCancellation ? .checkCancellation : .succeed
    }

    /// A reason to cancel with: `nil` (a plain `cancel()`) a third of the time, otherwise any code,
    /// with `detail` (or, a quarter of the time, no detail). Always three draws.
    mutating func cancellationReason(detail: String) -> CancellationReason? {
        let plain = chance(1.0 / 3)
        let code = SeededRandom.cancellationCodes[int(SeededRandom.cancellationCodes.count)]
        let withDetail = chance(0.75)
        return plain ? nil : CancellationReason(code: code, detail: withDetail ? detail : nil)
    }

    /// A time limit for a job: with probability `short`, one short enough to run out while much of
    /// the work is still going (the job then ends `.cancelled(timedOut)` unless its work ended
    /// first, or fails); with probability `long`, one that never runs out in a test (its timer must
    /// be cancelled when the job finishes); otherwise none. Always two draws.
    mutating func timeout(short: Double, long: Double) -> Duration? {
        let isShort = chance(short)
        let isLong = chance(long)
        return isShort ? .microseconds(200) : isLong ? .seconds(3600) : nil
    }

    /// `.requireSuccess` with probability `probability`, otherwise `.afterFinish`. One draw.
    mutating func policy(requireSuccess probability: Double) -> DependencyPolicy {
        chance(probability) ? .requireSuccess : .afterFinish
    }
}

/// Outcomes counted over a round, for the summaries and the sanity checks.
struct OutcomeTally: Sendable, CustomStringConvertible {
    var succeeded = 0
    var failed = 0
    /// Failed after being cancelled while running.
    var failedAfterCancel = 0
    /// Cancelled outcomes, by code.
    var cancelled: [String: Int] = [:]

    var cancelledCount: Int { cancelled.values.reduce(0, +) }
    /// Cancelled because a `.requireSuccess` dependency did not succeed.
    var cancelledByDependencies: Int {
        cancelled["\(CancellationReason.Code.dependencyFailed)", default: 0]
            + cancelled["\(CancellationReason.Code.dependencyCancelled)", default: 0]
    }

    mutating func add(_ outcome: JobOutcome?, wasCancelled: Bool) {
        switch outcome {
        case .succeeded?: succeeded += 1
        case .failed?:
            failed += 1
            if wasCancelled { failedAfterCancel += 1 }
        case .cancelled(let reason)?: cancelled["\(reason.code)", default: 0] += 1
        case nil: break
        }
    }

    mutating func add(_ other: OutcomeTally) {
        succeeded += other.succeeded
        failed += other.failed
        failedAfterCancel += other.failedAfterCancel
        cancelled.merge(other.cancelled, uniquingKeysWith: +)
    }

    var description: String {
        let codes = cancelled.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return
            "succeeded \(succeeded), failed \(failed) (\(failedAfterCancel) after being cancelled), cancelled \(cancelledCount) (\(codes))"
    }
}
