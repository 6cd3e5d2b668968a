import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Nothing a user hands Conductor is freed with the engine lock held: a block, a body, an observer,
// a completion block, an error, a value, and whatever each of them captured. Their deinits are user
// code, and the rule is "decide inside, act outside" (Docs/Design.md): what the engine drops under
// the lock, it hands to `_Actions`, which releases it after unlocking. Each test captures canaries
// (`LockCanary`, Tests/ConductorTestSupport/LockCanary.swift) in what it hands the engine, runs a
// scenario of a core job feature to its end, and then expects that every canary was freed (so that
// a test cannot pass because nothing was released) and that none was freed under the lock. Each
// scenario runs `rounds` times, so that the races between a worker, a finishing thread and the
// test's own thread take several orders.
//
// The engine's release must be the last one, or the test checks its own. So no local of a test
// holds a canary: each is made inside a helper (`block(_:_:)`, `observer(_:_:)`, ...) or in a
// closure's capture list, and is captured by the closure alone (debug builds keep a local until the
// end of its scope: a canary in a local outlives whatever the engine does meantime, such as the
// `.ready` delivery inside `addJob`). Jobs that keep what they were handed (a failure's error, a
// `ValueJob`'s value) are built inside a `do` block, and the test keeps none of them; and where
// the engine should run the jobs only after that, they wait on a suspended queue that the test
// resumes once the block has ended.
//
// When everything has been released, as in LeakTests (read its header comment): every queue runs
// its workers on a private serial `underlyingQueue`, everything a test finishes by hand is finished
// from a block on that queue (or on the test's own thread), and `drainSerialQueue` waits until the
// thread that finished the last job has returned from `_Actions.perform()`. Where a release
// happens on a thread no test owns (a `TaskJob`'s or `ValueJob`'s task ends on the cooperative
// pool after it has woken every waiter; a timeout fires on a Dispatch timer), the canary is held by
// a `Watched` object, whose deinit frees the canary on the same thread and then reports to the
// round's `Departures`, which the test awaits: an event, not a time. A leak there ends the wait
// through the test's time limit, and the count check then fails.
//
// Debug builds only: a canary tells whether the engine lock is held by reading the lock's owner,
// which only debug builds record. (LeakTests checks the releases themselves in every build.)

