/// A first-in, first-out ring buffer. Popped slots are cleared at once, so the buffer never keeps
/// a finished job alive.
struct _FIFO<Element> {
    private var slots: ContiguousArray<Element?> = []
    private var head = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// - Complexity: O(1) amortized.
    mutating func append(_ element: Element) {
        if count == slots.count {
            grow()
        }
        slots[(head + count) & (slots.count - 1)] = element
        count += 1
    }

    /// - Complexity: O(1).
    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = slots[head].take()
        head = (head + 1) & (slots.count - 1)
        count -= 1
        return element
    }

    /// The first element, in order, that satisfies `predicate`, without removing anything.
    ///
    /// - Complexity: O(elements before it).
    func first(where predicate: (Element) -> Bool) -> Element? {
        var index = 0
        while index < count {
            if let element = slots[(head + index) & (slots.count - 1)], predicate(element) {
                return element
            }
            index += 1
        }
        return nil
    }

    /// Removes the elements for which `shouldRemove` is true, keeping the others in order.
    ///
    /// - Complexity: O(count).
    mutating func removeAll(where shouldRemove: (Element) -> Bool) {
        // In place: every slot is taken (left empty) as it is read, and a kept element moves to the
        // next slot from the head, which has been read already. No buffer is allocated.
        let mask = slots.count - 1
        var kept = 0
        for offset in 0..<count {
            let element = slots[(head + offset) & mask].take()!
            if !shouldRemove(element) {
                slots[(head + kept) & mask] = element
                kept += 1
            }
        }
        count = kept
        if kept == 0 {
            // Emptied (a queue's jobs all cancelled): let the buffer go, as a fresh FIFO would.
            slots = []
            head = 0
        }
    }

    private mutating func grow() {
        grow(to: Swift.max(16, slots.count * 2))
    }

    /// Makes room for `additional` more elements with at most one reallocation.
    ///
    /// - Complexity: O(count) when it reallocates.
    mutating func reserve(_ additional: Int) {
        guard count + additional > slots.count else { return }
        var capacity = Swift.max(16, slots.count)
        while capacity < count + additional {
            capacity *= 2
        }
        grow(to: capacity)
    }

    private mutating func grow(to newCapacity: Int) {
        var newSlots = ContiguousArray<Element?>(repeating: nil, count: newCapacity)
        for offset in 0..<count {
            newSlots[offset] = slots[(head + offset) & (slots.count - 1)].take()
        }
        slots = newSlots
        head = 0
    }
}

/// A queue's ready jobs: one FIFO per priority.
///
/// Push and pop are O(1). Removing a job (cancelled, re-prioritized, or given a new dependency
/// while it waited) is O(1) too: the job's `_readyTicket` is reset, which makes its entry stale,
/// and stale entries are skipped when popped. When stale entries outnumber live ones the buckets
/// are compacted, so garbage stays proportional to live work; when no live entry is left they are
/// dropped at once, so an idle queue holds no finished job.
///
/// A job that enters an empty line takes the front slot instead of its level's ring, and a pop takes
/// it from there. The front holds the only entry of the line: the next push first moves it to its
/// ring, where its arrival puts it, at the head. A queue that holds one ready job at a time (a chain,
/// or a queue that keeps up with its work) then never touches the rings.
///
/// All members must be used with `engineLock` held.
struct _ReadyQueue {
    struct Entry {
        let job: Job
        let ticket: UInt64
    }

    private var buckets: [_FIFO<Entry>] = Array(repeating: _FIFO(), count: JobPriority.allCases.count)
    /// The front slot: when not `nil`, the line's only entry. It needs no ticket of its own: it is
    /// live (its job's `_readyTicket` is its ticket) while `count` is 1, and stale once `count` is 0,
    /// which is when the compaction that follows a removal drops it.
    private var frontJob: Job?
    /// Live entries.
    private(set) var count = 0
    private var staleCount = 0
    /// Source of tickets; increasing, so a ticket also records arrival order.
    private var nextTicket: UInt64 = 1

