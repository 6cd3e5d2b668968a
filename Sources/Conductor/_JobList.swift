/// A job's dependencies or dependents: none, one held directly, or a `_JobBuffer` of two or more.
///
/// Most jobs have at most one dependency and one dependent (every job of a chain, the leaves of a
/// fan), and for those the list allocates nothing. One word, like an `Array`: the case is kept in
/// the pointer's spare bits. Guarded by `engineLock`, like the job that holds it.
///
/// A value type with copy-on-write storage, like an `Array`: a copy of the list keeps its jobs, and
/// a change to the list it was copied from makes a new buffer. The storage is its own, not an
/// `Array`'s, because a graph adds edges one at a time on its building thread, and `Array`'s
/// growth and destruction for a class element go through the standard library's generic entry
/// points (its storage type looked up per allocation, each element destroyed through a value
/// witness): about 150 instructions per edge in callgrind, a quarter of an edge's cost.
///
/// `package` so that the tests can check its copy-on-write directly (`JobListTests`): the engine
/// never keeps a copy of a list across a change to it, so no engine path reaches that case.
package enum _JobList: RandomAccessCollection {
    case empty
    case one(Job)
    /// Two or more jobs.
    case many(_JobBuffer)

    package init() {
        self = .empty
    }

    package init(_ jobs: [Job]) {
        switch jobs.count {
        case 0: self = .empty
        case 1: self = .one(jobs[0])
        default:
            let buffer = _JobBuffer.make(capacity: jobs.count)
            for job in jobs {
                buffer.appendAssumingCapacity(job)
            }
            self = .many(buffer)
        }
    }

    package var startIndex: Int { 0 }

    package var endIndex: Int {
        switch self {
        case .empty: 0
        case .one: 1
        case .many(let buffer): buffer.count
        }
    }

    @inline(__always)
    package var isEmpty: Bool {
        if case .empty = self { return true }
        return false
    }

    package subscript(position: Int) -> Job {
        switch self {
        case .empty:
            _trap("_JobList: index \(position) out of range")
        case .one(let job):
            _require(position == 0, "_JobList: index \(position) out of range")
            return job
        case .many(let buffer):
            return buffer[position]
        }
    }

    /// The jobs after the first.
    var rest: SubSequence {
        dropFirst()
    }

    /// - Complexity: O(1) amortized.
    @inline(__always)
    package mutating func append(_ job: Job) {
        // A list's first job, inline at the call: every edge of a chain, and a graph's first edge
        // on each side.
        if case .empty = self {
            self = .one(job)
        } else {
            _appendToNonEmpty(job)
        }
    }

    /// `append(_:)` to a list that holds one job or more.
    @inline(never)
    mutating func _appendToNonEmpty(_ job: Job) {
        // `consume`: the payload moves out, so a buffer is uniquely referenced and grows in place,
        // with no retain and release of it (or of a single job) around the change.
        switch consume self {
        case .empty:
            self = .one(job)
        case .one(let first):
            // Room for four: a job of a graph often has three or four edges on a side, and the
            // buffer would otherwise be copied to grow at the third.
            let buffer = _JobBuffer.make(capacity: 4)
            buffer.appendAssumingCapacity(first)
            buffer.appendAssumingCapacity(job)
            self = .many(buffer)
        case .many(var buffer):
            guard isKnownUniquelyReferenced(&buffer) else {
                // Shared with a copy of the list, which keeps its jobs (the engine keeps no copy
                // across a change): a new buffer, made as the removals make theirs.
                var jobs = Array(_JobList.many(buffer))
                jobs.append(job)
                self = _JobList(jobs)
                return
            }
            if buffer.count == buffer.room {
                buffer = buffer.moved(capacity: buffer.count * 2)
            }
            buffer.appendAssumingCapacity(job)
            self = .many(buffer)
        }
    }

    /// Whether `job` itself is in the list, compared by identity, without retaining anything.
    ///
    /// - Complexity: O(count).
    @inline(__always)
    func containsIdentical(_ job: Job) -> Bool {
        var found = false
        forEachUnretained { element in
            if element === job { found = true }
        }
        return found
    }

    /// Calls `body` with each job in order, without retaining or releasing them: the list copy this
    /// is called on keeps them alive (a change to the list it was copied from makes a new buffer).
    /// For the engine's hot loops, where each retain is an atomic operation on another job's
    /// cache line.
    ///
    /// With `prefetchingAhead` > 0, it also starts loading the fields of the job that many places
    /// ahead of each one it visits (a finish visiting a fan-out's thousands of dependents, of which
    /// the claim loaded only the first `Job.dependentsToPrefetch`). A constant at each call site,
    /// so a call without it keeps the plain loop.
    @inline(__always)
    func forEachUnretained(prefetchingAhead distance: Int = 0, _ body: (Job) -> Void) {
        switch self {
        case .empty:
            return
        case .one(let job):
            body(job)
        case .many(let buffer):
            buffer.withUnsafeMutablePointers { header, elements in
                // A class reference and `Unmanaged` of it have the same layout.
                let references = UnsafeRawPointer(elements).assumingMemoryBound(to: Unmanaged<Job>.self)
                let count = header.pointee.count
                for index in 0..<count {
                    if distance > 0 && index + distance < count {
                        Job._prefetchFields(at: UnsafeRawPointer(references[index + distance].toOpaque()))
                    }
                    references[index]._withUnsafeGuaranteedRef(body)
                }
            }
        }
    }

    /// - Complexity: O(count).
    @discardableResult
    package mutating func remove(at position: Int) -> Job {
        switch self {
        case .empty:
            _trap("_JobList: index \(position) out of range")
        case .one(let job):
            _require(position == 0, "_JobList: index \(position) out of range")
            self = .empty
            return job
        case .many:
            var jobs = Array(self)
            let removed = jobs.remove(at: position)
            self = _JobList(jobs)
            return removed
        }
    }

    /// - Complexity: O(count).
    package mutating func removeAll(where shouldRemove: (Job) throws -> Bool) rethrows {
        var kept: [Job] = []
        for job in self where try !shouldRemove(job) {
            kept.append(job)
        }
        self = _JobList(kept)
    }
}

