#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The clock of traces and of the lock profiler: monotonic, in nanoseconds, with full resolution
/// (unlike `_DiagnosticClock`), read only while a tracer or a lock profile runs.
enum _PreciseClock {
    @inline(__always)
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}

/// The clock that times executing jobs for diagnostics (``Job/explain()``): monotonic, and cheap
/// enough to read on every start. On Linux it is `CLOCK_MONOTONIC_COARSE`, a vDSO read with the
/// resolution of the scheduler tick (a few milliseconds), plenty for saying how long a job has run;
/// on Darwin, `CLOCK_UPTIME_RAW_APPROX`.
enum _DiagnosticClock {
    /// Set in `Job._readyTicket` when it holds a start time rather than a ready ticket.
    static let startStamp: UInt64 = 1 << 63
    /// Set in `Job._readyTicket` when it holds the number of the barrier epoch the job is held in.
    static let heldMark: UInt64 = 1 << 62

    /// Nanoseconds since an arbitrary point, never decreasing, below `startStamp`.
    @inline(__always)
    static func now() -> UInt64 {
        #if canImport(Darwin)
            // The commpage clock, as cheap as Linux's coarse one.
            return clock_gettime_nsec_np(CLOCK_UPTIME_RAW_APPROX) & ~startStamp
        #else
            var time = timespec()
            clock_gettime(CLOCK_MONOTONIC_COARSE, &time)
            return (UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)) & ~startStamp
        #endif
    }

    /// "4 ms", "3.2 s", "5 min 12 s" or "2 h 3 min".
    static func format(_ nanoseconds: UInt64) -> String {
        let milliseconds = nanoseconds / 1_000_000
        if milliseconds < 1_000 { return "\(milliseconds) ms" }
        if milliseconds < 60_000 {
            return "\(milliseconds / 1_000).\(milliseconds % 1_000 / 100) s"
        }
        let seconds = milliseconds / 1_000
        if seconds < 3_600 { return "\(seconds / 60) min \(seconds % 60) s" }
        return "\(seconds / 3_600) h \(seconds % 3_600 / 60) min"
    }
}

/// Text put together under the engine lock that may show values only user code can describe (a
/// failure's error, a condition's name). Those are kept as they are and described by `rendered()`,
/// after unlocking: no user code runs under the lock.
struct _DeferredText {
    enum Part {
        case text(String)
        case error(any Error)
        /// The names of conditions, quoted and separated by commas.
        case conditionNames([any JobCondition])
    }

    private(set) var parts: [Part] = []

    init(_ text: String = "") {
        if !text.isEmpty { parts.append(.text(text)) }
    }

    mutating func append(_ text: String) {
        parts.append(.text(text))
    }

    mutating func append(_ part: Part) {
        parts.append(part)
    }

    mutating func append(_ other: _DeferredText) {
        parts.append(contentsOf: other.parts)
    }

    /// The text parts alone, for a text known to hold no error or condition: safe under the lock.
    var plainText: String {
        parts.reduce(into: "") { result, part in
            if case .text(let text) = part { result += text }
        }
    }

    /// The text, with errors and condition names described. Call without `engineLock` held.
    func rendered() -> String {
        var result = ""
        for part in parts {
            switch part {
            case .text(let text): result += text
            case .error(let error): result += "\(error)"
            case .conditionNames(let conditions): result += conditions.map { "'\($0.name)'" }.joined(separator: ", ")
            }
        }
        return result
    }
}

/// A list of at most `limit` items, then "and N more".
func _listing<T>(_ items: [T], limit: Int = 8, _ describe: (T) -> String) -> String {
    let shown = items.prefix(limit).map(describe).joined(separator: ", ")
    return items.count > limit ? "\(shown) and \(items.count - limit) more" : shown
}

/// The queues that have unsettled jobs (and so retain themselves), in an intrusive list, for
/// ``StallWatchdog``: a queue with nothing unsettled has nothing to report. A queue joins when it
/// gains its first unsettled job and leaves when its last one settles, in the critical sections
/// that take and release its self-retain, so every queue on the list is alive. No weak references:
/// one would move the queue's reference count to a side table and slow every retain of it.
/// Guarded by `engineLock`.
final class _ActiveQueues: @unchecked Sendable {
    // @unchecked Sendable: `head` (and the queues' links) are guarded by `engineLock`.
    var head: Unmanaged<JobQueue>?

    /// The active queues, most recently activated first.
    func allLocked() -> [JobQueue] {
        var queues: [JobQueue] = []
        var node = head
        while let current = node {
            queues.append(current.takeUnretainedValue())
            node = current._withUnsafeGuaranteedRef { $0._activeNext }
        }
        return queues
    }
}

let _activeQueues = _ActiveQueues()

/// The jobs whose work is blocked in a `waitUntil…` call now (see `Job._beginBlockedWaitLocked`),
/// for ``StallWatchdog``'s wait-cycle search. Guarded by `engineLock`.
final class _BlockedWaits: @unchecked Sendable {
    // @unchecked Sendable: `waiters` is guarded by `engineLock`.
    var waiters: [ObjectIdentifier: Job] = [:]
}

let _blockedWaits = _BlockedWaits()
