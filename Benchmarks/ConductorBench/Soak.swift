import Conductor
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `--soak N`: pushes N jobs through one queue in batches and samples resident memory as it goes,
/// to show that memory stays flat: nothing the engine keeps per job outlives the job.
///
/// A producer keeps at most `window` jobs queued (it waits for the queue to drain below half the
/// window before adding more), a mix of synchronous, asynchronous and dependent jobs with observers
/// and completion blocks, so every path that allocates per job is exercised.
enum Soak {
    static let window = 20_000

    /// The process's resident set in bytes, from `/proc/self/statm`; `nil` where there is none.
    static func residentBytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    static func run(jobs total: Int) -> Int32 {
        let queue = JobQueue(name: "soak", maxConcurrentJobCount: 4)
        let completion = DispatchQueue(label: "soak.completion")
        let ran = Atomic<Int>(0)
        let completed = Atomic<Int>(0)
        let observed = Atomic<Int>(0)
        var samples: [(jobs: Int, bytes: Int)] = []
        let sampleEvery = max(total / 20, window)
        let started = Clock.now()
        var added = 0
        var previous: Job?
        while added < total {
            let batch = min(window / 2, total - added)
            var jobs: [Job] = []
            jobs.reserveCapacity(batch)
            for index in 0..<batch {
                let job: Job
                switch (added + index) % 4 {
                case 0:
                    job = AsyncBlockJob { job in
                        ran.add(1, ordering: .relaxed)
                        completion.async { job.finish() }
                    }
                case 1:
                    job = BlockJob { ran.add(1, ordering: .relaxed) }
                    job.observe { event in
                        if event == .finished { observed.add(1, ordering: .relaxed) }
                    }
                default:
                    job = BlockJob { ran.add(1, ordering: .relaxed) }
                }
                job.completionBlock = { completed.add(1, ordering: .relaxed) }
                if (added + index) % 8 == 3, let previous {
                    try? job.addDependency(previous)
                }
                previous = job
                jobs.append(job)
            }
            queue.addJobs(jobs, waitUntilFinished: false)
            added += batch
            while queue.jobCount > window / 2 {
                usleep(100)  // a pacing loop for the producer, not synchronization of a check
            }
            if added % sampleEvery < batch, let bytes = residentBytes() {
                samples.append((added, bytes))
                Console.progress("soak: \(Format.count(added)) jobs, resident \(bytes / 1_048_576) MiB")
            }
        }
        previous = nil
        queue.waitUntilAllJobsAreFinished()
        let seconds = Double(Clock.now() - started) / 1e9
        if let bytes = residentBytes() { samples.append((added, bytes)) }

        let ok =
            ran.load(ordering: .relaxed) == total && completed.load(ordering: .relaxed) == total
            && observed.load(ordering: .relaxed) == (total + 2) / 4 && queue.jobCount == 0
        print(
            "soak: \(Format.count(total)) jobs through one queue (limit 4; sync, async, dependent, observed) in "
                + String(format: "%.1f s (%.0f ns/job)", seconds, seconds * 1e9 / Double(total)))
        print("  resident memory (MiB) by jobs done:")
        for sample in samples {
            print(
                "    \(Format.count(sample.jobs).leftPadded(to: 12))  \(String(format: "%.1f", Double(sample.bytes) / 1_048_576))"
            )
        }
        if samples.count >= 3 {
            // Compare after warm-up (the second sample) with the end: flat means within 10 %.
            let warm = Double(samples[1].bytes)
            let last = Double(samples[samples.count - 1].bytes)
            let growth = (last - warm) / warm
            print(String(format: "  growth from the second sample to the end: %+.1f %%", growth * 100))
        }
        print("  every job ran and completed exactly once: \(ok ? "yes" : "NO")")
        return ok ? 0 : 1
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
