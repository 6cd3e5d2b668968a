import Conductor
import ConductorTestSupport
import Testing

// The job lifecycle state machine, event by event, with no threads, queues or jobs (see
// Docs/Design.md, "The job lifecycle"). Every illegal transition traps with the state in its
// message; each is an exit test.

/// A lifecycle that has gone through `events`, for tests that need a particular state.
private func lifecycle(_ events: (inout _JobLifecycle) -> Void) -> _JobLifecycle {
    var machine = _JobLifecycle()
    events(&machine)
    return machine
}

@Suite struct JobLifecycleTests {
    @Test func aNewJobIsReadyAndWaitsForNothing() {
        let machine = _JobLifecycle()
        #expect(machine.state == .ready)
        #expect(machine.isUnstarted && !machine.isCancelled && !machine.didStart && !machine.didPostReady)
        #expect(machine.waits.isEmpty)
    }

    @Test func dependenciesMakeItPendingAndTheLastOneReleasedMakesItReady() {
        var machine = _JobLifecycle()
        #expect(machine.dependencyAdded() == .leftReady)
        #expect(machine.state == .pending && machine.waits.dependencies == 1)
        #expect(machine.dependencyAdded() == .keepsWaiting)
        #expect(machine.waits.dependencies == 2)
        #expect(machine.dependencyFinished() == .stillWaiting)
        #expect(machine.state == .pending)
        #expect(machine.dependencyRemoved() == .becameReady(postReady: true))
        #expect(machine.state == .ready && machine.waits.isEmpty)
        // `.ready` was posted when it became ready: not again at admission or start.
        #expect(machine.readyPostDue() == false)
        #expect(machine.started() == false)
        #expect(machine.state == .executing && machine.didStart)
    }

    @Test func conditionsHoldTheJobUntilSatisfiedAndAreDueOnceTheDependenciesHaveFinished() {
        var machine = _JobLifecycle()
        #expect(machine.conditionsAdded() == .leftReady)
        #expect(machine.state == .pending && machine.waits.conditions == 1)
        #expect(machine.conditionsAdded() == .keepsWaiting)  // one wait, however many conditions
        #expect(machine.dependencyAdded() == .keepsWaiting)
        #expect(machine.dependencyFinished() == .conditionsDue)
        #expect(machine.state == .pending && machine.waits.dependencies == 0)
        #expect(machine.conditionsSatisfied() == .becameReady(postReady: true))
        #expect(machine.state == .ready && machine.waits.isEmpty)

        // Satisfied while a dependency added meanwhile is unfinished: still waiting for it.
        var late = _JobLifecycle()
        _ = late.conditionsAdded()
        _ = late.dependencyAdded()
        #expect(late.conditionsSatisfied() == .stillWaiting)
        #expect(late.dependencyRemoved() == .becameReady(postReady: true))
    }

    @Test func conditionsSatisfiedAfterTheJobWasCancelledAreIgnored() {
        var machine = _JobLifecycle()
        _ = machine.conditionsAdded()
        #expect(machine.cancelled(.requested) == .finishWithoutRunning)
        _ = machine.finished()
        #expect(machine.conditionsSatisfied() == .ignored)
        #expect(machine.state == .finished && machine.outcome == .cancelled)
    }

