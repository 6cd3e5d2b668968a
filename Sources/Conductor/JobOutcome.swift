/// How a finished job ended: its work succeeded, failed with an error, or the job was cancelled for
/// a reason.
///
/// A job has exactly one outcome, set once when it finishes (``Job/outcome`` is `nil` until then),
/// before its observers are told `.finished` and before its waiters wake. The rule:
///
/// - A job that was cancelled, before or while it ran and by whatever cause, is `.cancelled` with
///   the first reason given, unless its work then fails with an error other than
///   `CancellationError`, which makes it `.failed`.
/// - A job whose work had already finished when the cancellation came keeps its outcome.
/// - Otherwise it is `.succeeded`, or `.failed` if its work threw (``Job/execute()``), called
///   ``AsynchronousJob/finish(throwing:)``, or (for a ``TaskJob``) its body threw.
public enum JobOutcome: Sendable, CustomStringConvertible {
    /// The work completed.
    case succeeded
    /// The work failed with this error.
    case failed(any Error)
    /// The job was cancelled, for this reason; its work did not run, or stopped early.
    case cancelled(CancellationReason)

    public var description: String {
        switch self {
        case .succeeded: "succeeded"
        case .failed(let error): "failed: \(error)"
        case .cancelled(let reason): "cancelled (\(reason))"
        }
    }
}

/// Why a job was cancelled.
///
/// ```swift
/// job.cancel(reason: .init(code: .requested, detail: "user tapped Stop"))
/// ```
public struct CancellationReason: Sendable, Equatable, CustomStringConvertible {
    /// The kind of cause. New codes may be added in later versions, so switch with a `default` case.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Value: UInt8, Sendable {
            case requested
            case queueCancelled
            case timedOut
            case dependencyFailed
            case dependencyCancelled
            case parentCancelled
            case conditionFailed
        }

        let value: Value

        /// ``Job/cancel()``, or ``Job/cancel(reason:)`` with a reason of the caller's.
        public static let requested = Code(value: .requested)
        /// ``JobQueue/cancelAllJobs()``.
        public static let queueCancelled = Code(value: .queueCancelled)
        /// The job ran longer than its timeout.
        public static let timedOut = Code(value: .timedOut)
        /// A dependency added with ``DependencyPolicy/requireSuccess`` failed.
        public static let dependencyFailed = Code(value: .dependencyFailed)
        /// A dependency added with ``DependencyPolicy/requireSuccess`` was cancelled.
        public static let dependencyCancelled = Code(value: .dependencyCancelled)
        /// The job that runs this one was cancelled: a ``GroupJob``'s child, or a ``RetryJob``'s
        /// attempt in flight.
        public static let parentCancelled = Code(value: .parentCancelled)
        /// A ``JobCondition`` of the job returned `false` or threw; the detail names it.
        public static let conditionFailed = Code(value: .conditionFailed)

        public var description: String {
            switch value {
            case .requested: "requested"
            case .queueCancelled: "queueCancelled"
            case .timedOut: "timedOut"
            case .dependencyFailed: "dependencyFailed"
            case .dependencyCancelled: "dependencyCancelled"
            case .parentCancelled: "parentCancelled"
            case .conditionFailed: "conditionFailed"
            }
        }
    }

    /// The kind of cause.
    public let code: Code
    /// Free text from whoever cancelled, if any.
    public let detail: String?
    /// The name of the job whose outcome caused the cancellation (the failed or cancelled
    /// dependency), where there is one.
    public let responsibleJob: String?

    /// Creates a reason, for ``Job/cancel(reason:)``.
    public init(code: Code, detail: String? = nil) {
        self.init(code: code, detail: detail, responsibleJob: nil)
    }

    init(code: Code, detail: String?, responsibleJob: String?) {
        self.code = code
        self.detail = detail
        self.responsibleJob = responsibleJob
    }

    /// The code, then the responsible job and the detail where there are any: for example
    /// `dependencyFailed: 'download' failed` or `requested: user tapped Stop`.
    public var description: String {
        var text = code.description
        if let responsibleJob {
            switch code.value {
            case .dependencyFailed: text += ": '\(responsibleJob)' failed"
            case .dependencyCancelled: text += ": '\(responsibleJob)' was cancelled"
            case .parentCancelled: text += ": '\(responsibleJob)' was cancelled"
            default: text += ": by '\(responsibleJob)'"
            }
        }
        if let detail {
            text += responsibleJob == nil ? ": \(detail)" : " (\(detail))"
        }
        return text
    }
}

