#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How many times the calling thread has blocked so far: given up the processor of its own accord,
/// on a semaphore, a futex or a sleep (its voluntary context switches). `nil` where the platform
/// does not count them per thread.
///
/// Unlike a time, the difference across a call depends little on the machine's load, so it shows
/// how often a wait woke its thread even on a noisy machine.
enum ThreadBlocks {
    static func now() -> Int? {
        #if os(Linux) && canImport(Glibc)
            var usage = rusage()
            // 1 is RUSAGE_THREAD, the calling thread only; Glibc's Swift module leaves the name out.
            guard getrusage(__rusage_who_t(1), &usage) == 0 else { return nil }
            return usage.ru_nvcsw
        #else
            return nil
        #endif
    }
}
