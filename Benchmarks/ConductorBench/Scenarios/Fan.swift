extension Scenario {
    /// `fan`: one job, then `width` jobs that depend on it, then one job that depends on all of them.
    static func fan(width: Int) -> Scenario {
        Scenario(
            id: "fan",
            summary: "fan-out/fan-in: 1 → \(Format.count(width)) → 1 jobs",
            size: width,
            describe: { "fan width \(Format.count($0)) (\(Format.count($0 + 2)) jobs)" },
            workloads: [
                (
                    .conductor,
                    .run(method: GraphWorkloads.conductorMethod, { GraphWorkloads.conductor(.fan(width: $0)) })
                ),
                (
                    .foundation,
                    .run(method: GraphWorkloads.foundationMethod, { GraphWorkloads.foundation(.fan(width: $0)) })
                ),
                (.dispatch, .run(method: GraphWorkloads.dispatchMethod, { GraphWorkloads.dispatch(.fan(width: $0)) })),
                (
                    .taskGroup,
                    .run(method: GraphWorkloads.taskGroupMethod, { GraphWorkloads.taskGroup(.fan(width: $0)) })
                ),
            ])
    }
}