#if DEBUG

    // MARK: - Helpers

    /// How many times each scenario runs.
    private let rounds = 30

    /// A job queue whose workers run on a private serial Dispatch queue, `worker`.
    private struct Harness {
        let queue: JobQueue
        let worker: DispatchQueue

        init(_ name: String, limit: Int = JobQueue.defaultMaxConcurrentJobCount) {
            (queue, worker) = makeJobQueueOnSerialWorker("UserCodeUnderLock.\(name)", limit: limit)
        }

        /// Waits until every job has finished and the thread that finished the last one has let go.
        func settle() async {
            await queue.waitUntilAllJobsAreFinished()
            await drainSerialQueue(worker)
        }
    }

    /// Runs `scenario` `rounds` times with one ledger, then expects that its canaries were all
    /// freed, none with the engine lock held.
    private func everyRound(
        sourceLocation: SourceLocation = #_sourceLocation, _ scenario: (CanaryLedger) async throws -> Void
    ) async rethrows {
        let ledger = CanaryLedger()
        for _ in 0..<rounds {
            try await scenario(ledger)
        }
        ledger.expectAllFreedOutsideTheLock(sourceLocation: sourceLocation)
    }

    /// A block that captures a fresh canary labelled `label` and nothing of the caller's: handed to
    /// the engine as a temporary, it is held by the engine alone.
    private func block(_ ledger: CanaryLedger, _ label: String) -> @Sendable () -> Void {
        let canary = ledger.canary(label)
        return { canary.touch() }
    }

    /// An observer that captures a fresh canary labelled `label`, like `block(_:_:)`.
    private func observer(_ ledger: CanaryLedger, _ label: String) -> @Sendable (JobEvent) -> Void {
        let canary = ledger.canary(label)
        return { _ in canary.touch() }
    }

    /// Gives `job` an observer that captures a canary and removes itself from inside its handler
    /// when it is told `event` (on `.finished`, when the job has already let its observers go).
    private func observeUntil(_ event: JobEvent, _ job: Job, _ ledger: CanaryLedger) {
        let token = Locked<JobObserverToken?>(nil)
        let canary = ledger.canary("observer removing itself on .\(event)")
        // Holds its job until it is released: on `event`, or after `.finished`.
        let added = job.observe { seen in
            canary.touch()
            if seen == event, let own = token.withLock({ $0 }) {
                job.removeObserver(own)
            }
        }
        token.withLock { $0 = added }
    }

    /// `count` block jobs whose blocks each capture a canary labelled `label`.
    private func blockJobs(_ ledger: CanaryLedger, _ count: Int, _ label: String) -> [Job] {
        (0..<count).map { BlockJob(block: block(ledger, "\(label) \($0)")) }
    }

    /// An `AsyncBlockJob` whose body captures a canary labelled `label`, then calls `then`.
    private func asyncBlockJob(
        _ ledger: CanaryLedger, _ label: String, then: @escaping @Sendable (AsyncBlockJob) -> Void
    ) -> AsyncBlockJob {
        let canary = ledger.canary(label)
        return AsyncBlockJob { job in
            canary.touch()
            then(job)
        }
    }

    /// Gives `job` an observer and a completion block that each capture a canary named after `label`.
    private func watchCallbacks(of job: Job, _ ledger: CanaryLedger, _ label: String) {
        job.observe(observer(ledger, "\(label): observer"))
        job.completionBlock = block(ledger, "\(label): completion block")
    }

    /// `watchCallbacks(of:_:_:)`, with watched canaries, for a job whose callbacks may be released on
    /// a thread no test owns.
    private func watchCallbacks(of job: Job, _ departures: Departures, _ ledger: CanaryLedger, _ label: String) {
        let observer = departures.watch(ledger, "\(label): observer")
        job.observe { _ in observer.touch() }
        let completion = departures.watch(ledger, "\(label): completion block")
        job.completionBlock = { completion.touch() }
    }

    /// A `TaskJob` whose body captures a watched canary labelled `label`, then runs `then`.
    private func taskJob(
        _ departures: Departures, _ ledger: CanaryLedger, _ label: String,
        then: @escaping @Sendable () async throws -> Void
    ) -> TaskJob {
        let watched = departures.watch(ledger, label)
        return TaskJob {
            watched.touch()
            try await then()
        }
    }

    /// Waits, in a body, until the body's task is cancelled; then throws `CancellationError`.
    @Sendable private func untilCancelled() async throws {
        await Signal().wait()  // Ends when the task is cancelled.
        try Task.checkCancellation()
    }

    /// Holds a canary where the last reference may go on a thread no test owns: its deinit frees
    /// the canary on that same thread, then tells `departures`.
    // @unchecked Sendable: `canary` is written only by `init` and by `deinit`; `departures` is Sendable.
    private final class Watched: @unchecked Sendable {
        private var canary: LockCanary?
        private let departures: Departures

        fileprivate init(_ canary: LockCanary, _ departures: Departures) {
            self.canary = canary
            self.departures = departures
        }

        /// Does nothing: a closure that calls it captures the object.
        func touch() {}

        deinit {
            canary = nil  // First, so the canary sees the thread that freed this object.
            departures.departed()
        }
    }

    /// An error that holds a watched canary: a job keeps the error it failed with until it is freed.
    private struct WatchedError: Error {
        let watched: Watched
    }

    /// The deinits of one round's `Watched` objects, which the test awaits without blocking a thread.
    private final class Departures: Sendable {
        private let stream: AsyncStream<Void>
        private let continuation: AsyncStream<Void>.Continuation
        private let made = Counter()

        init() {
            (stream, continuation) = AsyncStream<Void>.makeStream()
        }

        /// A watched object holding a fresh canary of `ledger`. Make them all before `waitForAll()`.
        func watch(_ ledger: CanaryLedger, _ label: String) -> Watched {
            made.increment()
            return Watched(ledger.canary(label), self)
        }

        fileprivate func departed() {
            continuation.yield()
        }

        /// Suspends until every object watched so far has been freed. Call it once. Returns early
        /// if the task is cancelled (by the test's time limit), and the count check then fails.
        func waitForAll() async {
            var left = made.value
            guard left > 0 else { return }
            for await _ in stream {
                left -= 1
                if left == 0 { return }
            }
        }
    }

    /// A job whose work throws a `CanaryError`.
    // @unchecked Sendable: its stored properties are immutable and Sendable; the rest is `Job`'s.
    private final class FailingJob: Job, @unchecked Sendable {
        let ledger: CanaryLedger
        let label: String

        init(_ ledger: CanaryLedger, _ label: String) {
            self.ledger = ledger
            self.label = label
            super.init()
        }

        override func execute() throws {
            throw CanaryError(ledger.canary(label))
        }
    }

    /// An asynchronous job whose work finishes it, then throws a `CanaryError` anyway: the error
    /// comes too late to count, and the engine drops it.
    // @unchecked Sendable: its stored property is immutable and Sendable; the rest is `Job`'s.
    private final class FinishingThenThrowingJob: AsynchronousJob, @unchecked Sendable {
        let ledger: CanaryLedger

        init(_ ledger: CanaryLedger) {
            self.ledger = ledger
            super.init()
        }

        override func execute() throws {
            finish()
            throw CanaryError(ledger.canary("error thrown after finish()"))
        }
    }

    // MARK: - Tests

    @Suite(
        "Nothing a user handed Conductor is freed under the engine lock: core jobs", .serialized,
        .hangLimit)
    struct UserCodeUnderLockTests {

        // MARK: Blocks, bodies and callbacks of jobs that run

        @Test("a BlockJob's block, and each of several blocks, are freed outside the lock")
        func blockJobBlocks() async {
            await everyRound { ledger in
                let harness = Harness("blocks")
                harness.queue.isSuspended = true
                harness.queue.addJobs(blockJobs(ledger, 3, "block"), waitUntilFinished: false)
                let several = BlockJob(block: block(ledger, "first of several blocks"))
                several.addExecutionBlock(block(ledger, "second of several blocks"))
                several.addExecutionBlock(block(ledger, "third of several blocks"))
                harness.queue.addJob(several)
                harness.queue.isSuspended = false
                await harness.settle()
            }
        }

        @Test("observers, a completion block and a progress observer are freed outside the lock")
        func callbacks() async {
            await everyRound { ledger in
                let harness = Harness("callbacks")
                harness.queue.isSuspended = true
                do {
                    let job = BlockJob {}
                    watchCallbacks(of: job, ledger, "plain job")
                    let token = job.observe(observer(ledger, "observer removed while the job is pending"))
                    job.progress.observe { [canary = ledger.canary("progress observer")] _ in canary.touch() }
                    harness.queue.addJob(job)
                    job.removeObserver(token)
                }
                harness.queue.isSuspended = false
                await harness.settle()
            }
        }

        @Test("an observer that removes itself from inside its handler is freed outside the lock")
        func observerRemovingItself() async {
            await everyRound { ledger in
                let harness = Harness("self-removing observer")
                harness.queue.isSuspended = true
                for event in [JobEvent.ready, .started, .finished] {
                    let job = BlockJob {}
                    observeUntil(event, job, ledger)
                    // Kept: the job still has an observer to tell its later events.
                    job.observe(observer(ledger, "observer beside one removing itself on .\(event)"))
                    harness.queue.addJob(job)
                }
                harness.queue.isSuspended = false
                await harness.settle()
            }
        }

        @Test("a completion block replaced before the job runs, or set on a finished job, is freed outside the lock")
        func replacedCompletionBlocks() async {
            await everyRound { ledger in
                let harness = Harness("replaced completion")
                harness.queue.isSuspended = true
                do {
                    let job = BlockJob {}
                    job.completionBlock = block(ledger, "completion block replaced by another")
                    job.completionBlock = block(ledger, "completion block replaced by nil")
                    job.completionBlock = nil
                    job.completionBlock = block(ledger, "completion block replaced while queued")
                    harness.queue.addJob(job)
                    job.completionBlock = block(ledger, "completion block that runs")
                }
                harness.queue.isSuspended = false
                await harness.settle()
                let finished = BlockJob {}
                finished.start()
                finished.completionBlock = block(ledger, "completion block set on a finished job")
            }
        }

        @Test("an AsyncBlockJob's body is freed outside the lock, however the job is finished")
        func asyncBlockJobBodies() async {
            let finisher = DispatchQueue(label: "UserCodeUnderLock.finisher")
            await everyRound { ledger in
                let harness = Harness("async bodies")
                let worker = harness.worker
                harness.queue.isSuspended = true
                do {
                    // Not kept by the test: the failed one keeps its error until it is freed.
                    let jobs = [
                        asyncBlockJob(ledger, "body finished later on the worker") { job in
                            worker.async { job.finish() }
                        },
                        asyncBlockJob(ledger, "body that finishes the job itself") { job in job.finish() },
                        asyncBlockJob(ledger, "body finished from another queue") { job in
                            finisher.async { job.finish() }
                        },
                        asyncBlockJob(ledger, "body finished with an error") { job in
                            let error = CanaryError(ledger.canary("error an AsyncBlockJob finished with"))
                            worker.async { job.finish(throwing: error) }
                        },
                    ]
                    for job in jobs {
                        watchCallbacks(of: job, ledger, "AsyncBlockJob")
                    }
                    harness.queue.addJobs(jobs, waitUntilFinished: false)
                }
                harness.queue.isSuspended = false
                await harness.settle()
                await drainSerialQueue(finisher)
            }
        }

        @Test("a job's error, thrown by its work or thrown too late, is freed outside the lock")
        func errorsThrownByWork() async {
            await everyRound { ledger in
                let harness = Harness("thrown errors")
                harness.queue.isSuspended = true
                harness.queue.addJob(FailingJob(ledger, "error thrown by a queued job's execute()"))
                harness.queue.addJob(FinishingThenThrowingJob(ledger))
                harness.queue.isSuspended = false
                await harness.settle()
                // By hand, on this thread.
                let job = FailingJob(ledger, "error thrown by execute() under start()")
                watchCallbacks(of: job, ledger, "job started by hand")
                job.start()
                FinishingThenThrowingJob(ledger).start()
            }
        }

        @Test("a job's work on its executionQueue, and its callbacks, are freed outside the lock")
        func executionQueue() async {
            let elsewhere = DispatchQueue(label: "UserCodeUnderLock.execution")
            await everyRound { ledger in
                let harness = Harness("execution queue")
                harness.queue.isSuspended = true
                let job = BlockJob(block: block(ledger, "block run on an execution queue"))
                job.executionQueue = elsewhere
                watchCallbacks(of: job, ledger, "job run on an execution queue")
                let asynchronous = asyncBlockJob(ledger, "AsyncBlockJob body run on an execution queue") { job in
                    job.finish()
                }
                asynchronous.executionQueue = elsewhere
                harness.queue.addJobs([job, asynchronous], waitUntilFinished: false)
                harness.queue.isSuspended = false
                await harness.queue.waitUntilAllJobsAreFinished()
                await drainSerialQueue(elsewhere)
                await drainSerialQueue(harness.worker)
            }
        }

        @Test("a TaskJob's body, error and callbacks are freed outside the lock: succeeded, failed, cancelled")
        func taskJobs() async {
            await everyRound { ledger in
                let harness = Harness("task jobs")
                let departures = Departures()
                let started = Signal()
                harness.queue.isSuspended = true
                let running = taskJob(departures, ledger, "body of a TaskJob cancelled while running") {
                    started.fire()
                    try await untilCancelled()
                }
                do {
                    // Not kept by the test: the failed one keeps its error until it is freed.
                    let jobs = [
                        taskJob(departures, ledger, "body of a TaskJob that succeeds") { await Task.yield() },
                        taskJob(departures, ledger, "body of a TaskJob that throws") {
                            [error = WatchedError(watched: departures.watch(ledger, "error a TaskJob threw"))] in
                            await Task.yield()
                            throw error
                        },
                        running,
                    ]
                    for job in jobs {
                        watchCallbacks(of: job, departures, ledger, "TaskJob")
                    }
                    harness.queue.addJobs(jobs, waitUntilFinished: false)
                }
                harness.queue.isSuspended = false
                await started.wait()
                running.cancel()
                await departures.waitForAll()
                await harness.settle()
            }
        }

        @Test("a ValueJob's value, its error and its dependents' bodies are freed outside the lock")
        func valueJobs() async throws {
            try await everyRound { ledger in
                let harness = Harness("value jobs")
                let departures = Departures()
                harness.queue.isSuspended = true
                do {
                    // Not kept by the test: the jobs keep the value and the error until they are freed.
                    let producer = ValueJob { [value = departures.watch(ledger, "a ValueJob's value")] in value }
                    let consumer = ValueJob { [reader = departures.watch(ledger, "body of a ValueJob reading it")] in
                        reader.touch()
                        return try await producer.value
                    }
                    try consumer.addDependency(producer, policy: .requireSuccess)
                    let failing = ValueJob<Int> { [error = WatchedError(watched: departures.watch(ledger, "error"))] in
                        throw error
                    }
                    let dependent = ValueJob<Int> { [skipped = departures.watch(ledger, "body behind a failure")] in
                        skipped.touch()
                        return 0
                    }
                    try dependent.addDependency(failing, policy: .requireSuccess)
                    let jobs: [Job] = [producer, consumer, failing, dependent]
                    for job in jobs {
                        watchCallbacks(of: job, departures, ledger, "ValueJob")
                    }
                    harness.queue.addJobs(jobs, waitUntilFinished: false)
                }
                harness.queue.isSuspended = false
                await departures.waitForAll()
                await harness.settle()
            }
        }

        // MARK: Cancellation

        @Test(
            "jobs cancelled before they start, on a queue and off one, free their work and callbacks outside the lock")
        func cancelledBeforeStarting() async {
            await everyRound { ledger in
                let harness = Harness("cancelled before starting")
                harness.queue.isSuspended = true
                var jobs: [Job] = []
                for place in ["on a queue", "off a queue"] {
                    let blockJob = BlockJob(block: block(ledger, "block of a BlockJob cancelled \(place)"))
                    blockJob.addExecutionBlock(block(ledger, "second block of a BlockJob cancelled \(place)"))
                    let placeJobs: [Job] = [
                        blockJob,
                        asyncBlockJob(ledger, "body of an AsyncBlockJob cancelled \(place)") { job in job.finish() },
                        TaskJob { [task = ledger.canary("body of a TaskJob cancelled \(place)")] in task.touch() },
                        ValueJob { [value = ledger.canary("body of a ValueJob cancelled \(place)")] in value },
                    ]
                    for job in placeJobs {
                        watchCallbacks(of: job, ledger, "job cancelled \(place)")
                        job.name = "to be cancelled"
                        job.name = "to be cancelled \(place)"
                    }
                    if place == "on a queue" {
                        harness.queue.addJobs(placeJobs, waitUntilFinished: false)
                    }
                    jobs += placeJobs
                }
                for (index, job) in jobs.enumerated() {
                    if index.isMultiple(of: 2) {
                        job.cancel()
                    } else {
                        job.cancel(reason: CancellationReason(code: .requested, detail: "the round ends"))
                    }
                }
                // Pending: dependents of an unfinished job, enough of them that the dependency
                // compacts its cancelled dependents away.
                let dependency = BlockJob {}
                for job in blockJobs(ledger, 20, "block of a pending dependent cancelled") {
                    try? job.addDependency(dependency)
                    harness.queue.addJob(job)
                    job.cancel()
                }
                dependency.cancel()
                harness.queue.isSuspended = false
                await harness.settle()
            }
        }

        @Test("jobs cancelled while they run free their work and callbacks outside the lock")
        func cancelledWhileRunning() async {
            await everyRound { ledger in
                let harness = Harness("cancelled while running")
                let worker = harness.worker
                // A BlockJob blocked in its block, on the worker's (Dispatch) thread.
                let gate = DispatchSemaphore(value: 0)
                let blockStarted = Signal()
                let blockJob = BlockJob { [canary = ledger.canary("block of a BlockJob cancelled while running")] in
                    canary.touch()
                    blockStarted.fire()
                    gate.wait()
                }
                watchCallbacks(of: blockJob, ledger, "BlockJob cancelled while running")
                harness.queue.addJob(blockJob)
                await blockStarted.wait()
                blockJob.cancel()
                gate.signal()
                await harness.settle()

                // An AsyncBlockJob that honours cancellation by finishing, on the worker.
                let started = Signal()
                let asynchronous = asyncBlockJob(ledger, "body of an AsyncBlockJob cancelled while running") { _ in
                    started.fire()
                }
                asynchronous.observe { event in
                    if event == .cancelled { worker.async { asynchronous.finish() } }
                }
                watchCallbacks(of: asynchronous, ledger, "AsyncBlockJob cancelled while running")
                harness.queue.addJob(asynchronous)
                await started.wait()
                asynchronous.cancel(reason: CancellationReason(code: .requested, detail: "stop"))
                await harness.settle()
            }
        }

        @Test("cancelAllJobs on a suspended queue frees its jobs' blocks, bodies and callbacks outside the lock")
        func cancelAllJobsOnASuspendedQueue() async {
            await everyRound { ledger in
                let harness = Harness("cancel all")
                harness.queue.isSuspended = true
                let jobs = blockJobs(ledger, 20, "block of a job cancelled by cancelAllJobs")
                for job in jobs.prefix(5) {
                    watchCallbacks(of: job, ledger, "job cancelled by cancelAllJobs")
                }
                harness.queue.addJobs(jobs, waitUntilFinished: false)
                harness.queue.addBarrierBlock(block(ledger, "barrier cancelled by cancelAllJobs"))
                harness.queue.addJob(
                    asyncBlockJob(ledger, "AsyncBlockJob body cancelled by cancelAllJobs") { $0.finish() })
                harness.queue.addJob(
                    TaskJob { [task = ledger.canary("TaskJob body cancelled by cancelAllJobs")] in task.touch() })
                for index in 0..<10 {
                    harness.queue.addJob(block(ledger, "pushed closure \(index) cancelled by cancelAllJobs"))
                }
                harness.queue.cancelAllJobs()
                // The barrier keeps its place: it still "runs" (without its block) once resumed.
                harness.queue.isSuspended = false
                await harness.settle()
            }
        }

        @Test(
            ".requireSuccess dependents cancelled by a dependency failing with a CanaryError free everything outside the lock"
        )
        func requireSuccessCascade() async throws {
            var round = 0
            try await everyRound { ledger in
                round += 1
                let harness = Harness("cascade")
                let other = Harness("cascade, other queue")
                harness.queue.isSuspended = true
                other.queue.isSuspended = true
                // Every other round the test keeps the failed dependency, and a late dependent that
                // requires its success is cancelled at once, on this thread; otherwise the test
                // keeps none of the jobs it built.
                let kept: Job? = try {
                    let failing = FailingJob(ledger, "error of the failed dependency")
                    watchCallbacks(of: failing, ledger, "failed dependency")
                    var previous: Job = failing
                    for (index, job) in blockJobs(ledger, 3, "block of a chained dependent").enumerated() {
                        try job.addDependency(previous, policy: .requireSuccess)
                        watchCallbacks(of: job, ledger, "chained dependent \(index)")
                        (index == 1 ? other.queue : harness.queue).addJob(job)
                        previous = job
                    }
                    for job in blockJobs(ledger, 5, "block of a fanned-out dependent") {
                        try job.addDependency(failing, policy: .requireSuccess)
                        other.queue.addJob(job)
                    }
                    let asynchronous = asyncBlockJob(ledger, "AsyncBlockJob dependent's body") { $0.finish() }
                    let taskJob = TaskJob { [task = ledger.canary("TaskJob dependent's body")] in task.touch() }
                    for job in [asynchronous, taskJob] + blockJobs(ledger, 1, "block of a dependent on no queue") {
                        try job.addDependency(failing, policy: .requireSuccess)
                    }
                    harness.queue.addJobs([asynchronous, taskJob, failing], waitUntilFinished: false)
                    return round.isMultiple(of: 2) ? failing : nil
                }()
                harness.queue.isSuspended = false
                other.queue.isSuspended = false
                await harness.settle()
                await other.settle()
                if let kept {
                    let late = blockJobs(ledger, 1, "block of a dependent added after the failure")[0]
                    try late.addDependency(kept, policy: .requireSuccess)
                    #expect(late.isCancelled)
                }
            }
        }

        @Test("removeDependency lets both jobs' blocks be freed outside the lock")
        func removedDependencies() async throws {
            try await everyRound { ledger in
                let harness = Harness("removed dependencies")
                harness.queue.isSuspended = true
                do {
                    let jobs = blockJobs(ledger, 5, "block of a job in a dependency")
                    for dependency in jobs.dropFirst() {
                        try jobs[0].addDependency(dependency)
                    }
                    harness.queue.addJobs([jobs[0], jobs[1]], waitUntilFinished: false)
                    // One on the queue, the others on none; those never run.
                    jobs[0].removeDependency(jobs[2])
                    jobs[0].removeDependency(jobs[3])
                    jobs[0].removeDependency(jobs[4])
                }
                harness.queue.isSuspended = false
                await harness.settle()
                do {
                    // Removing a dependency that has finished, and then the last unfinished one.
                    let jobs = blockJobs(ledger, 3, "block of a job whose dependency is removed late")
                    try jobs[0].addDependency(jobs[1])
                    try jobs[0].addDependency(jobs[2])
                    harness.queue.addJobs([jobs[0], jobs[1]], waitUntilFinished: false)
                    await jobs[1].waitUntilFinished()
                    jobs[0].removeDependency(jobs[1])
                    jobs[0].removeDependency(jobs[2])
                }
                await harness.settle()
            }
        }

        @Test("a job cancelled by its timeout frees its body and callbacks outside the lock")
        func timeouts() async {
            await everyRound { ledger in
                let harness = Harness("timeouts")
                let departures = Departures()
                harness.queue.isSuspended = true
                do {
                    let asynchronous = AsyncBlockJob {
                        [body = departures.watch(ledger, "body of an AsyncBlockJob timed out")] _ in
                        body.touch()  // Finishes when cancelled, below.
                    }
                    asynchronous.observe { event in
                        if event == .cancelled { asynchronous.finish() }
                    }
                    let task = taskJob(departures, ledger, "body of a TaskJob timed out") { try await untilCancelled() }
                    let inTime = TaskJob {
                        [body = departures.watch(ledger, "body of a TaskJob done before its timeout")] in
                        body.touch()
                    }
                    inTime.timeout = .seconds(3_600)
                    let jobs: [Job] = [asynchronous, task, inTime]
                    for job in jobs {
                        watchCallbacks(of: job, departures, ledger, "job with a timeout")
                    }
                    asynchronous.timeout = .milliseconds(1)
                    task.timeout = .milliseconds(1)
                    harness.queue.addJobs(jobs, waitUntilFinished: false)
                }
                harness.queue.isSuspended = false
                await departures.waitForAll()
                await harness.settle()
            }
        }

        // MARK: Queues

        @Test("a queue its owner dropped, with suspended jobs and a barrier, frees them outside the lock")
        func droppedQueues() async {
            await everyRound { ledger in
                let worker = DispatchQueue(label: "UserCodeUnderLock.dropped")
                // Resumed through a weak reference: it runs its jobs, then is freed.
                let freed = Signal()
                let (resumed, _, last) = abandonedSuspendedQueue(ledger, worker, withBarrier: true, freed: freed)
                resumed.object?.isSuspended = false
                await last.waitUntilFinished()
                // Awaited, not read at once: the queue lets itself go when its last job settles,
                // after `last`'s waiter resumed. Once in CI (2026-11-26) it had not, even after its
                // worker queue drained. A leak fails through the suite's `.hangLimit`.
                await freed.wait()
                #expect(resumed.object == nil)
                // Never resumed: its jobs are cancelled, and the last one lets the queue go. (A
                // barrier would keep it: cancelled, a barrier still waits for its turn to run.)
                let (cancelled, jobs, _) = abandonedSuspendedQueue(ledger, worker, withBarrier: false)
                for job in jobs {
                    job.object?.cancel()
                }
                #expect(cancelled.object == nil)
            }
        }

        @Test("barriers' blocks are freed outside the lock, as are the jobs cancelled behind a barrier")
        func barriers() async {
            await everyRound { ledger in
                let harness = Harness("barriers", limit: 2)
                harness.queue.isSuspended = true
                for index in 0..<3 {
                    harness.queue.addJobs(blockJobs(ledger, 2, "job before barrier \(index)"), waitUntilFinished: false)
                    harness.queue.addBarrierBlock(block(ledger, "barrier \(index)"))
                }
                // Enough jobs cancelled behind the last barrier that the queue compacts them away.
                let held = blockJobs(ledger, 20, "job cancelled behind a barrier")
                harness.queue.addJobs(held, waitUntilFinished: false)
                for job in held {
                    job.cancel()
                }
                harness.queue.isSuspended = false
                await harness.settle()
            }
        }

        @Test("closures added to a busy queue without the lock are freed outside it")
        func closuresPushedWithoutTheLock() async {
            // Whether the closures were still on the stack when looked at. Any section for the
            // queue admits them, a diagnostic of another test's included (`description` and
            // `explain()` admit on every queue), so a round may miss it; not every round can.
            // Counted in plain values: an `#expect` on a queue reflects its fields without the lock.
            var pushedWhileSuspended = 0
            var pushedWhileBusy = 0
            await everyRound { ledger in
                // Suspended: pushed, then run.
                let suspended = Harness("pushed while suspended")
                suspended.queue.isSuspended = true
                for index in 0..<10 {
                    suspended.queue.addJob(block(ledger, "closure \(index) pushed onto a suspended queue"))
                }
                if suspended.queue._hasPushedJobs { pushedWhileSuspended += 1 }
                suspended.queue.isSuspended = false
                await suspended.settle()

                // Every slot taken: pushed, then run when the slot frees.
                let busy = Harness("pushed while busy", limit: 1)
                let started = Signal()
                let held = AsyncBlockJob { _ in started.fire() }
                busy.queue.addJob(held)
                await started.wait()
                // Its worker has returned: no section runs for the queue to admit what is pushed.
                await drainSerialQueue(busy.worker)
                for index in 0..<10 {
                    busy.queue.addJob(block(ledger, "closure \(index) pushed onto a busy queue"))
                }
                if busy.queue._hasPushedJobs { pushedWhileBusy += 1 }
                busy.worker.async { held.finish() }
                await busy.settle()
            }
            #expect(pushedWhileSuspended > 0, "no closure was ever pushed without the lock onto a suspended queue")
            #expect(pushedWhileBusy > 0, "no closure was ever pushed without the lock onto a busy queue")
        }

        @Test("addJobs(_:waitUntilFinished:) frees the batch's blocks outside the lock, waiting or not")
        func batches() async {
            await everyRound { ledger in
                let harness = Harness("batches")
                let queue = harness.queue
                await runOnDispatchThread {
                    queue.addJobs(blockJobs(ledger, 5, "block of a waited batch"), waitUntilFinished: true)
                }
                queue.addJobs(blockJobs(ledger, 5, "block of a batch not waited for"), waitUntilFinished: false)
                await harness.settle()
            }
        }
    }

    /// Builds a suspended queue on `worker`, with limit 1, whose jobs (and barrier, if asked) capture
    /// canaries, and lets it go: returns weak references to it and its jobs, and its last job.
    /// A suspended queue with jobs, let go by its owner. With `freed`, the queue's progress holds an
    /// observer that fires it when the queue is freed (the queue alone holds its progress).
    private func abandonedSuspendedQueue(
        _ ledger: CanaryLedger, _ worker: DispatchQueue, withBarrier: Bool, freed: Signal? = nil
    ) -> (WeakReference<JobQueue>, [WeakReference<Job>], Job) {
        let queue = JobQueue(name: "UserCodeUnderLock.dropped", maxConcurrentJobCount: 1)
        queue.underlyingQueue = worker
        queue.isSuspended = true
        if let freed {
            let tracked = Tracked(signal: freed)
            _ = queue.progress.observe { _ in _ = tracked }
        }
        let first = blockJobs(ledger, 3, "job of a dropped queue")
        queue.addJobs(first, waitUntilFinished: false)
        if withBarrier {
            queue.addBarrierBlock(block(ledger, "barrier of a dropped queue"))
        }
        let last = BlockJob {}
        watchCallbacks(of: last, ledger, "last job of a dropped queue")
        queue.addJob(last)
        return (WeakReference(queue), (first + [last]).map { WeakReference($0) }, last)
    }

#endif
