import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Descriptions and explanations (Docs/Diagnostics.md): every reason a job waits is named with its
// keyword and what it waits for. Each situation is built deterministically: jobs the test holds
// executing (`HeldJob`), suspended queues, and categories held by a job the test controls.

private struct Unreachable: Error, CustomStringConvertible {
    var description: String { "host unreachable" }
}

/// A job whose work fails.
// @unchecked Sendable: no state of its own.
private final class FailingJob: Job, @unchecked Sendable {
    override func execute() throws { throw Unreachable() }
}

@Suite struct DiagnosticsTests {
    /// A mirror shows what the public API reads, taken under the engine lock, not the stored
    /// properties: a default mirror read those unlocked and followed the links the engine holds
    /// unretained (a job's neighbours on its queue, stale entries of the ready line), so `dump(_:)`
    /// walked the whole queue, and a failed `#expect` naming a queue could crash on a freed job.
    @Test func aJobAndAQueueReflectAsTheirPublicStateNotTheirStoredProperties() async {
        let queue = JobQueue(name: "diag-mirror", maxConcurrentJobCount: 2)
        queue.isSuspended = true
        let jobs = (0..<3).map { index in
            let job = BlockJob {}
            job.name = "mirror-\(index)"
            return job
        }
        queue.addJobs(jobs, waitUntilFinished: false)
        jobs[2].cancel()

        let jobMirror = Mirror(reflecting: jobs[1])
        #expect(jobMirror.children.map(\.label) == ["id", "name", "state", "isCancelled", "outcome"])
        #expect(jobMirror.superclassMirror == nil && jobMirror.displayStyle == .class)
        var dumped = ""
        dump(jobs[1], to: &dumped)
        #expect(dumped.contains("mirror-1") && dumped.contains("ready"))
        #expect(!dumped.contains("mirror-0") && !dumped.contains("mirror-2") && !dumped.contains("_next"))
        var cancelled = ""
        dump(jobs[2], to: &cancelled)
        #expect(cancelled.contains("isCancelled: true") && cancelled.contains("finished"))

        let queueMirror = Mirror(reflecting: queue)
        #expect(queueMirror.children.map(\.label) == ["name", "maxConcurrentJobCount", "isSuspended", "jobCount"])
        var dumpedQueue = ""
        dump(queue, to: &dumpedQueue)
        #expect(dumpedQueue.contains("jobCount: 2") && dumpedQueue.contains("isSuspended: true"))
        #expect(!dumpedQueue.contains("mirror-") && !dumpedQueue.contains("_ready"))
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
    }

