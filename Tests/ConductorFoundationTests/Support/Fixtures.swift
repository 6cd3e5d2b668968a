import Conductor
import ConductorTestSupport
import Dispatch
import Foundation

// Fixtures for the adapter's tests: a Foundation queue the test can drain, a correct asynchronous
// Operation subclass, and work that the test completes by hand. The ways to wait without blocking
// Swift concurrency's two pool threads are in ConductorTestSupport (Waiting.swift).

// MARK: - Queues

/// A Foundation queue whose operations run on `worker`, a private serial Dispatch queue that the
/// test can drain with `drainSerialQueue(_:)`.
func makeOperationQueue(_ name: String, limit: Int) -> (OperationQueue, worker: DispatchQueue) {
    let worker = DispatchQueue(label: "ConductorFoundationTests.\(name)")
    let queue = OperationQueue()
    queue.name = name
    queue.maxConcurrentOperationCount = limit
    queue.underlyingQueue = worker
    return (queue, worker)
}

// MARK: - Work completed by hand

/// Asynchronous work that has started and completes only when the test says so: each piece
/// registers its completion under an index, and `complete(_:)` runs it on the caller's thread.
final class ManualWork: Sendable {
    private let completions = Locked<[Int: @Sendable () -> Void]>([:])
    private let startedSignals: [Signal]

    init(count: Int) {
        startedSignals = (0..<count).map { _ in Signal() }
    }

    /// Called by the work when it starts; `completion` runs when the test completes it.
    func started(_ index: Int, completion: @escaping @Sendable () -> Void) {
        completions.withLock { $0[index] = completion }
        startedSignals[index].fire()
    }

    /// Suspends until work `index` has started.
    func waitUntilStarted(_ index: Int) async {
        await startedSignals[index].wait()
    }

    /// Completes work `index` on the calling thread (it must have started).
    func complete(_ index: Int) {
        let completion = completions.withLock { $0.removeValue(forKey: index) }
        guard let completion else {
            preconditionFailure("ManualWork: work \(index) has not started")
        }
        completion()
    }

    /// How many pieces have started and not yet been completed.
    var pending: Int { completions.withLock { $0.count } }
}

// MARK: - A correct asynchronous Operation subclass

/// The asynchronous `Operation` subclass Foundation's documentation asks for: it overrides
/// `isAsynchronous`, keeps `isExecuting`/`isFinished` behind a lock and posts their key-value
/// notifications, and handles cancellation before start. Its work starts in `start()` and
/// completes when the test completes it through `work`.
// @unchecked Sendable: `flags` is locked; the other properties are immutable and Sendable; the rest is `Operation`'s.
final class ManualAsyncOperation: Operation, @unchecked Sendable {
    private let flags = Locked((executing: false, finished: false))
    let index: Int
    let work: ManualWork
    let inFlight: InFlight?
    let log: Log<String>?

    init(index: Int, work: ManualWork, inFlight: InFlight? = nil, log: Log<String>? = nil) {
        self.index = index
        self.work = work
        self.inFlight = inFlight
        self.log = log
        super.init()
        name = "manual-\(index)"
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool { flags.withLock { $0.finished } }

    override func start() {
        if isCancelled {
            log?.append("\(name ?? "") cancelled before start")
            markFinished(wasExecuting: false)
            return
        }
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        inFlight?.enter()
        log?.append("\(name ?? "") started")
        work.started(index) { [self] in
            inFlight?.leave()
            log?.append("\(name ?? "") finished")
            markFinished(wasExecuting: true)
        }
    }

    private func markFinished(wasExecuting: Bool) {
        if wasExecuting { willChangeValue(forKey: "isExecuting") }
        willChangeValue(forKey: "isFinished")
        flags.withLock { $0 = (executing: false, finished: true) }
        didChangeValue(forKey: "isFinished")
        if wasExecuting { didChangeValue(forKey: "isExecuting") }
    }
}
