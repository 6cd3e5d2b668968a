import Conductor

/// The bridge side of an ``OperationJob``: whether the job ran its operation, and whether the job
/// has been told that the operation finished. A pure value; `OperationJob` keeps it in a locked box
/// and carries out the returned actions after unlocking.
///
/// The job's own lifecycle (ready, executing, finished) belongs to the Conductor engine. This
/// machine only guarantees the two things the bridge adds: `_finish()` is called exactly once,
/// however many ways the operation's finish is reported; and an operation whose job was cancelled
/// before it ran is started exactly once, so that Foundation moves it to finished.
package struct _OperationJobStateMachine: Sendable {
    package enum State: Equatable, Sendable {
        /// The job has neither run nor been cancelled before running.
        case idle
        /// `execute()` has started the operation; the job waits for it to finish.
        case running
        /// The job was cancelled before it ran, so it finished without running; the cancelled
        /// operation has been (or is being) started so that Foundation finishes it.
        case cancelledBeforeRunning
        /// The operation finished, and the job has been (or is being) told.
        case finished
    }

    package enum Action: Equatable, Sendable {
        case none
        /// Call the job's `_finish()`.
        case finishJob
        /// Start the cancelled operation: its `start()` sees `isCancelled` and finishes it without
        /// running its work, as an `OperationQueue` would.
        case startCancelledOperation
    }

    package private(set) var state: State = .idle

    package init() {}

    /// The engine called `execute()`.
    package mutating func executeBegan() {
        guard state == .idle else {
            _trap("OperationJob: execute() called in state \(state)")
        }
        state = .running
    }

    /// Foundation recorded the operation as finished.
    package mutating func operationFinished() -> Action {
        switch state {
        case .running:
            state = .finished
            return .finishJob
        case .finished, .cancelledBeforeRunning:
            return .none
        case .idle:
            _trap("OperationJob: operation finished in state \(state), before the job ran it")
        }
    }

    /// `cancel()` found the job finished. If it never ran, it was cancelled before running.
    package mutating func jobFoundFinishedAfterCancel() -> Action {
        guard state == .idle else { return .none }
        state = .cancelledBeforeRunning
        return .startCancelledOperation
    }
}
