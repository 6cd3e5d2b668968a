import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A stall the ``StallWatchdog`` found: what kind, which jobs, and why, in words.
public struct StallReport: CustomStringConvertible, Sendable {
    /// The kinds of stall.
    public enum Kind: String, Sendable, CustomStringConvertible {
        /// A job has been executing longer than the threshold: an ``AsynchronousJob`` that never
        /// called `finish()`, an `OperationJob` whose operation never finished, work stuck in a
        /// call. Composite jobs (``GroupJob``, ``RetryJob``) are not reported: their children and
        /// attempts are.
        case longExecution
        /// A queue has had ready jobs and free slots for longer than the threshold, and started
        /// none of them: the threads that would run its workers are all busy or blocked.
        case noProgress
        /// Jobs wait for each other in a cycle and none can proceed: a job's work blocked in
        /// `waitUntilFinished()` on a job that needs the slot the waiter holds, or any cycle through
        /// such waits, dependencies, slots and exclusivity categories.
        case waitCycle

        public var description: String { rawValue }
    }

    /// What kind of stall it is.
    public let kind: Kind
    /// The jobs involved: the job executing too long; the ready jobs that do not start; or the
    /// jobs of the cycle, and those stuck behind it.
    public let jobs: [Job]
    /// The kind, a sentence saying what is wrong, then the ``Job/explain()`` or
    /// ``JobQueue/explain()`` text of what is stuck.
    public let description: String
}

/// Watches every ``JobQueue`` in the process and reports stalls: a job executing longer than a
/// threshold, a queue that has ready jobs and free slots but starts nothing, and jobs that wait
/// for each other in a cycle.
///
/// ```swift
/// let watchdog = StallWatchdog(threshold: .seconds(30)) { report in
///     logger.error("\(report)")
/// }
/// watchdog.start()
/// ```
///
/// Each stall is reported once per episode: once per kind for the same jobs (for `noProgress`,
/// the same queue and first ready job) until they make progress. A started watchdog wakes every
/// `threshold / 2` on a thread of its own (not Dispatch, whose threads may be the ones stuck), looks at every queue that has unfinished jobs in one critical section of the
/// engine lock, and calls `onStall` on that thread after releasing it. A stall is therefore reported
/// between one and one and a half thresholds after it began (a wait cycle at the first wake-up
/// that sees it). A watchdog that is not started costs nothing: the engine records what it needs
/// (start times, blocked waits) anyway, for ``Job/explain()``.
///
/// What it sees: jobs on queues (a job started by hand with ``Job/start()`` is not on one), and
/// waits made from inside a job's work (the work of a ``TaskJob`` included). A wait from a thread
/// that runs no job cannot be part of a cycle the engine can see.
///
/// - Complexity: Each wake-up is O(queues + the jobs it looks at), under the engine lock: for each
///   queue, its members up to the last executing one (usually the oldest few, but all of them when
///   an executing job was added after many that still wait), and, while some job's work is blocked
///   in a wait or a composite job executes, the jobs those reach (at most 4,096), each full
///   queue's executing jobs listed once, a barrier needing the barrier before it, and the jobs
///   blocked waiting for a queue all needing one node that needs the queue's jobs.
public final class StallWatchdog: Sendable {
    /// How long a job may execute, or a queue go without starting a ready job, before it is
    /// reported.
    public let threshold: Duration
    /// How often it wakes: half the threshold, but not more often than once a millisecond.
    let interval: Duration
    private let onStall: @Sendable (StallReport) -> Void
    private let tickObserver: (@Sendable () -> Void)?
    private let state = _LockedValue(_WatchdogState())

    /// Creates a watchdog, stopped. `threshold` must be positive.
    public convenience init(threshold: Duration, onStall: @escaping @Sendable (StallReport) -> Void) {
        self.init(threshold: threshold, interval: nil, tickObserver: nil, onStall: onStall)
    }

