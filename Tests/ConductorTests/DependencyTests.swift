import Conductor
import ConductorTestSupport
import Dispatch
import Synchronization
import Testing

// Dependencies: adding and removing them around enqueueing and across queues, releasing dependents,
// memory (finished graphs free in any order, long chains without recursion), and cycle refusal by
// the incremental topological order (Pearce–Kelly), checked against a brute-force model.

// MARK: - Helpers (private to this file)

/// A synchronous job that checks, when it runs, that the jobs it must follow have finished.
// @unchecked Sendable: `mustFollow` is set before the job is enqueued or started; the rest is immutable and Sendable.
private final class CheckedJob: Job, @unchecked Sendable {
    /// Set before the job is enqueued or started; read by execute() (ordered by the engine's lock).
    var mustFollow: [Job] = []
    private let violations: Counter
    private let runs: Counter
    private let order: Log<String>?

    init(_ name: String, violations: Counter, runs: Counter = Counter(), order: Log<String>? = nil) {
        self.violations = violations
        self.runs = runs
        self.order = order
        super.init()
        self.name = name
    }

    override func execute() {
        for job in mustFollow where !job.isFinished {
            violations.increment()
        }
        runs.increment()
        order?.append(displayName)
    }
}

/// Evaluates `body` and returns the error it threw, or `nil`.
private func thrownError(_ body: @autoclosure () throws(JobError) -> Void) -> JobError? {
    do {
        try body()
        return nil
    } catch {
        return error
    }
}

private func ids(_ jobs: [Job]) -> [UInt64] { jobs.map(\.id) }

// MARK: - Tests

@Suite("Dependencies")
struct DependencyTests {
    // MARK: Adding dependencies

    @Test("a dependency added before enqueueing holds the dependent back, whatever the order of adding")
    func addedBeforeEnqueue() async throws {
        let violations = Counter()
        let order = Log<String>()
        let queue = JobQueue(name: "before")
        let first = AsyncBlockJob { job in
            DispatchQueue.global().async {
                order.append("first")
                job.finish()
            }
        }
        let second = CheckedJob("second", violations: violations, order: order)
        try second.addDependency(first)
        second.mustFollow = [first]
        #expect(second.state == .pending)
        #expect(ids(second.dependencies) == [first.id])

        queue.addJob(second)  // the dependent first
        queue.addJob(first)
        await queue.waitUntilAllJobsAreFinished()
        #expect(order.values == ["first", "second"])
        #expect(violations.value == 0)
    }

