// CShim: the thin C layer under sparsecache.
//
// Only what Swift cannot express lives here: _GNU_SOURCE functions and flag macros
// (fallocate, SEEK_DATA/SEEK_HOLE), O_CLOEXEC on every open, flock, the CRC32C instruction,
// and one place per syscall where fault injection can sit. Every function returns what the
// syscall returns and leaves errno set; EINTR retries, short-transfer loops and error mapping
// are the Swift side's job (Sources/SparseCache/IO).
#ifndef SPARSECACHE_CSHIM_H
#define SPARSECACHE_CSHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// File facts Swift needs from fstat, in fixed-width fields.
typedef struct sc_stat {
    int64_t size;        ///< st_size in bytes
    int64_t blocks512;   ///< st_blocks: allocated 512-byte units
    uint64_t device;     ///< st_dev
    uint64_t inode;      ///< st_ino
    int32_t is_regular;  ///< 1 for a regular file
    int32_t is_directory;///< 1 for a directory
} sc_stat;

/// open(2) with O_CLOEXEC always added.
int sc_open(const char *path, int flags, unsigned int mode);
int sc_close(int fd);

ssize_t sc_pread(int fd, void *buffer, size_t count, int64_t offset);
ssize_t sc_pwrite(int fd, const void *buffer, size_t count, int64_t offset);

int sc_fsync(int fd);
int sc_fdatasync(int fd);
int sc_ftruncate(int fd, int64_t length);

/// fallocate(2) mode 0: allocate blocks for [offset, offset+length), growing the file size.
int sc_fallocate(int fd, int64_t offset, int64_t length);
/// fallocate(2) with FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: free the blocks, keep the size.
int sc_punch_hole(int fd, int64_t offset, int64_t length);

/// lseek(2) with SEEK_DATA / SEEK_HOLE. Returns the offset or -1 (ENXIO past the end).
int64_t sc_seek_data(int fd, int64_t offset);
int64_t sc_seek_hole(int fd, int64_t offset);

/// flock(2) operations.
enum {
    SC_LOCK_SHARED = 1,
    SC_LOCK_EXCLUSIVE = 2,
    SC_LOCK_UNLOCK = 8,
    SC_LOCK_NONBLOCKING = 4,
};
int sc_flock(int fd, int operation);

int sc_fstat(int fd, sc_stat *out);
int sc_stat_path(const char *path, sc_stat *out);

int sc_rename(const char *from, const char *to);
int sc_unlink(const char *path);

/// Open flags, so Swift does not depend on how Glibc's macros import.
enum {
    SC_O_RDONLY = 0x0,
    SC_O_WRONLY = 0x1,
    SC_O_RDWR = 0x2,
    SC_O_CREAT = 0x40,
    SC_O_EXCL = 0x80,
    SC_O_TRUNC = 0x200,
    SC_O_DIRECTORY = 0x10000,
};

/// CRC-32C (Castagnoli), zlib-style chaining: pass 0 to start, the previous result to continue.
/// Uses the SSE4.2 instruction when the CPU has it, a table-driven software path otherwise.
uint32_t sc_crc32c(uint32_t crc, const void *buffer, size_t count);
/// The software path alone (for tests and benchmarks).
uint32_t sc_crc32c_software(uint32_t crc, const void *buffer, size_t count);
/// The hardware path alone; only valid when sc_crc32c_hardware_available() returns 1.
uint32_t sc_crc32c_hardware(uint32_t crc, const void *buffer, size_t count);
int sc_crc32c_hardware_available(void);

#ifdef __cplusplus
}
#endif

#endif
