import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The engine lock. It guards every job's and every queue's scheduling state: job state, the
/// dependency graph (edges, counts and topological order), queue membership, ready buckets and slot
/// accounting.
///
/// One lock, not one per job or per queue, is a deliberate choice; `Docs/Design.md` explains it.
/// In short: dependencies cross queues, cancellation and finishing touch a job, its queue and its
/// dependents at once, and the incremental topological order is global. With one lock every such
/// step is atomic by construction, there is no lock order to get wrong, and every critical section
/// is O(1) or O(out-degree). User code never runs under it.
let engineLock = _Lock(profiled: true)

/// Source of job ids; ids double as the initial topological order, so a job that depends on an
/// older job never needs reordering.
let nextJobID = Atomic<UInt64>(1)

/// Work decided inside the engine lock and carried out after unlocking.
///
/// Every public entry point that takes the lock follows the same shape:
///
///     var actions = _Actions()
///     engineLock.lock()
///     ... mutate state, recording what must happen into `actions` ...
///     actions.planWorkersLocked()
///     engineLock.unlock()
///     actions.perform()
///
/// The common paths (a job with no observers finishing and its worker taking the next job, or a
/// job being added to a busy queue) use only the two inline slots, so they allocate nothing and
/// creating and destroying an `_Actions` costs two releases. Everything else goes to `overflow`.
struct _Actions {
    /// The first queue whose ready work or capacity changed. Unretained: it is only used before
    /// unlocking, while the caller or the queue's own self-retain (released in `perform()`) keeps it alive.
    private var touchedQueue: Unmanaged<JobQueue>?
    /// The first two lists of jobs dropped under the lock (a finishing job's dependents and
    /// dependencies), released after unlocking.
    private var released = _JobList.empty
    private var releasedToo = _JobList.empty
    /// The first un-run block of a cancelled job, released after unlocking; inline so that
    /// cancelling a `BlockJob` allocates nothing.
    private var releasedBlock: (@Sendable () -> Void)?
    /// Everything less common, allocated on first use.
    private var overflow: _ActionsOverflow?

    private var more: _ActionsOverflow {
        mutating get {
            if let overflow { return overflow }
            let created = _ActionsOverflow()
            overflow = created
            return created
        }
    }

    /// Records that `queue` may be able to start more work.
    @inline(__always)
    mutating func touch(_ queue: JobQueue) {
        guard let touchedQueue else {
            touchedQueue = Unmanaged.passUnretained(queue)
            return
        }
        if touchedQueue.toOpaque() != Unmanaged.passUnretained(queue).toOpaque() {
            more.touch(queue)
        }
    }

    /// Runs `job`'s event delivery after unlocking.
    mutating func deliver(_ job: Job) {
        more.deliveries.append(job)
    }

    /// Whether `perform()` will run user code: observers, completion blocks, `cancel()` overrides,
    /// progress observers, or a group's end (which delivers the group's own callbacks).
    var hasDeliveries: Bool {
        guard let overflow else { return false }
        return !overflow.deliveries.isEmpty || !overflow.cancelOverrides.isEmpty
            || !overflow.progressNotifications.isEmpty || !overflow.groupEnds.isEmpty
    }

    /// Finishes `group`, sealed by its last child's count-down (`Job._countDownGroupLocked`),
    /// after unlocking and after this section's callbacks and waiters.
    mutating func endAfterCallbacks(_ group: GroupJob) {
        more.groupEnds.append(group)
    }

    /// Calls `handlers` with `progress` after unlocking: its counts changed. The handlers are
    /// released after that, outside the lock, too.
    mutating func notifyProgress(_ progress: JobProgress, _ handlers: [JobProgress.Handler]) {
        more.progressNotifications.append((progress, handlers))
    }

    /// Queues `job`'s cancellation: its `.requireSuccess` dependency `dependency` finished with
    /// `outcome`, which is not success. Carried out by `cancelDependentsLocked()`.
    mutating func cancelLater(_ job: Job, because dependency: Job, _ outcome: _OutcomeKind) {
        let code: CancellationReason.Code = outcome == .failed ? .dependencyFailed : .dependencyCancelled
        let reason = CancellationReason(code: code, detail: nil, responsibleJob: dependency._describeLocked)
        more.cascade.append((job, reason))
    }

