import Dispatch

/// A token for removing an observer added with ``Job/observe(_:)``.
public struct JobObserverToken: Hashable, Sendable {
    let id: UInt64
}

/// A job's rarely used state: observers, completion block, waiters and undelivered events.
/// Allocated on first use, so a job that nobody observes pays one pointer for all of it.
// @unchecked Sendable: every stored property is guarded by `engineLock`.
final class _JobExtras: @unchecked Sendable {
    var observers: [(token: JobObserverToken, handler: @Sendable (JobEvent) -> Void)] = []
    var nextObserverID: UInt64 = 1
    var completionBlock: (@Sendable () -> Void)?
    var waiters: [_Waiter] = []
    /// Events posted but not yet delivered, oldest first.
    var pendingEvents: [JobEvent] = []
    /// Whether some thread is delivering this job's events; it delivers all of them, in order.
    var isDelivering = false
    /// The queue to settle once the `.finished` callbacks have run.
    var settleQueue: JobQueue?
    /// Identities of the dependencies, kept once a job has many, so duplicate checks stay O(1).
    var dependencySet: Set<ObjectIdentifier>?
}

extension Job {
    /// The job's extras, created on first use. Call with `engineLock` held.
    var _extrasLocked: _JobExtras {
        if let extras = _extras { return extras }
        let extras = _JobExtras()
        _extras = extras
        return extras
    }

    /// Calls `handler` with each lifecycle event that happens after this call.
    ///
    /// Events reach each observer at most once and in lifecycle order (`.ready`, `.started`,
    /// `.finished`, with `.cancelled` where it happened). A job's events are delivered one at a
    /// time, never concurrently, on the thread that caused them or on the thread already delivering
    /// an earlier event of the same job. `.finished` is last; after it the observers are released.
    /// Observing a finished job registers nothing.
    ///
    /// - Returns: A token for ``removeObserver(_:)``.
    /// - Complexity: O(1) amortized.
    @discardableResult
    public func observe(_ handler: @escaping @Sendable (JobEvent) -> Void) -> JobObserverToken {
        engineLock.withLock {
            let extras = _extrasLocked
            let token = JobObserverToken(id: extras.nextObserverID)
            extras.nextObserverID += 1
            if _state != .finished {
                extras.observers.append((token, handler))
            }
            return token
        }
    }

    /// Removes an observer. An event already being delivered may still reach it.
    ///
    /// - Complexity: O(observers).
    public func removeObserver(_ token: JobObserverToken) {
        // The removed handler is released after unlocking.
        let removed = engineLock.withLock { () -> [@Sendable (JobEvent) -> Void] in
            guard let extras = _extras, let index = extras.observers.firstIndex(where: { $0.token == token }) else {
                return []
            }
            return [extras.observers.remove(at: index).handler]
        }
        _ = removed
    }

    /// A block run exactly once after the job finishes, then released.
    ///
    /// It runs after the observers have been told `.finished` and before ``waitUntilFinished()``
    /// returns and before the queue counts the job as settled for
    /// ``JobQueue/waitUntilAllJobsAreFinished()``. It may run concurrently with the job's
    /// dependents, which are released when the job finishes. Setting it on a finished job releases
    /// the block without running it.
    public var completionBlock: (@Sendable () -> Void)? {
        get { engineLock.withLock { _extras?.completionBlock } }
        set {
            // The replaced block (or, on a finished job, the new one) is released after unlocking.
            let released: (@Sendable () -> Void)? = engineLock.withLock {
                if _state == .finished { return newValue }
                if newValue == nil && _extras == nil { return nil }
                let extras = _extrasLocked
                let previous = extras.completionBlock
                extras.completionBlock = newValue
                return previous
            }
            _ = released
        }
    }

    /// Blocks the calling thread until the job has finished and its completion block has run.
    ///
    /// - Important: This blocks a thread. From Swift concurrency, use the `async` overload, which
    ///   suspends instead. Waiting for the job from inside its own work would never return and traps.
    public func waitUntilFinished() {
        engineLock.lock()
        if _state == .finished && !_callbacksPending {
            engineLock.unlock()
            return
        }
        if _ThreadContext.job === self {
            let name = _describeLocked
            engineLock.unlock()
            preconditionFailure(
                "Job.waitUntilFinished(): '\(name)' waits for itself from its own work; it would never return")
        }
        let semaphore = DispatchSemaphore(value: 0)
        _extrasLocked.waiters.append(.semaphore(semaphore))
        engineLock.unlock()
        semaphore.wait()
    }

    /// Suspends until the job has finished and its completion block has run.
    ///
    /// Cancelling the waiting task does not end the wait; cancel the job instead.
    public func waitUntilFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            engineLock.lock()
            if _state == .finished && !_callbacksPending {
                engineLock.unlock()
                continuation.resume()
                return
            }
            _extrasLocked.waiters.append(.continuation(continuation))
            engineLock.unlock()
        }
    }

    // MARK: Delivery

    /// Queues `event` for the observers; if no delivery is running, this thread will run it.
    /// Call with `engineLock` held.
    @inline(__always)
    func _postLocked(_ event: JobEvent, _ actions: inout _Actions) {
        // Most jobs have no extras: nobody to tell, nothing to allocate.
        guard let extras = _extras else { return }
        _postLocked(event, to: extras, &actions)
    }

    private func _postLocked(_ event: JobEvent, to extras: _JobExtras, _ actions: inout _Actions) {
        // `.finished` always goes through delivery: it carries the completion block and waiters.
        guard event == .finished || !extras.observers.isEmpty else { return }
        extras.pendingEvents.append(event)
        if !extras.isDelivering {
            extras.isDelivering = true
            actions.deliver(self)
        }
    }

    /// Delivers queued events in order until none is left. Call without `engineLock`.
    func _deliverEvents() {
        engineLock.lock()
        let extras = _extras!
        while !extras.pendingEvents.isEmpty {
            let event = extras.pendingEvents.removeFirst()
            let observers = extras.observers
            if event == .finished {
                extras.observers = []
                let completion = extras.completionBlock
                extras.completionBlock = nil
                engineLock.unlock()
                for observer in observers { observer.handler(event) }
                completion?()
                _settleAfterCallbacks(extras)
                return
            }
            engineLock.unlock()
            for observer in observers { observer.handler(event) }
            engineLock.lock()
        }
        extras.isDelivering = false
        engineLock.unlock()
    }

    /// The last step of finishing a job with callbacks: wake its waiters and settle its queue.
    private func _settleAfterCallbacks(_ extras: _JobExtras) {
        var actions = _Actions()
        engineLock.lock()
        _callbacksPending = false
        actions.resume(extras.waiters)
        extras.waiters = []
        extras.isDelivering = false
        if let queue = extras.settleQueue {
            extras.settleQueue = nil
            queue._settleLocked(&actions)
        }
        // Nothing can be posted after `.finished`; the extras are no longer needed.
        _extras = nil
        engineLock.unlock()
        actions.perform()
    }
}
