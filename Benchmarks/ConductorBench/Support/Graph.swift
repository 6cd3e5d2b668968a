/// A dependency graph for the `chain`, `fan` and `dag` scenarios, in compressed sparse rows.
///
/// Nodes are numbered in a topological order: every dependency has a smaller index than its
/// dependent, so systems can create jobs in index order and wire each to jobs already created.
struct Graph: Sendable {
    let count: Int
    private let dependencyStart: [Int32]
    private let dependencyList: [Int32]
    private let dependentStart: [Int32]
    private let dependentList: [Int32]
    /// Nodes without dependencies.
    let roots: [Int32]
    let edgeCount: Int

    /// Builds a graph from each node's dependencies, all of which must have smaller indices.
    init(dependencies: [[Int32]]) {
        count = dependencies.count
        var start: [Int32] = [0]
        start.reserveCapacity(count + 1)
        var list: [Int32] = []
        var dependentCount = [Int32](repeating: 0, count: count)
        for (node, nodeDependencies) in dependencies.enumerated() {
            for dependency in nodeDependencies {
                precondition(dependency < node, "Graph: node \(node) depends on later node \(dependency)")
                dependentCount[Int(dependency)] += 1
            }
            list.append(contentsOf: nodeDependencies)
            start.append(Int32(list.count))
        }
        dependencyStart = start
        dependencyList = list
        edgeCount = list.count

        // Invert the edges with a counting sort.
        var reverseStart = [Int32](repeating: 0, count: count + 1)
        for node in 0..<count {
            reverseStart[node + 1] = reverseStart[node] + dependentCount[node]
        }
        var fill = reverseStart
        var reverse = [Int32](repeating: 0, count: list.count)
        for node in 0..<count {
            for dependency in list[Int(start[node])..<Int(start[node + 1])] {
                reverse[Int(fill[Int(dependency)])] = Int32(node)
                fill[Int(dependency)] += 1
            }
        }
        dependentStart = reverseStart
        dependentList = reverse
        roots = (0..<count).filter { start[$0] == start[$0 + 1] }.map { Int32($0) }
    }

    func dependencies(of node: Int) -> ArraySlice<Int32> {
        dependencyList[Int(dependencyStart[node])..<Int(dependencyStart[node + 1])]
    }

    func dependents(of node: Int) -> ArraySlice<Int32> {
        dependentList[Int(dependentStart[node])..<Int(dependentStart[node + 1])]
    }

    // MARK: Shapes

    /// `count` jobs, each depending on the one before.
    static func chain(_ count: Int) -> Graph {
        Graph(dependencies: (0..<count).map { $0 == 0 ? [] : [Int32($0 - 1)] })
    }

    /// One root, `width` jobs that depend on it, and one job that depends on all of them.
    static func fan(width: Int) -> Graph {
        var dependencies: [[Int32]] = [[]]
        dependencies += Array(repeating: [0], count: width)
        dependencies.append((1...max(width, 1)).map { Int32($0) })
        return Graph(dependencies: dependencies)
    }

    /// `count` jobs in `layers` layers of equal width; each job after the first layer depends on
    /// 1 to `maxDependencies` distinct jobs of the layer before, chosen by a seeded generator.
    static func layered(count: Int, layers: Int, maxDependencies: Int, seed: UInt64) -> Graph {
        var random = SplitMix64(seed: seed)
        let width = max(1, count / max(1, layers))
        var dependencies: [[Int32]] = []
        dependencies.reserveCapacity(count)
        for node in 0..<count {
            let layerStart = node / width * width
            guard layerStart > 0 else {
                dependencies.append([])
                continue
            }
            let previous = (layerStart - width)..<layerStart
            let wanted = min(Int.random(in: 1...maxDependencies, using: &random), previous.count)
            var chosen: [Int32] = []
            while chosen.count < wanted {
                let candidate = Int32(Int.random(in: previous, using: &random))
                if !chosen.contains(candidate) { chosen.append(candidate) }
            }
            dependencies.append(chosen.sorted())
        }
        return Graph(dependencies: dependencies)
    }
}

/// A small seeded generator (SplitMix64), so the random DAG is the same on every run and machine.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
