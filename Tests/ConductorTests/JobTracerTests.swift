import Conductor
import ConductorTestSupport
import Foundation
import Testing

// The job tracer (Docs/Diagnostics.md, "A trace for Perfetto"): valid Chrome trace JSON, every
// executed job exactly once, flows from a dependency's end to its dependent's start, slots no
// more than the limit, and a bounded ring that says when it dropped events. Tracers record every
// queue in the process, so each test looks only at its own jobs and queues.

private struct Broken: Error {}

// @unchecked Sendable: no state of its own.
private final class FailingJob: Job, @unchecked Sendable {
    override func execute() throws { throw Broken() }
}

/// The trace's events, parsed.
private func traceEvents(_ json: String) throws -> [[String: Any]] {
    let object = try JSONSerialization.jsonObject(with: Data(json.utf8))
    let root = try #require(object as? [String: Any])
    return try #require(root["traceEvents"] as? [[String: Any]])
}

private func number(_ value: Any?) -> Double? {
    (value as? NSNumber)?.doubleValue
}

@Suite struct JobTracerTests {
    @Test func aTraceHasEveryExecutedJobOnceWithFlowsSlotsAndInstants() async throws {
        let front = JobQueue(name: "trace-front", maxConcurrentJobCount: 2)
        let back = JobQueue(name: "trace-back")
        // Only this test's queues: the other tests running meanwhile would fill the trace.
        let tracer = JobTracer(queues: [front, back])
        tracer.start()
        var jobs: [Job] = []
        var edges = 0
        // A chain on the limit-2 queue, a fan on the other queue depending on its end, an
        // asynchronous job, a job that fails, and one cancelled before it starts. The chain's first
        // job waits (on a worker thread) until that cancellation is made, so the chain cannot reach
        // the cancelled job first however the threads are scheduled.
        let cancellationMade = DispatchSemaphore(value: 0)
        for index in 0..<40 {
            let job = index == 0 ? BlockJob { cancellationMade.wait() } : BlockJob {}
            job.name = "trace-chain-\(index)"
            if let previous = jobs.last {
                try job.addDependency(previous)
                edges += 1
            }
            jobs.append(job)
        }
        let last = jobs[jobs.count - 1]
        var fan: [Job] = []
        for index in 0..<20 {
            let job = BlockJob {}
            job.name = "trace-fan-\(index)"
            try job.addDependency(last)
            edges += 1
            fan.append(job)
        }
        let async = AsyncBlockJob { job in DispatchQueue.global().async { job.finish() } }
        async.name = "trace-async"
        let failing = FailingJob()
        failing.name = "trace-failing"
        let cancelled = BlockJob {}
        cancelled.name = "trace-cancelled"
        try cancelled.addDependency(last)
        front.addJobs(jobs + [async, failing, cancelled], waitUntilFinished: false)
        cancelled.cancel()
        cancellationMade.signal()
        back.addJobs(fan, waitUntilFinished: false)
        await front.waitUntilAllJobsAreFinished()
        await back.waitUntilAllJobsAreFinished()
        tracer.stop()

        let events = try traceEvents(tracer.chromeTraceJSON())
        let executed = jobs + fan + [async, failing]
        let ours = Set(executed.map(\.id) + [cancelled.id])
        let completes = events.filter { $0["ph"] as? String == "X" }.filter {
            guard let id = number(($0["args"] as? [String: Any])?["id"]) else { return false }
            return ours.contains(UInt64(id))
        }
        var seen: [UInt64: Int] = [:]
        for event in completes {
            let id = UInt64(number((event["args"] as! [String: Any])["id"])!)
            seen[id, default: 0] += 1
        }
        #expect(seen == Dictionary(uniqueKeysWithValues: executed.map { ($0.id, 1) }))
        let failed = completes.first { $0["name"] as? String == "trace-failing" }
        #expect((failed?["args"] as? [String: Any])?["outcome"] as? String == "failed")
        #expect((completes.first?["args"] as? [String: Any])?["priority"] as? String == "normal")

        // Tracks: the limit-2 queue uses two slots, never a third.
        let trackNames = events.filter { $0["name"] as? String == "thread_name" }.compactMap {
            ($0["args"] as? [String: Any])?["name"] as? String
        }
        #expect(
            trackNames.filter { $0.hasPrefix("queue 'trace-front' · slot ") }.sorted() == [
                "queue 'trace-front' · slot 0", "queue 'trace-front' · slot 1",
            ])

