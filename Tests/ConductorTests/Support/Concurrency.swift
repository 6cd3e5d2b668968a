import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Small thread-safe helpers shared by the tests. Locks are pthread mutexes, not
// `Synchronization.Mutex`: ThreadSanitizer cannot see `Mutex` on Linux and reports false races.

/// A value guarded by a pthread mutex.
// @unchecked Sendable: `value` is only accessed inside `withLock`, under `mutex`.
final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

/// A thread-safe, append-only log.
final class Log<Element: Sendable>: Sendable {
    private let storage = Locked<[Element]>([])

    func append(_ element: Element) { storage.withLock { $0.append(element) } }
    var values: [Element] { storage.withLock { $0 } }
    var count: Int { storage.withLock { $0.count } }
}

/// A thread-safe counter.
final class Counter: Sendable {
    private let storage = Atomic<Int>(0)

    @discardableResult
    func increment() -> Int { storage.add(1, ordering: .sequentiallyConsistent).newValue }
    var value: Int { storage.load(ordering: .sequentiallyConsistent) }
}

/// A thread-safe flag.
final class Flag: Sendable {
    private let storage = Atomic<Bool>(false)

    func set(_ value: Bool = true) { storage.store(value, ordering: .sequentiallyConsistent) }
    var value: Bool { storage.load(ordering: .sequentiallyConsistent) }
}

/// Counts jobs in flight, the most there ever were, and how many started.
final class InFlight: Sendable {
    private let current = Atomic<Int>(0)
    private let peak = Atomic<Int>(0)
    private let total = Atomic<Int>(0)

    func enter() {
        let now = current.add(1, ordering: .sequentiallyConsistent).newValue
        peak.max(now, ordering: .sequentiallyConsistent)
        total.add(1, ordering: .sequentiallyConsistent)
    }

    func leave() { current.subtract(1, ordering: .sequentiallyConsistent) }
    var now: Int { current.load(ordering: .sequentiallyConsistent) }
    var maximum: Int { peak.load(ordering: .sequentiallyConsistent) }
    var starts: Int { total.load(ordering: .sequentiallyConsistent) }
}

/// A one-shot signal a job body (on any thread) gives and the test awaits without blocking.
struct Signal: Sendable {
    private let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    init() { (stream, continuation) = AsyncStream<Void>.makeStream() }

    func fire() { continuation.yield() }

    func wait() async {
        for await _ in stream { return }
    }
}
