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
let engineLock = _Lock()

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
    /// The first list of jobs dropped under the lock, released after unlocking.
    private var released: [Job]?
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

    /// Wakes `waiters` after unlocking.
    mutating func resume(_ waiters: [_Waiter]) {
        if !waiters.isEmpty {
            more.waiters.append(contentsOf: waiters)
        }
    }

    /// Keeps `jobs` alive until `perform()`, so that no job is freed under the lock.
    @inline(__always)
    mutating func release(_ jobs: [Job]) {
        if jobs.isEmpty { return }
        if released == nil {
            released = jobs
        } else {
            more.released.append(jobs)
        }
    }

    /// Empties `jobs`, releasing its elements under the lock when that cannot free any of them
    /// (none is uniquely referenced by the list), and after unlocking otherwise.
    ///
    /// - Complexity: O(jobs.count).
    @inline(__always)
    mutating func drop(_ jobs: inout [Job]) {
        if jobs.isEmpty { return }
        for index in jobs.indices where isKnownUniquelyReferenced(&jobs[index]) {
            release(jobs)
            break
        }
        jobs = []
    }

    /// Keeps `object` (for instance a cancelled job's un-run closures) alive until `perform()`, so
    /// that whatever it captured is freed after unlocking.
    mutating func releaseAfterUnlocking(_ object: Any) {
        more.releasedObjects.append(object)
    }

    /// Keeps `block` alive until `perform()`, so that whatever it captured is freed after unlocking.
    @inline(__always)
    mutating func releaseAfterUnlocking(block: (@Sendable () -> Void)?) {
        guard let block else { return }
        if releasedBlock == nil {
            releasedBlock = block
        } else {
            more.releasedObjects.append(block)
        }
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
        if queue._shouldStartWorkerLocked() {
            more.workerStarts.append((queue._dispatchTargetLocked, queue, queue._workerGeneration))
        }
    }

    /// Carries out the recorded work. Call without the engine lock.
    @inline(__always)
    mutating func perform() {
        released = nil
        releasedBlock = nil
        if let overflow {
            self.overflow = nil
            overflow.perform()
        }
    }
}

/// The less common parts of `_Actions`.
final class _ActionsOverflow {
    var touchedQueues: [JobQueue] = []
    var workerStarts: [(target: DispatchQueue, queue: JobQueue, generation: UInt64)] = []
    var deliveries: [Job] = []
    var waiters: [_Waiter] = []
    var released: [[Job]] = []
    var releasedObjects: [Any] = []
    var releasedQueues: [JobQueue] = []

    func touch(_ queue: JobQueue) {
        if !touchedQueues.contains(where: { $0 === queue }) {
            touchedQueues.append(queue)
        }
    }

    func perform() {
        for start in workerStarts {
            let queue = start.queue
            let generation = start.generation
            start.target.async { queue._runWorker(generation: generation) }
        }
        for job in deliveries {
            job._deliverEvents()
        }
        for waiter in waiters {
            waiter.resume()
        }
        released = []
        releasedObjects = []
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

    func resume() {
        switch self {
        case .semaphore(let semaphore): semaphore.signal()
        case .continuation(let continuation): continuation.resume()
        }
    }
}

/// Per-thread record of the queue and job a thread is running, for `JobQueue.current` and for
/// detecting waits that could never return.
enum _ThreadContext {
    private static let queueKey: pthread_key_t = makeKey()
    private static let jobKey: pthread_key_t = makeKey()

    private static func makeKey() -> pthread_key_t {
        var key = pthread_key_t()
        let result = pthread_key_create(&key, nil)
        precondition(result == 0, "pthread_key_create failed: \(result)")
        return key
    }

    /// The queue whose worker is running on this thread. Not retained: the worker retains it.
    static var queue: JobQueue? {
        get {
            guard let raw = pthread_getspecific(queueKey) else { return nil }
            return Unmanaged<JobQueue>.fromOpaque(raw).takeUnretainedValue()
        }
        set {
            pthread_setspecific(queueKey, newValue.map { Unmanaged.passUnretained($0).toOpaque() })
        }
    }

    /// Runs `body` with `queue` and `job` as this thread's context, then restores the previous one.
    static func withContext(queue: JobQueue?, job: Job?, _ body: () -> Void) {
        let previousQueue = self.queue
        let previousJob = self.job
        self.queue = queue
        self.job = job
        body()
        self.queue = previousQueue
        self.job = previousJob
    }

    /// The job whose work is running on this thread. Not retained: the runner retains it.
    static var job: Job? {
        get {
            guard let raw = pthread_getspecific(jobKey) else { return nil }
            return Unmanaged<Job>.fromOpaque(raw).takeUnretainedValue()
        }
        set {
            pthread_setspecific(jobKey, newValue.map { Unmanaged.passUnretained($0).toOpaque() })
        }
    }
}