    /// For tests: wakes every `interval` (instead of `threshold / 2`), and calls `tickObserver`
    /// after each wake-up, once its reports have been made.
    package init(
        threshold: Duration, interval: Duration? = nil, tickObserver: (@Sendable () -> Void)?,
        onStall: @escaping @Sendable (StallReport) -> Void
    ) {
        _require(
            threshold > .zero, "StallWatchdog(threshold:onStall:): the threshold must be positive; got \(threshold)")
        self.threshold = threshold
        self.interval = max(interval ?? threshold / 2, .milliseconds(1))
        self.onStall = onStall
        self.tickObserver = tickObserver
    }

    deinit {
        state.withLock { $0.ticker }?.stop()
    }

    /// For tests: builds the wait-for graph a wake-up would build from `seeds`, and returns how
    /// many times it walked a queue's members. The graph is let go after unlocking.
    package static func _queueWalksBuildingTheWaitGraph(from seeds: Job...) -> Int {
        let graph = engineLock.withLock {
            var graph = _WaitGraph()
            for seed in seeds {
                graph.add(seed)
            }
            return graph
        }
        return graph.queueWalks
    }

    /// Starts watching, with no memory of earlier episodes. Starting a started watchdog does
    /// nothing.
    ///
    /// The watchdog wakes on a thread of its own, not on Dispatch: it must still run when every
    /// Dispatch thread is blocked, which is one of the stalls it reports.
    public func start() {
        let ticker: _Ticker? = state.withLock { state in
            guard state.ticker == nil else { return nil }
            let ticker = _Ticker()
            state.ticker = ticker
            state.episodes = _StallEpisodes()
            return ticker
        }
        guard let ticker else { return }
        ticker.run(every: _saturatingNanoseconds(interval)) { [weak self] in
            self?.tick()
        }
    }

    /// Stops watching. It does not wait for a report being delivered: the watchdog's thread checks
    /// that it is still running just before it calls `onStall`, so a report that passed that check
    /// may still arrive after this returns (and one in `onStall` finishes). A report whose text was
    /// still being built is not delivered, nor is any later one, unless the watchdog is started
    /// again. Stopping a stopped watchdog does nothing.
    public func stop() {
        let ticker: _Ticker? = state.withLock { state in
            defer { state.ticker = nil }
            return state.ticker
        }
        ticker?.stop()
    }

    // MARK: Wake-ups

    private func tick() {
        let isRunning = state.withLock { $0.ticker != nil }
        guard isRunning else { return }
        let thresholdNanoseconds = _saturatingNanoseconds(threshold)
        var episodes = state.withLock { $0.episodes }
        // Each active queue retains itself while it is on the list, so none is freed meanwhile;
        // the array is released after unlocking.
        var queues: [JobQueue] = []
        let found = JobQueue._withEveryQueuesPushedAdmitted {
            queues = _activeQueues.allLocked()
            return episodes.lookLocked(at: queues, threshold: thresholdNanoseconds, now: _DiagnosticClock.now())
        }
        state.withLock { $0.episodes = episodes }
        for stall in found {
            // The text first: it may run user code (a condition's name, an error's description).
            // Then, if `stop()` has returned meanwhile, nothing more is delivered.
            let description = stall.text.rendered()
            guard state.withLock({ $0.ticker != nil }) else { break }
            onStall(StallReport(kind: stall.kind, jobs: stall.jobs, description: description))
        }
        tickObserver?()
    }
}

extension StallWatchdog: CustomReflectable {
    /// What `dump(_:)` and a `Mirror` show: its ``threshold`` and whether it is running, not its
    /// locks and what it has reported (`Job.customMirror`).
    public var customMirror: Mirror {
        let isRunning = state.withLock { $0.ticker != nil }
        return Mirror(self, children: ["threshold": threshold, "isRunning": isRunning], displayStyle: .class)
    }
}

/// A watchdog's ticker and what it has reported, guarded by its `_LockedValue`.
struct _WatchdogState: Sendable {
    var ticker: _Ticker?
    var episodes = _StallEpisodes()
}

