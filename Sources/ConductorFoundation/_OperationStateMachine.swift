import Conductor

/// The lifecycle a correct asynchronous `Operation` reports to Foundation, as a pure value.
///
/// ``JobOperation`` and the proxy behind `operation.addDependency(job)` keep it in a locked box.
/// Each change is decided and reserved under the lock, and the key-value notifications are posted
/// after unlocking, because they run code that is not ours (Foundation's bookkeeping, which may
/// start other operations, and on Apple platforms any KVO observer):
///
///     idle ──start()──▶ starting ──committed──▶ executing ──job finished──▶ finishing ──committed──▶ finished
///       └──start() when cancelled, or when the job already finished──▶ finishing(without running)──┘
///
/// `starting` and `finishing` exist so that `willChangeValue` is posted before the value changes
/// and `didChangeValue` after, while a second event cannot decide anything in between: the job
/// finishing during `starting` is recorded and acted on once `executing` is committed, and only
/// one thread can move `executing` to `finishing`, so the finish is reported exactly once.
///
/// - Important: `isExecuting` and `isFinished` report only committed values.
package struct _OperationStateMachine: Sendable {
    package enum State: Equatable, Sendable {
        /// `start()` has not been called. `jobFinished`: the job finished (it was cancelled) first.
        case idle(jobFinished: Bool)
        /// `start()` posted `willChangeValue("isExecuting")`; not yet committed.
        case starting(jobFinished: Bool)
        /// Reported executing; the job is running.
        case executing
        /// `willChangeValue("isFinished")` posted; not yet committed. `wasExecuting` is whether
        /// `isExecuting` was reported `true`, and so still is until the commit.
        case finishing(wasExecuting: Bool)
        /// Reported finished.
        case finished
    }

    /// What `start()` must do.
    package enum StartAction: Equatable, Sendable {
        /// Report finished without ever reporting executing (cancelled, or the job already finished).
        case reportFinishedWithoutRunning
        /// Report executing, then call `executingCommitted()` and act on its answer.
        case reportExecuting
        /// Already finished: `start()` does nothing, as Foundation's own `start()` does.
        case none
        /// Already started: a programming error, which the caller reports (outside the lock).
        case trapAlreadyStarted
    }

    /// What to do once `executing` is committed.
    package enum ExecutingAction: Equatable, Sendable {
        /// Run the job.
        case runJob
        /// The job finished while starting: report finished (from executing).
        case reportFinished
    }

    package private(set) var state: State = .idle(jobFinished: false)

    package init() {}

    package var isExecuting: Bool {
        switch state {
        case .executing, .finishing(wasExecuting: true): true
        case .idle, .starting, .finishing(wasExecuting: false), .finished: false
        }
    }

    package var isFinished: Bool { state == .finished }

    /// Foundation (or a caller) called `start()`.
    package mutating func startRequested(isCancelled: Bool) -> StartAction {
        switch state {
        case .idle(let jobFinished):
            if isCancelled || jobFinished {
                state = .finishing(wasExecuting: false)
                return .reportFinishedWithoutRunning
            }
            state = .starting(jobFinished: false)
            return .reportExecuting
        case .finishing, .finished:
            return .none
        case .starting, .executing:
            return .trapAlreadyStarted
        }
    }

    /// `isExecuting` may now read `true`; call between `willChangeValue` and `didChangeValue`.
    package mutating func executingCommitted() -> ExecutingAction {
        guard case .starting(let jobFinished) = state else {
            _trap("JobOperation: executing committed in state \(state)")
        }
        if jobFinished {
            state = .finishing(wasExecuting: true)
            return .reportFinished
        }
        state = .executing
        return .runJob
    }

    /// The job finished. Returns `true` if the caller must now report finished (from executing).
    package mutating func jobFinished() -> Bool {
        switch state {
        case .idle:
            state = .idle(jobFinished: true)
            return false
        case .starting:
            state = .starting(jobFinished: true)
            return false
        case .executing:
            state = .finishing(wasExecuting: true)
            return true
        case .finishing, .finished:
            return false
        }
    }

    /// `isFinished` may now read `true`; call between `willChangeValue` and `didChangeValue`.
    package mutating func finishCommitted() {
        guard case .finishing = state else {
            _trap("JobOperation: finish committed in state \(state)")
        }
        state = .finished
    }
}
