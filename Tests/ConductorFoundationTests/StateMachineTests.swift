import ConductorFoundation
import Testing

// The bridges' state machines, driven by hand: no threads, no Foundation queues. Every interleaving
// the classes can meet is a sequence of events here. (Results are bound before `#expect` because
// the events are mutating.)

@Suite("Operation state machine")
struct OperationStateMachineTests {
    @Test("start, run, finish: executing then finished, each reported once")
    func normalLifecycle() {
        var machine = _OperationStateMachine()
        #expect(!machine.isExecuting && !machine.isFinished)

        let start = machine.startRequested(isCancelled: false)
        #expect(start == .reportExecuting)
        #expect(!machine.isExecuting, "not committed until executingCommitted()")
        let afterCommit = machine.executingCommitted()
        #expect(afterCommit == .runJob)
        #expect(machine.isExecuting)

        let reports = machine.jobFinished()
        #expect(reports)
        #expect(machine.isExecuting && !machine.isFinished, "not committed until finishCommitted()")
        let reportsAgain = machine.jobFinished()
        #expect(!reportsAgain, "a second report of the finish does nothing")
        machine.finishCommitted()
        #expect(machine.isFinished && !machine.isExecuting)

        let lateReport = machine.jobFinished()
        #expect(!lateReport)
        let lateStart = machine.startRequested(isCancelled: false)
        #expect(lateStart == .none, "a finished operation ignores start()")
    }

    @Test("start of a cancelled operation finishes it without ever reporting executing")
    func earlyCancellation() {
        var machine = _OperationStateMachine()
        let start = machine.startRequested(isCancelled: true)
        #expect(start == .reportFinishedWithoutRunning)
        #expect(!machine.isExecuting && !machine.isFinished)
        machine.finishCommitted()
        #expect(machine.isFinished && !machine.isExecuting)
    }

    @Test("a job that finished before start: the operation finishes without running it")
    func jobFinishedBeforeStart() {
        var machine = _OperationStateMachine()
        let reports = machine.jobFinished()
        #expect(!reports)
        #expect(machine.state == .idle(jobFinished: true))
        let start = machine.startRequested(isCancelled: false)
        #expect(start == .reportFinishedWithoutRunning)
    }

    @Test("a job that finishes while start() reports executing: finished once executing is committed")
    func jobFinishedWhileStarting() {
        var machine = _OperationStateMachine()
        let start = machine.startRequested(isCancelled: false)
        #expect(start == .reportExecuting)
        let reportsEarly = machine.jobFinished()
        #expect(!reportsEarly, "recorded; start() acts on it")
        let afterCommit = machine.executingCommitted()
        #expect(afterCommit == .reportFinished)
        #expect(machine.isExecuting)
        let reportsAgain = machine.jobFinished()
        #expect(!reportsAgain, "already being reported")
        machine.finishCommitted()
        #expect(machine.isFinished)
    }

    @Test("starting twice is refused, while starting and while executing")
    func startingTwiceIsRefused() {
        var machine = _OperationStateMachine()
        _ = machine.startRequested(isCancelled: false)
        let whileStarting = machine.startRequested(isCancelled: false)
        #expect(whileStarting == .trapAlreadyStarted)
        _ = machine.executingCommitted()
        let whileExecuting = machine.startRequested(isCancelled: false)
        #expect(whileExecuting == .trapAlreadyStarted)
    }
}

@Suite("OperationJob state machine")
struct OperationJobStateMachineTests {
    @Test("run, then the operation finishes: the job is finished exactly once")
    func finishesOnce() {
        var machine = _OperationJobStateMachine()
        machine.executeBegan()
        let first = machine.operationFinished()
        #expect(first == .finishJob)
        let second = machine.operationFinished()
        #expect(second == .none)
        let cancelAfter = machine.jobFoundFinishedAfterCancel()
        #expect(cancelAfter == .none)
    }

    @Test("cancelled before running: the operation is started once, and the job is not finished again")
    func cancelledBeforeRunning() {
        var machine = _OperationJobStateMachine()
        let first = machine.jobFoundFinishedAfterCancel()
        #expect(first == .startCancelledOperation)
        let second = machine.jobFoundFinishedAfterCancel()
        #expect(second == .none)
        let finished = machine.operationFinished()
        #expect(finished == .none)
        #expect(machine.state == .cancelledBeforeRunning)
    }

    @Test("cancelled while running: nothing to start; the finish is still reported once")
    func cancelledWhileRunning() {
        var machine = _OperationJobStateMachine()
        machine.executeBegan()
        let cancel = machine.jobFoundFinishedAfterCancel()
        #expect(cancel == .none)
        let finished = machine.operationFinished()
        #expect(finished == .finishJob)
    }

    @Test("execute() twice traps")
    func executeTwiceTraps() async {
        await #expect(processExitsWith: .failure) {
            var machine = _OperationJobStateMachine()
            machine.executeBegan()
            machine.executeBegan()
        }
    }
}
