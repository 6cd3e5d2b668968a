import Conductor
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// Small thread-safe helpers shared by the test targets. Locks are the engine's `_Lock`, not
// `Synchronization.Mutex`: ThreadSanitizer cannot see `Mutex` on Linux and reports false races.

/// A value guarded by the engine's own `_Lock`.
package typealias Locked = _LockedValue

/// A thread-safe, append-only log.
package final class Log<Element: Sendable>: Sendable {
    private let storage = Locked<[Element]>([])

    package init() {}

    package func append(_ element: Element) { storage.withLock { $0.append(element) } }
    package var values: [Element] { storage.withLock { $0 } }
    package var count: Int { storage.withLock { $0.count } }
}

/// A thread-safe counter.
package final class Counter: Sendable {
    private let storage = Atomic<Int>(0)

    package init() {}

    @discardableResult
    package func increment() -> Int { storage.add(1, ordering: .sequentiallyConsistent).newValue }
    package var value: Int { storage.load(ordering: .sequentiallyConsistent) }
    /// Counts one down and returns the new value.
    @discardableResult
    package func decrement() -> Int { storage.subtract(1, ordering: .sequentiallyConsistent).newValue }
}

/// A thread-safe flag.
package final class Flag: Sendable {
    private let storage = Atomic<Bool>(false)

    package init() {}

    package func set(_ value: Bool = true) { storage.store(value, ordering: .sequentiallyConsistent) }
    package var value: Bool { storage.load(ordering: .sequentiallyConsistent) }
}

/// Counts jobs in flight, the most there ever were, and how many started.
package final class InFlight: Sendable {
    private let current = Atomic<Int>(0)
    private let peak = Atomic<Int>(0)
    private let total = Atomic<Int>(0)

    package init() {}

    /// Counts one more job in flight and returns how many are in flight now, this one included.
    @discardableResult
    package func enter() -> Int {
        let now = current.add(1, ordering: .sequentiallyConsistent).newValue
        peak.max(now, ordering: .sequentiallyConsistent)
        total.add(1, ordering: .sequentiallyConsistent)
        return now
    }

    package func leave() { current.subtract(1, ordering: .sequentiallyConsistent) }
    package var now: Int { current.load(ordering: .sequentiallyConsistent) }
    package var maximum: Int { peak.load(ordering: .sequentiallyConsistent) }
    package var starts: Int { total.load(ordering: .sequentiallyConsistent) }
}

/// A one-shot signal a job body (on any thread) gives and the test awaits without blocking.
package struct Signal: Sendable {
    private let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    package init() { (stream, continuation) = AsyncStream<Void>.makeStream() }

    package func fire() { continuation.yield() }

    package func wait() async {
        for await _ in stream { return }
    }
}

/// An object whose lifetime a test watches; optionally fires `signal` from its deinit. A waiter
/// can resume before the thread that finished a job has let go of what it released: a test that
/// checks a release awaits the signal (a leak then fails through the test's `.hangLimit`).
package final class Tracked: Sendable {
    package let signal: Signal?

    package init(signal: Signal? = nil) {
        self.signal = signal
    }

    deinit { signal?.fire() }
}

/// A reader–writer lock (a pthread rwlock, which ThreadSanitizer understands): any number of
/// readers at once, or one writer.
// @unchecked Sendable: the rwlock itself is the synchronization.
package final class ReadWriteLock: @unchecked Sendable {
    private let rwlock: UnsafeMutablePointer<pthread_rwlock_t>

    package init() {
        rwlock = .allocate(capacity: 1)
        pthread_rwlock_init(rwlock, nil)
    }

    deinit {
        pthread_rwlock_destroy(rwlock)
        rwlock.deallocate()
    }

    package func withReadLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_rwlock_rdlock(rwlock)
        defer { pthread_rwlock_unlock(rwlock) }
        return try body()
    }

    package func withWriteLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_rwlock_wrlock(rwlock)
        defer { pthread_rwlock_unlock(rwlock) }
        return try body()
    }
}

/// A weak reference that closures on any thread may capture and collections may hold, for tests
/// that must not keep an object alive (lifetime checks, and records that would otherwise form a
/// cycle with the object).
// @unchecked Sendable: `object` is set once, in `init`; loading a weak reference is thread-safe.
package final class WeakReference<Object: AnyObject>: @unchecked Sendable {
    package weak let object: Object?

    package init(_ object: Object?) {
        self.object = object
    }
}
