import Conductor
import ConductorTestSupport
import Testing

// A job's list of dependencies or dependents (`_JobList`) is a value with copy-on-write storage of
// its own. The engine never keeps a copy of a list across a change to it, so the paths that
// matter only then (a shared buffer must not be changed in place) are checked here, on lists
// made directly.
@Suite("Edge lists")
struct JobListTests {
    @Test("a list keeps its jobs in order from one job held inline to a buffer grown twice")
    func keepsOrderAsItGrows() {
        let jobs = (0..<20).map { _ in Job() }
        var list = _JobList()
        #expect(list.isEmpty)
        for (index, job) in jobs.enumerated() {
            list.append(job)
            #expect(list.count == index + 1)
        }
        #expect(list.count == jobs.count)
        #expect(zip(list, jobs).allSatisfy { $0 === $1 })
    }

    @Test(
        "appending to or removing from a list leaves a copy of it unchanged, and the jobs live while either holds them",
        arguments: [3, 4])
    func changesDoNotReachACopy(count: Int) {
        // 3: the shared buffer has room for one more; 4: it is full.
        var weakJobs: [WeakReference<Job>] = []
        do {
            var list = _JobList()
            var copy = _JobList()
            do {
                let jobs = (0..<count).map { _ in Job() }
                weakJobs = jobs.map { WeakReference($0) }
                for job in jobs { list.append(job) }
                copy = list
            }
            let added = Job()
            list.append(added)
            #expect(list.count == count + 1)
            #expect(copy.count == count, "the copy gained the job appended to the original")
            #expect(list[count] === added)

            list.remove(at: 0)
            #expect(copy[0] === weakJobs[0].object, "the copy lost the job removed from the original")
            #expect(weakJobs[0].object != nil, "the copy keeps the job removed from the original")

            list = _JobList()
            #expect(weakJobs.allSatisfy { $0.object != nil }, "the copy keeps its jobs")
            #expect(zip(copy, weakJobs).allSatisfy { $0 === $1.object })
            copy.removeAll { _ in true }
            #expect(copy.isEmpty)
        }
        #expect(weakJobs.allSatisfy { $0.object == nil }, "the jobs outlived both lists")
    }

    @Test("removals bring a list back to one job held inline, then to empty")
    func removalsShrinkTheList() {
        let jobs = (0..<3).map { _ in Job() }
        var list = _JobList()
        for job in jobs { list.append(job) }
        list.remove(at: 1)
        guard case .many = list else {
            Issue.record("two jobs are kept in a buffer")
            return
        }
        list.remove(at: 0)
        guard case .one(let kept) = list else {
            Issue.record("one job left is held inline")
            return
        }
        #expect(kept === jobs[2])
        list.removeAll { _ in true }
        #expect(list.isEmpty && list.count == 0)
    }
}
