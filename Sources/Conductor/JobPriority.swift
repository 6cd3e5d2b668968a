import Dispatch

/// The relative order in which a queue starts its ready jobs.
///
/// A queue always starts its highest-priority ready job first, and jobs of equal priority in the
/// order they became ready (first in, first out). The raw values match Foundation's
/// `Operation.QueuePriority`.
public enum JobPriority: Int, Sendable, CaseIterable, Comparable {
    case veryLow = -8
    case low = -4
    case normal = 0
    case high = 4
    case veryHigh = 8

    public static func < (lhs: JobPriority, rhs: JobPriority) -> Bool {
        lhs.rawValue < rhs.rawValue
    }

    /// The bucket index used by the ready queue: 0 for `.veryHigh` through 4 for `.veryLow`.
    @inline(__always)
    var bucket: Int {
        switch self {
        case .veryHigh: 0
        case .high: 1
        case .normal: 2
        case .low: 3
        case .veryLow: 4
        }
    }
}

/// Where a job is in its lifecycle.
///
/// The engine alone changes a job's state:
///
///     pending ──▶ ready ──▶ executing ──▶ finished
///        └──────────┴── cancel() before start ──▶ finished
///
/// Cancellation is not a state of its own: a cancelled job is one whose `isCancelled` is `true`.
/// See `Docs/Concepts.md`.
public enum JobState: Sendable, Equatable {
    /// Waiting for at least one dependency to finish.
    case pending
    /// Every dependency has finished; the job may start when its queue has a free slot.
    case ready
    /// The job's work is running. An asynchronous job stays here until it calls `finish()`.
    case executing
    /// The job is done, either because its work completed or because it was cancelled before it started.
    case finished
}

/// A lifecycle event delivered to a job's observers.
///
/// Each event reaches each observer at most once, in lifecycle order: `.ready`, `.started`,
/// `.finished`, with `.cancelled` wherever the cancellation happened (before `.started`, or between
/// `.started` and `.finished`). See `Docs/Concepts.md` for the delivery guarantees.
public enum JobEvent: Sendable, Equatable {
    /// The job's last unfinished dependency finished or was removed.
    case ready
    /// The job's work is about to run.
    case started
    /// `cancel()` was called for the first time while the job was not yet finished.
    case cancelled
    /// The job finished. This is the last event the job delivers.
    case finished
}
