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
// @unchecked Sendable: the only stored state is a pointer to a pthread mutex, which is itself the
// synchronization primitive; it is allocated once in `init` and freed in `deinit`.
package final class _Lock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    package init() {
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
        let result = pthread_mutex_lock(mutex)
        #if CONDUCTOR_INVARIANTS
            _require(result == 0, "Conductor engine lock acquired recursively (pthread error \(result))")
        #else
            _ = result
        #endif
    }

    @inline(__always)
    package func unlock() {
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
