#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The monotonic clock every measurement reads, in nanoseconds.
enum Clock {
    @inline(__always)
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }

    /// Runs `body` and returns its result with the nanoseconds it took.
    @inline(__always)
    static func measure<T>(_ body: () throws -> T) rethrows -> (result: T, nanoseconds: Double) {
        let start = now()
        let result = try body()
        return (result, Double(now() - start))
    }
}
