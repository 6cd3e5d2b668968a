import Conductor
import Dispatch

// Ways for a test's task to wait for Dispatch work without blocking one of Swift concurrency's
// cooperative-pool threads (two here: a blocked one starves every task body). What has to block
// does so on a thread of a fresh serial Dispatch queue, which Dispatch gives a thread of its own at
// once ("overcommit"), so it never waits for a pool thread to come free.

/// Suspends the calling task until the serial `queue` has run every block submitted to it before
/// this call, and released it: it submits an empty block and resumes the task from there. Blocks
/// no thread.
///
/// For the serial `underlyingQueue` of a job queue (see ``makeJobQueueOnSerialWorker(_:limit:)``),
/// this means that the worker or finisher running on it now has returned and let go of what it
/// held. Only for serial queues: on a concurrent queue the empty block may run while earlier ones
/// are still running; use ``drainConcurrentQueue(_:)`` there.
package func drainSerialQueue(_ queue: DispatchQueue) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        queue.async { continuation.resume() }
    }
}

/// Suspends the calling task until every block submitted to the concurrent `queue` before this call
/// has returned: it submits a barrier block and resumes the task from there. Blocks no thread.
///
/// Never returns while a block on `queue` is blocked waiting for the test (the barrier waits for
/// that block), so use it only when no job body on `queue` waits for a gate the test opens later.
package func drainConcurrentQueue(_ queue: DispatchQueue) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        queue.async(flags: .barrier) { continuation.resume() }
    }
}

/// Suspends the calling task until `semaphore` has been signalled `count` times. The waits block a
/// thread of a fresh serial Dispatch queue, never a cooperative-pool thread.
package func waitForSignals(_ semaphore: DispatchSemaphore, count: Int = 1) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        DispatchQueue(label: "ConductorTestSupport.waitForSignals").async {
            for _ in 0..<count { semaphore.wait() }
            continuation.resume()
        }
    }
}

/// Runs `body` on a thread of a fresh serial Dispatch queue, where it may block (for example in a
/// synchronous `waitUntilFinished()`), and suspends the calling task until it returns its result.
/// Never blocks a cooperative-pool thread.
package func runOnDispatchThread<Result: Sendable>(_ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { (continuation: CheckedContinuation<Result, Never>) in
        DispatchQueue(label: "ConductorTestSupport.runOnDispatchThread").async {
            continuation.resume(returning: body())
        }
    }
}

/// A job queue named `name` whose workers run on `worker`, a private serial Dispatch queue, so that
/// the test can ``drainSerialQueue(_:)`` it, and so that a block submitted to `worker` runs only
/// after the queue's worker running now has returned. Blocks no thread.
package func makeJobQueueOnSerialWorker(
    _ name: String, limit: Int = JobQueue.defaultMaxConcurrentJobCount
) -> (JobQueue, worker: DispatchQueue) {
    let worker = DispatchQueue(label: "ConductorTestSupport.worker.\(name)")
    let queue = JobQueue(name: name, maxConcurrentJobCount: limit)
    queue.underlyingQueue = worker
    return (queue, worker)
}
