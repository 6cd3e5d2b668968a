// C helpers for the Conductor module, for what Swift cannot express. Internal to the package: the
// Conductor module imports it with `internal import`, and it is no product.
#ifndef CONDUCTOR_SHIMS_H
#define CONDUCTOR_SHIMS_H

/// Asks the processor to start loading the cache line that holds `address` (for reading, kept in
/// every cache level), without waiting for it: `prefetcht0` on x86-64, `prfm pldl1keep` on arm64.
/// A hint only: it never faults, whatever the address, and changes no value.
static inline __attribute__((always_inline)) void conductor_prefetch(const void *_Nonnull address) {
    __builtin_prefetch(address, 0, 3);
}

/// Whether the calling thread is the process's main thread: on Linux, whether its thread id is the
/// process id (Swift's Glibc module does not export `gettid`); on Darwin, `pthread_main_np()`.
/// Inline, like the hint above: a function compiled in ConductorShims.c would carry debug
/// information that valgrind (3.19, used to profile the benchmarks) cannot read.
#if defined(__APPLE__)
#include <pthread.h>
static inline int conductor_is_main_thread(void) {
    return pthread_main_np() != 0;
}
#elif defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
static inline int conductor_is_main_thread(void) {
    return syscall(SYS_gettid) == getpid();
}
#else
static inline int conductor_is_main_thread(void) {
    return 0;
}
#endif

#endif
