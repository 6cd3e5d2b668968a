import Conductor
import Foundation

/// Calls `body` exactly once, when Foundation has recorded `operation` as finished; at once if it
/// already has. No polling, and the operation's `completionBlock` is left alone.
///
/// `body` runs on the thread that finishes the operation (the one that posts its `isFinished`
/// change, or runs its `start()`), or on the calling thread if the operation has already finished.
/// No lock of the adapter's is held while it runs.
///
/// An operation that never finishes (never started, or an asynchronous subclass that never posts
/// `isFinished`) never calls `body`, and the observation keeps the operation and `body` alive. Nothing
/// can rescue that case: Foundation's own dependents and queues wait forever too.
///
/// ## How it is detected
///
/// - **Apple platforms**: key-value observing of `isFinished`, with `.initial` so that an operation
///   that finished before the observation was installed is seen at once.
/// - **Linux**: swift-corelibs-foundation has no KVO. Its `Operation.didChangeValue(forKey:)` only
///   feeds the operation's own bookkeeping (`Operation.observeValue(forKeyPath:ofObject:)`), and
///   that bookkeeping tells an operation's dependents when it finishes: it lowers each dependent's
///   count of unfinished dependencies and, for each one that reached zero, reads the dependent's
///   `isReady`. So the observer is a private operation, a `_FinishProbe`, made to depend on
///   `operation`: its overridden `isReady` is the notification. `addDependency` decides under the
///   operation's own lock whether it has already finished, so there is no window in which the
///   finish can be missed, and no ambiguity about whether it will still be reported.
///
/// Why not wrap `completionBlock`, the other observable side effect of finishing on Linux:
/// replacing the operation's completion block afterwards (common in existing code) would silently
/// remove the hook and stall every job waiting for it; swift-corelibs-foundation reads the block
/// without its lock while finishing, so installing the wrapper then is a data race; when the
/// operation finishes during the installation nothing tells whether the old or the new block
/// was taken; and the block runs later on a global queue, holding the operation.
///
/// The one ordering caveat, on both platforms: the probe is one dependent among others, so `body`
/// can run before Foundation has lowered the count of another dependent of the same operation.
/// ``OperationJob`` copes with an operation that is momentarily not ready (see `_ReadinessQueue`).
func _whenFinished(_ operation: Operation, _ body: @escaping @Sendable () -> Void) {
    #if canImport(Darwin)
        _KVOFinishObserver.observe(operation, body)
    #else
        _FinishProbe.observe(operation, body)
    #endif
}

#if canImport(Darwin)

    /// Observes `isFinished` with KVO and runs a body once, then stops observing.
    // @unchecked Sendable: `state` is a locked box; nothing else is stored.
    final class _KVOFinishObserver: @unchecked Sendable {
        private struct State {
            var body: (@Sendable () -> Void)?
            var observation: NSKeyValueObservation?
            var keepAlive: _KVOFinishObserver?
        }
        private let state: _LockedValue<State>

        private init(_ body: @escaping @Sendable () -> Void) {
            state = _LockedValue(State(body: body))
        }

        static func observe(_ operation: Operation, _ body: @escaping @Sendable () -> Void) {
            let observer = _KVOFinishObserver(body)
            observer.state.withLock { $0.keepAlive = observer }
            // `.initial` delivers the current value during `observe`, so an operation that has
            // already finished (or finishes meanwhile) is seen; `fire()` runs the body once.
            let observation = operation.observe(\.isFinished, options: [.initial, .new]) { operation, _ in
                if operation.isFinished {
                    observer.fire()
                }
            }
            let fired = observer.state.withLock { state -> Bool in
                if state.body == nil { return true }
                state.observation = observation
                return false
            }
            if fired {
                observation.invalidate()
            }
        }

        private func fire() {
            let (body, observation, keepAlive) = state.withLock { state in
                defer { state = State() }
                return (state.body, state.observation, state.keepAlive)
            }
            observation?.invalidate()
            body?()
            withExtendedLifetime(keepAlive) {}
        }
    }

#else

    /// A private operation that depends on the observed operation, so that swift-corelibs-foundation
    /// tells it, through its `isReady`, when the observed operation has finished. See `_whenFinished`.
    ///
    /// The probe is never started or enqueued, and nothing but swift-corelibs-foundation (and
    /// `arm()`) reads its `isReady`. It keeps itself alive until it fires, because
    /// swift-corelibs-foundation refers to an operation's dependents without retaining them: a
    /// probe freed before the observed operation finishes would be used after it was freed. It
    /// holds the observed operation (as every dependent does, through `dependencies`) until it is
    /// freed itself.
    // @unchecked Sendable: the only mutable state is `state`, a locked box; the rest is
    // swift-corelibs-foundation's, which locks it.
    final class _FinishProbe: Operation, @unchecked Sendable {
        private struct State {
            /// Whether the dependency is in place; until then `isReady` is true merely because
            /// the probe has no dependency yet.
            var armed = false
            /// The body to run; `nil` once it has run.
            var body: (@Sendable () -> Void)?
            /// The probe's reference to itself, dropped when it fires.
            var keepAlive: _FinishProbe?
        }
        private let state: _LockedValue<State>

        private init(_ body: @escaping @Sendable () -> Void) {
            state = _LockedValue(State(body: body))
            super.init()
        }

        static func observe(_ operation: Operation, _ body: @escaping @Sendable () -> Void) {
            let probe = _FinishProbe(body)
            probe.state.withLock { $0.keepAlive = probe }
            // If `operation` has finished, this counts nothing, and the probe's count stays zero;
            // otherwise the probe is counted and registered, under `operation`'s lock, and its
            // count drops to zero when `operation` finishes.
            probe.addDependency(operation)
            probe.arm()
        }

        /// Starts listening; fires at once if `operation` finished before (or while) the
        /// dependency was added.
        private func arm() {
            state.withLock { $0.armed = true }
            if super.isReady {
                fire()
            }
        }

        /// swift-corelibs-foundation reads this when the observed operation has finished (and
        /// also right after `addDependency`, before the probe is armed).
        override var isReady: Bool {
            let ready = super.isReady
            if ready && state.withLock({ $0.armed }) {
                fire()
            }
            return ready
        }

        private func fire() {
            let (body, keepAlive) = state.withLock { state in
                let taken = (state.body, state.keepAlive)
                state.body = nil
                state.keepAlive = nil
                return taken
            }
            body?()
            // swift-corelibs-foundation holds the probe while it calls `isReady`, and `arm()`'s
            // caller holds it too, so this is never the last reference while the probe is in use.
            withExtendedLifetime(keepAlive) {}
        }
    }

#endif
