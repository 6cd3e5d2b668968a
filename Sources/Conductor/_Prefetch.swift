internal import ConductorShims

/// Asks the processor to start loading the cache line that holds `address`, without waiting for
/// it: `prefetcht0` on x86-64, `prfm pldl1keep` on arm64. A hint only: it never faults, whatever
/// the address, and changes no value.
///
/// In C (`ConductorShims`), inline: Swift has no prefetch, and declaring LLVM's intrinsic with
/// `@_silgen_name` breaks the compiler under ThreadSanitizer, which makes the call an `invoke`.
@inline(__always)
func _prefetch(_ address: UnsafeRawPointer) {
    conductor_prefetch(address)
}

// The accessors below find their addresses in a switch with no call inside, so the compiler reads
// the list in place: no copy of it, and no retain of a job or buffer whose line is still loading (a
// retain is an atomic write to that line). For the same reason the buffer's element pointer is
// returned from `withUnsafeMutablePointerToElements` instead of used inside it: a call in there (a
// hint is a call to the compiler) would make it copy the list first. That pointer stays valid
// while the list is unchanged: the callers hold the engine lock, which every change to the list
// needs (a buffer's jobs move only when `append` grows it into a new one), and the job.
extension _JobList {
    /// Where visiting the list starts reading: the one job, or the buffer's elements. Reads nothing
    /// from the buffer.
    @inline(__always)
    var _start: (address: UnsafeRawPointer, isJob: Bool)? {
        switch self {
        case .empty:
            return nil
        case .one(let job):
            return (UnsafeRawPointer(Unmanaged.passUnretained(job).toOpaque()), true)
        case .many(let buffer):
            return (UnsafeRawPointer(buffer.withUnsafeMutablePointerToElements { $0 }), false)
        }
    }

    /// The buffer's elements and count; `nil` for an empty list or a single job. Reads the
    /// buffer's count.
    @inline(__always)
    var _bufferStorage: (elements: UnsafeRawPointer, count: Int)? {
        guard case .many(let buffer) = self else { return nil }
        return buffer.withUnsafeMutablePointers { header, elements in
            (UnsafeRawPointer(elements), header.pointee.count)
        }
    }
}

extension Job {
    /// Starts loading the cache lines of the fields that a dependency's finish reads and writes (its
    /// lifecycle, lists, queue, ticket and extras): the first 128 bytes of the job at `address`,
    /// which span two or three lines.
    @inline(__always)
    static func _prefetchFields(at address: UnsafeRawPointer) {
        _prefetch(address)
        _prefetch(address + 64)
        _prefetch(address + 127)
    }

    /// Starts loading what visiting `_dependents` reads first: the one job's fields, or the
    /// buffer's header (its count, just before the elements) and first elements.
    @inline(__always)
    func _prefetchDependentsStorage() {
        guard let (address, isJob) = _dependents._start else { return }
        if isJob {
            Job._prefetchFields(at: address)
        } else {
            _prefetch(address - 16)
            _prefetch(address + 48)
        }
    }

    /// Starts loading the fields of each job in a buffer of `_dependents` (the one job's were
    /// loaded with the storage). Reads the buffer, so it pays once `_prefetchDependentsStorage()`
    /// has had time to bring that in.
    @inline(__always)
    func _prefetchDependents() {
        _forEachDependentToPrefetch(Job._prefetchFields(at:))
    }

    /// Calls `body` with the address of each of the first `dependentsToPrefetch` jobs in a buffer
    /// of `_dependents`, read without retaining them; nothing for an empty list or a single job.
    @inline(__always)
    func _forEachDependentToPrefetch(_ body: (UnsafeRawPointer) -> Void) {
        guard let (elements, count) = _dependents._bufferStorage else { return }
        for index in 0..<min(count, Job.dependentsToPrefetch) {
            body(Job._address(at: index, in: elements))
        }
    }

    /// The address of the job at `index` of a buffer's elements, read without retaining it.
    @inline(__always)
    static func _address(at index: Int, in elements: UnsafeRawPointer) -> UnsafeRawPointer {
        // A class reference and `Unmanaged` of it have the same layout.
        let reference = elements.load(
            fromByteOffset: index * MemoryLayout<Unmanaged<Job>>.stride, as: Unmanaged<Job>.self)
        return UnsafeRawPointer(reference.toOpaque())
    }

    /// How many dependents a claimed job's fields are loaded for. A fan-out's root has thousands;
    /// their lines would not all stay in the cache until its finish, and the hints would hold the
    /// lock.
    static let dependentsToPrefetch = 16
}

extension Job {
    /// For tests: the objects whose fields `_prefetchDependentsStorage()` and `_prefetchDependents()`
    /// load, as they find them without retaining, so that a test can check they are this job's
    /// dependents (a wrong address would not fail anything else, only load the wrong lines).
    package var _dependentAddressesToPrefetch: [UnsafeRawPointer] {
        engineLock.withLock {
            guard let (address, isJob) = _dependents._start else { return [] }
            if isJob { return [address] }
            guard _dependents._bufferStorage?.elements == address else { return [] }
            var addresses: [UnsafeRawPointer] = []
            _forEachDependentToPrefetch { addresses.append($0) }
            return addresses
        }
    }
}
