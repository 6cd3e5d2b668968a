import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A mutual-exclusion lock: one atomic word when uncontended, a pthread mutex and condition
/// variable to sleep on when not.
///
/// Taking and releasing a free lock is one compare-and-swap and one exchange on `state`, inlined
/// into the caller. A thread that finds it held spins briefly, then sleeps on `wakeup`; a release
/// that finds a possible sleeper (`state` 2) signals one. This is the classic three-state futex
/// lock, with the futex replaced by a condition variable, since Swift cannot call `syscall`.
///
/// Conductor does not use `Synchronization.Mutex`: on Linux it is built on raw futexes inside the
/// standard library, where ThreadSanitizer cannot see them, so every report TSan made about the
/// engine would be suspect. Here the handover is carried by the atomics on `state` (compiled into
/// this module, so TSan instruments them: an acquiring exchange pairs with the releasing one) and
/// the sleeping by a pthread mutex and condition variable, which TSan understands.
///
/// `package` so that the adapter and the tests in this package use the same TSan-visible lock.
///
/// - Important: Never call user code while holding a `_Lock`. The engine decides inside the lock and
///   acts after unlocking; see `Docs/Design.md`.
// @unchecked Sendable: `state` is atomic; `sleepers` and `wakeup` point to a pthread mutex and
// condition variable, themselves synchronization primitives (allocated once in `init` and freed in
// `deinit`); `sleeping` is only read or written with `sleepers` locked; `isProfiled` is constant;
// `profile` is only read or written with the lock held; `owner` is atomic.
package final class _Lock: @unchecked Sendable {
    /// 0: free; 1: held; 2: held, and a thread may be asleep waiting for it.
    private let state = Atomic<UInt32>(0)
    /// Guards sleeping on `wakeup` (never held across a critical section of the lock itself).
    private let sleepers: UnsafeMutablePointer<pthread_mutex_t>
    private let wakeup: UnsafeMutablePointer<pthread_cond_t>
    /// How many threads are asleep on `wakeup`, guarded by `sleepers`. For tests.
    private var sleeping = 0
    /// Whether ``_LockProfiler`` measures this lock while it runs (the engine lock only).
    private let isProfiled: Bool
    /// What the profiler has measured, guarded by this lock itself.
    @exclusivity(unchecked) fileprivate var profile = _LockProfile()
    #if CONDUCTOR_INVARIANTS
        /// The thread holding the lock, so that a recursive acquisition traps instead of deadlocking.
        private let owner = Atomic<UInt>(0)
    #endif

    /// How many times a thread that finds the lock held checks it again before it sleeps: about
    /// 2.7 µs on the 2-core machine while the word does not change. Critical sections are a few
    /// hundred nanoseconds, so most contended acquisitions succeed within the spin, without a system
    /// call on either side; sleeping and being woken costs microseconds on both. Measured: 1,000
    /// checks made two workers trading the lock on short jobs (`exclusive`, `group`) slower than the
    /// pthread mutex this replaced; 10,000 made them faster.
    private static let spins = 10_000

    package init(profiled: Bool = false) {
        isProfiled = profiled
        sleepers = .allocate(capacity: 1)
        wakeup = .allocate(capacity: 1)
        var result = pthread_mutex_init(sleepers, nil)
        _require(result == 0, "pthread_mutex_init failed: \(result)")
        result = pthread_cond_init(wakeup, nil)
        _require(result == 0, "pthread_cond_init failed: \(result)")
    }

    deinit {
        pthread_cond_destroy(wakeup)
        pthread_mutex_destroy(sleepers)
        wakeup.deallocate()
        sleepers.deallocate()
    }

    @inline(__always)
    package func lock() {
        if isProfiled && _isLockProfiling.load(ordering: .relaxed) {
            lockProfiled()
            return
        }
        rawLock()
    }

    @inline(__always)
    package func unlock() {
        if isProfiled && _isLockProfiling.load(ordering: .relaxed) {
            unlockProfiled()
            return
        }
        rawUnlock()
    }

    @inline(__always)
    private func rawLock() {
        #if CONDUCTOR_INVARIANTS
            let me = Self.currentThread
            _require(owner.load(ordering: .relaxed) != me, "Conductor engine lock acquired recursively")
        #endif
        if !state.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged {
            lockContended()
        }
        #if CONDUCTOR_INVARIANTS
            owner.store(me, ordering: .relaxed)
        #endif
    }

    @inline(never)
    private func lockContended() {
        for _ in 0..<Self.spins {
            if state.load(ordering: .relaxed) == 0
                && state.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
            {
                return
            }
        }
        pthread_mutex_lock(sleepers)
        // 2 tells the holder that it must wake a sleeper when it releases. Whoever takes the lock
        // here keeps the 2 (another thread may still sleep), so its release wakes one more.
        while state.exchange(2, ordering: .acquiring) != 0 {
            // A release between the exchange and this wait signals after it: the releasing thread
            // takes `sleepers` first, which this thread holds until it sleeps.
            sleeping += 1
            pthread_cond_wait(wakeup, sleepers)
            sleeping -= 1
        }
        pthread_mutex_unlock(sleepers)
    }

    @inline(__always)
    private func rawUnlock() {
        #if CONDUCTOR_INVARIANTS
            _require(
                owner.load(ordering: .relaxed) == Self.currentThread,
                "Conductor engine lock released by a thread that does not hold it")
            owner.store(0, ordering: .relaxed)
        #endif
        if state.exchange(0, ordering: .releasing) == 2 {
            wakeSleeper()
        }
    }

    #if CONDUCTOR_INVARIANTS
        /// Whether the calling thread holds the lock. Debug builds only: for invariant checks.
        package var isHeldByCurrentThread: Bool {
            owner.load(ordering: .relaxed) == Self.currentThread
        }

        private static var currentThread: UInt {
            #if canImport(Glibc)
                UInt(pthread_self())  // An integer in glibc.
            #else
                UInt(bitPattern: pthread_self())  // A pointer in Darwin and musl.
            #endif
        }
    #endif

    /// Whether a thread that found the lock held has marked it on its way to sleep (state 2); it
    /// stays marked until the lock is released. For tests.
    package var _hasSleeper: Bool {
        state.load(ordering: .relaxed) == 2
    }

    /// How many threads are asleep waiting for the lock. For tests.
    package var _sleepingThreads: Int {
        pthread_mutex_lock(sleepers)
        defer { pthread_mutex_unlock(sleepers) }
        return sleeping
    }

    @inline(never)
    private func wakeSleeper() {
        pthread_mutex_lock(sleepers)
        pthread_cond_signal(wakeup)
        pthread_mutex_unlock(sleepers)
    }

    @inline(never)
    private func lockProfiled() {
        let before = _PreciseClock.now()
        rawLock()
        let acquired = _PreciseClock.now()
        profile.acquisitions += 1
        profile.waitedNanoseconds &+= acquired &- before
        profile.acquiredAt = acquired
    }

    @inline(never)
    private func unlockProfiled() {
        // 0: acquired before profiling started, so there is no start to measure from.
        if profile.acquiredAt != 0 {
            profile.heldNanoseconds &+= _PreciseClock.now() &- profile.acquiredAt
            profile.acquiredAt = 0
        }
        rawUnlock()
    }

    @inline(__always)
    package func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A value guarded by a `_Lock`, after NIO's `NIOLockedValueBox`: the value is reachable only inside
/// `withLock`. Used by the Foundation adapter and the tests; the engine itself keeps its state
/// under `engineLock`.
// @unchecked Sendable: `value` is only read or written inside `withLock`, with `lock` held, and
// `Value` is Sendable, so a value read out of the box may cross threads.
package final class _LockedValue<Value: Sendable>: @unchecked Sendable {
    private let lock = _Lock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value. `body` must not call user code.
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try lock.withLock { try body(&value) }
    }
}