    @Test("a dependency added after both jobs were enqueued holds the dependent back")
    func addedAfterEnqueue() async throws {
        let violations = Counter()
        // One slot and first-in-first-out order: a job wrongly left in line would start first.
        let queue = JobQueue(name: "after", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        let first = CheckedJob("first", violations: violations)
        let second = CheckedJob("second", violations: violations)
        let third = CheckedJob("third", violations: violations)
        queue.addJobs([third, second, first], waitUntilFinished: false)
        #expect(third.state == .ready)

        try third.addDependency(second)  // a ready job waiting in line goes back to pending
        try second.addDependency(first)
        third.mustFollow = [second, first]
        second.mustFollow = [first]
        #expect(third.state == .pending && second.state == .pending && first.state == .ready)

        queue.isSuspended = false
        await queue.waitUntilAllJobsAreFinished()
        #expect(violations.value == 0)
        #expect([first, second, third].allSatisfy { $0.isFinished && !$0.isCancelled })
    }

    @Test("a dependency on a job executing on another queue holds the dependent back until it finishes")
    func addedWhileDependencyExecutes() async throws {
        let started = AsyncStream<Void>.makeStream()
        let first = AsyncBlockJob { _ in started.continuation.yield() }
        let firstQueue = JobQueue(name: "first")
        firstQueue.addJob(first)
        for await _ in started.stream { break }

        let violations = Counter()
        let second = CheckedJob("second", violations: violations)
        second.mustFollow = [first]
        try second.addDependency(first)
        let secondQueue = JobQueue(name: "second")
        secondQueue.addJob(second)
        #expect(second.state == .pending)

        first.finish()
        await secondQueue.waitUntilAllJobsAreFinished()
        #expect(second.isFinished)
        #expect(violations.value == 0)
    }

    @Test("dependencies work across queues: a chain alternating between two queues runs in order")
    func acrossQueues() async throws {
        let queues = [JobQueue(name: "even"), JobQueue(name: "odd")]
        let violations = Counter()
        let order = Log<String>()
        var jobs: [CheckedJob] = []
        for index in 0..<50 {
            let job = CheckedJob("\(index)", violations: violations, order: order)
            if let previous = jobs.last {
                try job.addDependency(previous)
                job.mustFollow = [previous]
            }
            jobs.append(job)
        }
        // Add them back to front, so that every dependent is on its queue before its dependency.
        for (index, job) in jobs.enumerated().reversed() {
            queues[index % 2].addJob(job)
        }
        for queue in queues { await queue.waitUntilAllJobsAreFinished() }
        #expect(violations.value == 0)
        #expect(order.values == (0..<50).map { "\($0)" })
    }

    @Test("a dependency on a finished job, cancelled or not, is satisfied at once")
    func dependencyOnAFinishedJob() async throws {
        let done = Job()
        done.start()
        let cancelled = Job()
        cancelled.cancel()
        let job = Job()
        try job.addDependency(done)
        try job.addDependency(cancelled)
        #expect(job.state == .ready)
        #expect(ids(job.dependencies) == [done.id, cancelled.id])
        job.start()  // would trap if the job were not ready
        #expect(job.isFinished)
        #expect(job.dependencies.isEmpty)
    }

    @Test("adding the same dependency twice does nothing")
    func duplicateDependency() throws {
        // Few dependencies (a list is scanned) and many (a set of identities is kept).
        for count in [3, 40] {
            let dependencies = (0..<count).map { _ in Job() }
            let job = Job()
            for dependency in dependencies { try job.addDependency(dependency) }
            for dependency in dependencies.reversed() { try job.addDependency(dependency) }
            #expect(ids(job.dependencies) == ids(dependencies))
            for dependency in dependencies.dropLast() { dependency.start() }
            #expect(job.state == .pending)
            dependencies.last!.start()
            #expect(job.state == .ready, "each dependency was counted once (\(count) dependencies)")
        }
    }

    @Test(
        "a duplicate is found from either end of the edge, and a removed edge can be added again",
        arguments: [0, 20])
    func duplicateFoundFromEitherEnd(otherDependents: Int) throws {
        // 40 dependencies, so the job's own list is long. With no other dependents, each dependency's
        // list is short and is the one scanned; with 20 each, both are long and a set is kept.
        let dependencies = (0..<40).map { _ in Job() }
        let others = (0..<otherDependents).map { _ in Job() }
        for other in others {
            for dependency in dependencies { try other.addDependency(dependency) }
        }
        let job = Job()
        for dependency in dependencies { try job.addDependency(dependency) }
        for dependency in dependencies.reversed() { try job.addDependency(dependency) }
        #expect(ids(job.dependencies) == ids(dependencies))
        #expect(others.allSatisfy { ids($0.dependencies) == ids(dependencies) })

        job.removeDependency(dependencies[7])
        try job.addDependency(dependencies[7])
        try job.addDependency(dependencies[7])
        #expect(ids(job.dependencies) == ids(dependencies.filter { $0 !== dependencies[7] } + [dependencies[7]]))

        for dependency in dependencies.dropLast() { dependency.start() }
        // Finished dependencies have dropped their dependents: the job's own list (or set) decides.
        for dependency in dependencies.dropLast() { try job.addDependency(dependency) }
        #expect(job.dependencies.count == 40)
        #expect(job.state == .pending)
        dependencies.last!.start()
        #expect(job.state == .ready, "each dependency was counted once")
    }

    // MARK: Removing dependencies

    @Test("removing the last unfinished dependency makes the job ready, and its queue runs it")
    func removeLastDependency() async throws {
        let neverRuns = Job()  // never started
        let alsoNeverRuns = Job()
        let runs = Counter()
        let job = BlockJob { runs.increment() }
        try job.addDependency(neverRuns)
        try job.addDependency(alsoNeverRuns)
        let events = Log<JobEvent>()
        job.observe { events.append($0) }

        let queue = JobQueue(name: "remove", maxConcurrentJobCount: 1)
        queue.isSuspended = true
        queue.addJob(job)
        job.removeDependency(Job())  // not a dependency: nothing happens
        job.removeDependency(alsoNeverRuns)
        #expect(job.state == .pending)
        #expect(ids(job.dependencies) == [neverRuns.id])

        job.removeDependency(neverRuns)
        #expect(job.state == .ready)
        #expect(job.dependencies.isEmpty)
        #expect(events.values == [.ready])

        // A job added now became ready later than `job`, so with one slot it starts after `job` has
        // finished. Awaiting it cannot hang even if `job` were (wrongly) never started.
        let later = Job()
        queue.addJob(later)
        queue.isSuspended = false
        await later.waitUntilFinished()
        #expect(job.isFinished)
        #expect(runs.value == 1)
        #expect(events.values == [.ready, .started, .finished])
        job.cancel()  // cleanup if it never ran
        #expect(neverRuns.state == .ready && alsoNeverRuns.state == .ready)
    }

    @Test("removing a finished dependency, or one of several unfinished ones, keeps the count right")
    func removeOtherDependencies() throws {
        let finished = Job()
        let first = Job()
        let second = Job()
        let job = Job()
        try job.addDependency(finished)
        try job.addDependency(first)
        try job.addDependency(second)
        finished.start()
        #expect(job.state == .pending)
        job.removeDependency(finished)
        #expect(job.state == .pending)
        job.removeDependency(first)
        #expect(job.state == .pending)
        first.start()  // no longer a dependency: no effect on the count
        #expect(job.state == .pending)
        second.start()
        #expect(job.state == .ready)
    }

    // MARK: Releasing dependents

    @Test(
        "the addresses a job prefetches before its finish are its dependents', for none, one and several",
        arguments: [0, 1, 2, 5])
    func prefetchedAddressesAreTheDependents(count: Int) throws {
        let job = BlockJob {}
        let dependents = (0..<count).map { _ in BlockJob {} }
        for dependent in dependents {
            try dependent.addDependency(job)
        }
        let expected = dependents.map { UnsafeRawPointer(Unmanaged.passUnretained($0).toOpaque()) }
        #expect(job._dependentAddressesToPrefetch == expected)
        // Once the job finishes its dependents are dropped, and nothing is left to load.
        job.start()
        #expect(job._dependentAddressesToPrefetch.isEmpty)
        #expect(dependents.allSatisfy { $0.state == .ready })
    }

    @Test("a finished job releases its dependents: a fan-out of 1,000 all run, after it")
    func fanOut() async throws {
        let worker = DispatchQueue(label: "DependencyTests.fanOut")
        let queue = JobQueue(name: "fan-out")
        queue.underlyingQueue = worker
        let violations = Counter()
        let runs = Counter()
        let root = AsyncBlockJob { job in
            DispatchQueue.global().async { job.finish() }
        }
        var weakDependents: [WeakReference<Job>] = []
        do {
            var dependents: [Job] = []
            for index in 0..<1_000 {
                let dependent = CheckedJob("dependent \(index)", violations: violations, runs: runs)
                try dependent.addDependency(root)
                dependent.mustFollow = [root]
                dependents.append(dependent)
                weakDependents.append(WeakReference(dependent))
            }
            queue.addJobs(dependents, waitUntilFinished: false)
            #expect(queue.jobCount == 1_000)
            #expect(dependents.allSatisfy { $0.state == .pending })
        }
        queue.addJob(root)
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(runs.value == 1_000)
        #expect(violations.value == 0)
        #expect(root.dependencies.isEmpty)
        // The finished root, still alive here, no longer holds its dependents.
        #expect(weakDependents.allSatisfy { $0.object == nil })
    }

    /// A job with many dependents makes room in the first one's ready line before releasing them
    /// (`Job._reserveLineLocked`). The guess must not change the order, for dependents on another
    /// queue or at another priority either.
    @Test("a fan-out of 200 enters the ready lines in order, by priority, across two queues")
    func fanOutOrder() async throws {
        let first = JobQueue(name: "first", maxConcurrentJobCount: 1)
        let second = JobQueue(name: "second", maxConcurrentJobCount: 1)
        let violations = Counter()
        let (firstOrder, secondOrder) = (Log<String>(), Log<String>())
        let root = BlockJob {}
        var expectedHigh: [String] = []
        var expectedNormal: [String] = []
        var expectedSecond: [String] = []
        for index in 0..<200 {
            let onSecond = index % 3 == 1
            let name = "d\(index)"
            let dependent = CheckedJob(name, violations: violations, order: onSecond ? secondOrder : firstOrder)
            try dependent.addDependency(root)
            dependent.mustFollow = [root]
            if onSecond {
                expectedSecond.append(name)
                second.addJob(dependent)
            } else {
                if index % 5 == 4 {
                    dependent.queuePriority = .high
                    expectedHigh.append(name)
                } else {
                    expectedNormal.append(name)
                }
                first.addJob(dependent)
            }
        }
        first.addJob(root)
        await first.waitUntilAllJobsAreFinished()
        await second.waitUntilAllJobsAreFinished()
        #expect(violations.value == 0)
        #expect(firstOrder.values == expectedHigh + expectedNormal)
        #expect(secondOrder.values == expectedSecond)
    }

    @Test("cancelling an unstarted job releases its dependents, which see it as cancelled")
    func cancelReleasesDependents() async throws {
        let blocker = Job()  // never runs
        let cancelled = Job()
        try cancelled.addDependency(blocker)
        let seen = Log<String>()
        let dependent = BlockJob {
            seen.append("finished: \(cancelled.isFinished), cancelled: \(cancelled.isCancelled)")
        }
        try dependent.addDependency(cancelled)
        let queue = JobQueue(name: "cancel")
        queue.addJob(dependent)
        queue.addJob(cancelled)
        #expect(dependent.state == .pending && cancelled.state == .pending)

        cancelled.cancel()
        #expect(cancelled.isFinished)
        try #require(dependent.state != .pending, "released at once")
        await queue.waitUntilAllJobsAreFinished()
        #expect(seen.values == ["finished: true, cancelled: true"])
        #expect(blocker.state == .ready)
        #expect(cancelled.dependencies.isEmpty)
    }

    @Test("a finished job's dependencies are empty")
    func dependenciesEmptyAfterFinish() async throws {
        let first = Job()
        let second = Job()
        let job = Job()
        try job.addDependency(first)
        try job.addDependency(second)
        #expect(ids(job.dependencies) == [first.id, second.id])
        let queue = JobQueue()
        queue.addJobs([job, second, first], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(job.isFinished)
        #expect(job.dependencies.isEmpty)
        #expect(first.dependencies.isEmpty && second.dependencies.isEmpty)
    }

    // MARK: Memory

    @Test("finished jobs free in any order", arguments: [true, false])
    func finishedJobsFreeInAnyOrder(dropDependentFirst: Bool) async throws {
        let worker = DispatchQueue(label: "DependencyTests.free")
        let queue = JobQueue(name: "free")
        queue.underlyingQueue = worker
        var dependent: Job? = Job()
        var dependency: Job? = Job()
        weak let weakDependent = dependent
        weak let weakDependency = dependency
        try dependent!.addDependency(dependency!)
        queue.addJob(dependent!)
        queue.addJob(dependency!)
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        #expect(dependent!.isFinished && dependency!.isFinished)

        if dropDependentFirst {
            dependent = nil
            #expect(weakDependent == nil)
            #expect(weakDependency != nil)
            dependency = nil
        } else {
            dependency = nil
            #expect(weakDependency == nil, "a finished dependent does not hold its dependencies")
            #expect(weakDependent != nil)
            dependent = nil
        }
        #expect(weakDependent == nil)
        #expect(weakDependency == nil)
    }

    @Test("a chain of 100,000 finished jobs frees without recursion")
    func longChainFrees() async throws {
        let worker = DispatchQueue(label: "DependencyTests.chain")
        let queue = JobQueue(name: "chain")
        queue.underlyingQueue = worker
        let count = 100_000
        var last: Job? = Job()
        weak let first = last
        do {
            var jobs: [Job] = [last!]
            jobs.reserveCapacity(count)
            for _ in 1..<count {
                let job = Job()
                try job.addDependency(jobs[jobs.count - 1])
                jobs.append(job)
            }
            last = jobs[jobs.count - 1]
            queue.addJobs(jobs, waitUntilFinished: false)
        }
        await last!.waitUntilFinished()
        await queue.waitUntilAllJobsAreFinished()
        await drainSerialQueue(worker)
        weak let weakLast = last
        last = nil  // the only reference to the last job: had it kept the chain, this would recurse 100,000 deep
        #expect(weakLast == nil)
        #expect(first == nil)
    }

    // MARK: Cycles

    @Test("a job cannot depend on itself")
    func selfDependency() throws {
        let job = Job()
        job.name = "Narcissus"
        let thrown = try #require(thrownError(try job.addDependency(job)))
        #expect(thrown.code == .dependencyCycle)
        #expect(ids(thrown.jobs) == [job.id])
        #expect(thrown.description.contains("'Narcissus'"))
        #expect(job.dependencies.isEmpty)
        #expect(job.state == .ready)
    }

    @Test("a two-job cycle is refused, naming both jobs, and the graph is unchanged")
    func twoCycle() async throws {
        let a = Job()
        a.name = "A"
        let b = Job()
        b.name = "B"
        try b.addDependency(a)
        let thrown = try #require(thrownError(try a.addDependency(b)))
        #expect(thrown.code == .dependencyCycle)
        #expect(ids(thrown.jobs) == [a.id, b.id], "A would wait for B, and B waits for A")
        #expect(thrown.description.contains("'A' waits for 'B' waits for 'A'"))
        #expect(a.dependencies.isEmpty)
        #expect(ids(b.dependencies) == [a.id])
        #expect(a.state == .ready && b.state == .pending)

        a.start()
        #expect(b.state == .ready)
    }

    @Test("a longer cycle found through the reordering search names exactly its jobs, in order")
    func longerCycle() async throws {
        // Each job depends on one created after it, so every edge takes the Pearce–Kelly slow path
        // (the dependency's initial order is greater than the dependent's) and reorders the jobs.
        // Each job's work records its start: observers are not used for the order, because an
        // event may be delivered by another thread after a later job's.
        let order = Log<String>()
        func recording(_ name: String) -> Job {
            let job = BlockJob { order.append(name) }
            job.name = name
            return job
        }
        let jobs = (0..<5).map { recording("J\($0)") }
        for index in 0..<4 {
            try jobs[index].addDependency(jobs[index + 1])  // J0 waits for J1, ..., J3 waits for J4
        }
        // Jobs that hang off the cycle must not appear in the error.
        let offCycle = recording("off")
        try offCycle.addDependency(jobs[2])
        let offDependency = recording("offDependency")
        try jobs[4].addDependency(offDependency)

        let thrown = try #require(thrownError(try jobs[4].addDependency(jobs[0])))
        #expect(thrown.code == .dependencyCycle)
        // J4 would wait for J0, J0 waits for J1, J1 for J2, J2 for J3, and J3 for J4.
        #expect(ids(thrown.jobs) == ids([jobs[4], jobs[0], jobs[1], jobs[2], jobs[3]]))
        #expect(
            thrown.description.contains(
                "'J4' waits for 'J0' waits for 'J1' waits for 'J2' waits for 'J3' waits for 'J4'"))

        // Refused in the middle of the cycle too.
        let middle = try #require(thrownError(try jobs[2].addDependency(jobs[0])))
        #expect(ids(middle.jobs) == ids([jobs[2], jobs[0], jobs[1]]))

        // The graph is unchanged: the jobs run in dependency order.
        #expect(ids(jobs[4].dependencies) == [offDependency.id])
        #expect(ids(jobs[2].dependencies) == [jobs[3].id])
        let queue = JobQueue(name: "cycle", maxConcurrentJobCount: 1)
        queue.addJobs(jobs + [offCycle, offDependency], waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        let started = order.values
        #expect(
            started.filter { $0.hasPrefix("J") || $0 == "offDependency" } == [
                "offDependency", "J4", "J3", "J2", "J1", "J0",
            ])
        #expect(started.firstIndex(of: "off")! > started.firstIndex(of: "J2")!)
    }

    @Test("a cycle across two queues is refused")
    func cycleAcrossQueues() async throws {
        let first = Job()
        let second = Job()
        let firstQueue = JobQueue(name: "first")
        let secondQueue = JobQueue(name: "second")
        firstQueue.isSuspended = true
        secondQueue.isSuspended = true
        firstQueue.addJob(first)
        secondQueue.addJob(second)
        try first.addDependency(second)
        let thrown = try #require(thrownError(try second.addDependency(first)))
        #expect(thrown.code == .dependencyCycle)
        #expect(ids(thrown.jobs) == [second.id, first.id])

        firstQueue.isSuspended = false
        secondQueue.isSuspended = false
        await firstQueue.waitUntilAllJobsAreFinished()
        await secondQueue.waitUntilAllJobsAreFinished()
        #expect(first.isFinished && second.isFinished)
    }

    @Test("a job that has started or finished cannot gain a dependency")
    func alreadyStarted() async throws {
        let executing = AsyncBlockJob { _ in }
        executing.name = "running"
        let other = Job()
        other.name = "other"
        executing.start()
        let thrown = try #require(thrownError(try executing.addDependency(other)))
        #expect(thrown.code == .alreadyStarted)
        #expect(ids(thrown.jobs) == [executing.id, other.id])
        #expect(thrown.description.contains("'running'") && thrown.description.contains("'other'"))
        #expect(executing.dependencies.isEmpty)

        executing.finish()
        #expect(thrownError(try executing.addDependency(other))?.code == .alreadyStarted)

        let cancelled = Job()
        cancelled.cancel()
        #expect(thrownError(try cancelled.addDependency(other))?.code == .alreadyStarted)
        #expect(cancelled.dependencies.isEmpty)

        // `other` gained no dependent: a new edge from it is accepted and it still runs.
        let next = Job()
        try next.addDependency(other)
        other.start()
        #expect(other.isFinished && next.state == .ready)
    }

    // MARK: Property test

    @Test(
        "the incremental topological order accepts exactly the edges a brute-force reachability check accepts",
        arguments: [1, 2, 3, 42, 0xDEAD_BEEF] as [UInt64])
    func pearceKellyMatchesBruteForce(seed: UInt64) async throws {
        var random = SeededRandom(seed: seed)
        let count = 200
        let violations = Counter()
        // Created in one order, indexed in another: about half the insertions take the slow path.
        var created = (0..<count).map { _ in CheckedJob("", violations: violations) }
        created.shuffle(using: &random)
        let jobs = created
        var index: [ObjectIdentifier: Int] = [:]
        for (position, job) in jobs.enumerated() {
            job.name = "J\(position)"
            index[ObjectIdentifier(job)] = position
        }

        // The model: each job's dependencies in the order added, and which jobs are finished
        // (cancelled before they started; a finished job drops its dependencies).
        var dependencies = Array(repeating: [Int](), count: count)
        var finished = Array(repeating: false, count: count)

        /// Whether `from` waits, directly or not, for `target`, through unfinished jobs.
        func waits(_ from: Int, for target: Int) -> Bool {
            var seen = Set([from])
            var stack = [from]
            while let job = stack.popLast() {
                for next in dependencies[job] where !finished[next] {
                    if next == target { return true }
                    if seen.insert(next).inserted { stack.append(next) }
                }
            }
            return false
        }

        func fail(_ step: Int, _ message: String) {
            Issue.record("seed \(seed), step \(step): \(message)")
        }

        func modelMatchesEngine(_ step: Int) -> Bool {
            for position in 0..<count {
                let job = jobs[position]
                let actual = job.dependencies.map { index[ObjectIdentifier($0)]! }
                if actual != dependencies[position] {
                    fail(step, "J\(position).dependencies is \(actual), expected \(dependencies[position])")
                    return false
                }
                let expectedState: JobState =
                    finished[position]
                    ? .finished : dependencies[position].contains { !finished[$0] } ? .pending : .ready
                if job.state != expectedState {
                    fail(step, "J\(position) is \(job.state), expected \(expectedState)")
                    return false
                }
            }
            return true
        }

        var accepted = 0
        var refused = 0
        for step in 0..<2_500 {
            let roll = random.next() % 100
            if roll < 2 {
                // Cancel an unfinished job: it finishes and drops its edges.
                let victim = Int(random.next() % UInt64(count))
                jobs[victim].cancel()
                finished[victim] = true
                dependencies[victim] = []
                continue
            }
            if roll < 7 {
                // Remove one existing edge.
                let dependent = Int(random.next() % UInt64(count))
                guard !dependencies[dependent].isEmpty else { continue }
                let position = Int(random.next() % UInt64(dependencies[dependent].count))
                let dependency = dependencies[dependent].remove(at: position)
                jobs[dependent].removeDependency(jobs[dependency])
                continue
            }
            let dependent = Int(random.next() % UInt64(count))
            let dependency = Int(random.next() % UInt64(count))
            let thrown = thrownError(try jobs[dependent].addDependency(jobs[dependency]))

            if dependent == dependency {
                guard let thrown, thrown.code == .dependencyCycle, ids(thrown.jobs) == [jobs[dependent].id] else {
                    return fail(step, "J\(dependent) depending on itself: got \(String(describing: thrown))")
                }
            } else if finished[dependent] {
                guard let thrown, thrown.code == .alreadyStarted else {
                    return fail(step, "finished J\(dependent) gained J\(dependency): \(String(describing: thrown))")
                }
            } else if dependencies[dependent].contains(dependency) {
                if let thrown { return fail(step, "duplicate J\(dependent) → J\(dependency) threw \(thrown)") }
            } else if !finished[dependency] && waits(dependency, for: dependent) {
                guard let thrown, thrown.code == .dependencyCycle else {
                    return fail(
                        step, "J\(dependent) → J\(dependency) closes a cycle but got \(String(describing: thrown))")
                }
                // The reported cycle: the new edge, then existing edges back to the dependent.
                let cycle = thrown.jobs.map { index[ObjectIdentifier($0)]! }
                guard cycle.count >= 2, cycle[0] == dependent, cycle[1] == dependency,
                    Set(cycle).count == cycle.count, cycle.allSatisfy({ !finished[$0] })
                else {
                    return fail(step, "bad cycle \(cycle) for J\(dependent) → J\(dependency)")
                }
                for position in 1..<cycle.count {
                    let waiter = cycle[position]
                    let awaited = cycle[(position + 1) % cycle.count]
                    guard dependencies[waiter].contains(awaited) else {
                        return fail(step, "cycle \(cycle): J\(waiter) does not wait for J\(awaited)")
                    }
                }
                refused += 1
            } else {
                if let thrown {
                    return fail(step, "J\(dependent) → J\(dependency) is acyclic but threw \(thrown)")
                }
                dependencies[dependent].append(dependency)
                accepted += 1
            }
            if step % 250 == 0, !modelMatchesEngine(step) { return }
        }
        guard modelMatchesEngine(2_500) else { return }
        #expect(accepted > 100 && refused > 50, "seed \(seed): the run exercised both outcomes")

        // Run everything: every job must start after all its (remaining) dependencies finished.
        for (position, job) in jobs.enumerated() {
            job.mustFollow = dependencies[position].map { jobs[$0] }
        }
        let queue = JobQueue(name: "property")
        queue.addJobs(jobs.enumerated().filter { !finished[$0.offset] }.map(\.element), waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        #expect(violations.value == 0, "seed \(seed)")
        #expect(jobs.allSatisfy { $0.isFinished }, "seed \(seed)")
    }
}
