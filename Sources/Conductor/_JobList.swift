/// A job's dependencies or dependents: none, one held directly, or an array.
///
/// Most jobs have at most one dependency and one dependent (every job of a chain, the leaves of a
/// fan), and for those the list allocates nothing; an `Array` would allocate a buffer for each on
/// the first `append`, and free it when the job finishes. One word, like an `Array`: the case is
/// kept in the pointer's spare bits. Guarded by `engineLock`, like the job that holds it.
enum _JobList: RandomAccessCollection {
    case empty
    case one(Job)
    case many([Job])

    init() {
        self = .empty
    }

    init(_ jobs: [Job]) {
        switch jobs.count {
        case 0: self = .empty
        case 1: self = .one(jobs[0])
        default: self = .many(jobs)
        }
    }

    var startIndex: Int { 0 }

    var endIndex: Int {
        switch self {
        case .empty: 0
        case .one: 1
        case .many(let jobs): jobs.count
        }
    }

    @inline(__always)
    var isEmpty: Bool {
        if case .empty = self { return true }
        return false
    }

    subscript(position: Int) -> Job {
        switch self {
        case .empty:
            _trap("_JobList: index \(position) out of range")
        case .one(let job):
            _require(position == 0, "_JobList: index \(position) out of range")
            return job
        case .many(let jobs):
            return jobs[position]
        }
    }

    /// The jobs after the first.
    var rest: ArraySlice<Job> {
        if case .many(let jobs) = self { return jobs.dropFirst() }
        return []
    }

    /// - Complexity: O(1) amortized.
    mutating func append(_ job: Job) {
        // `consume`: the payload moves out, so the array is uniquely referenced and grows in place,
        // with no retain and release of it (or of a single job) around the change.
        switch consume self {
        case .empty:
            self = .one(job)
        case .one(let first):
            // Room for four: a job of a graph often has three or four edges on a side, and the
            // array would otherwise be copied to grow at the third.
            self = .many(
                Array(unsafeUninitializedCapacity: 4) { buffer, count in
                    buffer.initializeElement(at: 0, to: first)
                    buffer.initializeElement(at: 1, to: job)
                    count = 2
                })
        case .many(var jobs):
            jobs.append(job)
            self = .many(jobs)
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
        case .many(let jobs):
            jobs.withUnsafeBufferPointer { buffer in
                // A class reference and `Unmanaged` of it have the same layout.
                buffer.withMemoryRebound(to: Unmanaged<Job>.self) { references in
                    for index in references.indices {
                        if distance > 0 && index + distance < references.count {
                            Job._prefetchFields(at: UnsafeRawPointer(references[index + distance].toOpaque()))
                        }
                        references[index]._withUnsafeGuaranteedRef(body)
                    }
                }
            }
        }
    }

    /// - Complexity: O(count).
    @discardableResult
    mutating func remove(at position: Int) -> Job {
        switch self {
        case .empty:
            _trap("_JobList: index \(position) out of range")
        case .one(let job):
            _require(position == 0, "_JobList: index \(position) out of range")
            self = .empty
            return job
        case .many(var jobs):
            self = .empty
            let removed = jobs.remove(at: position)
            self = _JobList(jobs)
            return removed
        }
    }

    /// - Complexity: O(count).
    mutating func removeAll(where shouldRemove: (Job) throws -> Bool) rethrows {
        var kept: [Job] = []
        for job in self where try !shouldRemove(job) {
            kept.append(job)
        }
        self = _JobList(kept)
    }
}
