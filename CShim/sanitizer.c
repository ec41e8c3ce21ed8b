// ThreadSanitizer hooks (Sources/SparseCacheEngine/IO/Lock.swift, and tests).
// Synchronization's Mutex takes a contended lock in its library's futex path, which is not
// instrumented: ThreadSanitizer does not see that thread acquire the lock and reports the
// accesses the lock guards as races. The Swift lock calls sc_tsan_acquire/sc_tsan_release around
// the guarded code. They reach ThreadSanitizer's interface only in a sanitized build (this file
// is compiled with -fsanitize=thread then) and do nothing otherwise; the Swift side has no
// compile-time test for the sanitizer, and a header's inline function is not compiled with it.
// sc_tsan_reports counts the reports printed, for tests that provoke a race.
#include "cshim.h"

#include <stdatomic.h>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SC_TSAN 1
// From compiler-rt's sanitizer/tsan_interface.h.
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#endif
#endif

static atomic_llong reports;

#ifdef SC_TSAN
// ThreadSanitizer calls this (a weak symbol of its runtime, defined here) for every report it
// prints.
void __tsan_on_report(const void *report) {
    (void)report;
    atomic_fetch_add(&reports, 1);
}
#endif

int64_t sc_tsan_reports(void) {
    return (int64_t)atomic_load(&reports);
}

int sc_tsan_enabled(void) {
#ifdef SC_TSAN
    return 1;
#else
    return 0;
#endif
}

void sc_tsan_acquire(void *address) {
#ifdef SC_TSAN
    __tsan_acquire(address);
#else
    (void)address;
#endif
}

void sc_tsan_release(void *address) {
#ifdef SC_TSAN
    __tsan_release(address);
#else
    (void)address;
#endif
}