/// What a watchdog has reported and still sees, so that each stall is reported once per episode.
/// Ids are jobs' and queues' ``Job/id``s, never reused.
struct _StallEpisodes: Sendable {
    /// Jobs reported as executing too long, while they still execute.
    var longJobs: Set<UInt64> = []
    /// Per queue with ready jobs and free slots: its first ready job, since when it was seen so,
    /// and whether that was reported.
    var stuckQueues: [UInt64: (head: UInt64, ticket: UInt64, since: UInt64, reported: Bool)] = [:]
    /// The stuck waiters (and composite jobs) already reported in a wait cycle, while they stay stuck.
    var stuckReported: Set<UInt64> = []

    struct Found {
        let kind: StallReport.Kind
        let jobs: [Job]
        let text: _DeferredText
    }

    /// Looks at `queues` and the blocked waits; returns the stalls not reported before, and
    /// forgets the episodes that ended. Call with `engineLock` held.
    mutating func lookLocked(at queues: [JobQueue], threshold: UInt64, now: UInt64) -> [Found] {
        var found: [Found] = []
        var stillLong: Set<UInt64> = []
        var stillStuck: [UInt64: (head: UInt64, ticket: UInt64, since: UInt64, reported: Bool)] = [:]
        // The jobs the wait-cycle search starts from: blocked waiters, and executing composite
        // jobs (a group holds its slot while it needs its children).
        var seeds = _blockedWaits.waiters.values.sorted { $0.id < $1.id }
        for queue in queues where queue._jobCount > 0 {
            // Executing jobs: the queue's members up to the last of its `_executing` jobs.
            var remaining = queue._executing
            var node = queue._head
            while remaining > 0, let current = node {
                let job = current.takeUnretainedValue()
                node = job._next
                guard job._state == .executing else { continue }
                remaining -= 1
                if job._isComposite { seeds.append(job) }
                guard !job._isComposite, let started = job._startedAtLocked, now &- min(started, now) >= threshold
                else { continue }
                stillLong.insert(job.id)
                if !longJobs.contains(job.id) {
                    var text = _DeferredText(
                        "longExecution: '\(job._describeLocked)' has been executing \(job._runningTimeLocked(now: now)), longer than the threshold of \(_DiagnosticClock.format(threshold)).\n"
                    )
                    text.append(job._explanationLocked(now: now))
                    found.append(Found(kind: .longExecution, jobs: [job], text: text))
                }
            }
            // A queue with ready jobs and free slots whose first ready job stays the same.
            guard !queue._isSuspended, queue._executing < queue._limit, let head = queue._ready.peekFirst() else {
                continue
            }
            var episode = (head: head.id, ticket: head._readyTicket, since: now, reported: false)
            if let previous = stuckQueues[queue.id], previous.head == head.id, previous.ticket == head._readyTicket {
                episode = previous
            }
            if !episode.reported && now &- min(episode.since, now) >= threshold {
                episode.reported = true
                let ready = queue._membersLocked().filter { $0._isInLine }.sorted {
                    ($0._priority.bucket, $0._readyTicket) < ($1._priority.bucket, $1._readyTicket)
                }
                var text = _DeferredText(
                    "noProgress: queue '\(queue._displayNameLocked)' has had \(queue._ready.count) ready \(queue._ready.count == 1 ? "job" : "jobs") and \(queue._limit - queue._executing) free \(queue._limit - queue._executing == 1 ? "slot" : "slots") for \(_DiagnosticClock.format(now &- min(episode.since, now))) and started none: no thread ran its worker (are Dispatch's threads all busy or blocked?).\n"
                )
                text.append(queue._explanationLocked(now: now))
                found.append(Found(kind: .noProgress, jobs: Array(ready.prefix(16)), text: text))
            }
            stillStuck[queue.id] = episode
        }
        longJobs = stillLong
        stuckQueues = stillStuck

        var stillReported: Set<UInt64> = []
        if !seeds.isEmpty {
            var graph = _WaitGraph()
            for seed in seeds {
                graph.add(seed)
            }
            let seedIDs = Set(seeds.map(\.id))
            for stuck in graph.stuckGroupsLocked() {
                // The episode is the stuck seeds: jobs piling up behind them make no new one, and
                // a new waiter stuck on the same cycle does.
                let stuckSeeds = stuck.map(\.id).filter { seedIDs.contains($0) }
                stillReported.formUnion(stuckSeeds)
                guard !stuckSeeds.allSatisfy(stuckReported.contains) else { continue }
                var text = _DeferredText(
                    "waitCycle: \(stuck.count) jobs wait for each other and none can proceed; break the cycle by cancelling one of them, or do not wait for a job from the work of a job it needs.\n"
                )
                for job in stuck.prefix(16) {
                    text.append(job._explanationLocked(now: now))
                    text.append("\n")
                }
                found.append(Found(kind: .waitCycle, jobs: stuck, text: text))
            }
        }
        stuckReported = stillReported
        return found
    }
}

