// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Conductor",
    products: [
        .library(name: "Conductor", targets: ["Conductor"])
    ],
    targets: [
        .target(
            name: "Conductor",
            swiftSettings: [
                // Internal invariant checks (`_checkInvariants()`), on in debug builds and so in `swift test`.
                .define("CONDUCTOR_INVARIANTS", .when(configuration: .debug))
            ]
        ),
        .testTarget(
            name: "ConductorTests",
            dependencies: ["Conductor"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
