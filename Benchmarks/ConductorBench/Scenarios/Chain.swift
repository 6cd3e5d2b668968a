extension Scenario {
    /// `chain`: a linear dependency chain; each job must run after the one before. The scaling
    /// sweep (``Harness/sweepChain(conductor:foundation:sizes:)``) reuses `Chain.conductor` and
    /// `Chain.foundation`.
    static func chain(size: Int) -> Scenario {
        Scenario(
            id: "chain",
            summary: "a linear dependency chain of \(Format.count(size)) jobs, each after the one before",
            size: size,
            workloads: [
                (.conductor, .run(method: GraphWorkloads.conductorMethod, Chain.conductor)),
                (.foundation, .run(method: GraphWorkloads.foundationMethod, Chain.foundation)),
                (.dispatch, .run(method: GraphWorkloads.dispatchMethod, { GraphWorkloads.dispatch(.chain($0)) })),
                (.taskGroup, .run(method: GraphWorkloads.taskGroupMethod, { GraphWorkloads.taskGroup(.chain($0)) })),
            ])
    }
}

enum Chain {
    static func conductor(_ jobs: Int) -> Trial { GraphWorkloads.conductor(.chain(jobs)) }
    static func foundation(_ jobs: Int) -> Trial { GraphWorkloads.foundation(.chain(jobs)) }
}
