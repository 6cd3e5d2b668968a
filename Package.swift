// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Conductor",
    // Synchronization's `Atomic` sets the Apple minimums; Linux has no minimum.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "Conductor", targets: ["Conductor"]),
        // Foundation interop: Operations on JobQueues, Jobs on OperationQueues, dependencies both ways.
        .library(name: "ConductorFoundation", targets: ["ConductorFoundation"]),
        .executable(name: "conductor-bench", targets: ["ConductorBench"]),
    ],
    targets: [
        .target(
            name: "Conductor",
            dependencies: ["ConductorShims"],
            // The spin model of the lifecycle (checked by .ci/check-model) lives beside the code it mirrors.
            exclude: ["Model"],
            swiftSettings: [
                // Internal invariant checks (`_checkInvariantsLocked()` and friends), on in debug builds and so in
                // `swift test`.
                .define("CONDUCTOR_INVARIANTS", .when(configuration: .debug))
            ]
        ),
        // C helpers the Conductor module imports internally (a prefetch hint); not a product.
        .target(name: "ConductorShims"),
        .testTarget(
            name: "ConductorTests",
            dependencies: ["Conductor", "ConductorTestSupport"]
        ),
        // Thread-safe helpers shared by the test targets (not a product).
        .target(
            name: "ConductorTestSupport",
            dependencies: ["Conductor"],
            path: "Tests/ConductorTestSupport"
        ),
        // The only library module that imports Foundation.
        .target(name: "ConductorFoundation", dependencies: ["Conductor"]),
        .testTarget(
            name: "ConductorFoundationTests",
            dependencies: ["ConductorFoundation", "Conductor", "ConductorTestSupport"]
        ),
        // Triggers one misuse trap by name, so that CI can check a release build prints its message
        // (`.ci/check-release-traps`). Not a product.
        .executableTarget(
            name: "conductor-trap-probe",
            dependencies: ["Conductor"],
            path: "Tests/TrapProbe"
        ),
        // Side-by-side benchmarks against Foundation, Dispatch and TaskGroup: `swift run -c release conductor-bench`.
        .executableTarget(
            name: "ConductorBench",
            dependencies: ["Conductor"],
            path: "Benchmarks/ConductorBench"
        ),
    ],
    swiftLanguageModes: [.v6]
)
