import Conductor
import Foundation
import Synchronization

extension Progress {
    /// Creates a Foundation `Progress` that follows `progress`: its `totalUnitCount` and
    /// `completedUnitCount` are copied now and after every change, so `fractionCompleted`,
    /// key-value observation on Apple platforms and a parent `Progress` see Conductor's counts.
    ///
    /// ```swift
    /// let overall = Progress(queue.progress)
    /// parent.addChild(overall, withPendingUnitCount: 1)
    /// ```
    ///
    /// The bridge goes one way: setting the Foundation object's counts does not change the job's.
    /// The `Progress` is held weakly by the observer it installs, which removes itself at the first
    /// change after the `Progress` is gone (and a job's progress drops its observers when the job
    /// finishes). A finished job's
    /// progress reads 1 of 1 unit at least, so the `Progress` reaches a `fractionCompleted` of 1.0.
    public convenience init(_ progress: JobProgress) {
        self.init(totalUnitCount: progress.totalUnitCount)
        completedUnitCount = progress.completedUnitCount
        let target = _WeakProgress(self)
        let token = progress.observe { progress in
            target.update(from: progress)
        }
        target.token.withLock { $0 = token }
        // A change between the first copy and the observer's installation: copy again.
        target.update(from: progress)
    }
}

/// The `Progress` a `JobProgress` observer updates.
// @unchecked Sendable: `progress` is a weak reference written once, in `init`; the other state is
// atomic. swift-corelibs-foundation's `Progress` takes no lock, so its counts are set by one thread
// at a time: the one that owns `isCopying`. No lock is held while they are set, since setting them
// updates a parent `Progress` and, on Apple platforms, runs key-value observers.
private final class _WeakProgress: @unchecked Sendable {
    private weak var progress: Progress?
    /// Set by each change; cleared by the copying thread before it copies.
    private let isDirty = Atomic<Bool>(false)
    /// Owned by the one thread copying counts into `progress`.
    private let isCopying = Atomic<Bool>(false)
    /// The observer's token, to remove it once the `Progress` is gone.
    let token = _LockedValue<JobObserverToken?>(nil)

    init(_ progress: Progress) {
        self.progress = progress
    }

    /// Copies `source`'s counts, or leaves it to the thread already copying, which copies again
    /// before it stops: the newest counts always end up in the `Progress`.
    func update(from source: JobProgress) {
        if progress == nil {
            // The `Progress` is gone: stop observing (outside the token's lock).
            if let token = token.withLock({ $0.take() }) { source.removeObserver(token) }
            return
        }
        isDirty.store(true, ordering: .sequentiallyConsistent)
        while isDirty.load(ordering: .sequentiallyConsistent) {
            guard isCopying.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged
            else { return }  // the owner will see `isDirty`
            while isDirty.exchange(false, ordering: .sequentiallyConsistent) {
                guard let progress else { break }
                let total = source.totalUnitCount
                let completed = source.completedUnitCount
                if progress.totalUnitCount != total { progress.totalUnitCount = total }
                if progress.completedUnitCount != completed { progress.completedUnitCount = completed }
            }
            isCopying.store(false, ordering: .sequentiallyConsistent)
            // A change that came after the last check and before `isCopying` was cleared found an
            // owner and left: the outer loop takes over for it.
        }
    }
}
