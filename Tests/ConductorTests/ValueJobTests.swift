import Conductor
import ConductorTestSupport
import Dispatch
import Testing

// ValueJob: values flow along a pipeline; a failure upstream reaches every `.requireSuccess`
// dependent's `value` as an error, and no body runs after it.

private struct ParseError: Error, Equatable {}

@Suite struct ValueJobTests {
    @Test func valuesFlowAlongAPipeline() async throws {
        let queue = JobQueue(name: "pipeline")
        let download = ValueJob { [UInt8]("42,8".utf8) }
        let parse = ValueJob { () async throws -> [Int] in
            let bytes = try await download.value
            return String(decoding: bytes, as: UTF8.self).split(separator: ",").map { Int($0)! }
        }
        let sum = ValueJob { try await parse.value.reduce(0, +) }
        try parse.addDependency(download, policy: .requireSuccess)
        try sum.addDependency(parse, policy: .requireSuccess)
        queue.addJobs([download, parse, sum], waitUntilFinished: false)
        #expect(try await sum.value == 50)
        #expect(try parse.result?.get() == [42, 8])
        if case .succeeded = sum.outcome {} else { Issue.record("sum: \(String(describing: sum.outcome))") }
    }

    @Test func aFailureUpstreamReachesEveryRequireSuccessDependentAsAnError() async throws {
        let queue = JobQueue(name: "pipeline-failure")
        let bodiesRun = Counter()
        let download = ValueJob { () async throws -> Int in throw ParseError() }
        download.name = "download"
        let parse = ValueJob { () async throws -> Int in
            bodiesRun.increment()
            return try await download.value + 1
        }
        let sum = ValueJob { () async throws -> Int in
            bodiesRun.increment()
            return try await parse.value + 1
        }
        try parse.addDependency(download, policy: .requireSuccess)
        try sum.addDependency(parse, policy: .requireSuccess)
        queue.addJobs([download, parse, sum], waitUntilFinished: false)
        await #expect(throws: ParseError.self) { try await download.value }
        await #expect(throws: CancellationError.self) { try await parse.value }
        await #expect(throws: CancellationError.self) { try await sum.value }
        #expect(bodiesRun.value == 0)
        #expect(parse.cancellationReason?.description == "dependencyFailed: 'download' failed")
        #expect(sum.cancellationReason?.code == .dependencyCancelled)
    }

    @Test func resultIsNilUntilFinishedAndCancellationIsAnError() async {
        let job = ValueJob { 1 }
        #expect(job.result == nil)
        job.cancel(reason: .init(code: .requested, detail: "not needed"))
        #expect(throws: CancellationError.self) { try job.result?.get() }
        await #expect(throws: CancellationError.self) { try await job.value }
        #expect(job.cancellationReason?.detail == "not needed")
    }

    @Test func aDependentReadsItsDependencysValueWithoutWaitingForItsCompletionBlock() async throws {
        // The dependency's completion block blocks until the dependent has read the value: reading
        // it must not wait for the block.
        let queue = JobQueue(name: "no-wait")
        let readValue = Signal()
        let upstream = ValueJob { 7 }
        let gate = DispatchSemaphore(value: 0)
        upstream.completionBlock = { gate.wait() }  // on a worker thread; released by the dependent
        let downstream = ValueJob { () async throws -> Int in
            let value = try await upstream.value
            gate.signal()
            readValue.fire()
            return value * 2
        }
        try downstream.addDependency(upstream, policy: .requireSuccess)
        queue.addJobs([upstream, downstream], waitUntilFinished: false)
        await readValue.wait()
        #expect(try await downstream.value == 14)
    }
}
