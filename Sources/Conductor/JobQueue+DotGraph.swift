extension JobQueue {
    /// The queue's unfinished jobs and the edges between them, as a Graphviz DOT digraph; see
    /// ``dotGraph(of:)``.
    ///
    /// ```sh
    /// dot -Tsvg graph.dot -o graph.svg
    /// ```
    public func dotGraph() -> String {
        JobQueue.dotGraph(of: [self])
    }

    /// The unfinished jobs of `queues` and the edges between them, as one Graphviz DOT digraph.
    ///
    /// - Each queue is a cluster, labelled with its name, limit and counts; each ``GroupJob`` is a
    ///   cluster inside its queue's, holding the group and its unfinished children.
    /// - Each job is a node labelled with its name, state, priority and, while it waits, its short
    ///   reason (the keywords of ``Job/explain()``), and filled with its state's colour: pending
    ///   grey, ready blue, executing green.
    /// - Each edge goes from a dependency to its dependent; a `.requireSuccess` edge is red and
    ///   labelled so. An unfinished dependency on a queue not listed (or on none) is drawn in a
    ///   dashed cluster of its own.
    ///
    /// The text is built in one critical section, so it is a consistent snapshot, and it is
    /// deterministic: the same graph gives the same text (nodes are numbered in the order they are
    /// drawn, never by id; running times are left out). Unnamed jobs are labelled with their type
    /// and ``Job/id``, which differ from run to run.
    ///
    /// - Complexity: O(jobs and edges drawn).
    public static func dotGraph(of queues: [JobQueue]) -> String {
        JobQueue._withEveryQueuesPushedAdmitted {
            var graph = _DotGraph()
            return graph.renderLocked(queues)
        }
    }
}

/// Builds the DOT text of ``JobQueue/dotGraph(of:)``. Call with `engineLock` held.
struct _DotGraph {
    private var lines: [String] = []
    private var nodes: [ObjectIdentifier: String] = [:]
    private var drawn: [Job] = []
    private var clusters = 0
    private var indent = "  "

    mutating func renderLocked(_ queues: [JobQueue]) -> String {
        lines = [
            "digraph Conductor {",
            "  graph [rankdir=LR, fontname=\"Helvetica\", fontsize=11];",
            "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];",
            "  edge [fontname=\"Helvetica\", fontsize=9];",
        ]
        var listed: [ObjectIdentifier] = []
        for queue in queues where !listed.contains(ObjectIdentifier(queue)) {
            listed.append(ObjectIdentifier(queue))
            cluster(
                label: "queue '\(queue._displayNameLocked)'\n\(queue._summaryLocked)", style: "rounded",
                color: "#555555"
            ) { graph in
                graph.members(of: queue)
            }
        }
        // Unfinished dependencies that were not drawn: in a dashed cluster per queue (or none).
        var foreign: [(queue: JobQueue?, jobs: [Job])] = []
        var foreignIndex: [ObjectIdentifier?: Int] = [:]
        var seen: Set<ObjectIdentifier> = []
        for job in drawn {
            for dependency in job._dependencies where dependency._state != .finished {
                guard nodes[ObjectIdentifier(dependency)] == nil, seen.insert(ObjectIdentifier(dependency)).inserted
                else { continue }
                let queue = dependency._queue?.takeUnretainedValue()
                let key = queue.map(ObjectIdentifier.init)
                if let index = foreignIndex[key] {
                    foreign[index].jobs.append(dependency)
                } else {
                    foreignIndex[key] = foreign.count
                    foreign.append((queue, [dependency]))
                }
            }
        }
        for (queue, jobs) in foreign {
            let label =
                queue.map { "queue '\($0._displayNameLocked)' (not listed)\n\($0._summaryLocked)" } ?? "on no queue"
            cluster(label: label, style: "rounded,dashed", color: "#888888") { graph in
                for job in jobs { graph.node(job) }
            }
        }
        // Edges, from each dependency to its dependent, in the order the dependents were drawn.
        for job in drawn {
            guard let to = nodes[ObjectIdentifier(job)] else { continue }
            for dependency in job._dependencies where dependency._state != .finished {
                guard let from = nodes[ObjectIdentifier(dependency)] else { continue }
                if job._requiresSuccessLocked(of: dependency) {
                    lines.append(
                        "  \(from) -> \(to) [label=\"requireSuccess\", color=\"#c0392b\", fontcolor=\"#c0392b\"];")
                } else {
                    lines.append("  \(from) -> \(to);")
                }
            }
        }
        lines.append("}")
        return lines.joined(separator: "\n") + "\n"
    }

    /// The members of `queue`, in the order they were added; a group as a cluster with its children.
    private mutating func members(of queue: JobQueue) {
        for job in queue._membersLocked() {
            if let group = job as? GroupJob {
                cluster(
                    label: "group '\(group._describeLocked)'", style: "rounded,dashed", color: "#1f6feb"
                ) { graph in
                    graph.node(group)
                    graph.members(of: group._childrenLocked)
                }
            } else {
                node(job)
            }
        }
    }

    private mutating func cluster(label: String, style: String, color: String, _ body: (inout _DotGraph) -> Void) {
        let name = "cluster_\(clusters)"
        clusters += 1
        lines.append("\(indent)subgraph \(name) {")
        let outer = indent
        indent += "  "
        lines.append("\(indent)label=\(_DotGraph.quoted(label));")
        lines.append("\(indent)style=\"\(style)\";")
        lines.append("\(indent)color=\"\(color)\";")
        body(&self)
        indent = outer
        lines.append("\(indent)}")
    }

    private mutating func node(_ job: Job) {
        guard nodes[ObjectIdentifier(job)] == nil else { return }
        let name = "n\(nodes.count)"
        nodes[ObjectIdentifier(job)] = name
        drawn.append(job)
        var label = "\(job._describeLocked)\n\(job._state) · \(job._priority)"
        switch job._state {
        case .pending, .ready:
            if let reason = job._waitReasonsLocked(now: 0, detailed: false).first {
                label += "\n\(reason.short)"
            }
        case .executing:
            if !job.finishesWhenExecuteReturns { label += "\nuntil finish()" }
        case .finished:
            break
        }
        lines.append(
            "\(indent)\(name) [label=\(_DotGraph.quoted(label)), fillcolor=\"\(_DotGraph.color(job._state))\"];")
    }

    private static func color(_ state: JobState) -> String {
        switch state {
        case .pending: "#e9ecef"
        case .ready: "#cfe2ff"
        case .executing: "#d1e7dd"
        case .finished: "#f8f9fa"
        }
    }

    /// `text` as a DOT string: quotes and backslashes escaped, line breaks as `\n`.
    static func quoted(_ text: String) -> String {
        var result = "\""
        // By scalar, not by Character: a quote followed by a combining mark is one Character, and
        // so is "\r\n" (until 2026-11-25 the first went out unescaped and the second raw).
        var scalars = text.unicodeScalars.makeIterator()
        var next = scalars.next()
        while let scalar = next {
            next = scalars.next()
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            // A line break of its own, or the first half of "\r\n", whose "\n" follows.
            case "\r": if next != "\n" { result += "\\n" }
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
