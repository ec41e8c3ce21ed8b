// Private to CShim: the seam between the syscall wrappers (syscalls.c), the fault table
// (faults.c) and the power-loss recorder (powerloss.c). Not exported to Swift.
#ifndef SPARSECACHE_FAULTS_INTERNAL_H
#define SPARSECACHE_FAULTS_INTERNAL_H

#include "cshim.h"

#include <stdatomic.h>
#include <sys/types.h>

/// Non-zero while any rule is set, counting is on, or power-loss recording is on. The
/// wrappers test it with one relaxed load and take the slow path only when it is set.
extern atomic_int sc_faults_armed;

#define SC_FAULTS_ARMED() \
    __builtin_expect(atomic_load_explicit(&sc_faults_armed, memory_order_relaxed), 0)

// Slow paths: count, match rules, apply effects, record for power loss, run the syscall.
int sc_fault_open(const char *path, int flags, unsigned int mode);
ssize_t sc_fault_pread(int fd, void *buffer, size_t count, int64_t offset);
ssize_t sc_fault_pread_nowait(int fd, void *buffer, size_t count, int64_t offset);
ssize_t sc_fault_pwrite(int fd, const void *buffer, size_t count, int64_t offset);
int sc_fault_fsync(int fd, int data_only);
int sc_fault_ftruncate(int fd, int64_t length);
int sc_fault_fallocate(int fd, int64_t offset, int64_t length, int punch);
int sc_fault_reserve(int fd, int64_t offset, int64_t length);
int sc_fault_rename(const char *from, const char *to);
int sc_fault_unlink(const char *path);

// powerloss.c, called by faults.c with the power-loss lock held.
int sc_pl_active(void);
void sc_pl_lock(void);
void sc_pl_unlock(void);
/// Before/after hooks around a mutating call. `before` captures pre-images; `after` records
/// the operation when it changed the file (result >= 0).
void sc_pl_before_open(const char *path, int flags, int *existed);
void sc_pl_after_open(const char *path, int fd, int existed);
void sc_pl_record_write(int fd, const void *buffer, int64_t offset, size_t count, void **token);
void sc_pl_commit_write(void *token, ssize_t written);
void sc_pl_record_truncate(int fd, int64_t length, void **token);
void sc_pl_record_fallocate(int fd, int64_t offset, int64_t length, int punch, void **token);
void sc_pl_commit_op(void *token, int ok);
/// The number of ops recorded for `fd`'s file so far (-1: a directory, or not recorded): taken
/// before a sync, given to ``sc_pl_synced``.
int64_t sc_pl_sync_mark(int fd);
void sc_pl_synced(int fd, int64_t mark);
void sc_pl_before_rename(const char *from, const char *to, void **token);
void sc_pl_after_rename(void *token, int ok);
void sc_pl_before_unlink(const char *path, void **token);
void sc_pl_after_unlink(void *token, int ok);
/// Takes `variants` snapshots named "<dir>/<op_index>-<v>"; variant 0 keeps every unsynced
/// change (a process crash), the others simulate power cuts seeded from `seed`.
void sc_pl_snapshot_point(const char *dir, int variants, uint64_t seed, int64_t op_index);

#endif
