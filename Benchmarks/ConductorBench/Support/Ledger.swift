import Synchronization

/// The body every benchmark job runs, and the evidence that the jobs ran correctly.
///
/// `record(_:)` is one relaxed atomic increment, which claims a slot, plus one store of the job's
/// index into that slot. Every system runs exactly this per job, so they do equivalent work. After
/// the workload has drained, the slots give the order in which the jobs ran, which proves that
/// every job ran exactly once and, where the workload defines an order, that it was kept.
///
/// Why relaxed is enough: increments of one atomic are totally ordered, and that order agrees with
/// happens-before. A job that starts after another finished (a dependency, a serial queue) therefore
/// claims a later slot.
// @unchecked Sendable: the counters are atomics. Each slot of `slots` is written by the one thread
// whose increment claimed it, so no two threads write the same slot; slots are read only after the
// workload has drained, and the wait for that (a queue's wait, a group, a semaphore or awaiting a
// task) orders every write before the read.
final class Ledger: @unchecked Sendable {
    let capacity: Int
    private let count = Atomic<Int>(0)
    private let inFlight = Atomic<Int>(0)
    private let maxInFlight = Atomic<Int>(0)
    private let slots: UnsafeMutablePointer<Int32>

    init(capacity: Int) {
        self.capacity = capacity
        slots = .allocate(capacity: max(capacity, 1))
    }

    deinit {
        slots.deallocate()
    }

    /// The job body: records that job `index` ran.
    @inline(__always)
    func record(_ index: Int) {
        let slot = count.wrappingAdd(1, ordering: .relaxed).oldValue
        if slot < capacity {
            slots[slot] = Int32(truncatingIfNeeded: index)
        }
    }

    /// Marks the start of an asynchronous job's work, to check a concurrency limit.
    @inline(__always)
    func enter() {
        let now = inFlight.wrappingAdd(1, ordering: .relaxed).newValue
        var seen = maxInFlight.load(ordering: .relaxed)
        while now > seen {
            let (exchanged, original) = maxInFlight.compareExchange(
                expected: seen, desired: now, ordering: .relaxed)
            if exchanged { break }
            seen = original
        }
    }

    /// Marks the end of an asynchronous job's work; call it before the job is finished.
    @inline(__always)
    func leave() {
        inFlight.wrappingSubtract(1, ordering: .relaxed)
    }

    /// How many jobs ran. Read it after the workload has drained.
    var recorded: Int { count.load(ordering: .relaxed) }

    // MARK: Checks (after the workload has drained); each returns a failure message or nil.

    /// Every job in `0..<jobs` ran exactly once.
    func checkExactlyOnce(jobs: Int) -> String? {
        let ran = recorded
        guard ran == jobs else {
            return "\(Format.count(ran)) job runs recorded for \(Format.count(jobs)) jobs"
        }
        var seen = [Bool](repeating: false, count: jobs)
        for slot in 0..<jobs {
            let index = Int(slots[slot])
            guard index >= 0, index < jobs else { return "unknown job \(index) ran" }
            if seen[index] { return "job \(index) ran twice" }
            seen[index] = true
        }
        return nil
    }

    /// Jobs ran in index order: first in, first out.
    func checkFIFO(jobs: Int) -> String? {
        if let failure = checkExactlyOnce(jobs: jobs) { return failure }
        for slot in 0..<jobs where Int(slots[slot]) != slot {
            return "FIFO order broken: job \(slots[slot]) ran in position \(slot)"
        }
        return nil
    }

    /// Every job ran after all of its dependencies in `graph`.
    func checkTopological(_ graph: Graph) -> String? {
        if let failure = checkExactlyOnce(jobs: graph.count) { return failure }
        var position = [Int32](repeating: 0, count: graph.count)
        for slot in 0..<graph.count {
            position[Int(slots[slot])] = Int32(slot)
        }
        for node in 0..<graph.count {
            for dependency in graph.dependencies(of: node) where position[Int(dependency)] > position[node] {
                return "job \(node) ran before its dependency \(dependency)"
            }
        }
        return nil
    }

    /// No more than `limit` asynchronous jobs were in flight at once.
    func checkLimit(_ limit: Int) -> String? {
        let most = maxInFlight.load(ordering: .relaxed)
        return most > limit ? "\(most) jobs in flight at once; the limit is \(limit)" : nil
    }
}
