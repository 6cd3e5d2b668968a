#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A small, fast, seedable random number generator (SplitMix64) for reproducible randomized tests.
///
/// The run's seed comes from the environment variable `CONDUCTOR_SEED` (decimal, or hexadecimal
/// with a `0x` prefix) when it is set, otherwise from the system generator. Tests print the seed
/// and put it in every failure message, so `CONDUCTOR_SEED=<seed> swift test --filter …` replays
/// the same random choices.
struct SeededRandom: RandomNumberGenerator, Sendable {
    /// The seed this generator started from.
    let seed: UInt64
    private var state: UInt64

    init(seed: UInt64) {
        self.seed = seed
        state = seed
    }

    /// An independent generator for `stream`, derived from `seed`; the same pair always gives the
    /// same sequence. Used to give each thread of a test its own reproducible sequence.
    init(seed: UInt64, stream: UInt64) {
        self.init(seed: SeededRandom.mix(seed ^ SeededRandom.mix(stream &+ 0x6A09_E667_F3BC_C908)))
    }

    /// The generator for one use (`part`) of `stream`: a randomized harness gives each round a
    /// stream and each use within the round (building, each mutator, ...) a part of it.
    init(seed: UInt64, stream: UInt64, part: UInt64) {
        self.init(seed: seed, stream: SeededRandom.mix(stream) ^ part)
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return SeededRandom.mix(state)
    }

    /// The SplitMix64 finalizer.
    static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniformly distributed integer in `0..<bound`.
    mutating func int(_ bound: Int) -> Int {
        precondition(bound > 0, "SeededRandom.int: bound must be positive")
        return Int(next(upperBound: UInt64(bound)))
    }

    /// A uniformly distributed integer in `range`.
    mutating func int(in range: ClosedRange<Int>) -> Int {
        range.lowerBound + int(range.count)
    }

    /// `true` with probability `probability`.
    mutating func chance(_ probability: Double) -> Bool {
        Double(next() >> 11) * 0x1.0p-53 < probability
    }

    // MARK: Environment

    /// The seed for this test process: `CONDUCTOR_SEED` if set, otherwise a fresh random one.
    /// Computed once, so every randomized test of a run reports the same seed.
    static let runSeed: UInt64 = {
        if let text = environment("CONDUCTOR_SEED") {
            let trimmed = text.trimmingSpaces
            let parsed =
                trimmed.lowercased().hasPrefix("0x")
                ? UInt64(trimmed.dropFirst(2), radix: 16)
                : UInt64(trimmed)
            guard let parsed else {
                preconditionFailure("CONDUCTOR_SEED='\(text)' is not a decimal or 0x-prefixed hexadecimal UInt64")
            }
            return parsed
        }
        var system = SystemRandomNumberGenerator()
        return system.next()
    }()

    /// Whether the seed was given with `CONDUCTOR_SEED`.
    static var seedIsFromEnvironment: Bool { environment("CONDUCTOR_SEED") != nil }

    /// The multiplier for stress-test sizes: `CONDUCTOR_STRESS_SCALE` (a positive number, e.g. `0.5`
    /// or `4`), 1 when unset.
    static let stressScale: Double = {
        guard let text = environment("CONDUCTOR_STRESS_SCALE") else { return 1 }
        guard let scale = Double(text.trimmingSpaces), scale > 0, scale.isFinite else {
            preconditionFailure("CONDUCTOR_STRESS_SCALE='\(text)' is not a positive number")
        }
        return scale
    }()

    /// A description that tells how to replay the run.
    static func describe(_ seed: UInt64) -> String {
        "seed \(seed) (replay with CONDUCTOR_SEED=\(seed))"
    }

    private static func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\n" }.reversed())
    }
}
