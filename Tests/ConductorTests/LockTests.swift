import Conductor
import ConductorTestSupport
import Dispatch
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A total that only a `_Lock` guards, to find lost updates.
// @unchecked Sendable: `value` is read and written only with the test's lock held.
private final class GuardedTotal: @unchecked Sendable {
    var value = 0
}

// The engine's lock (`_Lock`; Docs/Design.md, "One engine lock"): one atomic word while it is free,
// a condition variable to sleep on while it is not. Every thread that blocks is a Dispatch thread.
@Suite struct LockTests {
    /// Four threads on two cores add to a total under the lock, each holding it across a yield now
    /// and then, so that the others may run out of spins and sleep: no increment is lost.
    @Test(.hangLimit)
    func contendedAcquisitionsExcludeEachOther() async {
        let lock = _Lock()
        let total = GuardedTotal()
        let threads = 4
        let rounds = 20_000
        let done = DispatchSemaphore(value: 0)
        for thread in 0..<threads {
            DispatchQueue(label: "LockTests.adder.\(thread)").async {
                for round in 0..<rounds {
                    lock.lock()
                    let before = total.value
                    if round % 64 == 0 {
                        sched_yield()  // Held across a yield: another thread may take the processor and wait.
                    }
                    total.value = before + 1
                    lock.unlock()
                }
                done.signal()
            }
        }
        await waitForSignals(done, count: threads)
        #expect(lock.withLock { total.value } == threads * rounds)
    }

    /// Threads that find the lock held go to sleep on it (the first marks the lock, state 2, on its
    /// way to sleep), and the holder's release wakes them all in turn: each thread woken takes the
    /// lock keeping the mark, so that its own release wakes the next.
    @Test(.hangLimit, arguments: [1, 3])
    func threadsAsleepOnTheLockAreWokenInTurn(sleepers: Int) async {
        let lock = _Lock()
        let total = GuardedTotal()
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let acquired = DispatchSemaphore(value: 0)
        DispatchQueue(label: "LockTests.holder").async {
            lock.lock()
            held.signal()
            release.wait()
            lock.unlock()
        }
        await waitForSignals(held)
        for sleeper in 0..<sleepers {
            DispatchQueue(label: "LockTests.sleeper.\(sleeper)").async {
                lock.lock()
                total.value += 1
                lock.unlock()
                acquired.signal()
            }
        }
        while lock._sleepingThreads < sleepers {
            await Task.yield()
        }
        #expect(lock._hasSleeper)
        release.signal()
        await waitForSignals(acquired, count: sleepers)
        #expect(lock.withLock { total.value } == sleepers)
        #expect(!lock._hasSleeper)
        #expect(lock._sleepingThreads == 0)
    }

    #if DEBUG
        /// In debug builds (`CONDUCTOR_INVARIANTS`), taking the lock again on the thread that holds it
        /// traps with a message, where a release build would deadlock.
        @Test(.hangLimit)
        func aRecursiveAcquisitionTrapsInDebugBuilds() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let lock = _Lock()
                lock.lock()
                lock.lock()
            }
            #expect(standardErrorText(result).contains("acquired recursively"))
        }

        /// In debug builds, releasing the lock from a thread that does not hold it traps with a
        /// message, where a release build would let two threads in at once.
        @Test(.hangLimit)
        func aReleaseByAnotherThreadTrapsInDebugBuilds() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let lock = _Lock()
                lock.lock()
                let released = DispatchSemaphore(value: 0)
                DispatchQueue(label: "LockTests.stranger").async {
                    lock.unlock()
                    released.signal()
                }
                await waitForSignals(released)
            }
            #expect(standardErrorText(result).contains("released by a thread that does not hold it"))
        }
    #endif
}
