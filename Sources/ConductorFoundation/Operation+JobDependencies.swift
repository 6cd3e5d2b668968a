import Conductor
import Foundation

extension Operation {
    /// Makes this operation wait until the Conductor `job` has finished.
    ///
    /// The job can be anywhere: on a `JobQueue`, or run by a ``JobOperation``. The dependency is a
    /// proxy operation, already executing, that reports finished (with its key-value
    /// notifications) when the job delivers its `.finished` event, at once if the job has already
    /// finished. It appears in `dependencies` under a name like `job 'Index'`. Adding the same job
    /// twice does nothing. An ``OperationJob`` is not proxied: this operation depends on its
    /// operation directly.
    ///
    /// The proxy holds this operation until the job finishes. swift-corelibs-foundation refers to
    /// an operation's dependents without retaining them, so a dependent freed before its
    /// dependency finishes would be used after it was freed; with the proxy holding it, that
    /// cannot happen through a bridge. A job that never finishes keeps this operation alive.
    ///
    /// Waiting for itself traps, naming the job: for a ``JobOperation``, its own job; for any
    /// operation, the ``OperationJob`` that runs it (Foundation's `addDependency(self)` hangs).
    ///
    /// - Parameter job: The job to wait for.
    /// - Important: As with any Foundation dependency, add it before the operation starts. For an
    ///   operation that an ``OperationJob`` wraps, add it before creating the job, so that the job
    ///   waits without holding a slot (see ``OperationJob``).
    /// - Complexity: O(number of dependencies) for the duplicate check.
    public func addDependency(_ job: Job) {
        if let wrapper = self as? JobOperation, wrapper.job === job {
            _trap(
                "Operation.addDependency(_:): '\(job.displayName)' is the job this JobOperation runs; it would wait for itself and never finish"
            )
        }
        if let bridge = job as? OperationJob {
            _requireNotSelf(bridge.operation, job, "is the OperationJob that runs this operation")
            addDependency(bridge.operation)
            return
        }
        if let proxy = job as? _OperationFinishedJob {
            _requireNotSelf(proxy.operation, job, "stands for this operation")
            addDependency(proxy.operation)
            return
        }
        _addDependency(onConductorFinishOf: job)
    }

    /// Traps, naming `job`, if `operation`, which `job` stands for, is this operation.
    private func _requireNotSelf(_ operation: Operation, _ job: Job, _ relation: StaticString) {
        _require(
            operation !== self,
            "Operation.addDependency(_:): '\(job.displayName)' \(relation); an operation cannot wait for itself"
        )
    }

    /// Makes this operation wait until `job` has finished on the Conductor side, whatever the job
    /// is: always through a `_JobFinishedOperation`, without the shortcuts of `addDependency(_:)`
    /// to a Foundation operation. Adding the same job twice does nothing.
    ///
    /// The proxy reports finished when the job delivers `.finished`, which the engine does after it
    /// has released the job's dependents. So once Foundation has seen the proxy finish, every
    /// Conductor job that depended on `job` no longer waits for it. A shortcut gives no such
    /// order: Foundation records an `OperationJob`'s operation, or the operation behind
    /// `job.addDependency(operation)`, as finished before the Conductor side learns of it.
    func _addDependency(onConductorFinishOf job: Job) {
        if dependencies.contains(where: { ($0 as? _JobFinishedOperation)?.awaitedJob === job }) {
            return
        }
        let proxy = _JobFinishedOperation(waitingFor: job, dependent: self)
        proxy.begin()
        addDependency(proxy)
    }
}

/// The proxy behind `operation.addDependency(job)`: a correct asynchronous operation, started at
/// once so that it is executing while it waits, that reports finished when `job` finishes.
///
/// It holds the job and its dependent operation until then, and drops both once it has reported
/// finished (after Foundation, inside `didChangeValue`, is done with the dependent).
// @unchecked Sendable: `lifecycle` and `links` are locked boxes; the rest is `Operation`'s.
final class _JobFinishedOperation: Operation, @unchecked Sendable {
    private struct Links {
        var job: Job?
        var dependent: Operation?
    }

    private let lifecycle = _OperationLifecycle()
    private let links: _LockedValue<Links>

    init(waitingFor job: Job, dependent: Operation) {
        links = _LockedValue(Links(job: job, dependent: dependent))
        super.init()
        name = "job '\(job.displayName)'"
    }

    /// The job this proxy waits for; `nil` once it has finished.
    var awaitedJob: Job? { links.withLock { $0.job } }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { lifecycle.isExecuting }
    override var isFinished: Bool { lifecycle.isFinished }

    /// Reports executing. Called once, by `begin()`; any later call does nothing.
    override func start() {
        _ = lifecycle.start(self, isCancelled: false, description: "operation '\(name ?? "")'")
    }

    /// Starts the proxy and begins waiting for the job.
    func begin() {
        start()
        guard let job = awaitedJob else { return }
        // Strong: the proxy stays alive until the job finishes (the job drops its observers then).
        job.observe { event in
            if event == .finished {
                self.jobFinished()
            }
        }
        if job.isFinished {
            jobFinished()
        }
    }

    private func jobFinished() {
        // Only the call that reported the finish drops the links: Foundation is done with the
        // dependent once `didChangeValue` has returned, and not before.
        guard lifecycle.workFinished(self) else { return }
        let dropped = links.withLock { links in
            defer { links = Links() }
            return links
        }
        // If the dependent was being added to an OperationQueue while this proxy finished, the
        // queue may have cached a stale "not ready" (see `_announceReadinessIfReady()`). Announcing
        // again corrects it unless the queue stores its stale value later still, which only
        // `OperationQueue.addJob(_:)` rules out, by announcing once the operation is in the queue.
        dropped.dependent?._announceReadinessIfReady()
        withExtendedLifetime(dropped) {}
    }
}
