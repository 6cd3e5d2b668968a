import Dispatch
import Synchronization

/// Runs `body` in a task and blocks the calling thread until it returns.
///
/// The harness is synchronous code on the main thread, which is not part of Swift's cooperative
/// pool, so blocking it on a semaphore while the task runs starves nothing. Never call this from
/// inside a task.
func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        let value = await body()
        box.value.withLock { $0 = value }
        done.signal()
    }
    done.wait()
    return box.value.withLock { $0! }
}

private final class ResultBox<T: Sendable>: Sendable {
    let value = Mutex<T?>(nil)
}
