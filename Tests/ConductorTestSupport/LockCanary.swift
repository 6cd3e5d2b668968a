import Conductor
import Synchronization
import Testing

// Canaries for "no user code under the engine lock". Whatever a user hands Conductor (a block, a
// completion block, an observer, a condition, an error, a value) may hold the last reference to an
// object whose deinit is user code. A test captures a canary there; the canary's deinit records
// whether it ran with the engine lock held. Debug builds only: the check reads the lock's owner,
// which only debug builds record.

/// What a test's canaries saw: how many were freed, and which were freed under the engine lock.
package final class CanaryLedger: Sendable {
    private struct State {
        var made = 0
        var freed = 0
        var underLock: [String] = []
        /// Tasks in `waitUntilAllFreed()`, resumed when `freed` reaches `made`.
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Locked(State())

    package init() {}

    /// A canary that reports to this ledger; capture it where the test hands Conductor user code.
    package func canary(_ label: String) -> LockCanary {
        state.withLock { $0.made += 1 }
        return LockCanary(label: label, ledger: self)
    }

    fileprivate func freed(_ label: String, underLock: Bool) {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.freed += 1
            if underLock { state.underLock.append(label) }
            guard state.freed == state.made else { return [] }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Suspends until every canary made so far has been freed. For what no queue the test can drain
    /// releases (a condition's evaluation task, a group's children, Foundation's threads): a leak
    /// hangs here, so give the test a time limit. Blocks no thread.
    package func waitUntilAllFreed() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state in
                if state.freed == state.made { return true }
                state.waiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// How many canaries were made and how many were freed so far.
    package var counts: (made: Int, freed: Int) {
        state.withLock { ($0.made, $0.freed) }
    }

    /// The labels of the canaries freed with the engine lock held, in the order they were freed.
    package var freedUnderLock: [String] {
        state.withLock { $0.underLock }
    }

    /// Expects that at least `minimum` canaries were made (so that a scenario that released
    /// nothing cannot pass), that every one was freed, and that none was freed with the engine lock
    /// held.
    package func expectAllFreedOutsideTheLock(minimum: Int = 1, sourceLocation: SourceLocation = #_sourceLocation) {
        let (made, freed) = counts
        #expect(
            made >= minimum, "the scenario made \(made) canaries, fewer than \(minimum)", sourceLocation: sourceLocation
        )
        #expect(freed == made, "\(made - freed) of \(made) canaries were not freed", sourceLocation: sourceLocation)
        let underLock = freedUnderLock
        #expect(
            underLock.isEmpty,
            "\(underLock.count) canaries freed with the engine lock held: \(Set(underLock).sorted())",
            sourceLocation: sourceLocation)
    }

    /// A job whose work holds a canary (kept by the job: a `ProbeJob`'s work) and fails with a
    /// `CanaryError` holding another.
    package func failingJob(_ label: String) -> Job {
        let work = canary("\(label) work")
        let error = CanaryError(canary("\(label) error"))
        let job = ProbeJob { _ in
            work.touch()
            throw error
        }
        job.name = label
        return job
    }
}

/// An object whose deinit tells its ledger whether the calling thread held the engine lock.
package final class LockCanary: Sendable {
    package let label: String
    private let ledger: CanaryLedger

    fileprivate init(label: String, ledger: CanaryLedger) {
        self.label = label
        self.ledger = ledger
    }

    /// Does nothing: a closure that calls it captures the canary.
    package func touch() {}

    deinit {
        #if DEBUG
            ledger.freed(label, underLock: _engineLockIsHeldByCurrentThread)
        #else
            ledger.freed(label, underLock: false)
        #endif
    }
}

/// An error that carries a canary, for jobs that fail or are cancelled with it.
package struct CanaryError: Error, Sendable {
    package let canary: LockCanary

    package init(_ canary: LockCanary) {
        self.canary = canary
    }
}