        // Flows: one pair per edge between executed jobs, each starting no later than it ends.
        let ourTracks = Set(
            events.filter { $0["name"] as? String == "thread_name" }.filter {
                (($0["args"] as? [String: Any])?["name"] as? String)?.hasPrefix("queue 'trace-") == true
            }.compactMap { number($0["tid"]) })
        var flows: [Double: (start: Double?, end: Double?)] = [:]
        for event in events where ["s", "f"].contains(event["ph"] as? String) {
            let id = number(event["id"])!
            let ts = number(event["ts"])!
            if event["ph"] as? String == "s" {
                flows[id, default: (nil, nil)].start = ts
            } else {
                guard ourTracks.contains(number(event["tid"])!) else { continue }
                flows[id, default: (nil, nil)].end = ts
            }
        }
        let ourFlows = flows.values.filter { $0.end != nil }
        #expect(ourFlows.count == edges)
        for flow in ourFlows {
            #expect(flow.start != nil && flow.start! <= flow.end!)
        }

        // Instants: the cancellation and the failure.
        let instants = events.filter { $0["ph"] as? String == "i" }.compactMap { $0["name"] as? String }
        #expect(instants.contains("cancelled (requested): trace-cancelled"))
        #expect(instants.contains("failed: trace-failing"))

        // Counters: the front queue never shows more than 2 executing.
        let counters = events.filter { $0["ph"] as? String == "C" && $0["name"] as? String == "queue 'trace-front'" }
        #expect(!counters.isEmpty)
        for counter in counters {
            #expect(number((counter["args"] as? [String: Any])?["executing"]).map { $0 <= 2 } == true)
        }
    }

    @Test func aSmallRingKeepsTheLatestEventsAndSaysHowManyItDropped() async throws {
        let queue = JobQueue(name: "trace-ring")
        let tracer = JobTracer(capacity: 10, queues: [queue])
        tracer.start()
        let jobs = (0..<100).map { _ in BlockJob {} }
        queue.addJobs(jobs, waitUntilFinished: false)
        await queue.waitUntilAllJobsAreFinished()
        tracer.stop()
        let json = tracer.chromeTraceJSON()
        let events = try traceEvents(json)
        #expect(
            events.contains {
                ($0["name"] as? String)?.contains("earlier events were dropped (the tracer keeps 10)") == true
            })
        let root = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
        #expect(number((root?["otherData"] as? [String: Any])?["droppedEvents"]) == 190)
    }

    @Test func aCapacityBelowOneKeepsOneEvent() async throws {
        for capacity in [0, -5, Int.min] {
            let queue = JobQueue(name: "trace-capacity-\(capacity)")
            let tracer = JobTracer(capacity: capacity, queues: [queue])
            #expect(tracer.capacity == 1)
            tracer.start()
            queue.addJobs([BlockJob {}, BlockJob {}], waitUntilFinished: true)
            tracer.stop()
            let json = tracer.chromeTraceJSON()
            let root = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
            #expect(number((root?["otherData"] as? [String: Any])?["droppedEvents"]) == 3, "\(capacity)")
            #expect(json.contains("earlier events were dropped (the tracer keeps 1)"))
        }
    }

    @Test func aTracerGivenQueuesRecordsOnlyTheirJobs() async throws {
        let traced = JobQueue(name: "trace-listed")
        let other = JobQueue(name: "trace-unlisted")
        let tracer = JobTracer(queues: [traced])
        tracer.start()
        let inside = BlockJob {}
        let outside = BlockJob {}
        try inside.addDependency(outside)
        other.addJob(outside)
        traced.addJob(inside)
        await inside.waitUntilFinished()
        tracer.stop()
        let ids = try traceEvents(tracer.chromeTraceJSON()).compactMap {
            ($0["args"] as? [String: Any]).flatMap { number($0["id"]) }
        }
        #expect(Set(ids) == [Double(inside.id)])
        #expect(!tracer.chromeTraceJSON().contains("trace-unlisted"))
    }

    @Test func aTracerRecordsOnlyWhileStarted() async throws {
        let queue = JobQueue(name: "trace-stopped")
        let tracer = JobTracer(queues: [queue])
        tracer.start()
        tracer.stop()
        let job = BlockJob {}
        queue.addJob(job)
        await job.waitUntilFinished()
        let events = try traceEvents(tracer.chromeTraceJSON())
        #expect(!events.contains { ($0["args"] as? [String: Any]).flatMap { number($0["id"]) } == Double(job.id) })
    }

    // Found by an audit on 2026-11-25: tracks were keyed by the queue's name, so two queues named
    // alike shared slot tracks (their jobs overlapping on one) and a counter track; and a job's
    // name went with its start event when the ring overwrote it, though its cancellation was kept.

    @Test func queuesWithTheSameNameGetTracksAndCountersOfTheirOwn() async throws {
        let first = JobQueue(name: "same-name", maxConcurrentJobCount: 1)
        let second = JobQueue(name: "same-name", maxConcurrentJobCount: 1)
        let tracer = JobTracer(queues: [first, second])
        tracer.start()
        let (a, b) = (HeldJob(name: "same-name a"), HeldJob(name: "same-name b"))
        first.addJob(a)
        second.addJob(b)
        await a.started.wait()
        await b.started.wait()
        a.finish()
        b.finish()
        await first.waitUntilAllJobsAreFinished()
        await second.waitUntilAllJobsAreFinished()
        tracer.stop()
        let events = try traceEvents(tracer.chromeTraceJSON())
        let tracks = events.filter {
            $0["ph"] as? String == "X" && ($0["name"] as? String)?.hasPrefix("same-name") == true
        }
        .compactMap { number($0["tid"]) }
        #expect(tracks.count == 2)
        #expect(Set(tracks).count == 2, "both executing at once, on tracks \(tracks)")
        let counters = Set(
            events.filter { $0["ph"] as? String == "C" }.compactMap { $0["name"] as? String }
                .filter { $0.contains("same-name") })
        #expect(counters.count == 2, "\(counters)")
    }

    @Test func aCancellationKeepsItsJobsNameWhenTheRingDropsTheStart() async throws {
        let queue = JobQueue(name: "ring-name")
        let tracer = JobTracer(capacity: 2, queues: [queue])
        tracer.start()
        let job = HeldJob(name: "ring victim")
        queue.addJob(job)
        await job.started.wait()
        job.cancel()  // the ring holds started, cancelled
        job.finish()  // finished overwrites started
        await queue.waitUntilAllJobsAreFinished()
        tracer.stop()
        let events = try traceEvents(tracer.chromeTraceJSON())
        let names = events.filter { $0["cat"] as? String == "cancellation" }.compactMap { $0["name"] as? String }
        #expect(names == ["cancelled (requested): ring victim"])
    }

    @Test func aNameSetAfterTheJobStartedIsKeptWithItsLaterEvents() async throws {
        // Its start, recorded without a name, is overwritten; its cancellation carries the name.
        let queue = JobQueue(name: "ring-late-name")
        let tracer = JobTracer(capacity: 2, queues: [queue])
        tracer.start()
        let job = HeldJob(name: "unnamed")
        job.name = nil
        queue.addJob(job)
        await job.started.wait()
        job.name = "named late"
        job.cancel()
        job.finish()
        await queue.waitUntilAllJobsAreFinished()
        tracer.stop()
        let events = try traceEvents(tracer.chromeTraceJSON())
        let names = events.filter { $0["cat"] as? String == "cancellation" }.compactMap { $0["name"] as? String }
        #expect(names == ["cancelled (requested): named late"])
    }
}
