import Conductor
import Dispatch
import Synchronization

// What the randomized harnesses need for outcomes: jobs whose work can fail, the error they fail
// with, how a job's work is planned to end and how it did end, and comparisons of outcomes. The
// checks themselves are `WorkProbe`'s (Probes.swift).

// MARK: - Failing work

/// The error a probe's work fails with. It names the job, so that a `.failed` outcome can be traced
/// to the work that threw it; `ignored` marks the error of a call the engine must ignore (a second
/// `finish(throwing:)`, or a throw from `execute()` after `finish()`).
package struct ProbeFailure: Error, Equatable, CustomStringConvertible {
    package let job: String
    package let ignored: Bool

    package init(job: String, ignored: Bool = false) {
        self.job = job
        self.ignored = ignored
    }

    package var description: String { "ProbeFailure(\(job)\(ignored ? ", ignored" : ""))" }
}

/// How a job's work is planned to end (a random choice of the harness).
package enum PlannedEnding: String, Sendable {
    /// Returns, or calls `finish()`.
    case succeed
    /// Throws `ProbeFailure`, or calls `finish(throwing:)` with it.
    case fail
    /// Throws `CancellationError`, or calls `finish(throwing: CancellationError())`, whether or not
    /// the job was cancelled.
    case throwCancellation
    /// Ends like `.throwCancellation` if the job was cancelled by the time the work ends (a
    /// `TaskJob`: `try Task.checkCancellation()`), otherwise like `.succeed`.
    case checkCancellation
}

/// How a job's work actually ended, as the work recorded it just before ending.
package enum WorkEnding: Int, Sendable {
    case notEnded = 0
    case succeeded
    case failed
    case threwCancellation
}

/// A synchronous job whose work may throw: `execute()` runs `work` with the job.
package final class ProbeJob: Job, @unchecked Sendable {
    // @unchecked Sendable: `work` is immutable and itself Sendable.
    private let work: @Sendable (Job) throws -> Void

    package init(_ work: @escaping @Sendable (Job) throws -> Void) {
        self.work = work
        super.init()
    }

    package override func execute() throws {
        try work(self)
    }
}

/// An asynchronous job whose `execute()` may throw (which finishes it at once) or start work that
/// calls `finish()` or `finish(throwing:)` later.
package final class ProbeAsyncJob: AsynchronousJob, @unchecked Sendable {
    // @unchecked Sendable: `work` is immutable and itself Sendable.
    private let work: @Sendable (ProbeAsyncJob) throws -> Void

    package init(_ work: @escaping @Sendable (ProbeAsyncJob) throws -> Void) {
        self.work = work
        super.init()
    }

    package override func execute() throws {
        try work(self)
    }
}

// MARK: - Comparing outcomes

extension JobOutcome {
    /// The reason, for a cancelled outcome.
    package var reason: CancellationReason? {
        if case .cancelled(let reason) = self { reason } else { nil }
    }

    package var isSucceeded: Bool {
        if case .succeeded = self { true } else { false }
    }

    package var isFailed: Bool {
        if case .failed = self { true } else { false }
    }

    package var isCancelled: Bool { reason != nil }

    /// Whether two outcomes are the same: the same case, the same reason, or errors that compare
    /// equal (`ProbeFailure`) or, for other errors, print the same.
    package func isSame(as other: JobOutcome) -> Bool {
        switch (self, other) {
        case (.succeeded, .succeeded): true
        case (.cancelled(let a), .cancelled(let b)): a == b
        case (.failed(let a), .failed(let b)):
            if let a = a as? ProbeFailure, let b = b as? ProbeFailure { a == b } else { "\(a)" == "\(b)" }
        default: false
        }
    }
}
