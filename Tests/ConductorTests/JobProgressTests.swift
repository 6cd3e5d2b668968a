import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// JobProgress: a job's, a group's and a queue's (Docs/Composition.md, "Progress").

/// Reads `progress.fractionCompleted` after every change it reports, one reading at a time on a
/// serial Dispatch queue (so the readings are ordered in time), and records every time it went down.
/// No thread spins or blocks: Dispatch's pool is small here and shared with the other tests.
private final class FractionWatch: Sendable {
    private let serial = DispatchQueue(label: "JobProgressTests.FractionWatch")
    private let last = Log<Double>()
    let drops = Log<String>()

    init(_ progress: JobProgress) {
        progress.observe { [self] progress in
            serial.async { [self] in
                let now = progress.fractionCompleted
                if let previous = last.values.last, now < previous { drops.append("\(previous) → \(now)") }
                last.append(now)
            }
        }
    }

    /// Waits until every reading already requested has been made.
    func drain() async {
        await withCheckedContinuation { continuation in serial.async { continuation.resume() } }
    }

    var readings: Int { last.count }
}

/// A condition whose generated dependency is `login`, and which then holds.
private struct LoginCondition: JobCondition {
    let login: Job
    var name: String { "logged in" }
    func dependency(for job: Job) -> Job? { login }
    func evaluate(for job: Job) async throws -> Bool { true }
}

@Suite struct JobProgressTests {
    @Test func aJobIsOneUnitCompletedWhenItFinishes() async {
        let job = BlockJob {}
        #expect(job.progress.totalUnitCount == 1 && job.progress.completedUnitCount == 0)
        #expect(job.progress.fractionCompleted == 0)
        let queue = JobQueue(name: "progress-one-unit")
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(job.progress.fractionCompleted == 1.0)
        #expect(job.progress.totalUnitCount == 1 && job.progress.completedUnitCount == 1)
    }

    @Test func anAsynchronousJobsUnitStaysOpenAfterExecuteReturnsUntilFinish() async {
        let readings = Log<Double>()
        let bodyDone = DispatchSemaphore(value: 0)
        let job = AsyncBlockJob { job in
            let progress = job.progress
            DispatchQueue.global().async {
                bodyDone.wait()  // the body has reached its end
                readings.append(progress.fractionCompleted)
                job.finish()
                readings.append(progress.fractionCompleted)
            }
            bodyDone.signal()
        }
        let queue = JobQueue(name: "progress-async")
        queue.addJob(job)
        await job.waitUntilFinished()
        #expect(readings.values == [0, 1.0])
    }

    @Test func aJobReportsItsOwnStepsAndEndsCompleteWhateverItReached() async {
        let seen = Log<Int64>()
        let job = AsyncBlockJob { job in
            job.progress.totalUnitCount = 10
            for step in 1...4 { job.progress.completedUnitCount = Int64(step) }
            job.finish()  // at 4 of 10: finishing completes it
        }
        let progress = job.progress
        progress.observe { seen.append($0.completedUnitCount) }
        let queue = JobQueue(name: "progress-steps")
        queue.addJob(job)
        await queue.waitUntilAllJobsAreFinished()
        #expect(progress.totalUnitCount == 10 && progress.completedUnitCount == 10)
        #expect(progress.fractionCompleted == 1.0)
        #expect(seen.values.last == 10)
        progress.completedUnitCount = 3  // after finishing: no effect
        #expect(progress.completedUnitCount == 10)
    }

