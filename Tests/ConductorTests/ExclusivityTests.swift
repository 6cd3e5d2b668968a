import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// Mutual exclusivity (Docs/Composition.md, "Mutual exclusivity"): categories granted with the slot,
// all or nothing, first come first served, never held while waiting for a slot.

/// Counts, per category, the jobs executing in it, and records any moment with more than one.
final class CategoryGuard: Sendable {
    private let inside: [String: Counter]
    let violations = Log<String>()

    init(_ names: [String]) {
        var inside: [String: Counter] = [:]
        for name in names { inside[name] = Counter() }
        self.inside = inside
    }

    func enter(_ names: Set<String>, _ job: String) {
        for name in names {
            let now = inside[name]!.increment()
            if now > 1 { violations.append("\(job): \(now) jobs in '\(name)'") }
        }
    }

    func leave(_ names: Set<String>) {
        for name in names { inside[name]!.decrement() }
    }
}

/// An asynchronous job that ends only when `gate` is opened.
private func heldJob(_ name: String, categories: Set<String>, gate: Signal, started: Signal) -> Job {
    let job = AsyncBlockJob { job in
        started.fire()
        Task {
            await gate.wait()
            job.finish()
        }
    }
    job.name = name
    job.exclusivityCategories = categories
    return job
}

/// Runs one job of category `name` on `queue` and waits until it has finished: the category is
/// idle then, unless another job holds it or waits for it.
private func runOneJob(of name: String, on queue: JobQueue) async {
    let job = BlockJob {}
    job.exclusivityCategories = [name]
    queue.addJob(job)
    await queue.waitUntilAllJobsAreFinished()
}

@Suite struct ExclusivityTests {
    @Test func jobsOfOneCategoryNeverOverlapOnAWideQueue() async {
        let queue = JobQueue(name: "exclusive", maxConcurrentJobCount: 8)
        let guardian = CategoryGuard(["t1-db"])
        let others = InFlight()
        for index in 0..<400 {
            let categories: Set<String> = index % 2 == 0 ? ["t1-db"] : []
            let job = BlockJob {
                if categories.isEmpty { others.enter() }
                guardian.enter(categories, "job\(index)")
                guardian.leave(categories)
                if categories.isEmpty { others.leave() }
            }
            job.exclusivityCategories = categories
            queue.addJob(job)
        }
        await queue.waitUntilAllJobsAreFinished()
        #expect(guardian.violations.values.isEmpty)
        #expect(others.starts == 200)
        #expect(JobQueue._exclusivityCategoriesInUse(among: ["t1-db"]) == 0)
    }

    @Test func aJobWaitingForItsCategoryGivesItsSlotToOtherWork() async {
        // Limit 1: `waiting` is claimed, finds "x" held (on another queue), and waits in line
        // without the slot, so `other` runs.
        let holderQueue = JobQueue(name: "holder")
        let queue = JobQueue(name: "limit-1", maxConcurrentJobCount: 1)
        let gate = Signal()
        let started = Signal()
        holderQueue.addJob(heldJob("holder", categories: ["t2-x"], gate: gate, started: started))
        await started.wait()
        let ran = Log<String>()
        let waiting = BlockJob { ran.append("waiting") }
        waiting.exclusivityCategories = ["t2-x"]
        let other = BlockJob { ran.append("other") }
        queue.addJobs([waiting, other], waitUntilFinished: false)
        await other.waitUntilFinished()
        #expect(ran.values == ["other"])
        #expect(waiting.state == .pending)
        gate.fire()
        await queue.waitUntilAllJobsAreFinished()
        #expect(ran.values == ["other", "waiting"])
    }

    @Test func noJobHoldsACategoryWhileItWaitsForASlot() async {
        // `blocked` is on a full queue: it has not been claimed, so it holds nothing, and
        // `elsewhere`, of the same category on another queue, runs.
        let full = JobQueue(name: "full", maxConcurrentJobCount: 1)
        let free = JobQueue(name: "free")
        let gate = Signal()
        let started = Signal()
        full.addJob(heldJob("occupant", categories: [], gate: gate, started: started))
        await started.wait()
        let blocked = BlockJob {}
        blocked.exclusivityCategories = ["t3-x"]
        full.addJob(blocked)
        let elsewhere = BlockJob {}
        elsewhere.exclusivityCategories = ["t3-x"]
        free.addJob(elsewhere)
        await elsewhere.waitUntilFinished()
        #expect(blocked.state == .ready)
        gate.fire()
        await full.waitUntilAllJobsAreFinished()
    }