/// The storage of a `_JobList` of two or more jobs: its count and capacity, then the jobs, in one
/// allocation, laid out as an `Array`'s (the elements 32 bytes into the object, the count 16 bytes
/// before them), which the prefetch hints rely on. Each element is a strong reference, released
/// by `deinit` one by one with direct calls.
package final class _JobBuffer: ManagedBuffer<_JobBuffer.Header, Job> {
    package struct Header {
        var count: Int
        var capacity: Int
    }

    /// An empty buffer with room for `capacity` jobs.
    @inline(__always)
    static func make(capacity: Int) -> _JobBuffer {
        let buffer = create(minimumCapacity: capacity) { _ in Header(count: 0, capacity: capacity) }
        return unsafeDowncast(buffer, to: _JobBuffer.self)
    }

    deinit {
        withUnsafeMutablePointers { header, elements in
            for index in 0..<header.pointee.count {
                // One direct release each: `deinitialize(count:)` would destroy them through the
                // runtime's generic array destruction.
                _ = (elements + index).move()
            }
        }
    }

    // The header is read through its pointer: `header` is a stored property of a class in another
    // module, which Swift checks for exclusive access at run time (a runtime call per access).
    var count: Int {
        @inline(__always) get { withUnsafeMutablePointerToHeader { $0.pointee.count } }
    }

    /// How many jobs it has room for (ManagedBuffer's own `capacity` asks the allocator).
    var room: Int {
        @inline(__always) get { withUnsafeMutablePointerToHeader { $0.pointee.capacity } }
    }

    @inline(__always)
    subscript(position: Int) -> Job {
        withUnsafeMutablePointers { header, elements in
            _require(position >= 0 && position < header.pointee.count, "_JobList: index \(position) out of range")
            return elements[position]
        }
    }

    /// Appends `job`, retaining it. The caller has checked that there is room and that the buffer
    /// is not shared.
    @inline(__always)
    func appendAssumingCapacity(_ job: Job) {
        withUnsafeMutablePointers { header, elements in
            (elements + header.pointee.count).initialize(to: job)
            header.pointee.count += 1
        }
    }

    /// A new buffer with room for `capacity` jobs, holding this one's jobs, which this one gives up
    /// (it is left empty, so its `deinit` releases nothing).
    @inline(never)
    func moved(capacity: Int) -> _JobBuffer {
        let moved = _JobBuffer.make(capacity: capacity)
        withUnsafeMutablePointers { header, elements in
            moved.withUnsafeMutablePointers { movedHeader, movedElements in
                movedElements.moveInitialize(from: elements, count: header.pointee.count)
                movedHeader.pointee.count = header.pointee.count
            }
            header.pointee.count = 0
        }
        return moved
    }
}
