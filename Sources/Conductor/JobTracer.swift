import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Records what every queue does, for a timeline in Perfetto (<https://ui.perfetto.dev>) or
/// `chrome://tracing`.
///
/// ```swift
/// let tracer = JobTracer()
/// tracer.start()
/// queue.addJobs(jobs, waitUntilFinished: true)
/// tracer.stop()
/// try tracer.chromeTraceJSON().write(toFile: "run.json", atomically: true, encoding: .utf8)
/// ```
///
/// The trace has one track per queue slot ("queue name · slot k"), one complete event per job
/// execution (with its queue, priority and outcome), flow arrows from each dependency's end to its
/// dependent's start, instant events for cancellations and failures, and a counter track per
/// queue with its ready and executing jobs, sampled whenever a job starts or finishes.
///
/// It records every queue in the process, or only the queues given to
/// ``init(capacity:queues:)``. It keeps the last `capacity` events, in a ring: a long run costs
/// bounded memory, and the trace notes how many earlier events were dropped. Events are recorded in the engine's critical
/// sections, so their order is the engine's. When no tracer is running, each job start and finish
/// pays one relaxed atomic load; a running tracer adds a clock read and a ring write to each.
public final class JobTracer: Sendable {
    /// The most events kept; older ones are dropped.
    public let capacity: Int
    let recorder: _TraceRecorder

    /// Creates a stopped tracer that keeps at most `capacity` events (at least 1).
    ///
    /// - Parameters:
    ///   - capacity: The most events kept; older ones are dropped.
    ///   - queues: The queues whose jobs are recorded, or `nil` (the default) for every queue.
    ///     Jobs of other queues, and jobs started by hand on no queue, are left out, and so are
    ///     the flow arrows from dependencies on them. A group's children run on a queue of the
    ///     group's own, so only a tracer of every queue records them.
    public init(capacity: Int = 1_000_000, queues: [JobQueue]? = nil) {
        self.capacity = max(capacity, 1)
        recorder = _TraceRecorder(capacity: max(capacity, 1), queues: queues.map { Set($0.map(\.id)) })
    }

    deinit {
        stop()
    }

    /// Starts recording, keeping what was recorded before. Starting a started tracer does nothing.
    /// Several tracers may record at once; each gets every event.
    public func start() {
        engineLock.withLock {
            guard !_tracers.list.contains(where: { $0 === recorder }) else { return }
            _tracers.list.append(recorder)
            _isTracing.store(true, ordering: .relaxed)
        }
    }

    /// Stops recording; what was recorded stays, for ``chromeTraceJSON()``.
    public func stop() {
        engineLock.withLock {
            _tracers.list.removeAll { $0 === recorder }
            _isTracing.store(!_tracers.list.isEmpty, ordering: .relaxed)
        }
    }

    /// The recorded events as a Chrome trace (JSON), which Perfetto and `chrome://tracing` open.
    /// May be called while recording: it is a snapshot.
    ///
    /// - Complexity: O(events kept), with the engine lock held only to copy them.
    public func chromeTraceJSON() -> String {
        let snapshot = engineLock.withLock { recorder.snapshotLocked() }
        return _ChromeTrace(snapshot: snapshot, now: _PreciseClock.now()).json()
    }
}

/// The running tracers. Guarded by `engineLock`.
final class _Tracers: @unchecked Sendable {
    // @unchecked Sendable: `list` is guarded by `engineLock`.
    @exclusivity(unchecked) var list: [_TraceRecorder] = []
}

let _tracers = _Tracers()

/// Whether some tracer records: the one thing the hot path reads, without the lock (relaxed: a
/// job that starts just as a tracer starts may or may not be recorded). A global of its own,
/// initialized statically, so that reading it costs a load and no lazy-initialization check.
let _isTracing = Atomic<Bool>(false)

/// One recorded event: plain values only, so that writing it into the ring copies bytes and
/// touches no reference count. A job's name (when it has one) and its dependencies beyond the
/// first are kept beside the ring, in the recorder; unnamed jobs are named by type and id when the
/// trace is written.
struct _TraceEvent {
    enum Kind: UInt8 {
        case started
        case finished
        case cancelled
    }

    var kind: Kind
    var priority: JobPriority
    /// For `finished`: how it ended; for `cancelled`: the code.
    var outcome: _OutcomeKind?
    var code: CancellationReason.Code?
    /// The queue's executing and ready jobs after the event.
    var executing: Int32
    var ready: Int32
    var time: UInt64
    var job: UInt64
    var queue: UInt64
    /// For `started`: the job's first dependency (0 for none); the others are in the recorder.
    var firstDependency: UInt64
    /// The job's type, for its name when it has none.
    var type: Job.Type
    /// Whether the recorder counted this event toward keeping the job's name (set when recorded).
    var named = false
}

/// A tracer's ring of events, and what the events do not carry: the names of named jobs and of
/// queues, and dependencies beyond the first. A job's name is dropped with its last event in the
/// ring, and its dependencies with its start event, so memory is bounded by the ring (and the
/// number of queues). Guarded by `engineLock`.
final class _TraceRecorder: @unchecked Sendable {
    // @unchecked Sendable: every stored property, and the chunks' memory, is guarded by `engineLock`.
    // `@exclusivity(unchecked)`: the lock rules out conflicting accesses (see the note on `Job`).

    /// Events per chunk. The ring is made of chunks allocated as it fills, so it never copies
    /// what it holds, and memory grows with use up to `capacity`.
    static let chunkSize = 4_096

    let capacity: Int
    @exclusivity(unchecked) private var chunks: [UnsafeMutablePointer<_TraceEvent>] = []
    /// Events written so far (`count` of them are kept), and where the next one goes.
    @exclusivity(unchecked) private var count = 0
    @exclusivity(unchecked) private var next = 0
    @exclusivity(unchecked) private var dropped = 0
    @exclusivity(unchecked) private var jobNames: [UInt64: (name: String, events: Int)] = [:]
    @exclusivity(unchecked) private var moreDependencies: [UInt64: [UInt64]] = [:]
    @exclusivity(unchecked) private var queueNames: [UInt64: String] = [:]
    @exclusivity(unchecked) private var lastQueue: UInt64 = 0

    /// The ids of the queues recorded, or `nil` for every queue.
    let queues: Set<UInt64>?

    init(capacity: Int, queues: Set<UInt64>?) {
        self.capacity = capacity
        self.queues = queues
    }

    deinit {
        for chunk in chunks {
            chunk.deallocate()
        }
    }

    private func slot(_ index: Int) -> UnsafeMutablePointer<_TraceEvent> {
        chunks[index / _TraceRecorder.chunkSize] + index % _TraceRecorder.chunkSize
    }

    func recordLocked(_ event: _TraceEvent, job: Job, queue: JobQueue?) {
        if let queues, !queues.contains(event.queue) { return }
        var event = event
        if let queue, event.queue != lastQueue {
            lastQueue = event.queue
            if queueNames[event.queue] == nil {
                queueNames[event.queue] = queue._displayNameLocked
            }
        }
        if event.kind != .finished {
            if let name = job._name {
                // Counted per event that carries it, so that the name stays while any of them is
                // in the ring (until 2026-11-25 it went with the start event).
                jobNames[event.job] = (name, (jobNames[event.job]?.events ?? 0) + 1)
                event.named = true
            }
            if event.kind == .started && job._dependencies.count > 1 {
                moreDependencies[event.job] = job._dependencies.rest.map(\.id)
            }
        }
        if count < capacity {
            if next == chunks.count * _TraceRecorder.chunkSize {
                chunks.append(.allocate(capacity: min(_TraceRecorder.chunkSize, capacity - next)))
            }
            slot(next).initialize(to: event)
            count += 1
        } else {
            // The overwritten event's name and dependencies go with it: memory stays bounded.
            let old = slot(next).pointee
            if old.named, let kept = jobNames[old.job] {
                jobNames[old.job] = kept.events > 1 ? (kept.name, kept.events - 1) : nil
            }
            if old.kind == .started && !moreDependencies.isEmpty { moreDependencies[old.job] = nil }
            slot(next).pointee = event
            dropped += 1
        }
        next = next + 1 == capacity ? 0 : next + 1
    }

    /// The events, oldest first, how many were dropped, and what they do not carry.
    func snapshotLocked() -> _TraceSnapshot {
        var events: [_TraceEvent] = []
        events.reserveCapacity(count)
        let first = count < capacity ? 0 : next
        for offset in 0..<count {
            events.append(slot((first + offset) % capacity).pointee)
        }
        return _TraceSnapshot(
            events: events, dropped: dropped, jobNames: jobNames.mapValues(\.name), moreDependencies: moreDependencies,
            queueNames: queueNames)
    }
}

/// A recorder's contents, copied out under the lock and written out after.
struct _TraceSnapshot {
    let events: [_TraceEvent]
    let dropped: Int
    let jobNames: [UInt64: String]
    let moreDependencies: [UInt64: [UInt64]]
    let queueNames: [UInt64: String]

    func name(of event: _TraceEvent) -> String {
        jobNames[event.job] ?? "\(event.type)#\(event.job)"
    }

    func dependencies(of event: _TraceEvent) -> [UInt64] {
        event.firstDependency == 0 ? [] : [event.firstDependency] + (moreDependencies[event.job] ?? [])
    }
}

extension Job {
    /// Records an event of this job in every running tracer. Called only when `_isTracing`
    /// was seen set; out of line, so that the hot path carries only that check. Call with
    /// `engineLock` held.
    @inline(never)
    func _traceLocked(_ kind: _TraceEvent.Kind) {
        guard !_tracers.list.isEmpty else { return }
        // Unretained: the job's queue outlives this critical section (it holds the job).
        let queue = _queue?.takeUnretainedValue()
        // A finishing job is recorded before its queue counts it out: it is not executing after.
        let executing = (queue?._executing ?? 0) - (kind == .finished ? 1 : 0)
        var event = _TraceEvent(
            kind: kind, priority: _priority, outcome: nil, code: nil, executing: Int32(clamping: max(executing, 0)),
            ready: Int32(clamping: queue?._ready.count ?? 0), time: _PreciseClock.now(), job: id, queue: queue?.id ?? 0,
            firstDependency: 0, type: type(of: self))
        switch kind {
        case .started: event.firstDependency = _dependencies.first?.id ?? 0
        case .finished: event.outcome = _lifecycle.outcome
        case .cancelled: event.code = _lifecycle.cancellationCode
        }
        for recorder in _tracers.list {
            recorder.recordLocked(event, job: self, queue: queue)
        }
    }
}

/// Turns recorded events into the Chrome trace event format.
struct _ChromeTrace {
    let snapshot: _TraceSnapshot
    let now: UInt64

    var events: [_TraceEvent] { snapshot.events }
    var dropped: Int { snapshot.dropped }

    func json() -> String {
        var out: [String] = []
        let origin = events.first?.time ?? now
        /// Microseconds, with three decimals, as the format wants.
        func micro(_ nanoseconds: UInt64) -> String {
            "\(nanoseconds / 1_000).\(String(nanoseconds % 1_000 + 1_000).dropFirst())"
        }
        func ts(_ time: UInt64) -> String { micro(time &- min(origin, time)) }
        // Queues that share a name are told apart by their number.
        var nameCounts: [String: Int] = [:]
        for name in snapshot.queueNames.values { nameCounts[name, default: 0] += 1 }
        func queueName(_ id: UInt64) -> String {
            guard id != 0 else { return "no queue" }
            let name = snapshot.queueNames[id] ?? "JobQueue#\(id)"
            return nameCounts[name, default: 0] > 1 ? "queue '\(name)' #\(id)" : "queue '\(name)'"
        }
        out.append(#"{"ph":"M","pid":1,"name":"process_name","args":{"name":"Conductor"}}"#)
        if dropped > 0 {
            out.append(
                #"{"ph":"i","pid":1,"tid":0,"ts":0.000,"s":"g","name":"\#(dropped) earlier events were dropped (the tracer keeps \#(events.count))","cat":"tracer"}"#
            )
        }
        // Tracks: one per queue slot, allocated as jobs start (lowest free slot first).
        struct Slot: Hashable {
            let queue: UInt64
            let slot: Int
        }
        var tracks: [Slot: Int] = [:]
        var freeSlots: [UInt64: [Int]] = [:]
        var nextSlot: [UInt64: Int] = [:]
        var running: [UInt64: (event: _TraceEvent, track: Int, slot: Int)] = [:]
        /// Where each finished execution ended: its track and time, for flow arrows.
        var ended: [UInt64: (track: Int, time: UInt64)] = [:]
        var flowID = 0
        func track(queue: UInt64, slot: Int) -> Int {
            if let existing = tracks[Slot(queue: queue, slot: slot)] { return existing }
            let name = "\(queueName(queue)) · slot \(slot)"
            let id = tracks.count + 1
            tracks[Slot(queue: queue, slot: slot)] = id
            out.append(#"{"ph":"M","pid":1,"tid":\#(id),"name":"thread_name","args":{"name":\#(_json(name))}}"#)
            out.append(#"{"ph":"M","pid":1,"tid":\#(id),"name":"thread_sort_index","args":{"sort_index":\#(id)}}"#)
            return id
        }
        func complete(_ start: _TraceEvent, track: Int, end: UInt64, outcome: String) {
            let name = snapshot.name(of: start)
            out.append(
                #"{"ph":"X","pid":1,"tid":\#(track),"ts":\#(ts(start.time)),"dur":\#(micro(end &- min(start.time, end))),"name":\#(_json(name)),"cat":"job","args":{"id":\#(start.job),"queue":\#(_json(queueName(start.queue))),"priority":"\#(start.priority)","outcome":"\#(outcome)"}}"#
            )
        }
        for event in events {
            let counter =
                #"{"ph":"C","pid":1,"ts":\#(ts(event.time)),"name":\#(_json(queueName(event.queue))),"args":{"ready":\#(event.ready),"executing":\#(event.executing)}}"#
            switch event.kind {
            case .started:
                var free = freeSlots[event.queue] ?? []
                let slot: Int
                if let lowest = free.min() {
                    slot = lowest
                    free.removeAll { $0 == lowest }
                    freeSlots[event.queue] = free
                } else {
                    slot = nextSlot[event.queue, default: 0]
                    nextSlot[event.queue] = slot + 1
                }
                let id = track(queue: event.queue, slot: slot)
                running[event.job] = (event, id, slot)
                for dependency in snapshot.dependencies(of: event) {
                    guard let end = ended[dependency] else { continue }
                    flowID += 1
                    out.append(
                        #"{"ph":"s","pid":1,"tid":\#(end.track),"ts":\#(ts(end.time)),"id":\#(flowID),"name":"dependency","cat":"dependency"}"#
                    )
                    out.append(
                        #"{"ph":"f","bp":"e","pid":1,"tid":\#(id),"ts":\#(ts(event.time)),"id":\#(flowID),"name":"dependency","cat":"dependency"}"#
                    )
                }
                if event.queue != 0 { out.append(counter) }
            case .finished:
                guard let start = running.removeValue(forKey: event.job) else { continue }
                freeSlots[start.event.queue, default: []].append(start.slot)
                let outcome =
                    switch event.outcome {
                    case .failed?: "failed"
                    case .cancelled?: "cancelled"
                    default: "succeeded"
                    }
                complete(start.event, track: start.track, end: event.time, outcome: outcome)
                ended[event.job] = (start.track, event.time)
                if event.outcome == .failed {
                    let name = snapshot.name(of: start.event)
                    out.append(
                        #"{"ph":"i","pid":1,"tid":\#(start.track),"ts":\#(ts(event.time)),"s":"t","name":\#(_json("failed: \(name)")),"cat":"failure"}"#
                    )
                }
                if event.queue != 0 { out.append(counter) }
            case .cancelled:
                let name = snapshot.name(of: event)
                let code = event.code?.description ?? "requested"
                let track = running[event.job]?.track
                out.append(
                    #"{"ph":"i","pid":1,"tid":\#(track ?? 0),"ts":\#(ts(event.time)),"s":"\#(track == nil ? "p" : "t")","name":\#(_json("cancelled (\(code)): \(name)")),"cat":"cancellation","args":{"queue":\#(_json(queueName(event.queue)))}}"#
                )
            }
        }
        // Jobs still executing: up to now.
        for (_, start) in running.sorted(by: { $0.key < $1.key }) {
            complete(start.event, track: start.track, end: max(now, start.event.time), outcome: "executing")
        }
        return "{\"traceEvents\":[\n" + out.joined(separator: ",\n")
            + "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"droppedEvents\":\(dropped)}}\n"
    }
}

/// `text` as a JSON string literal. `package` so that conductor-bench's JSON report uses it too.
package func _json(_ text: String) -> String {
    var result = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": result += "\\\""
        case "\\": result += "\\\\"
        case "\n": result += "\\n"
        case "\r": result += "\\r"
        case "\t": result += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: result.unicodeScalars.append(scalar)
        }
    }
    return result + "\""
}

extension JobTracer: CustomReflectable {
    /// What `dump(_:)` and a `Mirror` show: its ``capacity`` and whether it is recording. Not its
    /// stored events, which the engine writes under its lock: a default mirror read them without
    /// it, and could crash on a buffer being replaced (`Job.customMirror`).
    public var customMirror: Mirror {
        let isRecording = engineLock.withLock { _tracers.list.contains { $0 === recorder } }
        return Mirror(self, children: ["capacity": capacity, "isRecording": isRecording], displayStyle: .class)
    }
}
