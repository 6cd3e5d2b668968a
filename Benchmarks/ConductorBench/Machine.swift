#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The machine and toolchain, for the report header and JSON.
enum Machine {
    static let cores = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))

    /// The compiler that built this binary (there is no `swift --version` at run time), to the
    /// nearest rung of this ladder.
    static let swiftVersion: String = {
        #if compiler(>=7.0)
            "7.0 or later"
        #elseif compiler(>=6.5)
            "6.5"
        #elseif compiler(>=6.4)
            "6.4"
        #elseif compiler(>=6.3.3)
            "6.3.3"
        #elseif compiler(>=6.3.2)
            "6.3.2"
        #elseif compiler(>=6.3.1)
            "6.3.1"
        #elseif compiler(>=6.3)
            "6.3"
        #elseif compiler(>=6.2)
            "6.2"
        #elseif compiler(>=6.1)
            "6.1"
        #else
            "6.0"
        #endif
    }()

    static let operatingSystem: String = {
        #if os(Linux)
            "Linux"
        #elseif os(macOS)
            "macOS"
        #else
            "unknown"
        #endif
    }()

    static let architecture: String = {
        #if arch(x86_64)
            "x86_64"
        #elseif arch(arm64)
            "arm64"
        #else
            "unknown"
        #endif
    }()

    static var summary: String {
        "\(cores) cores, Swift \(swiftVersion), \(operatingSystem) \(architecture)"
    }
}