    @Test func firstComeFirstServedAndTheFirstKeepsItsPlaceUntilItsQueueClaimsIt() async {
        // "x" is held. `first`, then `second` are claimed and wait in line. The holder finishes
        // while `first`'s queue is suspended: `first` is ready again, first in line, and keeps its
        // place, so `third`, claimed after that on a free queue, waits although "x" is free. Once
        // `first`'s queue resumes, they run in order.
        let holderQueue = JobQueue(name: "holder")
        let gate = Signal()
        let started = Signal()
        holderQueue.addJob(heldJob("holder", categories: ["t4-x"], gate: gate, started: started))
        await started.wait()

        let order = Log<String>()
        var workers: [DispatchQueue] = []
        func contender(_ name: String) -> (JobQueue, Job) {
            let (queue, worker) = makeJobQueueOnSerialWorker(name)
            workers.append(worker)
            let job = BlockJob { order.append(name) }
            job.name = name
            job.exclusivityCategories = ["t4-x"]
            return (queue, job)
        }
        let (firstQueue, first) = contender("first")
        let (secondQueue, second) = contender("second")
        let (thirdQueue, third) = contender("third")
        firstQueue.addJob(first)
        await drainSerialQueue(workers[0])
        secondQueue.addJob(second)
        await drainSerialQueue(workers[1])
        #expect(first.state == .pending && second.state == .pending)

        firstQueue.isSuspended = true
        gate.fire()
        await holderQueue.waitUntilAllJobsAreFinished()
        #expect(first.state == .ready)
        thirdQueue.addJob(third)
        await drainSerialQueue(workers[2])
        #expect(third.state == .pending)
        #expect(order.values.isEmpty)

        firstQueue.isSuspended = false
        for queue in [firstQueue, secondQueue, thirdQueue] { await queue.waitUntilAllJobsAreFinished() }
        #expect(order.values == ["first", "second", "third"])
    }

    @Test func categoriesInEveryOrderDoNotDeadlock() async {
        // Dining philosophers: five categories in a ring, each job takes two neighbours, named in
        // either order, over two queues, many times over.
        let names = ["t5-a", "t5-b", "t5-c", "t5-d", "t5-e"]
        let guardian = CategoryGuard(names)
        let queues = [JobQueue(name: "ring-1", maxConcurrentJobCount: 4), JobQueue(name: "ring-2")]
        for index in 0..<2_000 {
            let left = names[index % 5]
            let right = names[(index + 1) % 5]
            let categories: Set<String> = [left, right]
            let job = AsyncBlockJob { job in
                guardian.enter(categories, "job\(index)")
                DispatchQueue.global().async {
                    guardian.leave(categories)
                    job.finish()
                }
            }
            job.exclusivityCategories = categories
            queues[index % 2].addJob(job)
        }
        for queue in queues { await queue.waitUntilAllJobsAreFinished() }
        #expect(guardian.violations.values.isEmpty)
        #expect(JobQueue._exclusivityCategoriesInUse(among: names) == 0)
    }

