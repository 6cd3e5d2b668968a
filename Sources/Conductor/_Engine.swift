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
/// The common paths (a job with no observers finishing and the worker taking the next job) record
/// nothing and allocate nothing.
struct _Actions {
    /// The first queue whose ready work or capacity changed; kept inline to avoid an allocation.
    private var touchedQueue: JobQueue?
    /// Further queues whose ready work or capacity changed.
    private var moreTouchedQueues: [JobQueue] = []
    /// Worker starts decided by `planWorkersLocked()`.
    private var workerStarts: [(target: DispatchQueue, queue: JobQueue, generation: UInt64, count: Int)] = []
    /// Jobs whose event delivery this thread must run, because it posted into an idle delivery.
    var deliveries: [Job] = []
    /// Waiters to wake.
    var waiters: [_Waiter] = []
    /// Jobs dropped under the lock, released after unlocking (one slot inline, the rest in an array).
    private var released: [Job] = []
    private var moreReleased: [[Job]] = []
    /// A queue whose self-retain ends; released after unlocking.
    private var releasedQueue: JobQueue?
    private var moreReleasedQueues: [JobQueue] = []

    /// Keeps `jobs` alive until `perform()`, so that no job is freed under the lock.
    @inline(__always)
    mutating func release(_ jobs: [Job]) {
        if jobs.isEmpty { return }
        if released.isEmpty {
            released = jobs
        } else {
            moreReleased.append(jobs)
        }
    }

    /// Releases the queue's self-retain after unlocking.
    mutating func releaseAfterUnlocking(_ queue: JobQueue) {
        if releasedQueue == nil {
            releasedQueue = queue
        } else {
            moreReleasedQueues.append(queue)
        }
    }

    /// Records that `queue` may be able to start more work.
    @inline(__always)
    mutating func touch(_ queue: JobQueue) {
        if touchedQueue == nil {
            touchedQueue = queue
        } else if touchedQueue !== queue && !moreTouchedQueues.contains(where: { $0 === queue }) {
            moreTouchedQueues.append(queue)
        }
    }

    /// Decides, for every touched queue, how many workers to start. Call with the engine lock held.
    mutating func planWorkersLocked() {
        guard let first = touchedQueue else { return }
        planWorkersLocked(for: first)
        for queue in moreTouchedQueues {
            planWorkersLocked(for: queue)
        }
    }

    private mutating func planWorkersLocked(for queue: JobQueue) {
        #if CONDUCTOR_INVARIANTS
            queue._checkInvariantsLocked()
        #endif
        let count = queue._workersToStartLocked()
        if count > 0 {
            workerStarts.append((queue._dispatchTargetLocked, queue, queue._workerGeneration, count))
        }
    }

    /// Carries out the recorded work. Call without the engine lock.
    mutating func perform() {
        for start in workerStarts {
            for _ in 0..<start.count {
                let queue = start.queue
                let generation = start.generation
                start.target.async { queue._runWorker(generation: generation) }
            }
        }
        for job in deliveries {
            job._deliverEvents()
        }
        for waiter in waiters {
            waiter.resume()
        }
        released = []
        moreReleased = []
        if let queue = releasedQueue {
            releasedQueue = nil
            Unmanaged.passUnretained(queue).release()
            _ = queue  // `queue` keeps it alive until here, outside the lock
        }
        for queue in moreReleasedQueues {
            Unmanaged.passUnretained(queue).release()
        }
        moreReleasedQueues = []
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
