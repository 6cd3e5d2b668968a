import Conductor
import ConductorTestSupport
import Dispatch
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Serialized: several of these tests block a Dispatch thread (a job waiting in its work, a gated
// serial queue) until a report arrives; run together with the rest of the suite under
// ThreadSanitizer, they could use up the threads other suites' jobs need.
//
// The stall watchdog (Docs/Diagnostics.md, "The stall watchdog"): each kind of stall is reported
// exactly once per episode, naming its jobs, and a healthy run is not reported. The watchdog sees
// every queue in the process, so each test only counts the reports that name its own jobs. Tests
// wait for reports and for wake-ups (`tickObserver`), never for time.

/// A condition whose generated dependency is `login`, met once it has run.
private struct NeedsLogin: JobCondition {
    let login: Job
    var name: String { "needs login" }
    func dependency(for job: Job) -> Job? { login }
    func evaluate(for job: Job) async throws -> Bool { true }
}

/// A watchdog with a short threshold that keeps the reports naming a job `isOurs` accepts, and
/// lets the test await reports and wake-ups.
private final class Watch: Sendable {
    let reports = Log<StallReport>()
    let wakeUps = Counter()
    private let ticks: AsyncStream<Void>
    private let reportStream: AsyncStream<StallReport>
    private let watchdog: StallWatchdog

    init(
        threshold: Duration = .milliseconds(100), interval: Duration? = nil,
        onTick: (@Sendable () -> Void)? = nil, isOurs: @escaping @Sendable (Job) -> Bool
    ) {
        let (ticks, tick) = AsyncStream<Void>.makeStream()
        let (reportStream, report) = AsyncStream<StallReport>.makeStream()
        self.ticks = ticks
        self.reportStream = reportStream
        let reports = reports
        let wakeUps = wakeUps
        watchdog = StallWatchdog(
            threshold: threshold, interval: interval,
            tickObserver: {
                onTick?()
                wakeUps.increment()
                tick.yield()
            }
        ) { stall in
            guard stall.jobs.contains(where: isOurs) else { return }
            reports.append(stall)
            report.yield(stall)
        }
    }

    func start() { watchdog.start() }
    func stop() { watchdog.stop() }

    /// The next report naming one of our jobs.
    func nextReport() async -> StallReport {
        for await report in reportStream { return report }
        fatalError("the report stream ended")
    }

    /// Waits until the watchdog has woken `count` more times from now (wake-ups already buffered
    /// in the stream do not count).
    func waitForWakeUps(_ count: Int) async {
        let target = wakeUps.value + count
        for await _ in ticks where wakeUps.value >= target {
            return
        }
    }

    /// Waits until the watchdog has woken `target` times in all (`wakeUps.value` reaches it).
    func waitUntilWakeUps(reach target: Int) async {
        if wakeUps.value >= target { return }
        for await _ in ticks where wakeUps.value >= target {
            return
        }
    }

    func count(_ kind: StallReport.Kind) -> Int {
        reports.values.count { $0.kind == kind }
    }
}

@Suite(.serialized) struct StallWatchdogTests {
    @Test(.hangLimit)
    func aForgottenFinishIsReportedOnceAsALongExecution() async {
        let job = HeldJob(name: "wd-forgotten")
        let queue = JobQueue(name: "wd-long")
        queue.addJob(job)
        await job.started.wait()
        let watch = Watch { $0 === job }
        watch.start()

        let report = await watch.nextReport()
        #expect(report.kind == .longExecution)
        #expect(report.jobs.map(\.id) == [job.id])
        expectText(
            report.description,
            contains: [
                "longExecution: 'wd-forgotten' has been executing for ",
                "'wd-forgotten' is executing on queue 'wd-long' for ",
                "- finish(): its work has not signalled its end",
            ])
        // Later wake-ups see the same episode and stay quiet.
        await watch.waitForWakeUps(3)
        #expect(watch.reports.count == 1)
        watch.stop()
        job.finish()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aQueueWhoseWorkersCannotRunIsReportedOnceAsNoProgress() async {
        // The queue's workers run on a serial Dispatch queue that a block occupies.
        let blocked = DispatchQueue(label: "wd-blocked")
        let gate = DispatchSemaphore(value: 0)
        let occupied = Signal()
        blocked.async {
            occupied.fire()
            gate.wait()
        }
        await occupied.wait()
        let queue = JobQueue(name: "wd-no-progress")
        queue.underlyingQueue = blocked
        let job = BlockJob {}
        job.name = "wd-starved"
        let watch = Watch { $0 === job }
        watch.start()
        queue.addJob(job)

        let report = await watch.nextReport()
        #expect(report.kind == .noProgress)
        #expect(report.jobs.map(\.id) == [job.id])
        expectText(
            report.description,
            contains: [
                "noProgress: queue 'wd-no-progress' has had 1 ready job and \(JobQueue.systemDefaultWidth) free slots for ",
                "Ready (1), in the order they will start:\n  - normal: 'wd-starved'",
            ])
        await watch.waitForWakeUps(3)
        #expect(watch.reports.count == 1)
        watch.stop()
        gate.signal()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aJobWaitingForTheJobThatNeedsItsSlotIsReportedOnceAsAWaitCycle() async {
        let queue = JobQueue(name: "wd-self-wait", maxConcurrentJobCount: 1)
        let needed = BlockJob {}
        needed.name = "wd-needed"
        let waiter = BlockJob { needed.waitUntilFinished() }  // on a Dispatch worker thread
        waiter.name = "wd-waiter"
        let watch = Watch { $0 === waiter || $0 === needed }
        watch.start()
        queue.addJobs([waiter, needed], waitUntilFinished: false)

        var report = await watch.nextReport()
        while report.kind != .waitCycle {  // the waiter may first be reported executing too long
            report = await watch.nextReport()
        }
        #expect(report.jobs.map(\.id) == [waiter.id, needed.id].sorted())
        expectText(
            report.description,
            contains: [
                "waitCycle: 2 jobs wait for each other and none can proceed",
                "- its work is blocked in waitUntilFinished() on 'wd-needed'",
                "- limit: the only slot of queue 'wd-self-wait' is taken by 1 executing job: 'wd-waiter' for ",
            ])
        await watch.waitForWakeUps(3)
        #expect(watch.count(.waitCycle) == 1)
        watch.stop()
        needed.cancel()  // the wait returns, and the waiter finishes
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aCycleThroughACategoryIsReportedAsAWaitCycle() async {
        let category = "wd-category-\(UInt64.random(in: 0...UInt64.max))"
        let queue = JobQueue(name: "wd-category", maxConcurrentJobCount: 2)
        let second = BlockJob {}
        second.name = "wd-second"
        second.exclusivityCategories = [category]
        let first = BlockJob { second.waitUntilFinished() }
        first.name = "wd-first"
        first.exclusivityCategories = [category]
        let watch = Watch { $0 === first || $0 === second }
        watch.start()
        // First in line, `first` takes the category; `second` waits in line for it.
        queue.addJobs([first, second], waitUntilFinished: false)

        var report = await watch.nextReport()
        while report.kind != .waitCycle {
            report = await watch.nextReport()
        }
        #expect(report.jobs.map(\.id) == [first.id, second.id].sorted())
        expectText(report.description, contains: ["- category: '\(category)' is held by 'wd-first'"])
        watch.stop()
        second.cancel()
        await queue.waitUntilAllJobsAreFinished()
    }

    /// A child's generated dependency that was on another queue already stays there, outside the
    /// group (Composition, "Groups and produced jobs"). If it needs the category the group holds,
    /// the group waits for the child, the child for it and it for the group: a wait cycle, reported.
    @Test(.hangLimit)
    func aChildWaitingForAJobOutsideItsGroupThatNeedsTheGroupsCategoryIsAWaitCycle() async {
        let category = "wd-group-category-\(UInt64.random(in: 0...UInt64.max))"
        let elsewhere = JobQueue(name: "wd-elsewhere")
        elsewhere.isSuspended = true
        let login = BlockJob {}
        login.name = "wd-login"
        login.exclusivityCategories = [category]
        elsewhere.addJob(login)
        let child = BlockJob {}
        child.name = "wd-child"
        child.addCondition(NeedsLogin(login: login))
        let group = GroupJob(name: "wd-group", jobs: [child])
        group.exclusivityCategories = [category]
        let started = Signal()
        group.observe { if $0 == .started { started.fire() } }
        let watch = Watch { $0 === login || $0 === child }
        watch.start()
        let queue = JobQueue(name: "wd-group-queue")
        queue.addJob(group)
        await started.wait()  // the group holds the category
        elsewhere.isSuspended = false

        var report = await watch.nextReport()
        while report.kind != .waitCycle {
            report = await watch.nextReport()
        }
        let reported = report.jobs.map(\.displayName)
        #expect(Set(reported).isSuperset(of: ["wd-login", "wd-child"]), "\(report)")
        watch.stop()
        group.cancel()
        await queue.waitUntilAllJobsAreFinished()
        await elsewhere.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aHealthyRunOfAHundredThousandJobsIsNotReported() async {
        // A long threshold, so that a busy machine cannot make a healthy job look stuck, but
        // frequent wake-ups, so that the wait-cycle search runs many times during the run.
        let watch = Watch(threshold: .seconds(10), interval: .milliseconds(100)) { $0.name == "wd-healthy" }
        watch.start()
        let queue = JobQueue(name: "wd-healthy-queue", maxConcurrentJobCount: 4)
        let other = JobQueue(name: "wd-healthy-other")
        let finisher = DispatchQueue(label: "wd-healthy-finisher")
        // Batches of chains, asynchronous jobs finished from another queue, and a job of each
        // batch that waits (from its work) for a job of another queue that does run: until 10⁵
        // jobs have run and the watchdog has woken at least three times meanwhile. Built and
        // waited for on a Dispatch thread: building 10⁵ jobs (slow under ThreadSanitizer) must not
        // hold one of the cooperative pool's two threads that other tests' tasks need.
        let done = Signal()
        DispatchQueue.global().async {
            var jobs = 0
            while jobs < 100_000 || watch.wakeUps.value < 3 {
                var batch: [Job] = []
                for index in 0..<10_000 {
                    let job: Job
                    if index % 100 == 0 {
                        job = AsyncBlockJob { job in finisher.async { job.finish() } }
                    } else {
                        job = BlockJob {}
                    }
                    job.name = "wd-healthy"
                    if index % 10 != 0 { try! job.addDependency(batch[index - 1]) }
                    batch.append(job)
                }
                let elsewhere = BlockJob {}
                elsewhere.name = "wd-healthy"
                let waiting = BlockJob { elsewhere.waitUntilFinished() }
                waiting.name = "wd-healthy"
                batch.append(waiting)
                other.addJob(elsewhere)
                queue.addJobs(batch, waitUntilFinished: true)
                jobs += batch.count
            }
            done.fire()
        }
        await done.wait()
        watch.stop()
        #expect(watch.reports.values.map(\.description) == [])
    }

    @Test(.hangLimit)
    func aWaitForAJobThatCanStillFinishIsNotACycle() async {
        let holder = HeldJob(name: "wd-held")
        let elsewhere = JobQueue(name: "wd-elsewhere")
        elsewhere.addJob(holder)
        await holder.started.wait()
        let queue = JobQueue(name: "wd-not-a-cycle", maxConcurrentJobCount: 1)
        let waiter = BlockJob { holder.waitUntilFinished() }
        waiter.name = "wd-patient"
        let watch = Watch(threshold: .seconds(10), interval: .milliseconds(50)) { $0 === waiter || $0 === holder }
        let waiting = Signal()
        waiter.observe { if $0 == .started { waiting.fire() } }
        queue.addJob(waiter)
        await waiting.wait()
        watch.start()
        await watch.waitForWakeUps(5)
        watch.stop()
        #expect(watch.count(.waitCycle) == 0)
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func anAsynchronousJobBlockedInAWaitIsNotACycleSinceAnotherThreadMayFinishIt() async {
        let queue = JobQueue(name: "wd-async-waiter", maxConcurrentJobCount: 1)
        let later = BlockJob {}
        later.name = "wd-later"
        let blocked = Signal()
        let waiter = AsyncBlockJob { _ in
            blocked.fire()
            later.waitUntilFinished()  // the only slot is this job's, until someone finishes it
        }
        waiter.name = "wd-async"
        let watch = Watch(threshold: .seconds(10), interval: .milliseconds(50)) { $0 === waiter || $0 === later }
        queue.addJobs([waiter, later], waitUntilFinished: false)
        await blocked.wait()
        watch.start()
        await watch.waitForWakeUps(5)
        watch.stop()
        #expect(watch.count(.waitCycle) == 0)
        waiter.finish()  // frees the slot: `later` runs, and the wait returns
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aGroupHoldingTheSlotItsChildNeedsIsReportedAsAWaitCycle() async throws {
        let queue = JobQueue(name: "wd-group-queue", maxConcurrentJobCount: 1)
        let sibling = BlockJob {}
        sibling.name = "wd-sibling"
        let child = BlockJob {}
        child.name = "wd-child"
        try child.addDependency(sibling)
        let group = GroupJob(name: "wd-group", jobs: [child])
        let watch = Watch { $0 === group || $0 === child || $0 === sibling }
        watch.start()
        // The group takes the only slot first; its child waits for `sibling`, which waits for it.
        queue.addJobs([group, sibling], waitUntilFinished: false)

        var report = await watch.nextReport()
        while report.kind != .waitCycle {
            report = await watch.nextReport()
        }
        #expect(report.jobs.map(\.id) == [sibling.id, child.id, group.id].sorted())
        expectText(
            report.description,
            contains: [
                "- group: it waits for 1 unfinished child on 'wd-group.children'",
                "- limit: the only slot of queue 'wd-group-queue' is taken by 1 executing job: 'wd-group'",
            ])
        await watch.waitForWakeUps(3)
        #expect(watch.count(.waitCycle) == 1)
        watch.stop()
        sibling.cancel()  // the child's dependency has finished: it runs, and the group finishes
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aWaitForTheChildOfAnUnstartedGroupThatWaitsForTheWaiterIsReportedAsAWaitCycle() async throws {
        // The waiter's work waits for the child; the child, ready on the group's queue of children,
        // waits for the group to start (that queue is suspended until then); the group waits for
        // the waiter, its dependency. No dependency edge closes the cycle, so `addDependency`
        // cannot refuse it.
        let queue = JobQueue(name: "wd-unstarted-group-queue")
        let child = BlockJob {}
        child.name = "wd-waited-child"
        let group = GroupJob(name: "wd-unstarted-group", jobs: [child])
        let waiter = BlockJob { child.waitUntilFinished() }  // on a Dispatch worker thread
        waiter.name = "wd-child-waiter"
        try group.addDependency(waiter)
        let watch = Watch { $0 === group || $0 === child || $0 === waiter }
        watch.start()
        queue.addJobs([waiter, group], waitUntilFinished: false)

        var report = await watch.nextReport()
        while report.kind != .waitCycle {  // the waiter may first be reported executing too long
            report = await watch.nextReport()
        }
        #expect(report.jobs.map(\.id) == [waiter.id, child.id, group.id].sorted())
        expectText(
            report.description,
            contains: [
                "- its work is blocked in waitUntilFinished() on 'wd-waited-child'",
                "'wd-waited-child' is ready on queue 'wd-unstarted-group.children'",
            ])
        await watch.waitForWakeUps(3)
        #expect(watch.count(.waitCycle) == 1)
        watch.stop()
        child.cancel()  // the wait returns; the waiter finishes, and the group after it
        await queue.waitUntilAllJobsAreFinished()
        #expect(group.outcome?.isSucceeded == true)
    }

    @Test(.hangLimit)
    func aReportStillBeingWrittenWhenStopReturnsIsNotDelivered() async throws {
        // The group's wait cycle (as in the test above), with a condition on the child: the
        // report's text names it, and its name blocks the watchdog's thread until the test has
        // stopped the watchdog.
        let queue = JobQueue(name: "wd-stop-queue", maxConcurrentJobCount: 1)
        let sibling = BlockJob {}
        sibling.name = "wd-stop-sibling"
        let child = BlockJob {}
        child.name = "wd-stop-child"
        try child.addDependency(sibling)
        let naming = DispatchSemaphore(value: 0)
        let named = DispatchSemaphore(value: 0)
        // Every watchdog in the process sees this cycle (other suites run theirs meanwhile): the
        // name blocks only on this one's thread, which its first wake-up, before the cycle exists,
        // records.
        let watchdogThread = Locked<UInt?>(nil)
        child.addCondition(BlockingNameCondition(on: watchdogThread, entered: naming, release: named))
        let group = GroupJob(name: "wd-stop-group", jobs: [child])
        let watch = Watch(onTick: { watchdogThread.withLock { $0 = currentThreadID() } }) {
            $0 === group || $0 === child || $0 === sibling
        }
        watch.start()
        await watch.waitUntilWakeUps(reach: 1)
        queue.addJobs([group, sibling], waitUntilFinished: false)

        await waitForSignals(naming)  // the watchdog's thread is writing the report
        watch.stop()
        let wakeUpsSoFar = watch.wakeUps.value
        named.signal()
        await watch.waitUntilWakeUps(reach: wakeUpsSoFar + 1)  // that wake-up has ended
        #expect(watch.reports.values.isEmpty)
        sibling.cancel()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aThresholdTooLongToCountInNanosecondsMeansNever() async {
        // 300,000 years is more nanoseconds than UInt64 holds: the count wrapped, to 21 µs, and the
        // watchdog reported every job; beyond Int64 seconds, `Duration.components` trapped in `init`.
        // Both now saturate: such a watchdog reports nothing.
        _ = StallWatchdog(threshold: .seconds(Int64.max) * 10) { _ in }
        let job = HeldJob(name: "wd-vast-threshold")
        let queue = JobQueue(name: "wd-vast")
        queue.addJob(job)
        await job.started.wait()
        let watch = Watch(threshold: .seconds(9_463_179_709_813), interval: .milliseconds(1)) { $0 === job }
        watch.start()
        await watch.waitForWakeUps(20)
        #expect(watch.reports.values.isEmpty)
        watch.stop()
        job.finish()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test(.hangLimit)
    func aChildThatWaitsForItsGroupThroughAnotherJobIsReportedAsAWaitCycle() async throws {
        // Not refused (Concepts, the misuse table: `addDependency` refuses a child waiting for its
        // group directly, not through another job's edges): the child waits for the middle job,
        // which waits for the group to finish, and the group, executing, for its child.
        let queue = JobQueue(name: "wd-child-on-group-queue")
        let child = BlockJob {}
        child.name = "wd-child-on-group"
        let group = GroupJob(name: "wd-group-of-child", jobs: [child])
        let middle = BlockJob {}
        middle.name = "wd-between-child-and-group"
        try middle.addDependency(group)
        try child.addDependency(middle)
        let watch = Watch { $0 === group || $0 === child || $0 === middle }
        watch.start()
        queue.addJobs([group, middle], waitUntilFinished: false)

        var report = await watch.nextReport()
        while report.kind != .waitCycle {
            report = await watch.nextReport()
        }
        #expect(report.jobs.map(\.id) == [child.id, group.id, middle.id].sorted())
        watch.stop()
        group.cancel()  // cancels the child, which finishes; then the group, then the middle job
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test func aThresholdThatIsNotPositiveTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            _ = StallWatchdog(threshold: .zero) { _ in }
        }
        #expect(standardErrorText(result).contains("StallWatchdog(threshold:onStall:): the threshold must be positive"))
    }

    // Found by an audit on 2026-11-25.

    @Test(.hangLimit) func anAwaitInATaskAJobStartsIsNotTheJobsWait() async {
        // The task (`Task.immediate`, whose first part runs on the job's thread) awaits a job of
        // the same limit-1 queue while the job's work goes on: nothing is stuck. The await was
        // recorded as the job's own wait, and a waitCycle reported.
        // A serial worker: the blocked job's thread is one of its own, not a pool thread.
        let (queue, _) = makeJobQueueOnSerialWorker("immediate-await", limit: 1)
        let later = BlockJob {}
        later.name = "later"
        let taskWaits = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let job = BlockJob {
            // The task runs here until its first suspension, the await: once it returns, the wait
            // has begun (and was recorded, before the fix).
            Task.immediate { await later.waitUntilFinished() }
            taskWaits.signal()
            release.wait()  // the work goes on; its slot is freed when it returns
        }
        job.name = "spawner"
        let reports = Log<StallReport>()
        let (ticks, tick) = AsyncStream<Void>.makeStream()
        let watchdog = StallWatchdog(
            threshold: .seconds(3600), interval: .milliseconds(5), tickObserver: { tick.yield() }
        ) { report in
            if report.jobs.contains(where: { $0 === job || $0 === later }) { reports.append(report) }
        }
        queue.addJobs([job, later], waitUntilFinished: false)
        await waitForSignals(taskWaits)
        #expect(job.explain().contains("its work is blocked in") == false, "\(job.explain())")
        watchdog.start()
        var seen = 0
        for await _ in ticks {
            seen += 1
            if seen == 3 { break }
        }
        watchdog.stop()
        release.signal()
        await queue.waitUntilAllJobsAreFinished()
        #expect(reports.values.isEmpty, "\(reports.values.map(\.description))")
    }

    @Test(.hangLimit) func anAwaitInATaskJobsBodyIsStillTheJobsWait() async {
        // The body's own task: its wait for a job that needs its slot is a cycle.
        let queue = JobQueue(name: "taskjob-await", maxConcurrentJobCount: 1)
        let later = BlockJob {}
        later.name = "later"
        let job = TaskJob { await later.waitUntilFinished() }
        job.name = "awaiter"
        let (reports, report) = AsyncStream<StallReport>.makeStream()
        let watchdog = StallWatchdog(threshold: .seconds(3600), interval: .milliseconds(5), tickObserver: nil) {
            if $0.jobs.contains(where: { $0 === job }) { report.yield($0) }
        }
        queue.addJobs([job, later], waitUntilFinished: false)
        while later._pendingWaitCount == 0 { await Task.yield() }
        #expect(job.explain().contains("its work is blocked in waitUntilFinished() on 'later'"), "\(job.explain())")
        watchdog.start()
        var first: StallReport?
        for await stall in reports {
            first = stall
            break
        }
        watchdog.stop()
        later.cancel()
        await queue.waitUntilAllJobsAreFinished()
        #expect(first?.kind == .waitCycle)
    }

    @Test func aBarrierNeedsTheBarrierBeforeItAndNotTheWholeQueueAgain() async {
        // A job blocked waiting for a queue needs all its jobs, barriers included; each barrier not
        // yet admitted walked every job of the queue again: a review measured 19 s for one
        // wake-up with 4,000 barriers and 36,000 jobs. Now the wait walks the queue, and so does
        // its first barrier, for the jobs admitted before it; the others need the one before them.
        let queue = JobQueue(name: "many-barriers")
        let holder = HeldJob(name: "holder")
        queue.addJob(holder)
        await holder.started.wait()
        for _ in 0..<4 {
            queue.addBarrierBlock {}
            queue.addJob(BlockJob {})
        }
        let waiter = BlockJob { queue.waitUntilAllJobsAreFinished() }
        makeJobQueueOnSerialWorker("many-barriers-waiter").0.addJob(waiter)
        while queue._pendingWaitCount == 0 { await Task.yield() }
        let walks = StallWatchdog._queueWalksBuildingTheWaitGraph(from: waiter)
        holder.finish()
        await waiter.waitUntilFinished()
        #expect(walks == 2)
    }

    @Test func jobsBlockedWaitingForOneQueueNeedItsJobsOnceForAll() async {
        // Each job blocked in waitUntilAllJobsAreFinished() needed every job of the queue: a
        // review measured 5.4 s for one wake-up with 1,000 waiters on a queue of 20,000 jobs.
        let queue = JobQueue(name: "waited-for-by-many")
        let holder = HeldJob(name: "holder")
        queue.addJob(holder)
        await holder.started.wait()
        let waiters = (0..<3).map { _ in BlockJob { queue.waitUntilAllJobsAreFinished() } }
        for (number, waiter) in waiters.enumerated() {
            // A serial worker each: a thread of its own at once, not a pool thread that blocks.
            makeJobQueueOnSerialWorker("waiting-for-many-\(number)").0.addJob(waiter)
        }
        while queue._pendingWaitCount < 3 { await Task.yield() }
        let walks = StallWatchdog._queueWalksBuildingTheWaitGraph(from: waiters[0], waiters[1], waiters[2])
        holder.finish()
        for waiter in waiters {
            await waiter.waitUntilFinished()
        }
        #expect(walks == 1)
    }

    @Test(.hangLimit) func aWaitForAQueueWhoseJobNeedsTheWaitersSlotIsReportedAsAWaitCycle() async {
        // `waiter` holds the only slot of `first` and waits for `second`, whose job depends on a
        // job of `first`, which needs that slot.
        let (first, _) = makeJobQueueOnSerialWorker("cycle-first", limit: 1)
        let second = JobQueue(name: "cycle-second")
        let needsTheSlot = BlockJob {}
        needsTheSlot.name = "needs the slot"
        let dependent = BlockJob {}
        dependent.name = "dependent"
        try? dependent.addDependency(needsTheSlot)
        second.addJob(dependent)
        let waiting = DispatchSemaphore(value: 0)
        let waiter = BlockJob {
            waiting.signal()
            second.waitUntilAllJobsAreFinished()
        }
        waiter.name = "waiter"
        first.addJobs([waiter, needsTheSlot], waitUntilFinished: false)
        await waitForSignals(waiting)
        while second._pendingWaitCount == 0 { await Task.yield() }
        let (reports, report) = AsyncStream<StallReport>.makeStream()
        let watchdog = StallWatchdog(threshold: .seconds(3600), interval: .milliseconds(5), tickObserver: nil) {
            report.yield($0)
        }
        watchdog.start()
        var found: StallReport?
        for await stall in reports where stall.jobs.contains(where: { $0 === waiter }) {
            found = stall
            break
        }
        watchdog.stop()
        needsTheSlot.cancel()
        await first.waitUntilAllJobsAreFinished()
        await second.waitUntilAllJobsAreFinished()
        #expect(found?.kind == .waitCycle)
        #expect(Set(found?.jobs.map(\.name) ?? []) == ["waiter", "needs the slot", "dependent"])
    }

    @Test func aWakeUpListsAFullQueuesExecutingJobsOnceForAllItsReadyJobs() async {
        // Each ready job of a full queue needs the queue's executing jobs; listing them walks the
        // queue's members. Each ready child of this group listed them again: a wake-up walked
        // 4,096 times the group's children under the engine lock (seconds, for 40,000 children).
        let gate = HeldJob(name: "gate")
        let group = GroupJob(
            name: "wide group", maxConcurrentJobCount: 1, jobs: [gate] + (0..<2_000).map { _ in BlockJob {} })
        let queue = JobQueue(name: "wide-group")
        queue.addJob(group)
        await gate.started.wait()
        let lists = StallWatchdog._queueWalksBuildingTheWaitGraph(from: group)
        gate.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(lists == 1)
    }
}

/// An identifier of the calling thread.
private func currentThreadID() -> UInt {
    #if canImport(Glibc)
        UInt(pthread_self())  // An integer in glibc.
    #else
        UInt(bitPattern: pthread_self())  // A pointer in Darwin.
    #endif
}

/// A condition that is always met, whose name, asked for the first time on the thread `thread`
/// names, signals `entered` and waits for `release`. Asked on another thread, it answers at once.
private final class BlockingNameCondition: JobCondition, Sendable {
    private let thread: Locked<UInt?>
    private let entered: DispatchSemaphore
    private let release: DispatchSemaphore
    private let asked = Counter()

    init(on thread: Locked<UInt?>, entered: DispatchSemaphore, release: DispatchSemaphore) {
        self.thread = thread
        self.entered = entered
        self.release = release
    }

    var name: String {
        if thread.withLock({ $0 }) == currentThreadID(), asked.increment() == 1 {
            entered.signal()
            release.wait()
        }
        return "wd-blocking-name"
    }

    func evaluate(for job: Job) async throws -> Bool { true }
}
