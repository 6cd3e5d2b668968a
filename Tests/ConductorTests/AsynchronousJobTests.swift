import Conductor
import ConductorTestSupport
import Dispatch
import Synchronization
import Testing

// Asynchronous jobs: work that completes after execute() returns holds its slot until finish(), so
// concurrency limits are exact and dependents wait for finish().
//
// Several tests set the queue's `underlyingQueue` to a private serial Dispatch queue (`worker`) and
// complete the asynchronous work with blocks submitted to that same queue (directly or through a
// queue that targets it). Such a completion runs only after the queue's worker block has returned,
// and the worker, after execute() returns, immediately takes the next job it is allowed to start.
// So if the engine wrongly freed a slot (or released a dependent) when execute() returned, the
// worker would start the next job before the completion ran, every time: the test fails
// deterministically rather than by luck of timing.

// MARK: - Helpers (private to this file)

/// An AsynchronousJob subclass: it computes its result on another Dispatch queue, then finishes.
// @unchecked Sendable: an immutable Dispatch queue and two atomics; the rest is `AsynchronousJob`'s.
private final class Fetch: AsynchronousJob, @unchecked Sendable {
    private let completionQueue: DispatchQueue
    private let storage = Atomic<Int>(0)
    let executeCalls = Atomic<Int>(0)

    init(completionQueue: DispatchQueue) {
        self.completionQueue = completionQueue
        super.init()
    }

    var result: Int { storage.load(ordering: .sequentiallyConsistent) }

    override func execute() {
        executeCalls.add(1, ordering: .sequentiallyConsistent)
        completionQueue.async {
            self.storage.store(42, ordering: .sequentiallyConsistent)
            self.finish()
        }
    }
}

/// An AsynchronousJob subclass whose work the test finishes by hand.
// @unchecked Sendable: a `Signal` (Sendable) and an atomic; the rest is `AsynchronousJob`'s.
private final class ManualJob: AsynchronousJob, @unchecked Sendable {
    let started = Signal()
    let executeCalls = Atomic<Int>(0)

    override func execute() {
        executeCalls.add(1, ordering: .sequentiallyConsistent)
        started.fire()
    }
}

// MARK: - Tests

@Suite("Asynchronous jobs")
struct AsynchronousJobTests {
    @Test(
        "ten AsyncBlockJobs completing on another DispatchQueue run strictly one at a time, in order, at limit 1",
        arguments: [false, true])
    func tenJobsOneAtATime(completionQueueTargetsWorker: Bool) async {
        // Both variants complete on a separate serial DispatchQueue. When it targets the queue's
        // worker, a slot freed too early is caught deterministically (see the file comment);
        // otherwise the completions race the worker, as in most real code.
        let (queue, worker) = makeJobQueueOnSerialWorker("limit 1", limit: 1)
        let completionQueue =
            completionQueueTargetsWorker
            ? DispatchQueue(label: "AsynchronousJobTests.completion", target: worker)
            : DispatchQueue(label: "AsynchronousJobTests.completion")
        let inFlight = InFlight()
        let starts = Log<Int>()
        let finishes = Log<Int>()
        var jobs: [AsyncBlockJob] = []
        for index in 0..<10 {
            let job = AsyncBlockJob { job in
                inFlight.enter()
                starts.append(index)
                completionQueue.async {
                    finishes.append(index)
                    inFlight.leave()
                    job.finish()
                }
            }
            job.name = "async \(index)"
            jobs.append(job)
        }
        for job in jobs { queue.addJob(job) }
        await queue.waitUntilAllJobsAreFinished()

        #expect(inFlight.maximum == 1)
        #expect(starts.values == Array(0..<10))
        #expect(finishes.values == Array(0..<10))
        #expect(jobs.allSatisfy { $0.isFinished && !$0.isCancelled })
        #expect(queue.jobCount == 0)
    }

