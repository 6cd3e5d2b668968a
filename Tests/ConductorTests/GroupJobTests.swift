import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// GroupJob and Job.produce(_:) (Docs/Composition.md, "Groups and produced jobs").

private struct ChildError: Error, CustomStringConvertible {
    let label: String
    var description: String { label }
}

private func failing(_ label: String) -> Job {
    let job = ProbeJob { _ in throw ChildError(label: label) }
    job.name = label
    return job
}

/// A condition that generates `dependency` and is then met.
private struct GeneratesDependency: JobCondition {
    let dependency: Job
    init(_ dependency: Job) { self.dependency = dependency }
    var name: String { "generates '\(dependency.displayName)'" }
    func dependency(for job: Job) -> Job? { dependency }
    func evaluate(for job: Job) async throws -> Bool { true }
}

private func succeeded(_ job: Job) -> Bool {
    if case .succeeded? = job.outcome { true } else { false }
}

@Suite struct GroupJobTests {
    @Test func childrenRunWithTheGroupsLimitOnceItStartsAndItFinishesAfterAllOfThem() async throws {
        let queue = JobQueue(name: "groups")
        let inFlight = InFlight()
        let children = (0..<20).map { _ in
            AsyncBlockJob { job in
                inFlight.enter()
                DispatchQueue.global().async {
                    inFlight.leave()
                    job.finish()
                }
            }
        }
        let group = GroupJob(name: "batch", maxConcurrentJobCount: 2, jobs: children)
        let after = BlockJob {}
        try after.addDependency(group, policy: .requireSuccess)
        queue.isSuspended = true
        queue.addJobs([group, after], waitUntilFinished: false)
        #expect(inFlight.starts == 0)  // nothing runs before the group starts
        queue.isSuspended = false
        await group.waitUntilFinished()
        #expect(children.allSatisfy { $0.isFinished })
        #expect(inFlight.starts == 20 && inFlight.maximum <= 2)
        #expect(succeeded(group))
        await after.waitUntilFinished()
        #expect(succeeded(after))
    }

    @Test func theGroupFinishesAfterItsLastChildsObserversAndCompletionBlock() async {
        // Docs/Concepts.md: the finish that counts the group down to zero ends it after that
        // finish's callbacks, whatever order the observers were added in.
        let queue = JobQueue(name: "group-order")
        let log = Log<String>()
        let child = BlockJob { log.append("child ran") }
        child.observe { event in
            if event == .finished { log.append("child observer") }
        }
        child.completionBlock = { log.append("child completion") }
        let group = GroupJob(name: "ordered", jobs: [child])
        group.observe { event in
            if event == .finished { log.append("group finished") }
        }
        queue.addJob(group)
        await group.waitUntilFinished()
        #expect(log.values == ["child ran", "child observer", "child completion", "group finished"])
    }

    @Test func aLastChildFinishedFromItsOwnCancelledObserverIsToldBeforeItsGroupEnds() async {
        // The child's `.finished` is delivered after its `.cancelled` observer returns, by the
        // delivery already running; the group ends at the end of that delivery, not inside the
        // observer.
        let queue = JobQueue(name: "nested-finish")
        let log = Log<String>()
        let started = Signal()
        let child = AsyncBlockJob { _ in started.fire() }
        child.observe { event in
            if event == .cancelled { child.finish() }
            if event == .finished { log.append("child finished") }
        }
        let group = GroupJob(name: "ended-after", jobs: [child])
        group.observe { event in
            if event == .finished { log.append("group finished") }
        }
        queue.addJob(group)
        await started.wait()
        child.cancel()
        await group.waitUntilFinished()
        #expect(log.values == ["child finished", "group finished"])
    }

