import Conductor
import ConductorTestSupport
import Testing

// A group and a job inside it made to wait for each other: refused, as any other cycle
// (Docs/Concepts.md, the misuse table; Docs/Composition.md, "Groups and produced jobs").

private func named(_ name: String) -> BlockJob {
    let job = BlockJob {}
    job.name = name
    return job
}

/// The `.dependencyCycle` error `dependent.addDependency(dependency, policy:)` throws, if it
/// throws one.
private func cycleError(
    _ dependent: Job, waitingFor dependency: Job, policy: DependencyPolicy = .afterFinish
) -> JobError? {
    do {
        try dependent.addDependency(dependency, policy: policy)
        return nil
    } catch {
        return error.code == .dependencyCycle ? error : nil
    }
}

private func names(_ jobs: [Job]) -> [String] {
    jobs.map { $0.name ?? "?" }
}

@Suite struct GroupCycleTests {
    @Test func aChildWaitingForItsGroupIsRefusedAndBothStillRun() async throws {
        let child = named("child")
        let group = GroupJob(name: "group", jobs: [child])
        let error = try #require(cycleError(child, waitingFor: group))
        #expect(names(error.jobs) == ["child", "group"])
        #expect(
            "\(error)"
                == "JobError.dependencyCycle: refused; the dependency would close the cycle 'child' waits for 'group' waits for 'child' (a group waits for its children to finish, and they wait for it to start)"
        )
        #expect(child.dependencies.isEmpty)
        // Nothing changed: the group runs its child and finishes.
        let queue = JobQueue(name: "group-cycle")
        queue.addJob(group)
        await queue.waitUntilAllJobsAreFinished()
        #expect(child.outcome?.isSucceeded == true && group.outcome?.isSucceeded == true)
    }

    @Test func aGroupWaitingForItsChildIsRefusedWithEitherPolicy() async throws {
        let child = named("child")
        let group = GroupJob(name: "group", jobs: [child])
        for policy in [DependencyPolicy.afterFinish, .requireSuccess] {
            let error = try #require(cycleError(group, waitingFor: child, policy: policy))
            #expect(names(error.jobs) == ["group", "child"])
        }
        #expect(group.dependencies.isEmpty)
        let queue = JobQueue(name: "group-cycle")
        queue.addJob(group)
        await queue.waitUntilAllJobsAreFinished()
        #expect(child.outcome?.isSucceeded == true && group.outcome?.isSucceeded == true)
    }

    @Test func cyclesThroughNestedGroupsNameEveryGroupBetween() throws {
        let leaf = named("leaf")
        let inner = GroupJob(name: "inner", jobs: [leaf])
        let middle = GroupJob(name: "middle", jobs: [inner])
        let outer = GroupJob(name: "outer", jobs: [middle])
        // The leaf would wait for `outer`, which waits for `middle`, which waits for `inner`,
        // which waits for the leaf.
        let up = try #require(cycleError(leaf, waitingFor: outer))
        #expect(names(up.jobs) == ["leaf", "outer", "middle", "inner"])
        // `outer` would wait for the leaf, which waits for `inner` to start, which waits for
        // `middle`, which waits for `outer`.
        let down = try #require(cycleError(outer, waitingFor: leaf))
        #expect(names(down.jobs) == ["outer", "leaf", "inner", "middle"])
        #expect(cycleError(inner, waitingFor: outer) != nil)
        #expect(cycleError(middle, waitingFor: leaf) != nil)
    }

    @Test func edgesThatCloseNoCycleAreAccepted() async throws {
        // Between siblings, with jobs outside, between a group and another group's child.
        let first = named("first")
        let second = named("second")
        let otherChild = named("other-child")
        let group = GroupJob(name: "group", jobs: [first, second])
        let other = GroupJob(name: "other", jobs: [otherChild])
        let before = named("before")
        let after = named("after")
        try second.addDependency(first)
        try first.addDependency(before)
        try after.addDependency(second)
        try group.addDependency(otherChild)
        try otherChild.addDependency(before)
        let queue = JobQueue(name: "group-no-cycle")
        queue.addJobs([before, group, other, after], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        for job in [first, second, otherChild, group, other, before, after] {
            #expect(job.outcome?.isSucceeded == true, "\(job.name ?? "?")")
        }
    }

    @Test func jobsMayWaitForAFinishedGroupAndItsChildren() async throws {
        let child = named("child")
        let group = GroupJob(name: "group", jobs: [child])
        let queue = JobQueue(name: "group-finished-child")
        queue.addJob(group)
        await queue.waitUntilAllJobsAreFinished()
        let later = named("later")
        try later.addDependency(child)
        try later.addDependency(group)
        queue.addJob(later)
        await queue.waitUntilAllJobsAreFinished()
        #expect(later.outcome?.isSucceeded == true)
    }

    // MARK: addChild

    @Test func addingAChildThatWaitsForTheGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let group = GroupJob(name: "probe-group")
            let job = named("probe-child")
            try? job.addDependency(group)
            group.addChild(job)
        }
        #expect(
            standardErrorText(result).contains(
                "GroupJob.addChild(_:): the child would close the cycle 'probe-child' waits for 'probe-group' waits for 'probe-child' (a group waits for its children to finish, and they wait for it to start); remove that dependency first"
            ))
    }

    @Test func addingAChildTheGroupWaitsForTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let group = GroupJob(name: "probe-group")
            let job = named("probe-child")
            try? group.addDependency(job)
            group.addChild(job)
        }
        #expect(
            standardErrorText(result).contains(
                "the child would close the cycle 'probe-group' waits for 'probe-child' waits for 'probe-group'"))
    }

    @Test func addingAChildThatAnOuterGroupWaitsForTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let inner = GroupJob(name: "probe-inner")
            let outer = GroupJob(name: "probe-outer", jobs: [inner])
            let job = named("probe-child")
            try? outer.addDependency(job)
            inner.addChild(job)
        }
        #expect(
            standardErrorText(result).contains(
                "the child would close the cycle 'probe-outer' waits for 'probe-child' waits for 'probe-inner' waits for 'probe-outer'"
            ))
    }

    @Test func nestingAGroupWhoseChildWaitsForTheOuterGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let outer = GroupJob(name: "probe-outer")
            let job = named("probe-child")
            try? job.addDependency(outer)
            let inner = GroupJob(name: "probe-inner", jobs: [job])
            outer.addChild(inner)
        }
        #expect(
            standardErrorText(result).contains(
                "the child would close the cycle 'probe-child' waits for 'probe-outer' waits for 'probe-inner' waits for 'probe-child'"
            ))
    }

    @Test func nestingAGroupWhoseChildAnOuterGroupWaitsForTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let job = named("probe-child")
            let inner = GroupJob(name: "probe-inner", jobs: [job])
            let outer = GroupJob(name: "probe-outer")
            try? outer.addDependency(job)
            _ = GroupJob(name: "probe-top", jobs: [outer])
            outer.addChild(inner)
        }
        #expect(
            standardErrorText(result).contains(
                "the child would close the cycle 'probe-outer' waits for 'probe-child' waits for 'probe-inner' waits for 'probe-outer'"
            ))
    }

    @Test func aProducedJobThatWaitsForTheGroupTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = GroupBox()
            let producer = BlockJob {
                let made = named("probe-made")
                try? made.addDependency(box.group!)
                box.producer!.produce(made)
            }
            producer.name = "probe-producer"
            let group = GroupJob(name: "probe-group", jobs: [producer])
            box.group = group
            box.producer = producer
            // Without the trap, the producer still finishes (the group would not).
            JobQueue(name: "probe-queue").addJob(group)
            producer.waitUntilFinished()
        }
        #expect(
            standardErrorText(result).contains(
                "the child would close the cycle 'probe-made' waits for 'probe-group' waits for 'probe-made'"))
    }
}

/// Lets a child's block reach its group and itself.
// @unchecked Sendable: both are set before the group is added to a queue, which happens-before the
// block runs; nothing writes them after.
private final class GroupBox: @unchecked Sendable {
    var group: GroupJob?
    var producer: BlockJob?
}
