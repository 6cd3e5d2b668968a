import Conductor
import Synchronization
import Testing

// Debug-build invariant checks keep each operation's complexity: `addDependency` checks the edge
// it added, not every edge around the two jobs (which made a 10⁵ fan-in take minutes in a debug
// build, under the lock every queue shares).

@Suite struct InvariantCheckTests {
    @Test func addDependencyChecksOneEdgeInDebugBuilds() async {
        // In a child process, so that no other test adds edges meanwhile.
        await #expect(processExitsWith: .success) {
            let fanIn = BlockJob {}
            let fanOut = BlockJob {}
            let middle = (0..<10_000).map { _ in BlockJob {} }
            let before = _DependencyGraph.invariantEdgeChecks.load(ordering: .relaxed)
            for job in middle {
                try fanIn.addDependency(job)
                try job.addDependency(fanOut)
            }
            let checked = _DependencyGraph.invariantEdgeChecks.load(ordering: .relaxed) - before
            #if DEBUG
                // One edge examined per edge added.
                if checked != 20_000 { fatalError("examined \(checked) edges for 20,000 additions") }
            #else
                if checked != 0 { fatalError("release build examined \(checked) edges") }
            #endif
        }
    }
}
