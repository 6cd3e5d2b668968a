#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Bytes the process's allocator has handed out and not taken back, read from its own accounting.
///
/// On Linux this is glibc's `mallinfo2()`: `uordblks` (bytes in use in the heap arenas, all arenas
/// summed) plus `hblkhd` (bytes in large blocks mapped directly). On Darwin it is
/// `malloc_zone_statistics` over all zones. Elsewhere it is unavailable and `memory` reports n/a.
enum MemoryAccounting {
    /// Bytes currently allocated, or `nil` when this platform offers no accounting.
    static func allocatedBytes() -> Int? {
        #if canImport(Glibc)
            guard let mallinfo2 = glibcMallinfo2 else { return nil }
            // `struct mallinfo2` is ten `size_t`s: arena, ordblks, smblks, hblks, hblkhd, usmblks,
            // fsmblks, uordblks, fordblks, keepcost.
            var info = mallinfo2()
            return withUnsafeBytes(of: &info) { raw in
                raw.load(fromByteOffset: 7 * MemoryLayout<Int>.size, as: Int.self)
                    + raw.load(fromByteOffset: 4 * MemoryLayout<Int>.size, as: Int.self)
            }
        #elseif canImport(Darwin)
            var statistics = malloc_statistics_t()
            malloc_zone_statistics(nil, &statistics)
            return Int(statistics.size_in_use)
        #else
            return nil
        #endif
    }

    static var isAvailable: Bool { allocatedBytes() != nil }

    #if canImport(Glibc)
        /// `mallinfo2` (glibc 2.33 and later), looked up at run time because the Glibc module does not
        /// import `<malloc.h>`.
        ///
        /// The C function returns a 80-byte struct by value, which the C ABI (x86-64 System V and
        /// AArch64 alike) returns through a buffer the caller provides, since it is larger than 16
        /// bytes. Swift cannot name `struct mallinfo2`, so the function is typed as returning
        /// `struct stat`, an imported C struct that is also returned that way and is larger (144
        /// bytes on x86-64, 128 on AArch64): the callee fills the first 80 bytes of the buffer.
        private static let glibcMallinfo2: (@convention(c) () -> stat)? = {
            guard MemoryLayout<stat>.size >= 10 * MemoryLayout<Int>.size,
                let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallinfo2")
            else { return nil }
            return unsafeBitCast(symbol, to: (@convention(c) () -> stat).self)
        }()
    #endif
}
