extension Scenario {
    /// `dag`: a layered random DAG, the same on every run (fixed seed); each job must run after
    /// all of its dependencies.
    static func dag(size: Int) -> Scenario {
        Scenario(
            id: "dag",
            summary: "a layered random DAG of \(Format.count(size)) jobs in \(Dag.layers) layers, "
                + "1 to \(Dag.maxDependencies) dependencies each on the layer before (seed "
                + "0x\(String(Dag.seed, radix: 16, uppercase: true)))",
            size: size,
            workloads: [
                (.conductor, .run(method: GraphWorkloads.conductorMethod, { GraphWorkloads.conductor(Dag.graph($0)) })),
                (
                    .foundation,
                    .run(method: GraphWorkloads.foundationMethod, { GraphWorkloads.foundation(Dag.graph($0)) })
                ),
                (.dispatch, .run(method: GraphWorkloads.dispatchMethod, { GraphWorkloads.dispatch(Dag.graph($0)) })),
                (.taskGroup, .run(method: GraphWorkloads.taskGroupMethod, { GraphWorkloads.taskGroup(Dag.graph($0)) })),
            ])
    }
}

enum Dag {
    static let layers = 100
    static let maxDependencies = 4
    static let seed: UInt64 = 0xC0DE_C7ED

    static func graph(_ jobs: Int) -> Graph {
        .layered(count: jobs, layers: layers, maxDependencies: maxDependencies, seed: seed)
    }
}
