import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A mutual-exclusion lock over `pthread_mutex_t`.
///
/// Conductor does not use `Synchronization.Mutex`: on Linux it is built on raw futexes that
/// ThreadSanitizer cannot see, so every report TSan made about the engine would be suspect. A
/// pthread mutex is understood by TSan in every build, so a clean TSan run means something.
///
/// `package` so that the adapter and the tests in this package use the same TSan-visible lock.
///
/// - Important: Never call user code while holding a `_Lock`. The engine decides inside the lock and
///   acts after unlocking; see `Docs/Design.md`.
// @unchecked Sendable: the stored state is a pointer to a pthread mutex, which is itself the
// synchronization primitive (allocated once in `init` and freed in `deinit`), a constant flag, and
// `profile`, which is only read or written with that mutex held.
package final class _Lock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Whether ``_LockProfiler`` measures this lock while it runs (the engine lock only).
    private let isProfiled: Bool
    /// What the profiler has measured, guarded by this lock itself.
    @exclusivity(unchecked) fileprivate var profile = _LockProfile()

    package init(profiled: Bool = false) {
        isProfiled = profiled
        mutex = .allocate(capacity: 1)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        #if CONDUCTOR_INVARIANTS
            // Error-checking mutexes turn a recursive acquisition into an error instead of a silent deadlock.
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ERRORCHECK))
        #elseif canImport(Glibc)
            // Critical sections are short; spinning briefly before sleeping avoids a futex round trip
            // on most contended acquisitions.
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        #endif
        let result = pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
        _require(result == 0, "pthread_mutex_init failed: \(result)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always)
    package func lock() {
        if isProfiled && _isLockProfiling.load(ordering: .relaxed) {
            lockProfiled()
            return
        }
        let result = pthread_mutex_lock(mutex)
        #if CONDUCTOR_INVARIANTS
            _require(result == 0, "Conductor engine lock acquired recursively (pthread error \(result))")
        #else
            _ = result
        #endif
    }

    @inline(__always)
    package func unlock() {
        if isProfiled && _isLockProfiling.load(ordering: .relaxed) {
            unlockProfiled()
            return
        }
        rawUnlock()
    }

    @inline(never)
    private func lockProfiled() {
        let before = _PreciseClock.now()
        let result = pthread_mutex_lock(mutex)
        _require(result == 0, "Conductor engine lock acquired recursively (pthread error \(result))")
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
    private func rawUnlock() {
        let result = pthread_mutex_unlock(mutex)
        #if CONDUCTOR_INVARIANTS
            _require(result == 0, "Conductor engine lock released by a thread that does not hold it (\(result))")
        #else
            _ = result
        #endif
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