    @Test func aQueuesProgressReachesExactlyOneAndNeverGoesBackWhileItsTotalIsFixed() async {
        let queue = JobQueue(name: "progress-queue", maxConcurrentJobCount: 4)
        queue.isSuspended = true
        let progress = queue.progress
        var expectedTotal: Int64 = 0
        for index in 0..<2_000 {
            let job: Job
            let units: Int64 = index % 4 == 0 ? 5 : 1
            if index % 4 == 0 {
                // Five units, advanced from its work; the total is set before it is added.
                let stepped = BlockJob {}
                stepped.progress.totalUnitCount = 5
                stepped.addExecutionBlock { for step in 1...5 { stepped.progress.completedUnitCount = Int64(step) } }
                job = stepped
            } else if index % 4 == 1 {
                let asynchronous = AsyncBlockJob { job in DispatchQueue.global().async { job.finish() } }
                job = asynchronous
            } else {
                job = BlockJob {}
            }
            if index % 97 == 0 {
                job.cancel()  // finished before it is added: not counted
            } else {
                expectedTotal += units
            }
            queue.addJob(job)
        }
        #expect(progress.totalUnitCount == expectedTotal)
        let total = progress.totalUnitCount
        let watch = FractionWatch(progress)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        await watch.drain()
        #expect(watch.drops.values.isEmpty)
        #expect(watch.readings > 0)
        #expect(progress.totalUnitCount == total)
        #expect(progress.completedUnitCount == total)
        #expect(progress.fractionCompleted == 1.0)
    }

