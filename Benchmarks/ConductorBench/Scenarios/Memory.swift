import Conductor
import Dispatch
import Foundation
import Synchronization

extension Scenario {
    /// `memory`: bytes the allocator holds per job queued on a suspended queue. The blocks capture
    /// nothing, so the figure is the queue's cost per job, not the closure's. After measuring, the
    /// queue is resumed and every job must run.
    static func memory(size: Int) -> Scenario {
        let unavailable = "this platform offers no allocator accounting (mallinfo2 or malloc_zone_statistics)"
        func workload(_ method: String, _ body: @escaping (Int) -> Trial) -> Workload {
            MemoryAccounting.isAvailable ? .run(method: method, body) : .notApplicable(reason: unavailable)
        }
        return Scenario(
            id: "memory",
            summary: "bytes allocated per queued job, \(Format.count(size)) jobs on a suspended queue "
                + "(allocator's own accounting before and after; blocks capture nothing)",
            metric: .bytesPerJob,
            size: size,
            workloads: [
                (.conductor, workload("addJob(BlockJob { }) on a suspended JobQueue", Memory.conductor)),
                (
                    .foundation,
                    workload("addOperation(BlockOperation { }) on a suspended OperationQueue", Memory.foundation)
                ),
                (
                    .dispatch,
                    workload(
                        "async(execute: DispatchWorkItem { }) on a suspended serial DispatchQueue", Memory.dispatch)
                ),
                (
                    .taskGroup,
                    .notApplicable(
                        reason: "a child task starts as soon as it is added; tasks cannot be held on a suspended queue")
                ),
            ])
    }
}

enum Memory {
    /// The job body. A global, so the blocks capture nothing and allocate no context.
    private static let ran = Atomic<Int>(0)

    static func conductor(_ jobs: Int) -> Trial {
        let queue = JobQueue(name: "memory")
        queue.isSuspended = true
        return measure(jobs) {
            for _ in 0..<jobs {
                queue.addJob(BlockJob { ran.wrappingAdd(1, ordering: .relaxed) })
            }
        } drain: {
            queue.isSuspended = false
            queue.waitUntilAllJobsAreFinished()
        }
    }

    static func foundation(_ jobs: Int) -> Trial {
        let queue = FoundationStop.queue()
        queue.isSuspended = true
        return measure(jobs) {
            for _ in 0..<jobs {
                queue.addOperation(BlockOperation { ran.wrappingAdd(1, ordering: .relaxed) })
            }
        } drain: {
            queue.isSuspended = false
            queue.waitUntilAllOperationsAreFinished()
        }
    }

    static func dispatch(_ jobs: Int) -> Trial {
        let queue = DispatchQueue(label: "memory")
        queue.suspend()
        return measure(jobs) {
            for _ in 0..<jobs {
                queue.async(execute: DispatchWorkItem { ran.wrappingAdd(1, ordering: .relaxed) })
            }
        } drain: {
            queue.resume()
            queue.sync {}
        }
    }

    /// Reads the allocator's accounting around `fill`, then runs `drain` and checks every job ran.
    private static func measure(_ jobs: Int, fill: () -> Void, drain: () -> Void) -> Trial {
        ran.store(0, ordering: .relaxed)
        let before = MemoryAccounting.allocatedBytes() ?? 0
        let (_, nanoseconds) = Clock.measure(fill)
        let after = MemoryAccounting.allocatedBytes() ?? 0
        drain()
        let count = ran.load(ordering: .relaxed)
        let failure = count == jobs ? nil : "\(Format.count(count)) of \(Format.count(jobs)) jobs ran after resuming"
        return Trial(
            nanoseconds: nanoseconds, jobs: jobs, perJob: Double(after - before) / Double(max(jobs, 1)),
            failure: failure)
    }
}