/// Whether ``_LockProfiler`` runs: the one thing the engine lock's hot path reads for it (relaxed;
/// a global of its own, initialized statically, so that reading it costs a load and no
/// lazy-initialization check).
let _isLockProfiling = Atomic<Bool>(false)

#if CONDUCTOR_INVARIANTS
    /// Traps when the calling thread holds the engine lock: for the deinits of objects that hold
    /// user code (closures, and what they capture, whose deinits are user code too), which must
    /// never run under it. Debug builds only; see Design, "Decide inside, act outside".
    func _requireFreedOutsideEngineLock(_ what: @autoclosure () -> String) {
        _require(
            !engineLock.isHeldByCurrentThread,
            "Conductor: \(what()) was freed with the engine lock held; its last reference must be released after unlocking"
        )
    }

    /// Whether the calling thread holds the engine lock. Debug builds only: for the tests' canaries,
    /// objects captured by user code whose deinits check that they do not run under it.
    package var _engineLockIsHeldByCurrentThread: Bool {
        engineLock.isHeldByCurrentThread
    }
#endif

/// What a profiled lock measured: acquisitions, and nanoseconds spent waiting for it and holding it.
package struct _LockProfile: Sendable {
    package var acquisitions = 0
    package var waitedNanoseconds: UInt64 = 0
    package var heldNanoseconds: UInt64 = 0
    /// When the current holder acquired it (0: not measured).
    fileprivate var acquiredAt: UInt64 = 0

    package init() {}
}

/// Measures how long the engine lock is held and waited for (`conductor-bench --lock-profile`).
///
/// While it runs, each acquisition of the engine lock reads `CLOCK_MONOTONIC` before and after
/// taking the mutex and before releasing it; the totals are kept in the lock, under the lock. When
/// it does not run, each acquisition and release pays one relaxed atomic load. A clock read costs
/// some tens of nanoseconds, part of which lands inside the measured hold;
/// ``clockReadNanoseconds()`` measures it so that callers can say how much.
package enum _LockProfiler {
    /// Clears the totals and starts measuring. Not reentrant: one profile at a time.
    package static func start() {
        engineLock.lock()
        engineLock.profile = _LockProfile()
        _isLockProfiling.store(true, ordering: .relaxed)
        engineLock.unlock()
    }

    /// Stops measuring and returns the totals since ``start()``.
    package static func stop() -> _LockProfile {
        engineLock.lock()
        _isLockProfiling.store(false, ordering: .relaxed)
        var profile = engineLock.profile
        // This acquisition's own hold is not part of the work measured (its wait is, and is one
        // acquisition's worth).
        profile.acquisitions -= profile.acquiredAt == 0 ? 0 : 1
        profile.acquiredAt = 0
        engineLock.profile = _LockProfile()
        engineLock.unlock()
        return profile
    }

    /// The median cost of one clock read, in nanoseconds, over `samples` batches.
    package static func clockReadNanoseconds(samples: Int = 21) -> Double {
        var costs: [Double] = []
        for _ in 0..<samples {
            let first = _PreciseClock.now()
            var last = first
            for _ in 0..<1_000 { last = _PreciseClock.now() }
            costs.append(Double(last &- first) / 1_000)
        }
        costs.sort()
        return costs[costs.count / 2]
    }
}
