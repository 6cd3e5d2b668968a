import Foundation
import Synchronization

/// `--busy`: a thread of its own that keeps one core busy, as another process does on a shared
/// machine or a phone, while the scenarios run a second time.
final class BusyCore: Sendable {
    private let running = Atomic<Bool>(false)
    private let stopped = DispatchSemaphore(value: 0)

    func start() {
        running.store(true, ordering: .relaxed)
        Thread.detachNewThread { [self] in
            var value: UInt64 = 1
            while running.load(ordering: .relaxed) {
                for _ in 0..<1_000 { value = value &* 6_364_136_223_846_793_005 &+ 1 }
            }
            // Used, so that the loop is not optimized away.
            if value == 0 { Console.progress("") }
            stopped.signal()
        }
    }

    /// Stops the thread and waits until it has stopped spinning.
    func stop() {
        running.store(false, ordering: .relaxed)
        stopped.wait()
    }
}