    /// Queues `job`'s cancellation for `reason`, carried out by `cancelDependentsLocked()` with
    /// the cascade's: a group cancelled before it ran cancels its children this way.
    mutating func cancelLater(_ job: Job, reason: CancellationReason) {
        more.cascade.append((job, reason))
    }

    /// Carries out the queued cancellations and those they cause in turn, iteratively: cancelling a
    /// job finishes it, and its `_finishLocked` queues its own `.requireSuccess` dependents here
    /// instead of recursing. Nested calls return at once; the outermost one drains the queue, so a
    /// cascade through a chain of any length uses constant stack. Cancelled jobs are kept until
    /// `perform()`, and their `cancel()` overrides run there, after unlocking.
    ///
    /// - Complexity: O(edges) of the cascade.
    @inline(__always)
    mutating func cancelDependentsLocked() {
        guard let overflow, !overflow.cascade.isEmpty, !overflow.isCascading else { return }
        drainCascadeLocked(overflow)
    }

    private mutating func drainCascadeLocked(_ overflow: _ActionsOverflow) {
        overflow.isCascading = true
        while let (job, reason) = overflow.cascade.popLast() {
            // Kept alive until after unlocking: the cascade may hold the last reference.
            overflow.cascaded.append(job)
            if job._cancelLocked(reason, &self) && job._mayOverrideCancel {
                overflow.cancelOverrides.append(job)
            }
        }
        overflow.isCascading = false
    }

    /// Wakes `waiters` after unlocking.
    mutating func resume(_ waiters: [_Waiter]) {
        if !waiters.isEmpty {
            more.waiters.append(contentsOf: waiters)
        }
    }

    /// Keeps `jobs` alive until `perform()`, so that no job is freed under the lock.
    mutating func release(_ jobs: [Job]) {
        if jobs.isEmpty { return }
        more.released.append(jobs)
    }

    /// Empties `jobs`, releasing its elements after unlocking.
    ///
    /// Always after unlocking: checking under the lock that no element is uniquely referenced
    /// would not be enough, since another thread may drop its own reference without the lock
    /// between the check and the release, and the job would then be freed under the lock.
    ///
    /// - Complexity: O(1).
    @inline(__always)
    mutating func drop(_ jobs: inout _JobList) {
        if jobs.isEmpty { return }
        // Swapped, not copied: no reference count changes hands.
        if released.isEmpty {
            swap(&released, &jobs)
        } else if releasedToo.isEmpty {
            swap(&releasedToo, &jobs)
        } else {
            var list = _JobList.empty
            swap(&list, &jobs)
            more.releasedLists.append(list)
        }
    }

    /// Starts `job`'s timeout timer after unlocking.
    mutating func startTimeout(of job: Job, after timeout: Duration) {
        more.timeoutsToStart.append((job, timeout))
    }

    /// Cancels `timer` after unlocking (cancelling a source calls into Dispatch).
    mutating func cancelAfterUnlocking(timer: AnyObject) {
        more.timersToCancel.append(timer)
    }

    /// Starts evaluating `job`'s conditions after unlocking.
    mutating func evaluateConditions(of job: Job) {
        more.conditionEvaluations.append(job)
    }

    /// Cancels `task` (a job's condition evaluation) after unlocking.
    mutating func cancelAfterUnlocking(_ task: Task<Void, Never>) {
        more.tasksToCancel.append(task)
    }

    /// Keeps `object` (for instance a cancelled job's un-run closures) alive until `perform()`, so
    /// that whatever it captured is freed after unlocking.
    mutating func releaseAfterUnlocking(_ object: Any) {
        more.releasedObjects.append(object)
    }

    /// Keeps `block` alive until `perform()`, so that whatever it captured is freed after unlocking.
    @inline(__always)
    mutating func releaseAfterUnlocking(block: consuming (@Sendable () -> Void)?) {
        guard let block else { return }
        if releasedBlock == nil {
            releasedBlock = block
        } else {
            more.releasedBlocks.append(_ReleasedBlock(block: block))
        }
    }