    @Test(.hangLimit)
    func theRegistryKeepsNoMoreIdleCategoriesThanItsLimit() async {
        // One job per category, one category after another: each is idle once its job finished.
        // The registry keeps some of them for the next job that names one, never more than its
        // limit, so a process that names ever new categories does not grow. In a process of its
        // own: filling the registry's idle categories here would have it forget, at once, the
        // categories of the tests running beside this one, whose checks that an idle category
        // keeps no job would then pass without looking.
        await #expect(processExitsWith: .success) {
            let names = (0..<(JobQueue._exclusivityIdleLimit + 40)).map { "t-idle-\($0)" }
            let queue = JobQueue(name: "idle", maxConcurrentJobCount: 1)
            let ran = Counter()
            for name in names {
                let job = BlockJob { ran.increment() }
                job.exclusivityCategories = [name]
                queue.addJob(job)
            }
            await queue.waitUntilAllJobsAreFinished()
            let inUse = JobQueue._exclusivityCategoriesInUse(among: names)
            let known = JobQueue._exclusivityCategoriesKnown(among: names)
            guard ran.value == names.count, inUse == 0, known <= JobQueue._exclusivityIdleLimit else {
                fatalError("ran \(ran.value) of \(names.count); \(inUse) in use; \(known) known")
            }
        }
    }

    @Test(.hangLimit)
    func theRegistryForgetsTheCategoryIdleLongest() async {
        // Filled with idle categories, the registry forgets the one idle longest when another goes
        // idle: "a" was idle first, but used again it is the newest, so "b" is forgotten.
        await #expect(processExitsWith: .success) {
            let queue = JobQueue(name: "lru", maxConcurrentJobCount: 1)
            let others = (0..<(JobQueue._exclusivityIdleLimit - 2)).map { "t-lru-\($0)" }
            for name in ["t-lru-a", "t-lru-b"] + others { await runOneJob(of: name, on: queue) }
            await runOneJob(of: "t-lru-a", on: queue)
            await runOneJob(of: "t-lru-new", on: queue)
            let known = ["t-lru-a", "t-lru-b", "t-lru-new"].map { JobQueue._exclusivityCategoriesKnown(among: [$0]) }
            let kept = JobQueue._exclusivityCategoriesKnown(among: others)
            guard known == [1, 0, 1], kept == others.count else {
                fatalError("a, b, new known: \(known); others kept: \(kept) of \(others.count)")
            }
        }
    }

    @Test(.hangLimit)
    func aCategoryInUseIsNeverForgotten() async {
        // "busy" was idle, then is held again: however many categories go idle meanwhile, the
        // registry keeps it, and a second job naming it waits for the holder.
        await #expect(processExitsWith: .success) {
            let queue = JobQueue(name: "in-use", maxConcurrentJobCount: 1)
            await runOneJob(of: "t-busy", on: queue)
            let gate = Signal()
            let started = Signal()
            let holders = JobQueue(name: "holders")
            holders.addJob(heldJob("holder", categories: ["t-busy"], gate: gate, started: started))
            await started.wait()
            for index in 0...JobQueue._exclusivityIdleLimit {
                await runOneJob(of: "t-busy-other-\(index)", on: queue)
            }
            let (second, worker) = makeJobQueueOnSerialWorker("second")
            let ran = Flag()
            let waiting = BlockJob { ran.set() }
            waiting.exclusivityCategories = ["t-busy"]
            second.addJob(waiting)
            await drainSerialQueue(worker)
            let known = JobQueue._exclusivityCategoriesKnown(among: ["t-busy"])
            guard known == 1, !ran.value, waiting.state == .pending else {
                fatalError("'t-busy' known: \(known); the second job ran while the first held it: \(ran.value)")
            }
            gate.fire()
            await second.waitUntilAllJobsAreFinished()
            guard ran.value else { fatalError("the second job never ran") }
        }
    }

    @Test(.hangLimit)
    func aJobThatLeftTheLineOfAForgottenCategoryWaitsForItsNewHolder() async {
        // `waiting` joins the line of "x", leaves it (it gains a dependency), and "x" goes idle and
        // is forgotten. When `waiting` is claimed again it must find the "x" that `second` now
        // holds, not the forgotten one it looked up before.
        await #expect(processExitsWith: .success) {
            let firstGate = Signal()
            let firstStarted = Signal()
            let holders = JobQueue(name: "holders")
            holders.addJob(heldJob("first", categories: ["t-stale-x"], gate: firstGate, started: firstStarted))
            await firstStarted.wait()
            let (queue, worker) = makeJobQueueOnSerialWorker("stale")
            let ran = Flag()
            let waiting = BlockJob { ran.set() }
            waiting.exclusivityCategories = ["t-stale-x"]
            queue.addJob(waiting)
            await drainSerialQueue(worker)
            guard waiting.state == .pending else { fatalError("'waiting' is not in line") }
            let blocker = BlockJob {}
            try? waiting.addDependency(blocker)
            firstGate.fire()
            await holders.waitUntilAllJobsAreFinished()
            let others = JobQueue(name: "others", maxConcurrentJobCount: 1)
            for index in 0..<JobQueue._exclusivityIdleLimit {
                await runOneJob(of: "t-stale-\(index)", on: others)
            }
            guard JobQueue._exclusivityCategoriesKnown(among: ["t-stale-x"]) == 0 else {
                fatalError("'t-stale-x' was not forgotten")
            }
            let secondGate = Signal()
            let secondStarted = Signal()
            holders.addJob(heldJob("second", categories: ["t-stale-x"], gate: secondGate, started: secondStarted))
            await secondStarted.wait()
            queue.addJob(blocker)
            await drainSerialQueue(worker)
            guard !ran.value, waiting.state == .pending else {
                fatalError("'waiting' ran while 'second' held its category")
            }
            secondGate.fire()
            await queue.waitUntilAllJobsAreFinished()
            guard ran.value else { fatalError("'waiting' never ran") }
        }
    }

    @Test func aJobCancelledInLineLeavesItAndIsFreed() async {
        let holderQueue = JobQueue(name: "holder")
        let gate = Signal()
        let started = Signal()
        holderQueue.addJob(heldJob("holder", categories: ["t6-x"], gate: gate, started: started))
        await started.wait()
        let (queue, worker) = makeJobQueueOnSerialWorker("in-line")
        let ran = Log<String>()
        let cancelled: WeakReference<Job> = {
            let job = BlockJob { ran.append("cancelled") }
            job.exclusivityCategories = ["t6-x"]
            queue.addJob(job)
            return WeakReference(job)
        }()
        let next = BlockJob { ran.append("next") }
        next.exclusivityCategories = ["t6-x"]
        queue.addJob(next)
        await drainSerialQueue(worker)
        cancelled.object?.cancel()
        gate.fire()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(ran.values == ["next"])
        #expect(cancelled.object == nil)
        #expect(JobQueue._exclusivityCategoriesInUse(among: ["t6-x"]) == 0)
    }

    @Test func aJobInLineThatGainsADependencyLeavesTheLine() async throws {
        // Were `waiting` to keep its place while it waits for `dependency`, which needs "x" too,
        // neither could ever run.
        let holderQueue = JobQueue(name: "holder")
        let gate = Signal()
        let started = Signal()
        holderQueue.addJob(heldJob("holder", categories: ["t7-x"], gate: gate, started: started))
        await started.wait()
        let (queue, worker) = makeJobQueueOnSerialWorker("gains-dependency")
        let order = Log<String>()
        let waiting = BlockJob { order.append("waiting") }
        waiting.exclusivityCategories = ["t7-x"]
        queue.addJob(waiting)
        await drainSerialQueue(worker)
        #expect(waiting.state == .pending)
        let dependency = BlockJob { order.append("dependency") }
        dependency.exclusivityCategories = ["t7-x"]
        try waiting.addDependency(dependency)
        queue.addJob(dependency)
        gate.fire()
        await queue.waitUntilAllJobsAreFinished()
        #expect(order.values == ["dependency", "waiting"])
    }

    @Test func aJobProducedByARunningJobOfTheSameCategoryAsAJobWaitingOnTheProducer() async throws {
        // PK #364: with categories taken at enqueue, `produced` would queue behind `waiter`, which
        // waits for `producer`, which finishes only once `produced` has. Here categories are taken
        // at claim: `waiter`, waiting for its dependency, holds no place in line, so `produced`
        // runs, then `producer` finishes, then `waiter` runs.
        let queue = JobQueue(name: "produced-exclusive")
        let order = Log<String>()
        let producer = AsyncBlockJob { producer in
            order.append("producer")
            let produced = BlockJob { order.append("produced") }
            produced.exclusivityCategories = ["t9-x"]
            produced.observe { if $0 == .finished { producer.finish() } }
            producer.produce(produced)
        }
        let waiter = BlockJob { order.append("waiter") }
        waiter.exclusivityCategories = ["t9-x"]
        try waiter.addDependency(producer)
        queue.addJobs([waiter, producer], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(order.values == ["producer", "produced", "waiter"])
        #expect(JobQueue._exclusivityCategoriesInUse(among: ["t9-x"]) == 0)
    }

    @Test func randomGraphsOverThreeQueuesNeverOverlapAndDrain() async throws {
        let seed = SeededRandom.runSeed
        var random = SeededRandom(seed: seed, stream: 0xE8C1)
        let names = ["t8-c0", "t8-c1", "t8-c2", "t8-c3", "t8-c4", "t8-c5"]
        let guardian = CategoryGuard(names)
        let queues = (0..<3).map { JobQueue(name: "random-\($0)", maxConcurrentJobCount: 1 + $0 * 2) }
        var jobs: [Job] = []
        let ran = Counter()
        for index in 0..<3_000 {
            var drawn: Set<String> = []
            for _ in 0..<random.int(in: 0...3) { drawn.insert(names[random.int(names.count)]) }
            let categories = drawn
            let later = random.chance(0.3)
            let job: Job
            if later {
                job = AsyncBlockJob { job in
                    guardian.enter(categories, "job\(index)")
                    DispatchQueue.global().async {
                        guardian.leave(categories)
                        ran.increment()
                        job.finish()
                    }
                }
            } else {
                job = BlockJob {
                    guardian.enter(categories, "job\(index)")
                    guardian.leave(categories)
                    ran.increment()
                }
            }
            job.exclusivityCategories = categories
            for _ in 0..<random.int(in: 0...2) where !jobs.isEmpty {
                try job.addDependency(jobs[random.int(jobs.count)])
            }
            jobs.append(job)
        }
        var cancelled = 0
        for (index, job) in jobs.enumerated() {
            queues[index % 3].addJob(job)
            if random.chance(0.02) {
                jobs[random.int(index + 1)].cancel()
                cancelled += 1
            }
        }
        for queue in queues { await queue.waitUntilAllJobsAreFinished() }
        #expect(
            guardian.violations.values.isEmpty,
            "\(guardian.violations.values.prefix(5)) — \(SeededRandom.describe(seed))")
        #expect(jobs.allSatisfy { $0.isFinished })
        // Work that ran: every job not cancelled, and some cancelled while they ran.
        #expect(ran.value >= jobs.count { !$0.isCancelled } && ran.value <= jobs.count)
        #expect(JobQueue._exclusivityCategoriesInUse(among: names) == 0)
    }
}