    /// The other public classes whose state the engine guards reflect as their public state too: a
    /// tracer's default mirror read its event buffers unlocked while jobs were traced, and crashed.
    @Test func progressTracersAndWatchdogsReflectAsTheirPublicState() {
        let progress = BlockJob {}.progress
        #expect(
            Mirror(reflecting: progress).children.map(\.label)
                == ["totalUnitCount", "completedUnitCount", "fractionCompleted"])
        let tracer = JobTracer(capacity: 8)
        tracer.start()
        var dumped = ""
        dump(tracer, to: &dumped)
        tracer.stop()
        #expect(dumped.contains("capacity: 8") && dumped.contains("isRecording: true"), "\(dumped)")
        #expect(Mirror(reflecting: tracer).children.map(\.label) == ["capacity", "isRecording"])
        let watchdog = StallWatchdog(threshold: .seconds(60)) { _ in }
        #expect(Mirror(reflecting: watchdog).children.map(\.label) == ["threshold", "isRunning"])
    }

    @Test func aDescriptionNamesTheJobStateQueuePriorityAndReason() async {
        let loose = BlockJob {}
        #expect(loose.description == "BlockJob#\(loose.id): ready (not on a queue), priority normal")

        let queue = JobQueue(name: "diag-describe")
        queue.isSuspended = true
        let job = BlockJob {}
        job.name = "fetch"
        job.queuePriority = .high
        queue.addJob(job)
        #expect(job.description == "fetch: ready (suspended queue) on 'diag-describe', priority high")
        #expect(job.debugDescription.hasPrefix("BlockJob#\(job.id) 'fetch' is ready on queue 'diag-describe'"))
        expectText(
            job.explain(),
            contains: ["- suspended: queue 'diag-describe' is suspended; set isSuspended to false to resume it"])
        #expect(
            queue.description
                == "diag-describe: default limit \(JobQueue.systemDefaultWidth), 0 executing, 1 ready, 0 waiting, suspended"
        )

        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(job.description == "fetch: finished (succeeded), priority high")

        let cancelled = BlockJob {}
        cancelled.cancel(reason: CancellationReason(code: .requested, detail: "gave up"))
        #expect(cancelled.description.hasSuffix(": finished (cancelled (requested)), priority normal"))
        #expect(cancelled.explain().hasSuffix("is finished, priority normal: cancelled (requested: gave up)."))
    }

    @Test func aFailedJobExplainsItsError() async {
        let queue = JobQueue(name: "diag-failed")
        let job = FailingJob()
        job.name = "ping"
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(job.description == "ping: finished (failed), priority normal")
        #expect(job.explain() == "'ping' is finished, priority normal: failed: host unreachable.")
    }

    @Test func aDependencyChainIsFollowedAcrossQueuesToTheJobThatHoldsItUp() async {
        let front = JobQueue(name: "diag-front")
        let middle = JobQueue(name: "diag-middle")
        let back = JobQueue(name: "diag-back")
        let download = HeldJob(name: "download")
        let parse = BlockJob {}
        parse.name = "parse"
        let report = BlockJob {}
        report.name = "report"
        let done = BlockJob {}
        done.name = "done"
        try! parse.addDependency(download)
        try! report.addDependency(parse)
        try! report.addDependency(done)
        front.addJob(done)
        await done.waitUntilFinished()
        back.addJob(download)
        middle.addJob(parse)
        front.addJob(report)
        await download.started.wait()

        #expect(report.description == "report: pending (dependency 'parse') on 'diag-front', priority normal")
        expectText(
            report.explain(),
            contains: [
                "'report' is pending on queue 'diag-front', priority normal. It is not running because:",
                "- dependency: it waits for 1 unfinished dependency of 2:",
                "'parse' pending (dependency 'download') on 'diag-middle' → 'download' executing for ",
                "on 'diag-back', until finish()",
            ])
        expectText(
            download.explain(),
            contains: [
                "'download' is executing on queue 'diag-back' for ",
                "- finish(): its work has not signalled its end",
            ])
        download.finish()
        await report.waitUntilFinished()
        #expect(report.explain() == "'report' is finished, priority normal: succeeded.")
    }

    @Test(.hangLimit)
    func aConditionBeingEvaluatedIsNamed() async {
        let queue = JobQueue(name: "diag-condition")
        let evaluating = Signal()
        let job = BlockJob {}
        job.name = "sync"
        job.addCondition(
            BlockCondition(name: "logged in") { _ in
                evaluating.fire()
                try await Task.sleep(for: .seconds(3600))
                return true
            })
        queue.addJob(job)
        await evaluating.wait()
        #expect(job.description == "sync: pending (condition being evaluated) on 'diag-condition', priority normal")
        expectText(job.explain(), contains: ["- condition: 'logged in': being evaluated"])
        job.cancel()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test func aConditionWaitingForDependenciesSaysSo() {
        let dependency = BlockJob {}
        dependency.name = "login"
        let job = BlockJob {}
        job.addCondition(BlockCondition(name: "logged in") { _ in true })
        try! job.addDependency(dependency)
        expectText(
            job.explain(),
            contains: [
                "- dependency: it waits for 1 unfinished dependency of 1:\n      'login' ready (not on a queue)",
                "- condition: 'logged in': evaluated once its dependencies have finished",
            ])
    }

    @Test func theJobHoldingACategoryIsNamedAcrossQueues() async {
        let category = "diag-category-\(UInt64.random(in: 0...UInt64.max))"
        let holderQueue = JobQueue(name: "diag-holder")
        let waiterQueue = JobQueue(name: "diag-waiter", maxConcurrentJobCount: 1)
        let holder = HeldJob(name: "holder")
        holder.exclusivityCategories = [category]
        holderQueue.addJob(holder)
        await holder.started.wait()

        let waiter = BlockJob {}
        waiter.name = "waiter"
        waiter.exclusivityCategories = [category]
        // On a limit-1 queue, `after` starts only once the waiter was claimed and left its slot to
        // wait in line for the category.
        let after = BlockJob {}
        waiterQueue.addJobs([waiter, after], waitUntilFinished: false)
        await after.waitUntilFinished()

        #expect(
            waiter.description
                == "waiter: pending (category '\(category)' held by 'holder') on 'diag-waiter', priority normal")
        expectText(
            waiter.explain(),
            contains: [
                "- category: '\(category)' is held by 'holder' (executing for ", "on 'diag-holder', until finish())",
            ])
        holder.finish()
        await waiterQueue.waitUntilAllJobsAreFinished()
    }

    @Test func aFullLimitListsTheExecutingJobs() async {
        let queue = JobQueue(name: "diag-limit", maxConcurrentJobCount: 1)
        let holder = HeldJob(name: "holder")
        queue.addJob(holder)
        await holder.started.wait()
        let next = BlockJob {}
        next.name = "next"
        queue.addJob(next)

        #expect(next.description == "next: ready (limit: 1 of 1 slots taken) on 'diag-limit', priority normal")
        expectText(
            next.explain(),
            contains: ["- limit: the only slot of queue 'diag-limit' is taken by 1 executing job: 'holder' for "])
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test func aBarrierAndTheJobsBehindItAreExplained() async {
        let queue = JobQueue(name: "diag-barrier")
        let holder = HeldJob(name: "holder")
        queue.addJob(holder)
        await holder.started.wait()
        queue.addBarrierBlock {}
        let later = BlockJob {}
        later.name = "later"
        queue.addJob(later)

        expectText(later.explain(), contains: ["- barrier: it was added after barrier 'barrier#"])
        #expect(later.description.hasPrefix("later: ready (barrier 'barrier#"))
        let queueText = queue.explain()
        expectText(
            queueText,
            contains: [
                "Queue 'diag-barrier': default limit", "Executing (1):\n  - 'holder' executing for ",
                "Waiting (2), by reason:\n  - barrier (2): 'barrier#",
                "(barrier waiting for 1 earlier job), 'later' (barrier 'barrier#",
            ])
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test func aPendingJobsDescriptionNamesItsFirstUnfinishedDependencyAndCountsTheRest() async throws {
        let queue = JobQueue(name: "diag-dependencies")
        let done = BlockJob {}
        done.name = "done"
        queue.addJob(done)
        await done.waitUntilFinished()
        let report = BlockJob {}
        report.name = "report"
        try report.addDependency(done)
        for name in ["parse", "fetch", "sort"] {
            let dependency = BlockJob {}
            dependency.name = name
            try report.addDependency(dependency)
        }
        #expect(report.description == "report: pending (dependency 'parse' and 2 more), priority normal")
        expectText(report.explain(), contains: ["it waits for 3 unfinished dependencies of 4:"])
    }

    @Test func aBarrierCountsTheJobsBeforeItInWords() async {
        let queue = JobQueue(name: "diag-barrier-count")
        let holders = [HeldJob(name: "first"), HeldJob(name: "second")]
        queue.addJobs(holders, waitUntilFinished: false)
        for holder in holders { await holder.started.wait() }
        queue.addBarrierBlock {}
        expectText(queue.explain(), contains: ["(barrier waiting for 2 earlier jobs)"])
        holders[0].finish()
        await holders[0].waitUntilFinished()
        expectText(queue.explain(), contains: ["(barrier waiting for 1 earlier job)"])
        holders[1].finish()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test func aChildOfAnUnstartedGroupNamesTheGroup() async {
        let child = BlockJob {}
        child.name = "child"
        let group = GroupJob(name: "diag-group", jobs: [child])
        expectText(
            child.explain(),
            contains: [
                "'child' is ready on queue 'diag-group.children'",
                "- group: its group 'diag-group' has not started (ready (not on a queue))",
            ])
        #expect(
            child.description
                == "child: ready (group 'diag-group' has not started) on 'diag-group.children', priority normal")

        let queue = JobQueue(name: "diag-group-queue")
        queue.addJob(group)
        await group.waitUntilFinished()
        #expect(child.isFinished)
    }

    @Test func anExecutingGroupNamesItsUnfinishedChildren() async {
        let child = HeldJob(name: "child")
        let group = GroupJob(name: "diag-running-group", jobs: [child])
        let queue = JobQueue(name: "diag-running-group-queue")
        queue.addJob(group)
        await child.started.wait()
        expectText(
            group.explain(),
            contains: [
                "'diag-running-group' is executing on queue 'diag-running-group-queue'",
                "- group: it waits for 1 unfinished child on 'diag-running-group.children'",
                "'child' executing for ",
            ])
        child.finish()
        await group.waitUntilFinished()
    }

    @Test func aQueueExplainsItsJobsByStateAndReason() async {
        let queue = JobQueue(name: "diag-queue", maxConcurrentJobCount: 1)
        let holder = HeldJob(name: "holder")
        queue.addJob(holder)
        await holder.started.wait()
        let high = BlockJob {}
        high.name = "urgent"
        high.queuePriority = .high
        let normal = BlockJob {}
        normal.name = "routine"
        let blocked = BlockJob {}
        blocked.name = "blocked"
        try! blocked.addDependency(normal)
        queue.addJobs([normal, high, blocked], waitUntilFinished: false)

        #expect(queue.description == "diag-queue: limit 1, 1 executing, 2 ready, 1 waiting")
        #expect(
            timesHidden(queue.explain()) == """
                Queue 'diag-queue': limit 1, 1 executing, 2 ready, 1 waiting.
                Executing (1):
                  - 'holder' executing for T, until finish()
                Ready (2), in the order they will start:
                  - high: 'urgent'
                  - normal: 'routine'
                  They wait: limit: the only slot of queue 'diag-queue' is taken by 1 executing job: 'holder' for T
                Waiting (1), by reason:
                  - dependency (1): 'blocked' (dependency 'routine')
                """)
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
    }

    @Test func aBarrierIsSaidToWaitForTheBarrierBeforeIt() async {
        let queue = JobQueue(name: "third-barrier")
        let holder = HeldJob(name: "holder")
        queue.addJob(holder)
        await holder.started.wait()
        for _ in 0..<3 { queue.addBarrierBlock {} }
        let members = queue.jobs
        let (second, third) = (members[2].displayName, members[3].explain())
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(third.contains("it was added after barrier '\(second)'"), "\(third)")
    }

    @Test func aJobAddedAfterTheSecondBarrierIsSaidToWaitForIt() async {
        // Found by an audit on 2026-11-25: explain(), the description and the DOT label named the
        // queue's first barrier for every held job.
        let queue = JobQueue(name: "second-barrier")
        let holder = HeldJob(name: "holder")
        queue.addJob(holder)
        await holder.started.wait()
        queue.addBarrierBlock {}
        let middle = BlockJob {}
        queue.addJob(middle)
        queue.addBarrierBlock {}
        let late = BlockJob {}
        late.name = "late"
        queue.addJob(late)
        let members = queue.jobs
        let (firstBarrier, secondBarrier) = (members[1].displayName, members[3].displayName)
        let (explanation, description, dot) = (late.explain(), late.description, queue.dotGraph())
        let middleExplanation = middle.explain()
        holder.finish()
        await queue.waitUntilAllJobsAreFinished()
        #expect(explanation.contains("it was added after barrier '\(secondBarrier)'"), "\(explanation)")
        #expect(description.contains("barrier '\(secondBarrier)'"), "\(description)")
        #expect(dot.contains(#"late\nready · normal\nbarrier '"# + secondBarrier + "'"), "\(dot)")
        #expect(middleExplanation.contains("it was added after barrier '\(firstBarrier)'"), "\(middleExplanation)")
    }
}

/// `text` with every running time ("for 4 ms", "for 2.5 s", "for 5 min 12 s", "for 2 h 3 min")
/// replaced by "for T": the times vary.
private func timesHidden(_ text: String) -> String {
    text.replacing(/for [0-9]+(\.[0-9]+)? (ms|s|min [0-9]+ s|h [0-9]+ min)/, with: "for T")
}