    /// Makes room for `count` more blocks kept by `releaseAfterUnlocking(block:)`: for cancelling
    /// many jobs at once, whose list would otherwise grow by copying, again and again. The first
    /// block has an inline slot, so for one job or none this allocates nothing.
    mutating func reserveReleasedBlocks(_ count: Int) {
        guard count > 1 else { return }
        more.releasedBlocks.reserveCapacity(more.releasedBlocks.count + count)
    }

    /// Releases the queue's self-retain after unlocking.
    mutating func releaseSelfRetainAfterUnlocking(of queue: JobQueue) {
        more.releasedQueues.append(queue)
    }

    /// Decides, for every touched queue, whether to start a worker. Call with the engine lock held.
    @inline(__always)
    mutating func planWorkersLocked() {
        guard let first = touchedQueue else { return }
        first._withUnsafeGuaranteedRef { planWorkersLocked(for: $0) }
        if let overflow {
            for queue in overflow.touchedQueues {
                planWorkersLocked(for: queue)
            }
        }
    }

    private mutating func planWorkersLocked(for queue: JobQueue) {
        #if CONDUCTOR_INVARIANTS
            queue._checkInvariantsLocked()
        #endif
        if queue._shouldStartWorkerLocked(&self) {
            more.workerStarts.append((queue._dispatchTargetLocked, queue, queue._workerGeneration))
        }
    }

    /// Carries out the recorded work. Call without the engine lock.
    @inline(__always)
    mutating func perform() {
        released = .empty
        releasedToo = .empty
        releasedBlock = nil
        if let overflow {
            self.overflow = nil
            overflow.perform()
        }
    }
}

/// A closure kept alive until after unlocking; see `_ActionsOverflow.releasedBlocks`.
struct _ReleasedBlock {
    let block: @Sendable () -> Void
}

/// The less common parts of `_Actions`.
///
/// `@exclusivity(unchecked)` on every stored property: an `_ActionsOverflow` belongs to one
/// section's `_Actions`, on one thread, so no two accesses can conflict. Swift's dynamic check cost
/// about 70 instructions per checked access (callgrind), and cancelling a `BlockJob` paid one. See
/// Docs/Design.md, "Costs the hot path avoids".
final class _ActionsOverflow {
    @exclusivity(unchecked) var touchedQueues: [JobQueue] = []
    /// The identities of `touchedQueues`.
    @exclusivity(unchecked) private var touchedQueueIDs: Set<ObjectIdentifier> = []
    @exclusivity(unchecked) var workerStarts: [(target: DispatchQueue, queue: JobQueue, generation: UInt64)] = []
    @exclusivity(unchecked) var deliveries: [Job] = []
    @exclusivity(unchecked) var waiters: [_Waiter] = []
    @exclusivity(unchecked) var released: [[Job]] = []
    @exclusivity(unchecked) var releasedLists: [_JobList] = []
    @exclusivity(unchecked) var releasedObjects: [Any] = []
    /// Blocks of cancelled jobs, each in a struct: an `Array` or `Any` of bare closures stores
    /// them at the generic abstraction, which allocates a thunk for every closure stored, once per
    /// cancelled `BlockJob`.
    @exclusivity(unchecked) var releasedBlocks: [_ReleasedBlock] = []
    @exclusivity(unchecked) var releasedQueues: [JobQueue] = []
    /// Dependents waiting to be cancelled by a `.requireSuccess` cascade, and whether one is being
    /// carried out (see `_Actions.cancelDependentsLocked()`).
    @exclusivity(unchecked) var cascade: [(Job, CancellationReason)] = []
    @exclusivity(unchecked) var isCascading = false
    /// Jobs the cascade cancelled, kept alive until after unlocking.
    @exclusivity(unchecked) var cascaded: [Job] = []
    /// Jobs whose `cancel()` override must run after unlocking.
    @exclusivity(unchecked) var cancelOverrides: [Job] = []
    /// Jobs with a time limit that began executing, and timers of jobs that finished first.
    @exclusivity(unchecked) var timeoutsToStart: [(Job, Duration)] = []
    /// Timer sources (`_JobExtras.timer`), cancelled after unlocking.
    @exclusivity(unchecked) var timersToCancel: [AnyObject] = []
    /// Jobs whose conditions are due for evaluation, and evaluations of jobs that finished first.
    @exclusivity(unchecked) var conditionEvaluations: [Job] = []
    @exclusivity(unchecked) var tasksToCancel: [Task<Void, Never>] = []
    /// Progress objects whose counts changed, with the observers to tell.
    @exclusivity(unchecked) var progressNotifications: [(JobProgress, [JobProgress.Handler])] = []
    /// Groups whose last child finished in this section, to finish after its callbacks.
    @exclusivity(unchecked) var groupEnds: [GroupJob] = []

