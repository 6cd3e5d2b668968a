// The prefetch hint is in include/ConductorShims.h, inline; what needs system headers the Swift
// side should not see is here.
#include "ConductorShims.h"

#if defined(__APPLE__)
#include <pthread.h>

int conductor_is_main_thread(void) {
    return pthread_main_np() != 0;
}
#elif defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

int conductor_is_main_thread(void) {
    return syscall(SYS_gettid) == getpid();
}
#else
int conductor_is_main_thread(void) {
    return 0;
}
#endif
