import Foundation
import Synchronization

/// A correct asynchronous `Operation`, written the way Foundation requires.
///
/// It overrides `isAsynchronous`, `isExecuting` and `isFinished` over thread-safe state, posts the
/// KVO notifications for `isExecuting` and `isFinished` by hand (the queue learns of the finish only
/// through them), and finishes at once when it was cancelled before it started.
// @unchecked Sendable: Operation is a Foundation class shared across threads; this subclass's own
// state is the `Mutex` below and the immutable `work`.
final class FoundationAsyncOperation: Operation, @unchecked Sendable {
    private let work: @Sendable (FoundationAsyncOperation) -> Void
    private let state = Mutex<(executing: Bool, finished: Bool)>((false, false))

    init(_ work: @escaping @Sendable (FoundationAsyncOperation) -> Void) {
        self.work = work
        super.init()
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { state.withLock { $0.executing } }
    override var isFinished: Bool { state.withLock { $0.finished } }

    override func start() {
        if isCancelled {
            finish()
            return
        }
        willChangeValue(forKey: "isExecuting")
        state.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        work(self)
    }

    /// Marks the operation finished and tells the queue, through KVO. Call it once.
    func finish() {
        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        state.withLock {
            $0.executing = false
            $0.finished = true
        }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}