    /// Adds a ready job at the back of its priority level.
    ///
    /// - Complexity: O(1) amortized.
    mutating func push(_ job: Job) {
        let ticket = nextTicket
        nextTicket += 1
        job._readyTicket = ticket
        if count == 0 {
            // An empty line holds no entry at all: stale ones are dropped when the last live one
            // leaves, and that drops a stale front too.
            #if CONDUCTOR_INVARIANTS
                _require(frontJob == nil, "Conductor: an empty ready line still holds its front entry")
            #endif
            frontJob = job
        } else {
            if frontJob != nil {
                moveFrontToItsRing()
            }
            buckets[job._priority.bucket].append(Entry(job: job, ticket: ticket))
        }
        count += 1
    }

    /// Moves the front entry, the line's only one, to its level's ring, which is empty.
    @inline(never)
    private mutating func moveFrontToItsRing() {
        let job = frontJob.take().unsafelyUnwrapped
        let level = job._priority.bucket
        #if CONDUCTOR_INVARIANTS
            _require(buckets[level].isEmpty, "Conductor: the ready line's front entry is not its only one")
        #endif
        buckets[level].append(Entry(job: job, ticket: job._readyTicket))
    }

    /// Makes room for `additional` more jobs at priority `level` (a bucket index).
    ///
    /// - Complexity: O(jobs at that level) when it reallocates.
    mutating func reserve(_ additional: Int, level: Int) {
        buckets[level].reserve(additional)
    }

    /// Removes and returns the highest-priority, earliest-arrived live job.
    ///
    /// Stale entries skipped on the way may hold the last reference to a cancelled job; they are
    /// handed to `actions` so the job is freed after unlocking.
    ///
    /// - Complexity: O(1) amortized (stale entries are each skipped once).
    mutating func popFirst(_ actions: inout _Actions) -> Job? {
        guard count > 0 else { return nil }
        if frontJob != nil {
            // The only entry, and live: a stale front leaves the line empty, which drops it.
            let job = frontJob.take().unsafelyUnwrapped
            job._readyTicket = 0
            count = 0
            return job
        }
        var index = 0
        while index < buckets.count {
            if let entry = buckets[index].popFirst() {
                if entry.job._readyTicket == entry.ticket {
                    entry.job._readyTicket = 0
                    count -= 1
                    if count == 0 && staleCount > 0 {
                        compact(&actions)
                    }
                    return entry.job
                }
                staleCount -= 1
                actions.release([entry.job])
            } else {
                index += 1
            }
        }
        _ReadyQueue._noLiveEntry(count)
    }

    /// The job `popFirst` would return, without taking it out of line. For diagnostics.
    ///
    /// - Complexity: O(stale entries before it).
    func peekFirst() -> Job? {
        guard count > 0 else { return nil }
        if let frontJob {
            return frontJob
        }
        for bucket in buckets {
            if let entry = bucket.first(where: { $0.job._readyTicket == $0.ticket }) {
                return entry.job
            }
        }
        return nil
    }

    /// Out of line, so that `popFirst` stays small on the claim path.
    @inline(never)
    private static func _noLiveEntry(_ count: Int) -> Never {
        _trap("Conductor: ready count \(count) but no live entry")
    }

    /// Makes `job`'s entry stale. The job must have a live entry.
    ///
    /// - Complexity: O(1) amortized.
    mutating func remove(_ job: Job, _ actions: inout _Actions) {
        job._readyTicket = 0
        count -= 1
        staleCount += 1
        if count == 0 || (staleCount > 64 && staleCount > count) {
            compact(&actions)
        }
    }

    private mutating func compact(_ actions: inout _Actions) {
        var dropped: [Job] = []
        dropped.reserveCapacity(staleCount)
        for index in buckets.indices {
            buckets[index].removeAll { entry in
                let stale = entry.job._readyTicket != entry.ticket
                if stale { dropped.append(entry.job) }
                return stale
            }
        }
        if count == 0, let job = frontJob.take() {
            dropped.append(job)  // stale: a live front would be counted
        }
        staleCount = 0
        actions.release(dropped)
    }
}