/// The wait-for graph behind ``StallReport/Kind/waitCycle``: from the jobs whose work is blocked in
/// a wait and the executing composite jobs, every job they need, and what each of those needs in
/// turn. A job needs all of its `all` set (the jobs it is blocked waiting for, a group's unfinished
/// children, a retry job's attempt, its unfinished dependencies, the holders of its categories and
/// those ahead of it in line, its barrier, its unstarted group) and, when it waits for a slot, one
/// of its `any` set (the jobs executing on its full queue). A job that needs nothing can proceed:
/// it executes and is not blocked, it is an asynchronous job (another thread may call `finish()`
/// even while its `execute()` waits), it has finished, or it waits for something outside the graph
/// (a condition, a suspended queue, a limit of 0). Proceeding spreads to every job whose needs are
/// then met; the jobs left are stuck, and can only be stuck through a cycle. Build and search with
/// `engineLock` held.
struct _WaitGraph {
    /// A job, or "every job of this queue has finished", which the jobs blocked waiting for the
    /// queue need: one node per queue, so that each waiter needs one node, not every job of the
    /// queue (until 2026-11-25 each did: O(waiters × the queue's jobs) per wake-up).
    private enum Node {
        case job(Job)
        case drained(JobQueue)
    }

    private var index: [ObjectIdentifier: Int] = [:]
    private var nodes: [Node] = []
    /// For each node: how many of its `all` needs cannot proceed yet, whether it has `any` needs
    /// and one of them can proceed, and the nodes that need it (with whether as an `any` need).
    private var allRemaining: [Int] = []
    private var hasAny: [Bool] = []
    private var anyMet: [Bool] = []
    private var neededBy: [[(job: Int, asAny: Bool)]] = []
    private var pending: [Int] = []
    /// Each full queue's executing jobs, listed once per graph: every ready job of the queue needs
    /// them, and listing them walks the queue's members (until 2026-11-25 each ready job walked
    /// them again, O(4,096 × the queue's jobs) under the engine lock per wake-up).
    private var executingOf: [ObjectIdentifier: [Job]] = [:]
    /// How many times a queue's members were walked (for tests).
    private(set) var queueWalks = 0

    /// Adds `job` and everything it needs, transitively. Iterative.
    mutating func add(_ job: Job) {
        _ = node(.job(job), key: ObjectIdentifier(job))
        while let next = pending.popLast() {
            expand(next)
        }
    }

    private mutating func node(_ node: Node, key: ObjectIdentifier) -> Int {
        if let existing = index[key] { return existing }
        let position = nodes.count
        index[key] = position
        nodes.append(node)
        allRemaining.append(0)
        hasAny.append(false)
        anyMet.append(false)
        neededBy.append([])
        pending.append(position)
        return position
    }

    /// The most jobs the graph takes in, so that a wake-up holds the engine lock for a bounded
    /// time. A need on a job beyond it counts as met: the search may then miss a cycle that only a
    /// larger graph shows, but never reports a false one.
    static let maximumJobs = 4_096

