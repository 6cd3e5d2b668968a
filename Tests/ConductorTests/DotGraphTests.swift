import Conductor
import ConductorTestSupport
import Foundation
import Testing

// The DOT dump (Docs/Diagnostics.md, "A live graph in DOT"): deterministic, structurally valid,
// and accepted by Graphviz's `dot -Tsvg` where Graphviz is installed (CI installs it).

/// A small graph over two queues, one of them not listed, with a group, a `.requireSuccess` edge
/// and a job waiting for the limit. `fetch` executes until the test finishes it.
private struct Sample {
    let main: JobQueue
    let uploads: JobQueue
    let fetch: HeldJob

    init(prefix: String) async {
        main = JobQueue(name: "\(prefix)-main", maxConcurrentJobCount: 1)
        uploads = JobQueue(name: "\(prefix)-uploads")
        uploads.isSuspended = true
        fetch = HeldJob(name: "fetch \"v2\"")
        main.addJob(fetch)
        await fetch.started.wait()
        let parse = BlockJob {}
        parse.name = "parse"
        try! parse.addDependency(fetch, policy: .requireSuccess)
        let upload = BlockJob {}
        upload.name = "upload"
        let report = BlockJob {}
        report.name = "report"
        try! report.addDependency(parse)
        try! report.addDependency(upload)
        let first = BlockJob {}
        first.name = "first"
        let second = BlockJob {}
        second.name = "second"
        try! second.addDependency(first)
        let bundle = GroupJob(name: "bundle", jobs: [first, second])
        uploads.addJob(upload)
        main.addJobs([parse, report, bundle], waitUntilFinished: false)
    }

    func finish() async {
        uploads.isSuspended = false
        fetch.finish()
        await main.waitUntilAllJobsAreFinished()
    }
}

/// Checks the shape of DOT text as `JobQueue.dotGraph(of:)` writes it: one statement per line,
/// balanced clusters, unique node ids, and edges between declared nodes only.
private func checkStructure(_ dot: String, sourceLocation: SourceLocation = #_sourceLocation) {
    var depth = 0
    var declared: Set<String> = []
    var edges: [(String, String)] = []
    let lines = dot.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
    #expect(lines.first == "digraph Conductor {", sourceLocation: sourceLocation)
    for line in lines {
        if line.hasSuffix("{") {
            #expect(
                line == "digraph Conductor {" || line.hasPrefix("subgraph cluster_"), "\(line)",
                sourceLocation: sourceLocation)
            depth += 1
        } else if line == "}" {
            depth -= 1
            #expect(depth >= 0, sourceLocation: sourceLocation)
        } else {
            #expect(line.hasSuffix(";"), "\(line)", sourceLocation: sourceLocation)
            let words = line.split(separator: " ")
            if words.count >= 3, words[1] == "->" {
                edges.append(
                    (String(words[0]), String(words[2].trimmingCharacters(in: CharacterSet(charactersIn: ";")))))
            } else if let id = words.first, id.hasPrefix("n"), line.contains("[label=") {
                #expect(
                    declared.insert(String(id)).inserted, "node \(id) declared twice", sourceLocation: sourceLocation)
            }
        }
    }
    #expect(depth == 0, sourceLocation: sourceLocation)
    for (from, to) in edges {
        #expect(
            declared.contains(from) && declared.contains(to), "edge \(from) -> \(to)", sourceLocation: sourceLocation)
    }
}

