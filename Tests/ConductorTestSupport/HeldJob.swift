import Conductor

/// An asynchronous job that tells the test when it starts and stays executing, holding its slot
/// (and its categories), until the test calls `finish()`.
// @unchecked Sendable: a `Signal` (Sendable); the rest is `AsynchronousJob`'s.
package final class HeldJob: AsynchronousJob, @unchecked Sendable {
    package let started = Signal()

    package init(name: String) {
        super.init()
        self.name = name
    }

    package override func execute() {
        started.fire()
    }
}
