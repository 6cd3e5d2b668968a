import Dispatch

extension Job {
    /// The Dispatch queue the job's work runs on, or `nil` (the default) for its queue's worker.
    ///
    /// Set it, for example to `.main`, for work that must run on a particular thread or queue. The
    /// job still holds its own queue's slot from the moment its queue starts it until it finishes, so
    /// a limit of 3 still means at most 3 such jobs in flight; the worker does not wait meanwhile, it
    /// goes on with other jobs. Inside the work, ``JobQueue/current`` is the job's queue. A job
    /// that finishes when ``execute()`` returns finishes then; an ``AsynchronousJob`` when it calls
    /// ``AsynchronousJob/finish()``. ``start()`` by hand also hands the work to this queue, and
    /// returns at once.
    ///
    /// A ``TaskJob``'s or ``ValueJob``'s body runs in a `Task` wherever it was started; mark the body
    /// `@MainActor` instead.
    ///
    /// Set it before the job starts; setting it on a started job traps, and on a job cancelled
    /// before it started it has no effect.
    public var executionQueue: DispatchQueue? {
        get { engineLock.withLock { _extras?.executionQueue } }
        set {
            engineLock.lock()
            guard _isUnstartedLocked("Job.executionQueue", "set its execution queue") else { return }
            if newValue != nil || _extras != nil {
                _extrasLocked.executionQueue = newValue
            }
            _runsElsewhere = newValue != nil
            engineLock.unlock()
        }
    }

    /// Runs the job's work on its execution queue, with `queue` as ``JobQueue/current``, and
    /// finishes the job as its worker would have. The job is executing.
    func _executeOnExecutionQueue(queue: JobQueue?) {
        engineLock.lock()
        let target = _extras?.executionQueue
        let refusal = _extras?.categoryRefusal
        _extras?.categoryRefusal = nil
        engineLock.unlock()
        if let refusal {
            // Not on this worker, which goes on with its next job: finishing runs callbacks.
            return (target ?? DispatchQueue.global()).async { [self] in
                _refuseToRun(category: refusal.category, group: refusal.group)
            }
        }
        guard let target else { return }
        target.async { [self] in
            _ThreadContext.withContext(queue: queue, job: self) {
                var failure: (any Error)?
                do {
                    try _executeClaimed()
                } catch {
                    failure = error
                }
                if failure != nil || finishesWhenExecuteReturns {
                    _finish(failure: failure)
                } else {
                    _executeReturned()
                }
            }
        }
    }
}

extension Job {
    /// The job named an exclusivity category its group does not hold (`categoryRefusal`): it fails
    /// without running. A group first cancels its children, which have not started.
    func _refuseToRun(category: String, group: GroupJob) {
        if let refusedGroup = self as? GroupJob {
            refusedGroup._cancelChildrenBecauseRefused()
        }
        let situation = "names the exclusivity category '\(category)', which"
        // A job cancelled meanwhile keeps its own reason, as any cancelled job does, also when the
        // cancel lands after this look (`unlessCancelled`). Its work never runs: it is let go now,
        // or a block that captured the job would keep both alive.
        _finish(
            failure: isCancelled
                ? nil : JobError(code: .categoryNotHeldByGroup, jobs: [self, group], situation: situation),
            discardingWork: true, unlessCancelled: true)
    }
}

extension JobQueue {
    /// A shared queue whose jobs run their work on the main queue, one at a time, as Foundation's
    /// `OperationQueue.main`.
    ///
    /// Its limit is 1 and its `underlyingQueue` is `DispatchQueue.main`, so its workers, and so
    /// its jobs' work, observers and completion blocks, run on the main thread, in order of
    /// priority then arrival. The main queue must be running (an app's run loop, `dispatchMain()`,
    /// or an `async` `main`). A blocking wait on the main queue (or the main thread) for its jobs
    /// that have not started would return only if another thread cancelled them or moved the queue
    /// off the main queue, and traps (as for any queue whose `underlyingQueue` is
    /// `DispatchQueue.main`); wait with `await`, or from another thread.
    public static let main: JobQueue = {
        let queue = JobQueue(name: "main", maxConcurrentJobCount: 1)
        queue.underlyingQueue = DispatchQueue.main
        return queue
    }()
}
