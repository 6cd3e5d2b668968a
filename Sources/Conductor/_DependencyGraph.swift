import Synchronization

/// The incremental topological order that refuses dependency cycles.
///
/// Every unfinished job has an `_order`, and for every edge between unfinished jobs the dependency's
/// order is smaller than the dependent's. Jobs start with their id as their order, so a dependency
/// on an older job, the common case when graphs are built front to back, is accepted by one
/// comparison. Otherwise the Pearce–Kelly algorithm ("A dynamic topological sort algorithm for
/// directed acyclic graphs", 2006) searches only the affected region, the jobs whose order lies
/// between the two, and either finds the cycle or reorders that region.
///
/// Finished jobs have no edges (they drop them), so they are never part of a search.
///
/// All functions must be called with `engineLock` held.
package enum _DependencyGraph {
    /// Ensures `dependency` is ordered before `dependent`, reordering the affected region if needed.
    ///
    /// - Returns: `nil` on success, leaving the graph ready for the new edge; otherwise the jobs on
    ///   the cycle the edge would close, starting with `dependent`, each waiting for the next and
    ///   the last for the first. Nothing is changed when a cycle is returned.
    /// - Complexity: O(1) when `dependency` is already ordered first; otherwise O(E log E) in the
    ///   jobs and edges of the affected region.
    @inline(__always)
    static func orderLocked(_ dependency: Job, before dependent: Job) -> [Job]? {
        // The common case, a dependency created (or ordered) first, is one comparison, inlined
        // into `addDependency`; only an edge against the order calls the search.
        if dependency._order < dependent._order {
            return nil
        }
        return reorderLocked(dependency, before: dependent)
    }

    /// `orderLocked` when `dependency` is not ordered first: the Pearce–Kelly search.
    @inline(never)
    private static func reorderLocked(_ dependency: Job, before dependent: Job) -> [Job]? {
        let lowerBound = dependent._order
        let upperBound = dependency._order

        // Forward: jobs that (transitively) wait for `dependent`, within the region.
        var forward: [Job] = []
        var parent: [ObjectIdentifier: Job] = [:]
        var stack: [Job] = [dependent]
        parent[ObjectIdentifier(dependent)] = dependent
        while let job = stack.popLast() {
            forward.append(job)
            for next in job._dependents where next._state != .finished && next._order <= upperBound {
                if next === dependency {
                    return cyclePath(from: job, to: dependent, dependency: dependency, parent: parent)
                }
                if parent.updateValue(job, forKey: ObjectIdentifier(next)) == nil {
                    stack.append(next)
                }
            }
        }

        // Backward: jobs that `dependency` (transitively) waits for, within the region.
        var backward: [Job] = []
        var seen: Set<ObjectIdentifier> = [ObjectIdentifier(dependency)]
        stack = [dependency]
        while let job = stack.popLast() {
            backward.append(job)
            for previous in job._dependencies where previous._state != .finished && previous._order >= lowerBound {
                if seen.insert(ObjectIdentifier(previous)).inserted {
                    stack.append(previous)
                }
            }
        }

        // Reorder: the backward set takes the smallest of the region's orders, then the forward set.
        backward.sort { $0._order < $1._order }
        forward.sort { $0._order < $1._order }
        var orders = (backward + forward).map(\._order)
        orders.sort()
        for (job, order) in zip(backward + forward, orders) {
            job._order = order
        }
        return nil
    }

    /// Rebuilds the cycle found by the forward search: `dependent` would wait for `dependency`,
    /// which waits (through `parent` links) back to `dependent`.
    private static func cyclePath(
        from last: Job, to dependent: Job, dependency: Job, parent: [ObjectIdentifier: Job]
    ) -> [Job] {
        // Walking parents from `last` reaches `dependent`; each job on the way waits for its parent.
        var chain: [Job] = []
        var job = last
        while job !== dependent {
            chain.append(job)
            job = parent[ObjectIdentifier(job)]!
        }
        // dependent waits for dependency, dependency waits for `last`, ..., the first waits for dependent.
        return [dependent, dependency] + chain
    }

    /// Edges examined by the debug-build invariant check, so that a test can prove the check
    /// costs O(1) per added edge. Counted only in builds with `CONDUCTOR_INVARIANTS`.
    package static let invariantEdgeChecks = Atomic<Int>(0)

    #if CONDUCTOR_INVARIANTS
        /// Checks the order invariant on the edge just added, and only on it: a check that walked
        /// every edge around either job would make a fan of n edges cost O(n²) under the lock every
        /// queue shares (a 10⁵ fan-in took minutes in a debug build).
        static func checkInvariantsLocked(edgeFrom dependency: Job, to dependent: Job) {
            invariantEdgeChecks.add(1, ordering: .relaxed)
            _require(
                dependency._order < dependent._order,
                "Conductor: topological order broken on the edge '\(dependent._describeLocked)' waits for '\(dependency._describeLocked)'"
            )
        }
    #endif
}
