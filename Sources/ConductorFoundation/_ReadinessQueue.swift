import Foundation

/// Starts operations that are not ready when their ``OperationJob`` runs, as soon as Foundation
/// marks them ready.
///
/// `Operation.start()` traps on an operation that is not ready, and no platform offers a portable
/// notification of readiness outside a queue (Linux has no KVO). A Foundation `OperationQueue` is
/// the one thing that reliably starts an operation when it becomes ready, so this private,
/// unlimited queue does it. The job stays executing, holding its slot, meanwhile.
///
/// When it happens:
///
/// - Foundation is still lowering the operation's count of unfinished dependencies. The
///   adapter learns that a dependency finished as one of its dependents (see `_whenFinished`), so
///   the job can run a moment before Foundation has updated the operation itself.
/// - A dependency was added to the operation after it was wrapped, so the job never knew of it.
/// - The operation overrides `isReady` with conditions of its own (and posts `isReady` changes).
// @unchecked Sendable: the only stored property is an `OperationQueue`, which Foundation documents
// as safe to use from any thread (it is `Sendable` in swift-corelibs-foundation, not in every SDK).
final class _ReadinessQueue: @unchecked Sendable {
    private static let shared = _ReadinessQueue()

    private let queue: OperationQueue

    private init() {
        queue = OperationQueue()
        queue.name = "ConductorFoundation.readiness"
    }

    /// Hands `operation`, which was not ready, to the queue.
    static func start(_ operation: Operation) {
        shared.start(operation)
    }

    private func start(_ operation: Operation) {
        queue.addOperation(operation)
        if operation.isReady {
            // swift-corelibs-foundation caches readiness when an operation is added. If the last
            // dependency finishes while `addOperation` runs, the cache can keep the stale `false`
            // and no scheduling pass follows: a pass only re-reads a stale cache, and the next one
            // starts the operation. Setting `isSuspended = false` runs a pass. Otherwise harmless.
            queue.isSuspended = false
            queue.isSuspended = false
        }
    }
}