/// What a dependent does when a dependency does not succeed.
///
/// Set per edge with ``Job/addDependency(_:policy:)``.
public enum DependencyPolicy: Sendable, Equatable {
    /// Run once the dependency has finished, whatever its outcome: Foundation's semantics, and the
    /// default.
    case afterFinish
    /// Run only if the dependency succeeds. If it fails or is cancelled, the dependent is cancelled
    /// without running, with ``CancellationReason/Code/dependencyFailed`` or
    /// ``CancellationReason/Code/dependencyCancelled`` naming it, and so on through the graph.
    case requireSuccess
}

/// What only some jobs need, kept beside the job so that a plain `BlockJob` stays in a 128-byte
/// malloc chunk: the outcome's payloads (a failure's error, a cancellation reason's detail and
/// responsible job), a name, a batch wait, an order moved by Pearce–Kelly, a `BlockJob`'s blocks
/// when it has several, and a count of dependents that finished first. Allocated on first use.
// @unchecked Sendable: every stored property is guarded by `engineLock`, and so
// `@exclusivity(unchecked)`, like `Job`'s own.
final class _JobDetails: _JobSide, @unchecked Sendable {
    @exclusivity(unchecked) var error: (any Error)?
    @exclusivity(unchecked) var detail: String?
    @exclusivity(unchecked) var responsibleJob: String?
    @exclusivity(unchecked) var name: String?
    /// Until the job settles.
    @exclusivity(unchecked) var batch: _BatchWait?
    @exclusivity(unchecked) var movedOrder: UInt64?
    /// Every block of a `BlockJob` that has more than one (see `BlockJob`).
    @exclusivity(unchecked) var blockList: _BlockList?
    @exclusivity(unchecked) var finishedDependents: Int32 = 0

    init() {
        super.init(isBatch: false)
    }
}

/// What a job's side slot (`Job._side`) holds: its `_JobDetails`, or, for a job whose only detail
/// is the batch wait it counts in, that `_BatchWait` itself, so that each job of a waiting batch
/// allocates nothing. Which one is recorded here, so telling them apart needs no dynamic cast.
// @unchecked Sendable: immutable; the subclasses say why theirs are safe.
class _JobSide: @unchecked Sendable {
    let isBatch: Bool

    init(isBatch: Bool) {
        self.isBatch = isBatch
    }
}

/// A job's one-bit flags, in one byte. Guarded by `engineLock`, like the job's other fields.
struct _JobFlags: OptionSet, Sendable {
    let rawValue: UInt8

    static let isBarrier = _JobFlags(rawValue: 1 << 0)
    static let admitted = _JobFlags(rawValue: 1 << 1)
    static let callbacksPending = _JobFlags(rawValue: 1 << 2)
    static let isExclusive = _JobFlags(rawValue: 1 << 3)
    static let runsElsewhere = _JobFlags(rawValue: 1 << 4)
    /// An asynchronous job's `execute()` has returned, so `finish()` releases what it ran
    /// (`Job._releaseSpentWork()`).
    static let workReturned = _JobFlags(rawValue: 1 << 5)
    /// A group counts the job among its unfinished children: the group whose queue of children the
    /// job is on (`JobQueue._countingGroupRetain`), from when the group takes the job until the
    /// job, finished and told so, counts it down (`Job._countingGroupLocked`).
    static let isCountedChild = _JobFlags(rawValue: 1 << 6)
    /// The job joined its queue as a dependency another job's condition generated
    /// (`JobQueue._enqueueGeneratedDependenciesLocked`): adding it to that queue again does nothing,
    /// and a group that counts it does not take its failure (`GroupJob._countGeneratedDependencyLocked`).
    static let joinedAsGeneratedDependency = _JobFlags(rawValue: 1 << 7)

    @inline(__always)
    mutating func set(_ flag: _JobFlags, _ on: Bool) {
        if on { insert(flag) } else { remove(flag) }
    }
}