    func touch(_ queue: JobQueue) {
        // A set, not a scan of the list: a cascade across many queues touches each once, in O(1).
        if touchedQueueIDs.insert(ObjectIdentifier(queue)).inserted {
            touchedQueues.append(queue)
        }
    }

    func perform() {
        for timer in timersToCancel {
            (timer as? DispatchSourceTimer)?.cancel()
        }
        for task in tasksToCancel {
            task.cancel()
        }
        for job in conditionEvaluations {
            job._evaluateConditions()
        }
        for (job, timeout) in timeoutsToStart {
            job._startTimeout(after: timeout)
        }
        for start in workerStarts {
            let queue = start.queue
            let generation = start.generation
            start.target.async { queue._runWorker(generation: generation) }
        }
        if !deliveries.isEmpty || !cancelOverrides.isEmpty || !progressNotifications.isEmpty {
            // Callbacks run with no worker context, whichever thread runs them: `JobQueue.current`
            // is `nil` there (a `TaskJob`'s body that causes them binds its queue to its task, which
            // is unbound too), and a wait from a callback is not mistaken for a job waiting for itself.
            _ThreadContext.withContext(queue: nil, job: nil) {
                JobQueue._withoutTaskQueue {
                    for (progress, handlers) in progressNotifications {
                        for handler in handlers { handler(progress) }
                    }
                    for job in deliveries {
                        job._deliverEvents()
                    }
                    // The engine already cancelled these jobs; their overrides see `isCancelled`.
                    for job in cancelOverrides {
                        job.cancel()
                    }
                }
            }
        }
        for waiter in waiters {
            waiter.resume()
        }
        // After the callbacks and waiters of the children whose finish ended them, so that the
        // group's waiters find what those did. Finishing delivers the group's own callbacks, with
        // no worker context.
        for group in groupEnds {
            group._end()
        }
        released = []
        releasedLists = []
        releasedObjects = []
        releasedBlocks = []
        cascaded = []
        cancelOverrides = []
        groupEnds = []
        timersToCancel = []
        timeoutsToStart = []
        for queue in releasedQueues {
            // Balance the self-retain; `releasedQueues` keeps the queue alive until it is emptied.
            Unmanaged.passUnretained(queue).release()
        }
        releasedQueues = []
    }
}

/// A thread or task blocked in one of the `waitUntil…` methods.
enum _Waiter {
    case semaphore(DispatchSemaphore)
    case continuation(CheckedContinuation<Void, Never>)
    /// The last job of a batch wait settled.
    case batch(_BatchWait)

    func resume() {
        switch self {
        case .semaphore(let semaphore): semaphore.signal()
        case .continuation(let continuation): continuation.resume()
        case .batch(let batch): batch.semaphore.signal()
        }
    }
}

/// The wait of `addJobs(_:waitUntilFinished: true)`: one semaphore for the whole batch, signalled
/// when the last of its jobs has settled, so the waiting thread wakes once, not once per job. Each
/// job of the batch points to it (`Job._batch`) and counts it down, under the engine lock, as it
/// settles; only the last one hands the signal to `_Actions`.
/// A job whose only detail is its batch keeps the batch in its side slot itself (see `_JobSide`).
// @unchecked Sendable: `remaining` is guarded by `engineLock`; the semaphore is thread-safe.
final class _BatchWait: _JobSide, @unchecked Sendable {
    /// Jobs of the batch not yet settled. Set under the engine lock before any of them can settle.
    var remaining = 0
    let semaphore = DispatchSemaphore(value: 0)

    init() {
        super.init(isBatch: true)
    }
}

