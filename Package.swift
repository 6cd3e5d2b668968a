// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Conductor",
    // Synchronization's `Atomic` sets the Apple minimums; Linux has no minimum.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
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
