import Conductor
import Dispatch
import Synchronization

extension Scenario {
    /// `exclusive`: no-op jobs spread over 16 exclusivity categories on a limit-8 queue; no two jobs
    /// of a category may overlap.
    static func exclusive(size: Int) -> Scenario {
        Scenario(
            id: "exclusive",
            summary:
                "\(Format.count(size)) no-op jobs over \(Exclusive.categories) exclusivity categories on a limit-8 "
                + "queue, checked never two of a category at once",
            size: size,
            workloads: [
                (
                    .conductor,
                    .run(
                        method: "JobQueue(maxConcurrentJobCount: 8); exclusivityCategories = [one of 16] per job",
                        Exclusive.conductor)
                ),
                (.foundation, .notApplicable(reason: "OperationQueue has no mutual exclusivity")),
                (
                    .dispatch,
                    .run(
                        method: "one serial DispatchQueue per category (hand-written), async(group:) per job",
                        Exclusive.dispatch)
                ),
                (.taskGroup, .notApplicable(reason: "TaskGroup has no mutual exclusivity")),
            ])
    }

    /// `group`: groups of 100 no-op children, all added at once; each group finishes after its
    /// children.
    static func group(groups: Int) -> Scenario {
        Scenario(
            id: "group",
            summary:
                "\(Format.count(groups)) groups of \(Groups.children) no-op children, each group finished after "
                + "its children",
            size: groups,
            describe: { "\(Format.count($0)) groups (\(Format.count($0 * Groups.children)) children)" },
            workloads: [
                (.conductor, .run(method: "GroupJob(jobs: 100 BlockJobs) per group on one JobQueue", Groups.conductor)),
                (.foundation, .notApplicable(reason: "OperationQueue has no group operation")),
                (
                    .dispatch,
                    .run(
                        method: "a DispatchGroup of 100 async blocks per group, notify() marking the group done",
                        Groups.dispatch)
                ),
                (
                    .taskGroup,
                    .run(
                        method: "a withTaskGroup of 100 children per group, inside an outer TaskGroup", Groups.taskGroup
                    )
                ),
            ])
    }
}

/// A shared count.
private final class Count: Sendable {
    private let storage = Atomic<Int>(0)

    @discardableResult
    func add(_ delta: Int = 1) -> Int { storage.add(delta, ordering: .relaxed).newValue }
    var value: Int { storage.load(ordering: .relaxed) }
}

/// Counts, per category, the jobs inside it, and whether two ever were at once.
private final class CategoryCheck: Sendable {
    private let inside: [Count]
    private let overlaps = Count()
    private let ran = Count()

    init(categories: Int) {
        inside = (0..<categories).map { _ in Count() }
    }

    func run(_ category: Int) {
        if inside[category].add() > 1 {
            overlaps.add()
        }
        inside[category].add(-1)
        ran.add()
    }

    func failure(jobs: Int) -> String? {
        let overlaps = overlaps.value
        let ran = ran.value
        if overlaps > 0 { return "\(overlaps) jobs ran while another of their category ran" }
        if ran != jobs { return "\(ran) of \(jobs) jobs ran" }
        return nil
    }
}

enum Exclusive {
    static let categories = 16

    static func conductor(_ jobs: Int) -> Trial {
        let check = CategoryCheck(categories: categories)
        let names = (0..<categories).map { "category-\($0)" }
        let queue = JobQueue(name: "exclusive", maxConcurrentJobCount: 8)
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                let category = index % categories
                let job = BlockJob { check.run(category) }
                job.exclusivityCategories = [names[category]]
                queue.addJob(job)
            }
            queue.waitUntilAllJobsAreFinished()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check.failure(jobs: jobs))
    }

    static func dispatch(_ jobs: Int) -> Trial {
        let check = CategoryCheck(categories: categories)
        let queues = (0..<categories).map { DispatchQueue(label: "category-\($0)") }
        let group = DispatchGroup()
        let (_, nanoseconds) = Clock.measure {
            for index in 0..<jobs {
                let category = index % categories
                queues[category].async(group: group) { check.run(category) }
            }
            group.wait()
        }
        return Trial(nanoseconds: nanoseconds, jobs: jobs, failure: check.failure(jobs: jobs))
    }
}

enum Groups {
    static let children = 100

    private static func failure(ran: Int, groupsDone: Int, groups: Int) -> String? {
        if ran != groups * children { return "\(ran) of \(groups * children) children ran" }
        if groupsDone != groups { return "\(groupsDone) of \(groups) groups finished" }
        return nil
    }

    static func conductor(_ groups: Int) -> Trial {
        let ran = Count()
        let queue = JobQueue(name: "groups")
        var all: [GroupJob] = []
        all.reserveCapacity(groups)
        let (_, nanoseconds) = Clock.measure {
            for _ in 0..<groups {
                let group = GroupJob(jobs: (0..<children).map { _ in BlockJob { ran.add() } })
                all.append(group)
                queue.addJob(group)
            }
            queue.waitUntilAllJobsAreFinished()
        }
        let done = all.count { $0.isFinished }
        return Trial(
            nanoseconds: nanoseconds, jobs: groups * (children + 1),
            failure: failure(ran: ran.value, groupsDone: done, groups: groups))
    }

    static func dispatch(_ groups: Int) -> Trial {
        let ran = Count()
        let groupsDone = Count()
        let all = DispatchGroup()
        let (_, nanoseconds) = Clock.measure {
            for _ in 0..<groups {
                let group = DispatchGroup()
                all.enter()
                for _ in 0..<children {
                    DispatchQueue.global().async(group: group) { ran.add() }
                }
                group.notify(queue: .global()) {
                    groupsDone.add()
                    all.leave()
                }
            }
            all.wait()
        }
        return Trial(
            nanoseconds: nanoseconds, jobs: groups * (children + 1),
            failure: failure(
                ran: ran.value, groupsDone: groupsDone.value, groups: groups))
    }

    static func taskGroup(_ groups: Int) -> Trial {
        let ran = Count()
        let groupsDone = Count()
        let nanoseconds = runBlocking {
            let start = Clock.now()
            await withTaskGroup(of: Void.self) { outer in
                for _ in 0..<groups {
                    outer.addTask {
                        await withTaskGroup(of: Void.self) { inner in
                            for _ in 0..<children {
                                inner.addTask { ran.add() }
                            }
                        }
                        groupsDone.add()
                    }
                }
            }
            return Double(Clock.now() - start)
        }
        return Trial(
            nanoseconds: nanoseconds, jobs: groups * (children + 1),
            failure: failure(
                ran: ran.value, groupsDone: groupsDone.value, groups: groups))
    }
}
