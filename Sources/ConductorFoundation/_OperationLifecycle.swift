import Conductor
import Foundation

/// The storage half of a correct asynchronous `Operation`: an `_OperationStateMachine` behind a
/// lock, and the key-value notifications for its changes, posted after unlocking.
///
/// Used by ``JobOperation`` and by `_JobFinishedOperation`, which cannot share a superclass
/// (`JobOperation` is public and subclasses `Operation` directly). The operation is passed in, not
/// stored, so there is no reference cycle.
///
/// The keys are `"isExecuting"` and `"isFinished"`: the key paths of the `isExecuting` and
/// `isFinished` properties for Apple's KVO, and the spellings swift-corelibs-foundation's
/// `Operation.observeValue(forKeyPath:ofObject:)` acts on (it also accepts `"executing"` and
/// `"finished"`).
// @unchecked Sendable: the only stored property is a locked box.
final class _OperationLifecycle: @unchecked Sendable {
    private let machine = _LockedValue(_OperationStateMachine())

    var isExecuting: Bool { machine.withLock { $0.isExecuting } }
    var isFinished: Bool { machine.withLock { $0.isFinished } }

    /// Carries out `start()`. Returns `true` when the caller must now run its work; by then
    /// `isExecuting` has been reported.
    func start(_ operation: Operation, isCancelled: Bool, description: @autoclosure () -> String) -> Bool {
        switch machine.withLock({ $0.startRequested(isCancelled: isCancelled) }) {
        case .none:
            return false
        case .trapAlreadyStarted:
            _trap("\(description()).start(): already started; an operation is started once")
        case .reportFinishedWithoutRunning:
            // Early cancellation, as Apple documents it: never report executing, move straight to
            // finished, with the notification.
            operation._reportChange(of: ["isFinished"]) {
                machine.withLock { $0.finishCommitted() }
            }
            return false
        case .reportExecuting:
            var next = _OperationStateMachine.ExecutingAction.runJob
            operation._reportChange(of: ["isExecuting"]) {
                next = machine.withLock { $0.executingCommitted() }
            }
            switch next {
            case .runJob:
                return true
            case .reportFinished:
                reportFinishedFromExecuting(operation)
                return false
            }
        }
    }

    /// The work finished. Returns `true` if this call reported the operation finished (exactly one
    /// call does, once the operation has started).
    @discardableResult
    func workFinished(_ operation: Operation) -> Bool {
        guard machine.withLock({ $0.jobFinished() }) else { return false }
        reportFinishedFromExecuting(operation)
        return true
    }

    private func reportFinishedFromExecuting(_ operation: Operation) {
        operation._reportChange(of: ["isExecuting", "isFinished"]) {
            machine.withLock { $0.finishCommitted() }
        }
    }
}

extension Operation {
    /// Posts `willChangeValue` for each key, runs `commit`, then posts `didChangeValue` in
    /// reverse order, so that the notifications nest. Call without holding any lock.
    func _reportChange(of keys: [String], _ commit: () -> Void) {
        for key in keys {
            willChangeValue(forKey: key)
        }
        commit()
        for key in keys.reversed() {
            didChangeValue(forKey: key)
        }
    }
}

extension Operation {
    /// Posts the key-value notifications for `isReady`, so that the operation's queue reads it
    /// again. A workaround for swift-corelibs-foundation, where an operation whose last
    /// dependency finishes while `addOperation(_:)` runs can keep a stale "not ready" and never
    /// start: the queue caches `isReady` as read before the dependency's announcement, and
    /// schedules it only on another announcement. Harmless on an operation that has started or
    /// finished, and on Darwin, which reads `isReady` again on each notification.
    ///
    /// Only a ready operation is announced: the queue caches what it reads during the
    /// notification, and a "not ready" read just before another dependency finished would be one
    /// more stale value, the very problem this works around. A ready operation stays ready.
    func _announceReadinessIfReady() {
        guard isReady else { return }
        willChangeValue(forKey: "isReady")
        didChangeValue(forKey: "isReady")
    }
}