    private mutating func need(_ position: Int, _ other: Job, asAny: Bool = false) {
        need(position, .job(other), key: ObjectIdentifier(other), asAny: asAny)
    }

    private mutating func need(_ position: Int, _ other: Node, key: ObjectIdentifier, asAny: Bool = false) {
        guard nodes.count < _WaitGraph.maximumJobs || index[key] != nil else {
            if asAny {
                hasAny[position] = true
                anyMet[position] = true
            }
            return
        }
        let target = node(other, key: key)
        neededBy[target].append((position, asAny))
        if asAny {
            hasAny[position] = true
        } else {
            allRemaining[position] += 1
        }
    }

    private mutating func expand(_ position: Int) {
        let job: Job
        switch nodes[position] {
        case .job(let node):
            job = node
        case .drained(let queue):
            queueWalks += 1
            for member in queue._membersLocked() {
                need(position, member)
            }
            return
        }
        switch job._state {
        case .finished:
            return
        case .executing:
            if let group = job as? GroupJob {
                // It holds its slot until every child has finished.
                for child in group._childrenLocked._membersLocked() {
                    need(position, child)
                }
                return
            }
            if let retry = job as? RetryJob {
                if let attempt = retry._currentAttemptLocked, attempt._state != .finished {
                    need(position, attempt)
                }
                return
            }
            // An asynchronous job may be finished from any thread, even while its `execute()` is
            // blocked in a wait: it can proceed. A `TaskJob` ends only when its body does.
            guard job.finishesWhenExecuteReturns || job._taskRunner != nil else { return }
            for blocked in job._extras?.blockedOn ?? [] {
                switch blocked {
                case .job(let target) where target._state != .finished:
                    need(position, target)
                case .queue(let queue):
                    need(position, .drained(queue), key: ObjectIdentifier(queue))
                default:
                    break
                }
            }
        case .pending:
            let waits = job._lifecycle.waits
            if waits.dependencies > 0 {
                for dependency in job._dependencies where dependency._state != .finished {
                    need(position, dependency)
                }
            }
            if waits.exclusivity != 0, let extras = job._extras {
                extras.lineCategories.forEach { category in
                    if let holder = category.holder, holder !== job { need(position, holder) }
                    if let first = category.first(), first !== job { need(position, first) }
                }
            }
        case .ready:
            guard let queue = job._queue?.takeUnretainedValue() else { return }
            if !job._admitted, !job._isBarrier, let barrier = queue._epochs.first?.barrier {
                need(position, barrier)
            } else if job._isBarrier && !job._admitted {
                if let own = queue._heldEpochIndexLocked(of: job), own > 0 {
                    // It runs after the barrier before it and the jobs held behind that one, which
                    // need the earlier ones: the queue is not walked again for each barrier (until
                    // 2026-11-25 it was, O(barriers × the queue's jobs)).
                    let previous = queue._epochs[own - 1]
                    need(position, previous.barrier)
                    for held in previous.held where held._state != .finished {
                        need(position, held)
                    }
                } else {
                    queueWalks += 1
                    for member in queue._membersLocked() where member._admitted && member !== job {
                        need(position, member)
                    }
                }
            } else if queue._isSuspended, let group = queue._countingGroup, group._lifecycle.isUnstarted {
                need(position, group)
            } else if !queue._isSuspended, queue._limit > 0, queue._executing >= queue._limit {
                for executing in executingJobs(of: queue) {
                    need(position, executing, asAny: true)
                }
            }
        }
    }

    private mutating func executingJobs(of queue: JobQueue) -> [Job] {
        let key = ObjectIdentifier(queue)
        if let listed = executingOf[key] { return listed }
        let executing = queue._executingJobsLocked()
        executingOf[key] = executing
        queueWalks += 1
        return executing
    }