    @Test("with a limit of 3, never more than 3 asynchronous jobs are in flight")
    func limitOfThree() async {
        // The jobs complete in batches: the work of each started job waits until three jobs (or the
        // last ones) have started, then the batch completes together. With a correct limit exactly
        // three are in flight at the peak; a queue that started more jobs while three were
        // unfinished would show it whatever the timing.
        let queue = JobQueue(name: "limit 3", maxConcurrentJobCount: 3)
        let total = 30
        let inFlight = InFlight()
        let batcher = Batcher(size: 3, total: total)
        let completions = DispatchQueue(label: "AsynchronousJobTests.limit3")
        let runs = Counter()
        var jobs: [Job] = []
        for _ in 0..<total {
            jobs.append(
                AsyncBlockJob { job in
                    inFlight.enter()
                    runs.increment()
                    guard let batch = batcher.add(job) else { return }
                    completions.async {
                        for job in batch {
                            inFlight.leave()
                            job.finish()
                        }
                    }
                })
        }
        queue.addJobs(jobs, waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(inFlight.maximum == 3)
        #expect(inFlight.now == 0)
        #expect(runs.value == total)
    }

    @Test("a dependent of an asynchronous job starts only after that job's finish()")
    func dependentWaitsForFinish() async throws {
        let (queue, worker) = makeJobQueueOnSerialWorker("dependents")
        let otherQueue = JobQueue(name: "other")
        let job = ManualJob()
        let sawFinishCalled = Log<String>()
        let sameQueueDependent = BlockJob {
            sawFinishCalled.append("same queue: \(job.isFinished)")
        }
        let otherQueueDependent = BlockJob {
            sawFinishCalled.append("other queue: \(job.isFinished)")
        }
        try sameQueueDependent.addDependency(job)
        try otherQueueDependent.addDependency(job)
        queue.addJob(sameQueueDependent)
        otherQueue.addJob(otherQueueDependent)
        queue.addJob(job)

        await job.started.wait()
        await drainSerialQueue(worker)  // the worker that ran execute() has returned
        #expect(job.isExecuting)
        #expect(sameQueueDependent.state == .pending)
        #expect(otherQueueDependent.state == .pending)
        #expect(sawFinishCalled.values.isEmpty)

        job.finish()
        await queue.waitUntilAllJobsAreFinished()
        await otherQueue.waitUntilAllJobsAreFinished()
        #expect(sawFinishCalled.values.sorted() == ["other queue: true", "same queue: true"])
    }

    @Test("a dependent of an AsyncBlockJob that completes later waits for its finish()")
    func dependentOfCallbackJob() async throws {
        let (queue, worker) = makeJobQueueOnSerialWorker("callback dependents")
        let log = Log<String>()
        let job = AsyncBlockJob { job in
            log.append("execute returned")
            worker.async {
                log.append("finish")
                job.finish()
            }
        }
        let dependent = BlockJob { log.append("dependent") }
        try dependent.addDependency(job)
        queue.addJobs([job, dependent], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(log.values == ["execute returned", "finish", "dependent"])
    }

    @Test("cancelling an asynchronous job before its queue starts it never calls execute()")
    func cancelBeforeStartNeverExecutes() async throws {
        let (queue, worker) = makeJobQueueOnSerialWorker("one slot", limit: 1)
        let gate = ManualJob()
        queue.addJob(gate)
        await gate.started.wait()

        let bodyRuns = Counter()
        let blockJob = AsyncBlockJob { job in
            bodyRuns.increment()
            job.finish()
        }
        let subclassJob = ManualJob()
        queue.addJob(blockJob)
        queue.addJob(subclassJob)
        blockJob.cancel()
        subclassJob.cancel()
        // Required: a job left to run would never finish (ManualJob waits for the test) and the
        // waits below would hang.
        try #require(blockJob.isFinished && blockJob.isCancelled)
        try #require(subclassJob.isFinished && subclassJob.isCancelled)
        #expect(queue.jobs.map(\.id) == [gate.id])

        // On a suspended queue too.
        queue.isSuspended = true
        let suspendedJob = ManualJob()
        queue.addJob(suspendedJob)
        suspendedJob.cancel()
        try #require(suspendedJob.isFinished)
        queue.isSuspended = false

        gate.finish()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(bodyRuns.value == 0)
        #expect(subclassJob.executeCalls.load(ordering: .sequentiallyConsistent) == 0)
        #expect(suspendedJob.executeCalls.load(ordering: .sequentiallyConsistent) == 0)
        #expect(gate.executeCalls.load(ordering: .sequentiallyConsistent) == 1)
    }

    @Test("cancelling an executing asynchronous job keeps its slot until finish()")
    func cancelWhileExecutingKeepsTheSlot() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("one slot", limit: 1)
        let job = ManualJob()
        let nextRuns = Counter()
        let next = BlockJob { nextRuns.increment() }
        let events = Log<JobEvent>()
        job.observe { events.append($0) }
        queue.addJob(job)
        queue.addJob(next)
        await job.started.wait()

        job.cancel()
        await drainSerialQueue(worker)  // a worker started by cancel() (wrongly) would have run by now
        #expect(job.isCancelled && job.isExecuting)
        #expect(next.state == .ready)
        #expect(nextRuns.value == 0)

        job.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(job.isFinished && job.isCancelled)
        #expect(nextRuns.value == 1)
        #expect(events.values == [.ready, .started, .cancelled, .finished])
    }

    @Test("an AsynchronousJob subclass finishes when it calls finish(), on a queue")
    func subclassOnAQueue() async throws {
        let (queue, worker) = makeJobQueueOnSerialWorker("subclass", limit: 1)
        let completions = DispatchQueue(label: "AsynchronousJobTests.fetch", target: worker)
        let fetches = (0..<5).map { _ in Fetch(completionQueue: completions) }
        let seenByDependent = Log<Int>()
        let dependent = BlockJob {
            for fetch in fetches { seenByDependent.append(fetch.isFinished ? fetch.result : -1) }
        }
        for fetch in fetches { try dependent.addDependency(fetch) }
        let events = Log<JobEvent>()
        fetches[0].observe { events.append($0) }
        #expect(fetches[0].state == .ready)

        queue.addJob(dependent)
        queue.addJobs(fetches, waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(fetches.map(\.result) == Array(repeating: 42, count: 5))
        #expect(
            fetches.map { $0.executeCalls.load(ordering: .sequentiallyConsistent) } == Array(repeating: 1, count: 5))
        #expect(seenByDependent.values == Array(repeating: 42, count: 5))
        #expect(events.values == [.ready, .started, .finished])
    }

    @Test("an AsynchronousJob subclass run with start() stays executing until finish()")
    func subclassThroughStart() async {
        let job = ManualJob()
        let completions = Counter()
        job.completionBlock = { completions.increment() }
        job.start()
        #expect(job.state == .executing)
        #expect(completions.value == 0)
        job.finish()
        #expect(job.state == .finished && !job.isCancelled)
        #expect(completions.value == 1)
        job.finish()
        #expect(completions.value == 1)
        #expect(job.executeCalls.load(ordering: .sequentiallyConsistent) == 1)
    }

    @Test("finish() called from inside execute() finishes the job once")
    func finishInsideExecute() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("inline finish", limit: 1)
        let runs = Counter()
        let completions = Counter()
        let jobs = (0..<20).map { _ in
            let job = AsyncBlockJob { job in
                runs.increment()
                job.finish()
            }
            job.completionBlock = { completions.increment() }
            return job
        }
        let events = Log<JobEvent>()
        jobs[0].observe { events.append($0) }
        queue.addJobs(jobs, waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(runs.value == 20)
        #expect(completions.value == 20)
        #expect(jobs.allSatisfy { $0.isFinished && !$0.isCancelled })
        #expect(events.values == [.ready, .started, .finished])
        #expect(queue.jobCount == 0)
    }
}

/// Groups started jobs into batches of `size` (the last batch holds the rest) and hands each full
/// batch back to the caller that completed it.
// @unchecked Sendable: `size` and `total` are immutable; `started` and `pending` are only touched on `lock`.
private final class Batcher: @unchecked Sendable {
    private let lock = DispatchQueue(label: "AsynchronousJobTests.Batcher")
    private let size: Int
    private let total: Int
    private var started = 0  // guarded by `lock`
    private var pending: [AsyncBlockJob] = []  // guarded by `lock`

    init(size: Int, total: Int) {
        self.size = size
        self.total = total
    }

    func add(_ job: AsyncBlockJob) -> [AsyncBlockJob]? {
        lock.sync {
            started += 1
            pending.append(job)
            guard pending.count == size || started == total else { return nil }
            defer { pending = [] }
            return pending
        }
    }
}