    @Test func conditionsAddedToAStartedJobTrap() async {
        await #expect(processExitsWith: .failure) {
            var machine = _JobLifecycle()
            _ = machine.started()
            _ = machine.conditionsAdded()
        }
    }

    @Test func conditionsSatisfiedWithoutConditionsTrap() async {
        await #expect(processExitsWith: .failure) {
            var machine = _JobLifecycle()
            _ = machine.dependencyAdded()
            _ = machine.conditionsSatisfied()
        }
    }

    @Test func waitingForExclusivityCategoriesMakesAReadyJobPendingUntilCleared() {
        var machine = _JobLifecycle()
        _ = machine.readyPostDue()
        machine.exclusivityWaitBegan()
        #expect(machine.state == .pending && machine.waits.exclusivity == 1)
        #expect(machine.exclusivityCleared() == .becameReady(postReady: false))
        #expect(machine.state == .ready && machine.waits.isEmpty)

        // Cleared while a dependency added meanwhile is unfinished: still waiting for it.
        var gained = _JobLifecycle()
        gained.exclusivityWaitBegan()
        _ = gained.dependencyAdded()
        #expect(gained.exclusivityCleared() == .stillWaiting)
        #expect(gained.dependencyFinished() == .becameReady(postReady: true))

        // Cleared after it was cancelled: ignored.
        var cancelled = _JobLifecycle()
        cancelled.exclusivityWaitBegan()
        _ = cancelled.cancelled(.requested)
        _ = cancelled.finished()
        #expect(cancelled.exclusivityCleared() == .ignored)
    }

    @Test func anExclusivityWaitOnAPendingJobTraps() async {
        await #expect(processExitsWith: .failure) {
            var machine = _JobLifecycle()
            _ = machine.dependencyAdded()
            machine.exclusivityWaitBegan()
        }
    }

    @Test func readyIsPostedOnceWhicheverEventComesFirst() {
        var admitted = _JobLifecycle()
        #expect(admitted.readyPostDue() == true)
        #expect(admitted.readyPostDue() == false)
        #expect(admitted.started() == false)

        var startedByHand = _JobLifecycle()
        #expect(startedByHand.started() == true)
        #expect(startedByHand.didPostReady)

        // Ready, posted, then pending again and ready again: posted only the first time.
        var again = _JobLifecycle()
        _ = again.readyPostDue()
        #expect(again.dependencyAdded() == .leftReady)
        #expect(again.dependencyFinished() == .becameReady(postReady: false))
    }

    @Test func cancellingAnUnstartedJobFinishesItWithoutRunning() {
        for waiting in [false, true] {
            var machine = _JobLifecycle()
            if waiting { _ = machine.dependencyAdded() }
            #expect(machine.cancelled(.requested) == .finishWithoutRunning)
            #expect(machine.isCancelled && machine.isUnstarted)
            #expect(machine.finished() == false)
            #expect(machine.state == .finished && !machine.didStart)
            // Its dependency finishing later has nothing to release.
            if waiting { #expect(machine.dependencyFinished() == .ignored) }
            #expect(machine.cancelled(.requested) == .ignored)
        }
    }

    @Test func cancellingARunningJobOnlyFlagsIt() {
        var machine = _JobLifecycle()
        _ = machine.started()
        #expect(machine.cancelled(.requested) == .flagged)
        #expect(machine.state == .executing && machine.isCancelled)
        #expect(machine.cancelled(.requested) == .ignored)
        #expect(machine.workReportedCancellation() == false)
        #expect(machine.finished() == true)
        #expect(machine.state == .finished)
        #expect(machine.cancelled(.requested) == .ignored)
    }

    @Test func workThatReportsCancellationIsCancelledOnce() {
        var machine = _JobLifecycle()
        _ = machine.started()
        #expect(machine.workReportedCancellation() == true)
        #expect(machine.isCancelled)
        #expect(machine.cancelled(.requested) == .ignored)
        #expect(machine.finished() == true)
    }

    @Test func finishingAfterRunningKeepsItUncancelled() {
        var machine = _JobLifecycle()
        _ = machine.started()
        #expect(machine.finished() == true)
        #expect(machine.state == .finished && machine.didStart && !machine.isCancelled)
        #expect(machine.cancelled(.requested) == .ignored)
        #expect(!machine.isCancelled)
    }

    // MARK: Illegal transitions

    @Test func addingADependencyToARunningJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = lifecycle { _ = $0.started() }
            _ = machine.dependencyAdded()
        }
        #expect(standardErrorText(result).contains("a dependency added to a job in state executing"))
    }

    @Test func addingADependencyToAFinishedJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = lifecycle {
                _ = $0.cancelled(.requested)
                _ = $0.finished()
            }
            _ = machine.dependencyAdded()
        }
        #expect(standardErrorText(result).contains("a dependency added to a job in state finished"))
    }

    @Test func aDependencyFinishingForAReadyJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = _JobLifecycle()
            _ = machine.dependencyFinished()
        }
        #expect(standardErrorText(result).contains("a dependency finished for a job in state ready"))
    }

    @Test func aDependencyFinishingForARunningJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = lifecycle { _ = $0.started() }
            _ = machine.dependencyFinished()
        }
        #expect(standardErrorText(result).contains("a dependency finished for a job in state executing"))
    }

    @Test func removingACountedDependencyFromAReadyJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = _JobLifecycle()
            _ = machine.dependencyRemoved()
        }
        #expect(standardErrorText(result).contains("a counted dependency removed from a job in state ready"))
    }

    @Test func startingAPendingJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = lifecycle { _ = $0.dependencyAdded() }
            _ = machine.started()
        }
        #expect(standardErrorText(result).contains("started in state pending"))
    }

    @Test func startingTwiceTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = lifecycle { _ = $0.started() }
            _ = machine.started()
        }
        #expect(standardErrorText(result).contains("started in state executing"))
    }

    @Test func startingAFinishedJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = lifecycle {
                _ = $0.started()
                _ = $0.finished()
            }
            _ = machine.started()
        }
        #expect(standardErrorText(result).contains("started in state finished"))
    }

    @Test func finishingTwiceTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = lifecycle {
                _ = $0.started()
                _ = $0.finished()
            }
            _ = machine.finished()
        }
        #expect(standardErrorText(result).contains("finished twice"))
    }

    @Test func finishingAnUnstartedUncancelledJobTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = _JobLifecycle()
            _ = machine.finished()
        }
        #expect(standardErrorText(result).contains("finished in state ready without running or being cancelled"))
    }

    @Test func workReportingCancellationBeforeItStartedTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var machine = _JobLifecycle()
            _ = machine.workReportedCancellation()
        }
        #expect(standardErrorText(result).contains("work reported cancellation in state ready"))
    }
}