    @Test func addingAJobToAnIdleQueueStartsANewCount() async {
        let queue = JobQueue(name: "progress-new-count")
        queue.addJobs([BlockJob {}, BlockJob {}, BlockJob {}], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        // Asked for only now: the three jobs of this count finished already, as units.
        let progress = queue.progress
        #expect(progress.totalUnitCount == 3 && progress.completedUnitCount == 3)
        queue.isSuspended = true
        queue.addJob(BlockJob {})
        #expect(progress.totalUnitCount == 1 && progress.completedUnitCount == 0)
        queue.addJob(BlockJob {})
        #expect(progress.totalUnitCount == 2 && progress.fractionCompleted == 0)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(progress.fractionCompleted == 1.0)
    }

    @Test func aJobAskedForItsProgressOnAQueueCountsWithItsUnits() async {
        let queue = JobQueue(name: "progress-late-job")
        queue.isSuspended = true
        let job = BlockJob {}
        queue.addJob(job)
        let queueProgress = queue.progress
        job.progress.totalUnitCount = 4  // the queue counted it as one unit; now four
        #expect(queueProgress.totalUnitCount == 4)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(queueProgress.completedUnitCount == 4 && queueProgress.fractionCompleted == 1.0)
    }

    @Test func aGroupWeighsItsChildrenByTheirTotals() async {
        let release = Signal()
        let big = AsyncBlockJob { job in
            job.progress.completedUnitCount = 2
            Task {
                await release.wait()
                job.finish()
            }
        }
        big.progress.totalUnitCount = 6
        let small = BlockJob {}
        let group = GroupJob(name: "weighted", maxConcurrentJobCount: 2, jobs: [big, small])
        #expect(group.progress.totalUnitCount == 7 && group.progress.completedUnitCount == 0)
        let produced = Log<Int64>()
        let producer = BlockJob {}
        producer.addExecutionBlock { producer.produce(BlockJob {}) }
        group.addChild(producer)
        let queue = JobQueue(name: "progress-group")
        let queueProgress = queue.progress
        let reachedThree = Signal()
        group.progress.observe { progress in
            produced.append(progress.completedUnitCount)
            if progress.completedUnitCount >= 3 { reachedThree.fire() }
        }
        queue.addJob(group)
        await reachedThree.wait()  // big at 2 of 6, small done; the producer may be too
        #expect(group.progress.completedUnitCount >= 3 && group.progress.fractionCompleted < 1)
        release.fire()
        await group.waitUntilFinished()
        // big 6 + small 1 + producer 1 + the job it produced 1.
        #expect(group.progress.totalUnitCount == 9 && group.progress.completedUnitCount == 9)
        #expect(queueProgress.totalUnitCount == 9 && queueProgress.fractionCompleted == 1.0)
    }

    @Test func cancelledJobsAndAnEmptyGroupComplete() async {
        let queue = JobQueue(name: "progress-cancelled")
        queue.isSuspended = true
        let progress = queue.progress
        let cancelled = BlockJob {}
        let empty = GroupJob(name: "empty")
        queue.addJobs([cancelled, empty], waitUntilFinished: false)
        cancelled.cancel()
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(cancelled.progress.fractionCompleted == 1.0)
        #expect(empty.progress.fractionCompleted == 1.0)
        #expect(progress.fractionCompleted == 1.0)
    }

    @Test func observersRunOutsideTheEngineWithNoWorkerContextAndCanBeRemoved() async {
        let calls = Counter()
        let contexts = Log<String>()
        let called = Signal()
        let job = BlockJob {}
        let progress = job.progress
        let token = progress.observe { progress in
            calls.increment()
            // Reading the job's state from an observer takes the engine lock: not held here.
            contexts.append("\(JobQueue.current == nil) \(job.state) \(progress.fractionCompleted)")
            called.fire()
        }
        let queue = JobQueue(name: "progress-observer")
        queue.addJob(job)
        // Observers are not ordered against waiters: wait for the call itself.
        await called.wait()
        await queue.waitUntilAllJobsAreFinished()
        #expect(calls.value == 1, "\(contexts.values)")
        #expect(contexts.values == ["true finished 1.0"])
        progress.removeObserver(token)
        let other = BlockJob {}
        let otherProgress = other.progress
        let removed = otherProgress.observe { _ in calls.increment() }
        otherProgress.removeObserver(removed)
        other.progress.totalUnitCount = 3  // reported on this thread, before the setter returns
        #expect(calls.value == 1)
    }

    @Test func aGroupCancelledBeforeItStartsCountsEachChildOnce() async {
        let queue = JobQueue(name: "progress-group-cancelled")
        queue.isSuspended = true
        let progress = queue.progress
        let group = GroupJob(name: "cancelled early", jobs: [BlockJob {}, BlockJob {}])
        queue.addJobs([group, BlockJob {}], waitUntilFinished: false)
        #expect(progress.totalUnitCount == 3 && progress.completedUnitCount == 0)
        group.cancel()  // finishes the group, and its children, in one step
        #expect(progress.totalUnitCount == 3 && progress.completedUnitCount == 2)
        #expect(group.progress.totalUnitCount == 2 && group.progress.completedUnitCount == 2)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(progress.totalUnitCount == 3 && progress.completedUnitCount == 3)
    }

    @Test func aChildAskingForItsQueuesProgressStillCountsInItsGroup() async {
        let seen = Log<Int64>()
        let groupBox = Locked<GroupJob?>(nil)
        let first = BlockJob { _ = JobQueue.current?.progress }  // the group's queue of children
        let second = AsyncBlockJob { job in
            seen.append(groupBox.withLock { $0 }?.progress.completedUnitCount ?? -1)
            job.finish()
        }
        let group = GroupJob(name: "counted", maxConcurrentJobCount: 1)
        groupBox.withLock { $0 = group }
        group.addChild(first)
        group.addChild(second)
        let queue = JobQueue(name: "progress-children-queue")
        queue.addJob(group)
        await group.waitUntilFinished()
        // While `second` ran, `first` had finished and counted in the group.
        #expect(seen.values == [1])
        #expect(group.progress.completedUnitCount == 2)
    }

    @Test(.hangLimit) func aFinishedJobsProgressReleasesItsObserversAfterTheLastReport() async {
        // The finishing thread lets go of the observers after the waiters resume: the test waits
        // for the release, while it still holds the job.
        let freed = Signal()
        var captured: Tracked? = Tracked(signal: freed)
        let weak = WeakReference(captured)
        let reports = Counter()
        let job = BlockJob {}
        job.progress.observe { [captured] _ in
            _ = captured
            reports.increment()
        }
        captured = nil
        let reported = Signal()
        job.progress.observe { _ in reported.fire() }
        let queue = JobQueue(name: "progress-observers-released")
        queue.addJob(job)
        await reported.wait()
        await queue.waitUntilAllJobsAreFinished()
        #expect(reports.value == 1)
        await freed.wait()
        #expect(weak.object == nil)
        // A finished progress never changes: observing it registers nothing.
        job.progress.observe { _ in reports.increment() }
        #expect(reports.value == 1)
    }

    @Test func aGroupAskedLateCountsItsFinishedChildrenWithTheirUnits() async {
        // Nobody asks for the group's progress until two children have finished: it is made then,
        // from what they counted as they finished (a total of 4, and one unit).
        let weighted = BlockJob {}
        weighted.progress.totalUnitCount = 4
        let plain = BlockJob {}
        let held = HeldJob(name: "held child")
        let group = GroupJob(name: "asked late", maxConcurrentJobCount: 1, jobs: [weighted, plain, held])
        JobQueue(name: "progress-asked-late").addJob(group)
        await held.started.wait()
        let progress = group.progress
        #expect(progress.totalUnitCount == 6 && progress.completedUnitCount == 5)
        held.finish()
        await group.waitUntilFinished()
        #expect(progress.totalUnitCount == 6 && progress.completedUnitCount == 6)
    }

    @Test func aQueueOrAGroupMadeToCountAGroupCountsItsChildren() async {
        // Neither group was asked for its progress: the outer one's, made when the queue's is,
        // counts the inner group's three children and the plain job beside them.
        let queue = JobQueue(name: "progress-nested")
        queue.isSuspended = true
        let inner = GroupJob(name: "inner", jobs: [BlockJob {}, BlockJob {}, BlockJob {}])
        let outer = GroupJob(name: "outer", maxConcurrentJobCount: 1, jobs: [inner, BlockJob {}])
        queue.addJobs([outer, BlockJob {}], waitUntilFinished: false)
        let progress = queue.progress
        #expect(progress.totalUnitCount == 5 && progress.completedUnitCount == 0)
        // A group added to a queue whose progress exists counts its children too.
        queue.addJob(GroupJob(name: "later", jobs: [BlockJob {}, BlockJob {}]))
        #expect(progress.totalUnitCount == 7)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(progress.totalUnitCount == 7 && progress.completedUnitCount == 7)
        #expect(outer.progress.totalUnitCount == 4 && inner.progress.totalUnitCount == 3)
    }

    @Test func theQueueOfChildrenCountsPlainUnitsWhenAChildAsksBeforeItsGroup() async {
        // The first child asks for its queue's progress (the group's queue of children) before
        // anyone asked for the group's: the group's is made first and takes the weighted child's
        // units, so the queue of children counts each child as one unit.
        let seen = Log<Int64>()
        let asker = BlockJob { seen.append(JobQueue.current?.progress.totalUnitCount ?? -1) }
        let weighted = HeldJob(name: "weighted")
        weighted.progress.totalUnitCount = 5
        let group = GroupJob(name: "asked from inside", maxConcurrentJobCount: 1, jobs: [asker, weighted])
        JobQueue(name: "progress-inside").addJob(group)
        await weighted.started.wait()
        #expect(seen.values == [2])
        #expect(group.progress.totalUnitCount == 6 && group.progress.completedUnitCount == 1)
        weighted.finish()
        await group.waitUntilFinished()
        #expect(group.progress.totalUnitCount == 6 && group.progress.completedUnitCount == 6)
    }

    @Test func aNestedGroupThatFinishedBeforeAnyoneAskedCountsItsChildren() async {
        // The inner group finishes before the outer group's progress is made; it counts its three
        // children, not one unit. A child that makes its own progress after its group's exists
        // counts in the group's with the total it sets.
        let inner = GroupJob(name: "inner", jobs: [BlockJob {}, BlockJob {}, BlockJob {}])
        let held = HeldJob(name: "held")
        let outer = GroupJob(name: "outer", maxConcurrentJobCount: 1, jobs: [inner, held])
        JobQueue(name: "progress-nested-finished").addJob(outer)
        await held.started.wait()
        let progress = outer.progress
        #expect(progress.totalUnitCount == 4 && progress.completedUnitCount == 3)
        #expect(inner.progress.totalUnitCount == 3 && inner.progress.completedUnitCount == 3)
        held.progress.totalUnitCount = 5
        #expect(progress.totalUnitCount == 8 && progress.completedUnitCount == 3)
        held.finish()
        await outer.waitUntilFinished()
        #expect(progress.totalUnitCount == 8 && progress.completedUnitCount == 8)
    }

    @Test func aCancelledGroupAddedAsAChildCountsItsChildren() async {
        let cancelled = GroupJob(name: "cancelled", jobs: [BlockJob {}, BlockJob {}])
        cancelled.cancel()
        let held = HeldJob(name: "held")
        let outer = GroupJob(name: "outer", jobs: [held])
        outer.addChild(cancelled)
        // Children given to the finished, cancelled group are cancelled, and count nowhere.
        cancelled.addChild(BlockJob {})
        cancelled.addChild(BlockJob {})
        #expect(cancelled.progress.totalUnitCount == 2 && cancelled.progress.completedUnitCount == 2)
        #expect(outer.progress.totalUnitCount == 3 && outer.progress.completedUnitCount == 2)
        JobQueue(name: "progress-cancelled-child").addJob(outer)
        await held.started.wait()
        held.finish()
        await outer.waitUntilFinished()
        #expect(outer.progress.totalUnitCount == 3 && outer.progress.completedUnitCount == 3)
    }

    @Test func aChildsGeneratedDependencyCountsInTheGroupAsAChild() async {
        // The login job runs on the group's queue of children, as the generated dependency of a
        // child's condition, and the group counts it as a child from the moment it joins (with the
        // child, here). Until 2026-11-26 it counted only in the queue of children.
        let login = BlockJob {}
        let child = BlockJob {}
        child.addCondition(LoginCondition(login: login))
        let group = GroupJob(name: "with login", jobs: [child])
        #expect(group.progress.totalUnitCount == 2 && group.progress.completedUnitCount == 0)
        let fractions = Log<Double>()
        child.observe { event in
            if case .finished = event { fractions.append(group.progress.fractionCompleted) }
        }
        JobQueue(name: "progress-login").addJob(group)
        await group.waitUntilFinished()
        #expect(login.isFinished && group.progress.totalUnitCount == 2)
        #expect(fractions.values == [1.0])
    }

    @Test func aJobCountsAtMostItsTotalTowardItsQueue() async {
        let queue = JobQueue(name: "progress-clamped", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let progress = queue.progress
        let seen = Log<Int64>()
        let eager = BlockJob {}
        eager.progress.totalUnitCount = 2
        eager.addExecutionBlock {
            eager.progress.completedUnitCount = 5  // more than its total
            seen.append(progress.completedUnitCount)
        }
        queue.addJobs([eager, BlockJob {}], waitUntilFinished: false)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(seen.values == [2])
        #expect(progress.totalUnitCount == 3 && progress.completedUnitCount == 3)
    }

    @Test func sumsPastInt64MaxStayExactAndReadAsInt64Max() async {
        // Children of Int64.max units each: their group's and their queue's sums go past Int64.max
        // (an arithmetic overflow crashed the process, without a message in release builds). They
        // read as Int64.max, and stay exact: lowering the children brings them back.
        let queue = JobQueue(name: "progress-vast", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let children = (0..<3).map { _ in
            let job = BlockJob {}
            job.progress.totalUnitCount = .max
            return job
        }
        let small = BlockJob {}
        small.progress.totalUnitCount = 1
        let group = GroupJob(name: "vast", jobs: children + [small])
        let groupProgress = group.progress
        #expect(groupProgress.totalUnitCount == .max)
        children[0].progress.completedUnitCount = .max
        #expect(groupProgress.completedUnitCount == .max && groupProgress.fractionCompleted < 1)
        small.progress.totalUnitCount = 5
        small.progress.totalUnitCount = 1
        for child in children { child.progress.totalUnitCount = 0 }
        // Exact: 0 + 0 + 0 + 1 units, none completed (the first child's completed units count up
        // to its total, now 0).
        #expect(groupProgress.totalUnitCount == 1 && groupProgress.completedUnitCount == 0)
        children[1].progress.totalUnitCount = .max
        let queueProgress = queue.progress
        queue.addJobs([group, BlockJob {}], waitUntilFinished: false)
        #expect(queueProgress.totalUnitCount == .max)
        #expect(queueProgress.completedUnitCount == 0 && queueProgress.fractionCompleted == 0)
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(groupProgress.fractionCompleted == 1 && queueProgress.fractionCompleted == 1)
    }
}