/// Per-thread record of the queue and job a thread is running, for `JobQueue.current` and for
/// detecting waits that could never return.
///
/// One pthread key per process points to a `Slot` per thread, allocated when a context is first set
/// on the thread and freed when the thread exits. A worker finds its slot once and then records each job it runs
/// with a plain store (`_ThreadContext.slot()`): `pthread_setspecific` per job cost about 35
/// instructions.
enum _ThreadContext {
    /// A thread's queue and job. Neither is retained: the worker retains both while it runs.
    struct Slot {
        var queue: Unmanaged<JobQueue>?
        var job: Unmanaged<Job>?
        /// The job whose observers or completion block this thread is running, for the waits'
        /// misuse checks: such a wait on the job, or on its queue, would never return.
        var delivering: Unmanaged<Job>?
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let result = pthread_key_create(&key) { slot in
            #if canImport(Darwin)
                slot.assumingMemoryBound(to: Slot.self).deallocate()
            #else
                slot?.assumingMemoryBound(to: Slot.self).deallocate()
            #endif
        }
        _require(result == 0, "pthread_key_create failed: \(result)")
        return key
    }()

    /// This thread's slot, if it has one.
    @inline(__always)
    private static var existingSlot: UnsafeMutablePointer<Slot>? {
        pthread_getspecific(key)?.assumingMemoryBound(to: Slot.self)
    }

    /// This thread's slot, allocated if it has none. The pointer stays valid until the thread exits.
    static func slot() -> UnsafeMutablePointer<Slot> {
        if let slot = existingSlot { return slot }
        let slot = UnsafeMutablePointer<Slot>.allocate(capacity: 1)
        slot.initialize(to: Slot())
        let result = pthread_setspecific(key, slot)
        _require(result == 0, "pthread_setspecific failed: \(result)")
        return slot
    }

    /// The queue whose worker is running on this thread. Set by the worker, through its slot, and
    /// by `withContext`.
    static var queue: JobQueue? {
        existingSlot?.pointee.queue?.takeUnretainedValue()
    }

    /// The job whose work is running on this thread.
    static var job: Job? {
        get { existingSlot?.pointee.job?.takeUnretainedValue() }
        set { slot().pointee.job = newValue.map { Unmanaged.passUnretained($0) } }
    }

    /// The job whose observers or completion block are running on this thread (the innermost).
    static var delivering: Job? {
        existingSlot?.pointee.delivering?.takeUnretainedValue()
    }

    /// Runs `body`, a job's observers or completion block, with `job` recorded as `delivering`.
    /// `job` is held by the caller.
    static func whileDelivering(_ job: Job, _ body: () -> Void) {
        let slot = slot()
        let previous = slot.pointee.delivering
        slot.pointee.delivering = Unmanaged.passUnretained(job)
        body()
        slot.pointee.delivering = previous
    }

    /// Runs `body` with `queue` and `job` as this thread's context, then restores the previous one.
    static func withContext(queue: JobQueue?, job: Job?, _ body: () -> Void) {
        if queue == nil && job == nil && existingSlot == nil {
            return body()  // A thread without a slot has no context to clear.
        }
        let slot = slot()
        let previous = slot.pointee
        slot.pointee = Slot(
            queue: queue.map { Unmanaged.passUnretained($0) }, job: job.map { Unmanaged.passUnretained($0) })
        body()
        slot.pointee = previous
    }
}

/// `duration` in whole nanoseconds, saturated: 0 for zero or less, `UInt64.max` beyond that (584
/// years). Every conversion of a user's duration goes through it (time limits, backoff waits, the
/// watchdog's threshold). Compared as durations before `components`, which traps for a duration
/// beyond `Int64` seconds (`.seconds(Int64.max) * 10`); saturated, not wrapped: a watchdog
/// threshold of 1,169 years once wrapped to 0.58 s and reported every job.
func _saturatingNanoseconds(_ duration: Duration) -> UInt64 {
    guard duration > .zero else { return 0 }
    guard duration < .seconds(18_446_744_073) else { return .max }
    let (seconds, attoseconds) = duration.components
    return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
}

/// `duration` as a Dispatch interval: zero or negative is now; too long for Dispatch (about 292
/// years) is never, so a time limit or backoff that long never fires.
func _dispatchInterval(_ duration: Duration) -> DispatchTimeInterval {
    let nanoseconds = _saturatingNanoseconds(duration)
    let limit = UInt64(Int.max / 1_000_000_000 - 1) * 1_000_000_000
    return nanoseconds < limit ? .nanoseconds(Int(nanoseconds)) : .never
}