/// Runs `path` with `arguments` and returns its wait status (0: it exited with 0), or -1 if it
/// could not be started. The child is started and reaped here, on a Dispatch thread of its own.
/// Not with Foundation's `Process`: it reaps through a Dispatch queue, and while that queue waits
/// for a thread, the exited child keeps Swift Testing's exit-test monitor busy (it waits for any
/// child and leaves others' alone), so no exit test ends and the suite starves. A CI run hung so
/// on 2026-11-25.
private func spawnAndReap(_ path: String, _ arguments: [String]) async -> Int32 {
    await runOnDispatchThread {
        let environment = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid = pid_t()
        guard posix_spawn(&pid, path, nil, nil, argv, envp) == 0 else { return -1 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return status
    }
}

/// The DOT dump of a queue named `queueName` while its one job, named `name`, executes.
private func dotGraph(ofOneJobNamed name: String, on queueName: String) async -> String {
    let queue = JobQueue(name: queueName)
    let job = HeldJob(name: name)
    queue.addJob(job)
    await job.started.wait()
    let dot = queue.dotGraph()
    job.finish()
    await queue.waitUntilAllJobsAreFinished()
    return dot
}

/// Graphviz's `dot`, if it is installed.
private var dotExecutable: URL? {
    ["/usr/bin/dot", "/usr/local/bin/dot", "/opt/homebrew/bin/dot"].map(URL.init(fileURLWithPath:))
        .first { FileManager.default.isExecutableFile(atPath: $0.path) }
}

@Suite struct DotGraphTests {
    @Test func theGraphIsDrawnAsDocumented() async {
        let sample = await Sample(prefix: "dot-exact")
        let dot = JobQueue.dotGraph(of: [sample.main])
        #expect(
            dot == #"""
                digraph Conductor {
                  graph [rankdir=LR, fontname="Helvetica", fontsize=11];
                  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];
                  edge [fontname="Helvetica", fontsize=9];
                  subgraph cluster_0 {
                    label="queue 'dot-exact-main'\nlimit 1, 1 executing, 1 ready, 2 waiting";
                    style="rounded";
                    color="#555555";
                    n0 [label="fetch \"v2\"\nexecuting · normal\nuntil finish()", fillcolor="#d1e7dd"];
                    n1 [label="parse\npending · normal\ndependency 'fetch \"v2\"'", fillcolor="#e9ecef"];
                    n2 [label="report\npending · normal\ndependency 'parse' and 1 more", fillcolor="#e9ecef"];
                    subgraph cluster_1 {
                      label="group 'bundle'";
                      style="rounded,dashed";
                      color="#1f6feb";
                      n3 [label="bundle\nready · normal\nlimit: 1 of 1 slots taken", fillcolor="#cfe2ff"];
                      n4 [label="first\nready · normal\ngroup 'bundle' has not started", fillcolor="#cfe2ff"];
                      n5 [label="second\npending · normal\ndependency 'first'", fillcolor="#e9ecef"];
                    }
                  }
                  subgraph cluster_2 {
                    label="queue 'dot-exact-uploads' (not listed)\ndefault limit \#(JobQueue.systemDefaultWidth), 0 executing, 1 ready, 0 waiting, suspended";
                    style="rounded,dashed";
                    color="#888888";
                    n6 [label="upload\nready · normal\nsuspended queue", fillcolor="#cfe2ff"];
                  }
                  n0 -> n1 [label="requireSuccess", color="#c0392b", fontcolor="#c0392b"];
                  n1 -> n2;
                  n6 -> n2;
                  n4 -> n5;
                }

                """#)
        checkStructure(dot)
        // Both queues listed: the second is a cluster like the first, no longer "not listed".
        let both = JobQueue.dotGraph(of: [sample.main, sample.uploads])
        checkStructure(both)
        #expect(both.contains(#"label="queue 'dot-exact-uploads'\ndefault limit"#))
        #expect(!both.contains("not listed"))
        await sample.finish()
        #expect(
            sample.main.dotGraph().contains("subgraph cluster_0 {") && !sample.main.dotGraph().contains(" [label=\""))
    }

    @Test func theSameGraphGivesTheSameText() async {
        let first = await Sample(prefix: "dot-stable")
        let second = await Sample(prefix: "dot-stable")
        let text = first.main.dotGraph()
        #expect(first.main.dotGraph() == text)
        #expect(second.main.dotGraph() == text)
        await first.finish()
        await second.finish()
    }

    @Test(.enabled(if: dotExecutable != nil, "Graphviz is not installed (CI installs it)"))
    func graphvizRendersIt() async throws {
        let sample = await Sample(prefix: "dot-render")
        let dot = JobQueue.dotGraph(of: [sample.main, sample.uploads])
        await sample.finish()
        checkStructure(dot)
        let executable = try #require(dotExecutable)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("conductor-dot-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("graph.dot")
        let output = directory.appendingPathComponent("graph.svg")
        try dot.write(to: input, atomically: true, encoding: .utf8)
        let status = await spawnAndReap(executable.path, ["-Tsvg", input.path, "-o", output.path])
        #expect(status == 0, "dot's wait status \(status)")
        let svg = try String(contentsOf: output, encoding: .utf8)
        #expect(svg.contains("<svg") && svg.contains("report"))
    }

    // Found by an audit on 2026-11-25: names were escaped by Character (grapheme cluster), so a
    // quote followed by a combining mark went out unescaped (Graphviz refused the file) and a
    // "\r\n" matched neither line break and went out raw; and a group's queue of children listed
    // beside the group's queue drew each child twice, under two node ids.

    @Test func aQuoteFollowedByACombiningMarkIsEscaped() async {
        let dot = await dotGraph(ofOneJobNamed: "say \"\u{301}hi\"", on: "dot-quote")
        #expect(dot.contains(#"say \""# + "\u{301}" + #"hi\""#), "\(dot)")
        checkStructure(dot)
    }

    @Test func aCarriageReturnAndLineFeedInANameIsOneEscapedLineBreak() async {
        let dot = await dotGraph(ofOneJobNamed: "first\r\nsecond\rthird", on: "dot-crlf")
        #expect(!dot.unicodeScalars.contains("\r"), "\(dot.debugDescription)")
        #expect(dot.contains(#"first\nsecond\nthird"#), "\(dot)")
    }

    @Test func aJobReachedThroughTwoListedQueuesIsDrawnOnce() async throws {
        // The group's queue of children is `JobQueue.current` inside a child.
        let children = Locked<JobQueue?>(nil)
        let started = DispatchSemaphore(value: 0)
        let child = AsyncBlockJob { _ in
            children.withLock { $0 = JobQueue.current }
            started.signal()
        }
        child.name = "only child"
        let group = GroupJob(name: "drawn-once group", jobs: [child])
        let queue = JobQueue(name: "drawn-once")
        queue.addJob(group)
        await waitForSignals(started)
        let dot = JobQueue.dotGraph(of: [queue, try #require(children.withLock { $0 })])
        child.finish()
        await queue.waitUntilAllJobsAreFinished()
        let declarations = dot.split(separator: "\n").filter { $0.contains(#"[label="only child\n"#) }
        #expect(declarations.count == 1, "\(dot)")
        checkStructure(dot)
    }
}
