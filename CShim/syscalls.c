// Thin wrappers over the syscalls the engine uses. No retry, no policy: see cshim.h.
//
// Each wrapper that fault injection can reach starts with SC_FAULT_HOOK: one relaxed atomic
// load and a branch predicted not taken; only when a rule, counting or power-loss recording
// is on does the call go to the slow path in faults.c (which then makes the syscall itself).
#define _GNU_SOURCE
#include "cshim.h"
#include "faults_internal.h"

#define SC_FAULT_HOOK(slow_call) \
    do { if (SC_FAULTS_ARMED()) return slow_call; } while (0)

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

_Static_assert(SC_O_WRONLY == O_WRONLY && SC_O_RDWR == O_RDWR && SC_O_CREAT == O_CREAT &&
               SC_O_EXCL == O_EXCL && SC_O_TRUNC == O_TRUNC && SC_O_DIRECTORY == O_DIRECTORY,
               "open flag values differ from this libc");
_Static_assert(SC_LOCK_SHARED == LOCK_SH && SC_LOCK_EXCLUSIVE == LOCK_EX &&
               SC_LOCK_UNLOCK == LOCK_UN && SC_LOCK_NONBLOCKING == LOCK_NB,
               "flock values differ from this libc");

int sc_open(const char *path, int flags, unsigned int mode) {
    SC_FAULT_HOOK(sc_fault_open(path, flags, mode));
    return open(path, flags | O_CLOEXEC, (mode_t)mode);
}

int sc_close(int fd) { return close(fd); }

int sc_dup(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 0); }

ssize_t sc_pread(int fd, void *buffer, size_t count, int64_t offset) {
    SC_FAULT_HOOK(sc_fault_pread(fd, buffer, count, offset));
    return pread(fd, buffer, count, (off_t)offset);
}

ssize_t sc_pread_nowait(int fd, void *buffer, size_t count, int64_t offset) {
    SC_FAULT_HOOK(sc_fault_pread_nowait(fd, buffer, count, offset));
    struct iovec vector = {.iov_base = buffer, .iov_len = count};
    return preadv2(fd, &vector, 1, (off_t)offset, RWF_NOWAIT);
}

#ifndef __NR_cachestat
#define __NR_cachestat 451  // the same number on every architecture that has it
#endif

int64_t sc_cached_pages(int fd, int64_t offset, int64_t length) {
    // The kernel's struct cachestat_range and struct cachestat (include/uapi/linux/mman.h),
    // spelled out because older headers lack them.
    struct { uint64_t off, len; } range = {(uint64_t)offset, (uint64_t)length};
    struct { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted; } stat;
    if (syscall(__NR_cachestat, fd, &range, &stat, 0) != 0) return -1;
    return (int64_t)stat.nr_cache;
}

ssize_t sc_pwrite(int fd, const void *buffer, size_t count, int64_t offset) {
    SC_FAULT_HOOK(sc_fault_pwrite(fd, buffer, count, offset));
    return pwrite(fd, buffer, count, (off_t)offset);
}

int sc_fsync(int fd) {
    SC_FAULT_HOOK(sc_fault_fsync(fd, 0));
    return fsync(fd);
}

int sc_fdatasync(int fd) {
    SC_FAULT_HOOK(sc_fault_fsync(fd, 1));
    return fdatasync(fd);
}

int sc_ftruncate(int fd, int64_t length) {
    SC_FAULT_HOOK(sc_fault_ftruncate(fd, length));
    return ftruncate(fd, (off_t)length);
}

int sc_fallocate(int fd, int64_t offset, int64_t length) {
    SC_FAULT_HOOK(sc_fault_fallocate(fd, offset, length, 0));
    return fallocate(fd, 0, (off_t)offset, (off_t)length);
}

int sc_reserve(int fd, int64_t offset, int64_t length) {
    SC_FAULT_HOOK(sc_fault_reserve(fd, offset, length));
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
}

int sc_punch_hole(int fd, int64_t offset, int64_t length) {
    SC_FAULT_HOOK(sc_fault_fallocate(fd, offset, length, 1));
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
}

int64_t sc_seek_data(int fd, int64_t offset) { return lseek(fd, (off_t)offset, SEEK_DATA); }
int64_t sc_seek_hole(int fd, int64_t offset) { return lseek(fd, (off_t)offset, SEEK_HOLE); }

int sc_flock(int fd, int operation) { return flock(fd, operation); }

static void fill_stat(const struct stat *st, sc_stat *out) {
    out->size = (int64_t)st->st_size;
    out->blocks512 = (int64_t)st->st_blocks;
    out->device = (uint64_t)st->st_dev;
    out->inode = (uint64_t)st->st_ino;
    out->is_regular = S_ISREG(st->st_mode) ? 1 : 0;
    out->is_directory = S_ISDIR(st->st_mode) ? 1 : 0;
}

int sc_fstat(int fd, sc_stat *out) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    fill_stat(&st, out);
    return 0;
}

int sc_stat_path(const char *path, sc_stat *out) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    fill_stat(&st, out);
    return 0;
}

int sc_rename(const char *from, const char *to) {
    SC_FAULT_HOOK(sc_fault_rename(from, to));
    return rename(from, to);
}

int sc_unlink(const char *path) {
    SC_FAULT_HOOK(sc_fault_unlink(path));
    return unlink(path);
}

// Heap bytes handed out and not freed (small chunks and mmapped ones), for the benchmark's
// memory per object. mallinfo2 reads the main arena only: run with MALLOC_ARENA_MAX=1.
long long sc_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return (long long)info.uordblks + (long long)info.hblkhd;
}

// Asks the kernel to start reading the whole file now (posix_fadvise WILLNEED): the reads
// complete in the background while the caller works on other files. Advisory: no fault hook.
int sc_advise_will_need(int fd) {
    return posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
}