    @Test func aFinishedChildHandedToAnotherGroupStillCountsInItsFirstGroup() async {
        let queue = JobQueue(name: "two-groups")
        let child = HeldJob(name: "held child")
        let inCompletion = Signal()
        let release = DispatchSemaphore(value: 0)
        child.completionBlock = {
            inCompletion.fire()
            release.wait()
        }
        let first = GroupJob(name: "first", jobs: [child])
        let second = GroupJob(name: "second")
        queue.addJob(first)
        await child.started.wait()
        let finished = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            child.finish()
            finished.signal()
        }
        // The child has finished and left its queue, but has not counted its group down: its
        // completion block is running. Another group may take it now, as a finished child, and
        // becomes its parent; the count-down must still go to the group that counts it.
        await inCompletion.wait()
        second.addChild(child)
        release.signal()
        // The first group ends in the child's delivery, before `finish()` returns on that thread.
        await waitForSignals(finished)
        #expect(first.isFinished && succeeded(first))
        #expect(!second.isFinished)
    }

    @Test func aGroupStartedByHandAndLetGoLivesUntilItsChildrenFinish() async {
        let child = HeldJob(name: "held child")
        let completed = DispatchSemaphore(value: 0)
        let weakGroup: WeakReference<GroupJob>
        do {
            let group = GroupJob(name: "by hand", jobs: [child])
            group.completionBlock = { completed.signal() }
            weakGroup = WeakReference(group)
            group.start()
        }
        await child.started.wait()
        // The group holds itself while it has an unfinished child, as the observer it used to
        // register on each child held it.
        let isAlive = weakGroup.object != nil
        #expect(isAlive)
        child.finish()
        if isAlive {
            await waitForSignals(completed)
        }
    }

    @Test func aGroupHoldsItselfAgainForAChildAddedAfterItsChildrenFinished() async {
        let second = HeldJob(name: "second")
        let completed = DispatchSemaphore(value: 0)
        let weakGroup: WeakReference<GroupJob>
        do {
            let first = BlockJob {}
            let group = GroupJob(name: "held twice", jobs: [first])
            // Cancelled on the suspended queue of children, the first child finishes: the group
            // has no unfinished child, and lets go of itself. The second must make it hold again.
            first.cancel()
            #expect(first.isFinished)
            group.addChild(second)
            group.completionBlock = { completed.signal() }
            weakGroup = WeakReference(group)
            group.start()
        }
        await second.started.wait()
        let isAlive = weakGroup.object != nil
        #expect(isAlive)
        second.finish()
        if isAlive {
            await waitForSignals(completed)
        }
    }

    @Test func aGroupWithNoChildrenFinishesWhenItStarts() async {
        let queue = JobQueue(name: "empty-group")
        let group = GroupJob()
        queue.addJob(group)
        await group.waitUntilFinished()
        #expect(succeeded(group))
    }

    @Test func failuresAreAggregatedAndAChildCancelledOnItsOwnDoesNotFailTheGroup() async {
        let queue = JobQueue(name: "failing-group")
        let cancelledChild = BlockJob {}
        cancelledChild.cancel()
        let group = GroupJob(
            name: "g", jobs: [failing("a"), BlockJob {}, failing("b"), cancelledChild, failing("c")])
        queue.addJob(group)
        await group.waitUntilFinished()
        guard case .failed(let error as GroupFailure)? = group.outcome else {
            Issue.record("outcome \(String(describing: group.outcome))")
            return
        }
        #expect(error.failures.map(\.job).sorted() == ["a", "b", "c"])
        #expect(error.description.hasPrefix("'g': 3 children failed: "))

        let cancelledAlone = BlockJob {}
        cancelledAlone.cancel()
        let quiet = GroupJob(name: "quiet", jobs: [BlockJob {}, cancelledAlone])
        queue.addJob(quiet)
        await quiet.waitUntilFinished()
        #expect(succeeded(quiet))
    }

    @Test func cancellingTheGroupRecordsItsReasonThenCancelsItsChildren() async {
        // Limit 1: `waiting` must not start in the moment between `blocker`'s cancellation (which
        // finishes it and frees the slot) and its own; 20 rounds, since a slip is a race.
        for round in 0..<20 {
            let queue = JobQueue(name: "cancel-group-\(round)")
            let started = Signal()
            let blocker = AsyncBlockJob { job in
                job.observe { if $0 == .cancelled { job.finish() } }
                if job.isCancelled { job.finish() }
                started.fire()
            }
            let ran = Counter()
            let waiting = BlockJob { ran.increment() }
            let group = GroupJob(name: "parent", maxConcurrentJobCount: 1, jobs: [blocker, waiting])
            queue.addJob(group)
            await started.wait()
            group.cancel(reason: CancellationReason(code: .requested, detail: "stop"))
            await group.waitUntilFinished()
            #expect(group.cancellationReason == CancellationReason(code: .requested, detail: "stop"))
            for child in [blocker, waiting] {
                #expect(child.cancellationReason?.description == "parentCancelled: 'parent' was cancelled")
            }
            #expect(ran.value == 0)
            let late = BlockJob {}
            group.addChild(late)
            #expect(late.isFinished && late.cancellationReason?.code == .parentCancelled)
        }
    }

    @Test func aGroupCancelledBeforeItStartsCancelsItsChildren() async {
        let queue = JobQueue(name: "cancel-group-early")
        queue.isSuspended = true
        let ran = Counter()
        let child = BlockJob { ran.increment() }
        let group = GroupJob(jobs: [child])
        queue.addJob(group)
        group.cancel()
        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        await child.waitUntilFinished()
        #expect(ran.value == 0 && child.cancellationReason?.code == .parentCancelled)
    }

    /// Whoever sees a group cancelled before it started as finished (its `.finished` observers, its
    /// waiters) sees every child, at any depth, finished and cancelled with `parentCancelled`: the
    /// children are cancelled in the critical section that finishes the group. Both ways an
    /// unstarted group is cancelled: by request, and by a condition that refuses it.
    @Test(arguments: ["requested", "conditionFailed"])
    func aGroupCancelledBeforeItStartsFinishesAfterItsChildren(path: String) async {
        for round in 0..<20 {
            let queue = JobQueue(name: "cancel-group-before-start-\(path)-\(round)")
            queue.isSuspended = path == "requested"
            let grandchild = BlockJob {}
            let inner = GroupJob(name: "inner", jobs: [grandchild])
            let children = [BlockJob {}, BlockJob {}, inner]
            let outer = GroupJob(name: "outer", jobs: children)
            let everyone = children + [grandchild]
            let unfinishedWhenOuterFinished = Log<String>()
            outer.observe { event in
                guard event == .finished else { return }
                for job in everyone where !job.isFinished || job.cancellationReason?.code != .parentCancelled {
                    unfinishedWhenOuterFinished.append(job.displayName)
                }
            }
            if path == "conditionFailed" {
                outer.addCondition(BlockCondition(name: "never") { _ in false })
            }
            queue.addJob(outer)
            if path == "requested" { outer.cancel() }
            await outer.waitUntilFinished()
            let unfinishedWhenWaiterWoke = everyone.filter { !$0.isFinished }.map(\.displayName)
            #expect(outer.cancellationReason?.code == (path == "requested" ? .requested : .conditionFailed))
            #expect(unfinishedWhenOuterFinished.values.isEmpty, "round \(round)")
            #expect(unfinishedWhenWaiterWoke.isEmpty, "round \(round)")
            queue.isSuspended = false
            await queue.waitUntilAllJobsAreFinished()
        }
    }

    @Test func groupsNestThreeDeepWithTenThousandChildren() async {
        let queue = JobQueue(name: "nested")
        let ran = Counter()
        let inner = (0..<10).map { _ in
            GroupJob(jobs: (0..<10).map { _ in GroupJob(jobs: (0..<100).map { _ in BlockJob { ran.increment() } }) })
        }
        let outer = GroupJob(name: "outer", jobs: inner)
        queue.addJob(outer)
        await outer.waitUntilFinished()
        #expect(ran.value == 10_000)
        #expect(succeeded(outer))
        #expect(inner.allSatisfy { $0.isFinished })
    }

    @Test func producedJobsJoinTheGroupAndTheGroupWaitsForThem() async {
        let queue = JobQueue(name: "produce")
        let produced = Log<String>()
        let producer = BlockJob {}
        let group = GroupJob(name: "producing")
        let box = Locked<Job?>(nil)
        let child = BlockJob {
            let me = box.withLock { $0 }!
            for index in 0..<3 {
                me.produce(
                    AsyncBlockJob { job in
                        DispatchQueue.global().async {
                            produced.append("p\(index)")
                            job.finish()
                        }
                    })
            }
        }
        box.withLock { $0 = child }
        group.addChild(child)
        group.addChild(producer)
        queue.addJob(group)
        await group.waitUntilFinished()
        #expect(produced.values.sorted() == ["p0", "p1", "p2"])
        box.withLock { $0 = nil }
    }

    @Test(
        "a job a child adds to JobQueue.current is not the group's: the group does not count it, its category is its own, and it produces onto that queue"
    )
    func aJobAddedToTheChildrensQueueIsNotAChild() async {
        // The children's queue says which group counts a job on it only for the jobs the group
        // took: this one is on that queue too, but was added to it directly. A child naming a
        // category no group around it holds would fail without running; this job takes its own.
        let queue = JobQueue(name: "not-a-child")
        let release = DispatchSemaphore(value: 0)
        let produced = Signal()
        let box = Locked<Job?>(nil)
        let extra = BlockJob {
            release.wait()  // A Dispatch worker of the children's queue.
            box.withLock { $0 }!.produce(BlockJob { produced.fire() })
        }
        extra.exclusivityCategories = ["not-a-child-category"]
        box.withLock { $0 = extra }
        let child = BlockJob { JobQueue.current!.addJob(extra) }
        let group = GroupJob(name: "not-a-child-group", jobs: [child])
        queue.addJob(group)
        await group.waitUntilFinished()
        #expect(succeeded(group))
        #expect(!extra.isFinished, "the group waited for a job it does not count, or the job did not run")
        release.signal()
        await extra.waitUntilFinished()
        #expect(succeeded(extra), "the job was refused its category, as the group's child would be")
        if succeeded(extra) {
            await produced.wait()  // Produced before the job finished.
        }
        box.withLock { $0 = nil }
    }

    @Test func aJobOnAQueueProducesOntoItsQueue() async {
        let queue = JobQueue(name: "produce-queue")
        let ran = Signal()
        let box = Locked<Job?>(nil)
        let producer = BlockJob {
            box.withLock { $0 }!.produce(BlockJob { ran.fire() })
        }
        box.withLock { $0 = producer }
        queue.addJob(producer)
        await ran.wait()
        await queue.waitUntilAllJobsAreFinished()
        box.withLock { $0 = nil }
    }

    @Test func cancellationRacingChildrenThatProduceEndsOnceWithEveryJobFinished() async {
        for round in 0..<20 {
            let queue = JobQueue(name: "race-\(round)")
            let group = GroupJob(name: "racing", maxConcurrentJobCount: 4)
            let all = Log<Job>()
            let halfway = Signal()
            let started = Counter()
            for _ in 0..<50 {
                let box = Locked<Job?>(nil)
                let child = BlockJob {
                    if started.increment() == 25 { halfway.fire() }
                    guard let me = box.withLock({ $0 }) else { return }
                    for _ in 0..<2 {
                        let extra = BlockJob {}
                        all.append(extra)
                        me.produce(extra)
                    }
                    box.withLock { $0 = nil }
                }
                box.withLock { $0 = child }
                all.append(child)
                group.addChild(child)
            }
            // Ends only when cancelled, so that the group is still running when the cancel comes.
            let holdout = AsyncBlockJob { job in
                job.observe { if $0 == .cancelled { job.finish() } }
                if job.isCancelled { job.finish() }
            }
            all.append(holdout)
            group.addChild(holdout)
            let finishedEvents = Counter()
            group.observe { if $0 == .finished { finishedEvents.increment() } }
            queue.addJob(group)
            await halfway.wait()
            group.cancel()
            await group.waitUntilFinished()
            await queue.waitUntilAllJobsAreFinished()
            #expect(finishedEvents.value == 1)
            #expect(group.cancellationReason?.code == .requested)
            #expect(all.values.allSatisfy { $0.isFinished })
        }
    }

    @Test func aGroupAndItsChildInTheSameCategoryDoNotDeadlock() async {
        // PK #486: the child would wait forever for the category its running parent holds.
        let queue = JobQueue(name: "group-exclusive")
        let ran = Counter()
        let child = BlockJob { ran.increment() }
        child.exclusivityCategories = ["group-printer"]
        let inner = GroupJob(jobs: [child])
        let group = GroupJob(jobs: [inner])
        group.exclusivityCategories = ["group-printer"]
        let outsider = BlockJob { ran.increment() }
        outsider.exclusivityCategories = ["group-printer"]
        queue.addJobs([group, outsider], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.value == 2)
        #expect(JobQueue._exclusivityCategoriesInUse(among: ["group-printer"]) == 0)
    }

    /// A child's condition generates a dependency that names the category the group holds. The
    /// dependency joins the group's queue of children and the group counts it, as a child: it runs
    /// under the group's hold, and the group waits for it. Until 2026-11-26 the group did not count
    /// it, so it waited in line for the category the group held, while the group waited for the
    /// child and the child for it: none of them finished.
    @Test(.hangLimit) func aChildsGeneratedDependencyInTheGroupsCategoryRunsInsideTheGroup() async {
        let queue = JobQueue(name: "group-generated-category", maxConcurrentJobCount: 2)
        let ran = Log<String>()
        let login = BlockJob { ran.append("login") }
        login.name = "login"
        login.exclusivityCategories = ["gg-account"]
        let child = BlockJob { ran.append("child") }
        child.addCondition(GeneratesDependency(login))
        let group = GroupJob(name: "account group", jobs: [child])
        group.exclusivityCategories = ["gg-account"]
        let outsider = BlockJob { ran.append("outsider") }
        outsider.exclusivityCategories = ["gg-account"]
        try? outsider.addDependency(child)  // in line for the category only once the group runs
        // Counted as a child, so the group cannot wait for it.
        #expect(throws: JobError.self) { try group.addDependency(login) }
        queue.addJobs([group, outsider], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()

        let order = ran.values
        #expect(order == ["login", "child", "outsider"])
        let unsuccessful = [group, login, outsider].filter { !succeeded($0) }.map(\.displayName)
        #expect(unsuccessful == [], "\(String(describing: group.outcome))")
        let units = (group.progress.totalUnitCount, group.progress.completedUnitCount)
        #expect(units == (2, 2))
        let inUse = JobQueue._exclusivityCategoriesInUse(among: ["gg-account"])
        #expect(inUse == 0)
    }

    /// A generated dependency the group counts: the group waits for it, even when the child that
    /// needed it was cancelled; it takes the group's category through the group and waits in line
    /// for any other, as outside the group (a child naming one would be refused); and its failure
    /// does not fail the group (the child's condition judges it). The group's category is set
    /// after the group is made, as usual: the count does not depend on it.
    @Test(.hangLimit) func aGroupCountsItsChildsGeneratedDependencyButNotItsFailure() async {
        let queue = JobQueue(name: "group-generated-counted")
        let order = Log<String>()
        func child(_ name: String, needing dependency: Job) -> BlockJob {
            let child = BlockJob { order.append(name) }
            child.name = name
            child.addCondition(GeneratesDependency(dependency))
            return child
        }
        let login = HeldJob(name: "login")
        let cancelled = child("cancelled child", needing: login)
        let mixed = BlockJob { order.append("mixed") }
        mixed.name = "mixed"
        mixed.exclusivityCategories = ["gg-held", "gg-other"]
        let failingLogin = ProbeJob { _ in throw ChildError(label: "no account") }
        failingLogin.name = "failing login"
        let alert = BlockJob { order.append("alert") }
        alert.name = "alert"
        alert.exclusivityCategories = ["gg-alert"]
        let children = [
            cancelled, child("after mixed", needing: mixed), child("after failing login", needing: failingLogin),
            child("after alert", needing: alert),
        ]
        let group = GroupJob(name: "counting group", jobs: children)
        group.exclusivityCategories = ["gg-held"]
        group.completionBlock = { order.append("group finished") }
        queue.addJob(group)
        await login.started.wait()
        cancelled.cancel()
        for child in children { await child.waitUntilFinished() }
        order.append("login finishes")
        login.finish()
        await group.waitUntilFinished()

        let events = order.values
        #expect(events.last == "group finished" && events.contains("login finishes"), "\(events)")
        #expect(!events.contains("cancelled child"))
        #expect(events.contains("mixed") && events.contains("alert"), "\(events)")
        let outcomes = [mixed, alert, group].map { String(describing: $0.outcome) }
        #expect(outcomes == ["Optional(succeeded)", "Optional(succeeded)", "Optional(succeeded)"])
        #expect(failingLogin.isFinished)
        // The four children, login, mixed, the failing login and the alert.
        let units = (group.progress.totalUnitCount, group.progress.completedUnitCount)
        #expect(units == (8, 8))
        let inUse = JobQueue._exclusivityCategoriesInUse(among: ["gg-held", "gg-other", "gg-alert"])
        #expect(inUse == 0)
    }

    /// A generated dependency that waits for the group itself is not counted: the group would wait
    /// for it, a cycle through the child's edge, which is not refused (as no cycle through another
    /// job's edges is). It stays on the queue of children as before, and the group's cancellation
    /// still ends all three.
    @Test(.hangLimit) func aGeneratedDependencyThatWaitsForTheGroupIsNotCounted() async throws {
        let login = BlockJob {}
        login.name = "login"
        let child = BlockJob {}
        child.addCondition(GeneratesDependency(login))
        let group = GroupJob(name: "waited-for group")
        try login.addDependency(group)
        group.addChild(child)
        #expect(group.progress.totalUnitCount == 1)
        JobQueue(name: "group-generated-cycle").addJob(group)
        group.cancel()
        await group.waitUntilFinished()
        #expect(child.isCancelled && login.isFinished && group.isCancelled)
        #expect(group.progress.totalUnitCount == 1)
    }

    /// Inside a group, a job may name only categories a group around it holds. One naming another
    /// would wait for it while the group holds its own: with `both` (which wants the group's
    /// category and that one) in line first, neither could ever run. The job fails with
    /// `categoryNotHeldByGroup` instead, without running; a refused group first cancels its
    /// children. A group without categories in between changes nothing.
    @Test func insideAGroupWithCategoriesAJobMayNameOnlyThoseItsGroupsHold() async throws {
        let queue = JobQueue(name: "group-categories", maxConcurrentJobCount: 2)
        let other = JobQueue(name: "group-categories-other")
        let ran = Log<String>()
        func job(_ name: String, _ categories: Set<String>) -> BlockJob {
            let job = BlockJob { ran.append(name) }
            job.name = name
            job.exclusivityCategories = categories
            return job
        }
        let both = job("both", ["gc-disk", "gc-net"])
        let shared = BlockJob {
            ran.append("shared")
            other.addJob(both)  // in line for both categories while the group holds "gc-disk"
        }
        shared.name = "shared"
        shared.exclusivityCategories = ["gc-disk"]
        let outside = job("outside", ["gc-disk", "gc-net"])
        let grandchild = job("grandchild", [])
        let refusedGroup = GroupJob(name: "refused group", jobs: [grandchild])
        refusedGroup.exclusivityCategories = ["gc-net"]
        let deep = job("deep", ["gc-net"])
        let plain = GroupJob(name: "plain", jobs: [deep])
        let group = GroupJob(
            name: "disk group", maxConcurrentJobCount: 1, jobs: [shared, outside, refusedGroup, plain])
        group.exclusivityCategories = ["gc-disk"]
        queue.addJob(group)
        await queue.waitUntilAllJobsAreFinished()
        await other.waitUntilAllJobsAreFinished()

        #expect(Set(ran.values) == ["shared", "both"])
        for refused in [outside, refusedGroup, deep] {
            guard case .failed(let error as JobError)? = refused.outcome else {
                Issue.record("\(refused.displayName): \(String(describing: refused.outcome))")
                continue
            }
            #expect(error.code == .categoryNotHeldByGroup)
            #expect(error.jobs.first === refused && error.jobs.last === (refused === deep ? plain : group))
        }
        guard case .failed(let error)? = outside.outcome else { return }
        #expect(
            "\(error)"
                == "JobError.categoryNotHeldByGroup: 'outside' names the exclusivity category 'gc-net', which its group 'disk group' does not hold; inside a group a job may name only categories a group around it holds, so it did not run"
        )
        #expect(grandchild.cancellationReason?.code == .parentCancelled)
        guard case .failed(let failure as GroupFailure)? = group.outcome else {
            Issue.record("the group: \(String(describing: group.outcome))")
            return
        }
        #expect(Set(failure.failures.map(\.job)) == ["outside", "refused group", "plain"])
        #expect(succeeded(both))
        #expect(JobQueue._exclusivityCategoriesInUse(among: ["gc-disk", "gc-net"]) == 0)
    }

    @Test(.hangLimit) func aJobRefusedItsCategoryInsideAGroupLetsItsWorkGo() async {
        // Refused, the job fails without running its work; the work must be released then, as a
        // cancelled job's is, or a block that captures its job keeps both alive. The thread that
        // finished the job may let go of the work after the group's waiters resume: the test waits
        // for the release, while it still holds the job.
        let queue = JobQueue(name: "refused-work")
        let freed = Signal()
        let captured: WeakReference<Tracked>
        let refused: BlockJob
        do {
            let capture = Tracked(signal: freed)
            captured = WeakReference(capture)
            refused = BlockJob { _ = capture }
        }
        refused.exclusivityCategories = ["rw-net"]
        let group = GroupJob(name: "rw group", jobs: [refused])
        group.exclusivityCategories = ["rw-disk"]
        queue.addJob(group)
        await queue.waitUntilAllJobsAreFinished()
        guard case .failed(let error as JobError)? = refused.outcome else {
            Issue.record("the refused job: \(String(describing: refused.outcome))")
            return
        }
        #expect(error.code == .categoryNotHeldByGroup)
        await freed.wait()
        #expect(captured.object == nil, "the refused job's block (and what it captured) outlived its finish")
        #expect(refused.isFinished)  // held until here: the release is the finish's, not the deinit's
    }

    @Test func aJobAndAGroupRefusedTheirCategoriesAreFreedWithTheirGroup() async {
        // Each fails with an error that names it and its group: the error, kept as the job's
        // outcome, must not keep the job (or the group) alive. The refused group cancels its
        // child first; the group's hold on itself ends with it. A refused job fails on its
        // execution queue: the test's worker, so that draining it is the point where the engine
        // has let go (LeakTests.swift explains).
        let (queue, worker) = makeJobQueueOnSerialWorker("refused-freed")
        let failures = Log<String>()
        let (group, refusedJob, refusedGroup, grandchild):
            (WeakReference<GroupJob>, WeakReference<Job>, WeakReference<GroupJob>, WeakReference<Job>) = {
                let refusedJob = BlockJob {}
                refusedJob.exclusivityCategories = ["rf-net"]
                let grandchild = BlockJob {}
                let refusedGroup = GroupJob(name: "rf refused group", jobs: [grandchild])
                refusedGroup.exclusivityCategories = ["rf-net"]
                for refused in [refusedJob, refusedGroup] as [Job] {
                    refused.executionQueue = worker
                    refused.observe { [weak refused] event in
                        guard event == .finished, case .failed(let error as JobError)? = refused?.outcome else {
                            return
                        }
                        failures.append("\(error.code)")
                    }
                }
                let group = GroupJob(name: "rf group", jobs: [refusedJob, refusedGroup])
                group.exclusivityCategories = ["rf-disk"]
                queue.addJob(group)
                return (
                    WeakReference(group), WeakReference(refusedJob), WeakReference(refusedGroup),
                    WeakReference(grandchild)
                )
            }()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(failures.values == ["categoryNotHeldByGroup", "categoryNotHeldByGroup"])
        #expect(refusedJob.object == nil)
        #expect(grandchild.object == nil)
        #expect(refusedGroup.object == nil)
        #expect(group.object == nil)
    }

    @Test func cancellingAGroupThatSucceededLeavesAJobItsChildAddedAlone() async {
        // A child added `straggler` to its queue (the group's queue of children), which does not
        // make it a child: the group finished without waiting for it. Cancelling a finished job
        // does nothing; until 2026-11-25 the group still cancelled what was left on that queue.
        let stragglerStarted = DispatchSemaphore(value: 0)
        let straggler = AsyncBlockJob { _ in stragglerStarted.signal() }
        let group = GroupJob(name: "finished-group", jobs: [BlockJob { JobQueue.current?.addJob(straggler) }])
        JobQueue(name: "finished-group-queue").addJob(group)
        await group.waitUntilFinished()
        await waitForSignals(stragglerStarted)
        #expect(straggler.state == .executing)
        group.cancel()
        #expect(!straggler.isCancelled)
        if case .succeeded? = group.outcome {} else { Issue.record("outcome \(String(describing: group.outcome))") }
        straggler.finish()
        await straggler.waitUntilFinished()
    }

    @Test func aFinishedGroupIsFreedWithItsChildren() async {
        let (queue, worker) = makeJobQueueOnSerialWorker("group-freed")
        let (group, child): (WeakReference<GroupJob>, WeakReference<Job>) = {
            let child = BlockJob {}
            let group = GroupJob(jobs: [child])
            queue.addJob(group)
            return (WeakReference(group), WeakReference(child))
        }()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(group.object == nil)
        #expect(child.object == nil)
    }

    @Test("a group let go while its queue of children is read is not freed under the engine lock")
    func aGroupLetGoWhileItsQueueOfChildrenIsReadIsNotFreedUnderTheLock() async {
        // A finished group's queue of children knows its group only weakly. Reading the group
        // under the lock through that reference (explaining the queue, making its progress) would
        // hold a strong one meanwhile; if the group's last other reference went then, that one
        // would be the last, and must be released after unlocking (debug builds trap when a job
        // is freed with the lock held). A race, so many rounds: each lets the group go while
        // another thread reads its queue.
        let (queue, worker) = makeJobQueueOnSerialWorker("group-let-go")
        for round in 0..<300 {
            let saved = Locked<JobQueue?>(nil)
            // Finished from `worker`, so that the group ends there too, and the queue lets go of
            // it there: the rounds' drain leaves the holder with the group's last reference.
            let child = AsyncBlockJob { job in
                saved.withLock { $0 = JobQueue.current }
                worker.async { job.finish() }
            }
            let holder = Locked<GroupJob?>(GroupJob(jobs: [child]))
            let freed = WeakReference(holder.withLock { $0 })
            holder.withLock { queue.addJob($0!) }
            await queue.waitUntilAllJobsAreFinished()
            await drainSerialQueue(worker)
            guard let children = saved.withLock({ $0 }) else {
                Issue.record("round \(round): the child did not run on a queue of children")
                return
            }
            // A suspended queue of children looks for its group whenever it is explained, once for
            // the queue and once for its first ready job (one the group does not count).
            children.isSuspended = true
            let waiting = BlockJob {}
            children.addJob(waiting)
            let reading = Flag()
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                let finished = Counter()
                DispatchQueue(label: "GroupJobTests.let-go.reader").async {
                    reading.set()
                    _ = children.progress
                    for _ in 0..<50 { _ = children.explain() }
                    if finished.increment() == 2 { done.resume() }
                }
                DispatchQueue(label: "GroupJobTests.let-go.dropper").async {
                    while !reading.value {}
                    let group = holder.withLock { group in
                        defer { group = nil }
                        return group
                    }
                    _ = consume group
                    if finished.increment() == 2 { done.resume() }
                }
            }
            #expect(freed.object == nil)
            waiting.cancel()
        }
    }

    @Test("an unstarted group let go is freed after unlocking when its last child is cancelled")
    func anUnstartedGroupLetGoIsFreedWhenItsLastChildIsCancelled() {
        // The group's hold on itself while it has unfinished children is then its last reference:
        // released after unlocking (debug builds trap when a job is freed with the lock held).
        let (group, child): (WeakReference<GroupJob>, Job) = {
            let child = BlockJob {}
            let group = GroupJob(jobs: [child])
            return (WeakReference(group), child)
        }()
        #expect(group.object != nil)
        child.cancel()
        #expect(group.object == nil)
    }

    @Test func aGroupCancelledBeforeItStartsIsFreedWithItsChildren() async {
        // Its children are counted, then cancelled with it before it ever executes: the group's
        // hold on itself while it has unfinished children ends with the last of them.
        let (group, child): (WeakReference<GroupJob>, WeakReference<Job>) = {
            let child = BlockJob {}
            let group = GroupJob(jobs: [child, BlockJob {}])
            group.cancel()
            #expect(group.isFinished && child.isFinished)
            return (WeakReference(group), WeakReference(child))
        }()
        #expect(group.object == nil)
        #expect(child.object == nil)
    }
}