    /// The jobs that cannot proceed, in independent groups (connected through what they need),
    /// each sorted by id, the groups by their first id.
    func stuckGroupsLocked() -> [[Job]] {
        var proceeds = [Bool](repeating: false, count: nodes.count)
        var allRemaining = allRemaining
        var anyMet = anyMet
        var work: [Int] = []
        for position in nodes.indices where allRemaining[position] == 0 && (!hasAny[position] || anyMet[position]) {
            proceeds[position] = true
            work.append(position)
        }
        while let position = work.popLast() {
            for (dependent, asAny) in neededBy[position] where !proceeds[dependent] {
                if asAny {
                    anyMet[dependent] = true
                } else {
                    allRemaining[dependent] -= 1
                }
                if allRemaining[dependent] == 0 && (!hasAny[dependent] || anyMet[dependent]) {
                    proceeds[dependent] = true
                    work.append(dependent)
                }
            }
        }
        // Union–find over the needs between stuck jobs.
        var parent = Array(nodes.indices)
        func root(_ position: Int) -> Int {
            var position = position
            while parent[position] != position {
                parent[position] = parent[parent[position]]
                position = parent[position]
            }
            return position
        }
        for target in nodes.indices where !proceeds[target] {
            for (dependent, _) in neededBy[target] where !proceeds[dependent] {
                parent[root(dependent)] = root(target)
            }
        }
        // The jobs only: a queue's node joins its waiters to its jobs.
        var groups: [Int: [Job]] = [:]
        for position in nodes.indices where !proceeds[position] {
            if case .job(let job) = nodes[position] {
                groups[root(position), default: []].append(job)
            }
        }
        return groups.values.map { $0.sorted { $0.id < $1.id } }.sorted { $0[0].id < $1[0].id }
    }
}

/// A thread that calls a closure at a fixed interval until stopped: the watchdog's clock. A
/// pthread of its own, sleeping on a condition variable, so that it wakes even when every Dispatch
/// thread is blocked.
final class _Ticker: @unchecked Sendable {
    // @unchecked Sendable: `stopped` is guarded by `mutex`; the mutex and condition are
    // thread-safe; `body` is set once, before the thread starts, and read only by it.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var stopped = false
    private var body: (@Sendable () -> Void)?
    private var interval: UInt64 = 0

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        #if !canImport(Darwin)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        #endif
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Starts the thread: `body` every `nanoseconds` until `stop()`. The thread holds the ticker.
    func run(every nanoseconds: UInt64, _ body: @escaping @Sendable () -> Void) {
        self.body = body
        self.interval = max(nanoseconds, 1_000_000)
        let context = Unmanaged.passRetained(self).toOpaque()
        #if canImport(Darwin)
            var thread: pthread_t?
        #else
            var thread = pthread_t()
        #endif
        let result = pthread_create(
            &thread, nil,
            { context in
                let ticker = Unmanaged<_Ticker>.fromOpaque(context!).takeRetainedValue()
                ticker.loop()
                return nil
            }, context)
        _require(result == 0, "StallWatchdog.start(): could not create its thread (error \(result))")
        #if canImport(Darwin)
            pthread_detach(thread!)
        #else
            pthread_detach(thread)
        #endif
    }

    /// Wakes the thread and makes it exit; it calls `body` no more once this returns, except a
    /// call already under way.
    func stop() {
        pthread_mutex_lock(mutex)
        stopped = true
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    private func loop() {
        while waitForNextTick() {
            body?()
        }
        body = nil
    }

    /// Sleeps for one interval; returns `false` once stopped.
    private func waitForNextTick() -> Bool {
        var deadline = timespec()
        #if canImport(Darwin)
            clock_gettime(CLOCK_REALTIME, &deadline)
        #else
            clock_gettime(CLOCK_MONOTONIC, &deadline)
        #endif
        let total = UInt64(deadline.tv_nsec) + interval % 1_000_000_000
        deadline.tv_sec += Int(interval / 1_000_000_000) + Int(total / 1_000_000_000)
        deadline.tv_nsec = Int(total % 1_000_000_000)
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !stopped {
            if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT {
                return !stopped
            }
        }
        return false
    }
}
