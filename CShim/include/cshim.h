// CShim: the thin C layer under sparsecache.
//
// Only what Swift cannot express lives here: _GNU_SOURCE functions and flag macros
// (fallocate, SEEK_DATA/SEEK_HOLE), O_CLOEXEC on every open, flock, the CRC32C instruction,
// and one place per syscall where fault injection can sit. Every function returns what the
// syscall returns and leaves errno set; EINTR retries, short-transfer loops and error mapping
// are the Swift side's job (Sources/SparseCacheEngine/IO).
#ifndef SPARSECACHE_CSHIM_H
#define SPARSECACHE_CSHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
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
/// A second descriptor for the open file `fd` (fcntl F_DUPFD_CLOEXEC): same file, same
/// status flags, closed on exec. Returns it, or -1 with errno.
int sc_dup(int fd);

ssize_t sc_pread(int fd, void *buffer, size_t count, int64_t offset);
/// pread that copies only from the page cache and never waits for the device: preadv2(2) with
/// RWF_NOWAIT. Returns a short count or -1 with EAGAIN where the data is not cached; -1 with
/// EOPNOTSUPP (or EINVAL on old kernels) where the file system does not support it. Fault
/// rules for pread apply; a `delay` rule makes it report EAGAIN (a slow device, not a wait).
ssize_t sc_pread_nowait(int fd, void *buffer, size_t count, int64_t offset);
/// Pages of [offset, offset + length) in the page cache, from cachestat(2) (Linux 6.5): it
/// looks only at the cache and starts no I/O. -1 with errno (ENOSYS on older kernels).
int64_t sc_cached_pages(int fd, int64_t offset, int64_t length);
ssize_t sc_pwrite(int fd, const void *buffer, size_t count, int64_t offset);

int sc_fsync(int fd);
int sc_fdatasync(int fd);
int sc_ftruncate(int fd, int64_t length);

/// fallocate(2) mode 0: allocate blocks for [offset, offset+length), growing the file size.
int sc_fallocate(int fd, int64_t offset, int64_t length);
/// fallocate(2) with FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: free the blocks, keep the size.
int sc_punch_hole(int fd, int64_t offset, int64_t length);
/// fallocate(2) with FALLOC_FL_KEEP_SIZE: reserve blocks for [offset, offset+length) without
/// changing the file size or any byte (room past the end that later writes use). A fault rule
/// matches it as `fallocate`.
int sc_reserve(int fd, int64_t offset, int64_t length);

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

/// posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED): start reading the whole file in the background.
int sc_advise_will_need(int fd);

/// Heap bytes in use in malloc's main arena (mallinfo2): with MALLOC_ARENA_MAX=1, all of them.
long long sc_heap_in_use(void);

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

/// 1 when all `count` bytes at `buffer` are zero (and when `count` is 0), else 0. Decoders check
/// padding with it: a byte loop in Swift is slow in debug builds, where the tests run.
int sc_all_zero(const void *buffer, size_t count);

// MARK: - TCP sockets (CShim/sockets.c)
//
// For the local proxy and the origin client. Every socket is non-blocking and close-on-exec;
// calls never wait (but sc_resolve, for DNS).

/// A listening socket on a numeric address ("127.0.0.1", "::1", "0.0.0.0"); port 0 picks one.
/// Returns the descriptor or -1 with errno (EINVAL for an address that is not numeric).
int sc_tcp_listen(const char *host, int port, int backlog);
/// The port a socket is bound to, or -1.
int sc_tcp_local_port(int fd);
/// accept4(2): a non-blocking, close-on-exec client with TCP_NODELAY; writes "host:port" to
/// `peer`. -1 with EAGAIN when no client is waiting.
int sc_tcp_accept(int fd, char *peer, size_t peer_size);
/// send(2) without SIGPIPE and recv(2), both non-blocking.
ssize_t sc_send(int fd, const void *buffer, size_t count);
ssize_t sc_recv(int fd, void *buffer, size_t count);
/// sendmsg(2) of two buffers in one call (a response head and its first body bytes, without
/// copying them together), non-blocking and without SIGPIPE.
ssize_t sc_send2(int fd, const void *first, size_t first_count, const void *second, size_t second_count);
/// Whether an idle connection can carry another request: 1 when nothing is waiting to be read
/// and the peer has not closed it, 0 otherwise (closed, reset, or unexpected bytes).
int sc_tcp_idle_usable(int fd);
int sc_shutdown_write(int fd);

/// epoll(7) for the sockets' reactor: one edge-triggered registration per descriptor, for
/// both directions. The token comes back with each event (the reactor's name for the
/// descriptor; never a pointer, so an event that races a removal finds nothing).
int sc_epoll_create(void);
/// Adds `fd` for input and output, edge-triggered. 0, or -1 with errno.
int sc_epoll_watch(int epoll_fd, int fd, uint64_t token);
/// Adds `fd` for input only, edge-triggered (an event loop's wake-up descriptor: an output
/// edge after each read would wake the loop for nothing). 0, or -1 with errno.
int sc_epoll_watch_input(int epoll_fd, int fd, uint64_t token);
/// Adds a listening socket watched by several epoll instances (one per event loop), for input
/// only, edge-triggered, and exclusive: a new client wakes one loop waiting in `epoll_wait`, not
/// all of them (EPOLLEXCLUSIVE, Linux 4.5). 0, or -1 with errno.
int sc_epoll_watch_listener(int epoll_fd, int fd, uint64_t token);
/// Removes `fd`. 0, or -1 with errno.
int sc_epoll_unwatch(int epoll_fd, int fd);
/// Readable when input, a hang-up or an error is reported; writable when output, a hang-up or
/// an error is (the next call on the descriptor reports which).
#define SC_EPOLL_READABLE 1
#define SC_EPOLL_WRITABLE 2
/// The peer closed its side or the connection failed (EPOLLRDHUP, EPOLLHUP, EPOLLERR): a read
/// may end the stream even right after a read that found no more data.
#define SC_EPOLL_HANGUP 4
/// Waits up to `timeout_ms` (-1: no limit) for events: fills `tokens` and `directions`
/// (SC_EPOLL_* bits) and returns how many, or -1 with errno (EINTR included).
int sc_epoll_wait(int epoll_fd, uint64_t *tokens, uint32_t *directions, int capacity, int timeout_ms);
/// An eventfd(2) that wakes an event loop from another thread: non-blocking, close-on-exec.
/// Returns the descriptor, or -1 with errno.
int sc_wake_create(void);
/// Makes `fd` readable (adds one to its counter).
void sc_wake_signal(int fd);
/// Reads the counter back to zero.
void sc_wake_drain(int fd);
/// Names the calling thread (what `top -H`, `perf` and /proc/PID/task/TID/comm show); Linux
/// keeps the first 15 bytes. Returns 0, or an errno.
int sc_thread_set_name(const char *name);

/// One address of a host, as getaddrinfo(3) gives it.
struct sc_address {
    struct sockaddr_storage storage;
    socklen_t length;
};
/// Resolves `host` (a name or a numeric address) for TCP to `port`: up to `capacity` addresses
/// in `found`, in getaddrinfo's order. Returns how many, or a negative getaddrinfo error
/// (EAI_*; gai_strerror names it). May wait for DNS: call it off the cooperative pool.
int sc_resolve(const char *host, int port, struct sc_address *found, int capacity);
/// `host` as a numeric address (as sc_resolve reads one) for TCP to `port`: up to `capacity`
/// addresses in `found`, how many, or 0 when `host` is not numeric. Never waits for a name
/// service: safe on any thread.
int sc_numeric_address(const char *host, int port, struct sc_address *found, int capacity);
/// Starts a non-blocking connect to `address`: the descriptor (non-blocking, close-on-exec)
/// whose connect is done or in progress (wait until writable, then read sc_socket_error), or
/// -1 with errno.
int sc_tcp_connect(const struct sc_address *address);
/// The pending error of a socket (SO_ERROR): 0 once a connect has succeeded.
int sc_socket_error(int fd);

/// Delivers `signals` as bytes (the signal number) on a pipe and returns its non-blocking read
/// end (the same one on every call). The handler only writes one byte, which is
/// async-signal-safe. Also unblocks the signals in the calling thread: a process started
/// from a thread that blocked them (dispatch threads do) would otherwise never see them.
int sc_signal_pipe(const int *signals, int count);

// MARK: - Fault injection (CShim/faults.c)
//
// A table of rules the wrappers above consult before each call. With no rule set, no counting
// and no power-loss recording, every wrapper pays one relaxed atomic load and a predicted
// branch. Rules come from the testing product's Swift API (Sources/SparseCacheTesting; the
// engine's part is the scope a task carries, Sources/SparseCacheEngine/Faults) or, at process
// start, from the SPARSECACHE_FAULTS environment variable (grammar in docs/TESTING.md).

/// Operations a rule can match (bit n of sc_fault_rule.ops is operation n).
enum {
    SC_OP_OPEN = 0,
    SC_OP_PREAD = 1,
    SC_OP_PWRITE = 2,
    SC_OP_FSYNC = 3,
    SC_OP_FDATASYNC = 4,
    SC_OP_FTRUNCATE = 5,
    SC_OP_FALLOCATE = 6,
    SC_OP_PUNCH_HOLE = 7,
    SC_OP_RENAME = 8,
    SC_OP_UNLINK = 9,
    SC_OP_COUNT = 10,
};

/// When a rule fires, counted over the calls it matches (operation and path), from 1.
enum {
    SC_TRIGGER_NTH = 0,         ///< only the n-th matching call
    SC_TRIGGER_AFTER = 1,       ///< every matching call after the n-th (n = 0: every call)
    SC_TRIGGER_PROBABILITY = 2, ///< each matching call with `probability`, seeded by `seed`
};

/// The exit status of the `crash` effect, unless the rule sets its own.
enum { SC_FAULT_CRASH_STATUS = 86 };
/// The size of a rule's path filter and snapshot directory buffers (with the final NUL).
enum { SC_FAULT_TEXT_MAX = 512 };

/// One rule. Effects combine: e.g. torn_bytes + crash writes the first bytes, then exits.
typedef struct sc_fault_rule {
    uint32_t ops;               ///< bit mask of 1 << SC_OP_*
    int32_t trigger;            ///< SC_TRIGGER_*
    int64_t n;                  ///< for NTH and AFTER
    double probability;         ///< for PROBABILITY, 0...1
    uint64_t seed;              ///< for PROBABILITY and snapshot variants
    int64_t max_fires;          ///< stop after this many fires; 0 = no limit
    int32_t error;              ///< fail with this errno (0: do not fail)
    int32_t crash;              ///< 1: _exit(exit_status) after the other effects
    int32_t exit_status;        ///< 0 means SC_FAULT_CRASH_STATUS
    int32_t snapshot_variants;  ///< > 0: take power-loss snapshots before the call
    int64_t short_bytes;        ///< >= 0: pread/pwrite transfer at most this many bytes
    int64_t torn_bytes;         ///< >= 0: pwrite puts only this many bytes in the file, then
                                ///<       reports `error` if set, else full success
    int64_t delay_us;           ///< > 0: sleep this long before the call
    int64_t scope;              ///< != 0: only calls made while the scope provider answers this
} sc_fault_rule;

/// A rule with no effect and trigger AFTER 0 (fires on every call).
sc_fault_rule sc_fault_rule_default(void);
/// Adds a rule; `path_substring` (may be NULL) restricts it to files whose path contains it,
/// `path_prefix` (may be NULL) to files whose path starts with it (descriptor calls resolve
/// the path through /proc/self/fd); `snapshot_dir` is where snapshot variants go. Returns the rule id (> 0), or -1 with errno EINVAL (a bad rule),
/// ENOSPC (every rule slot taken, or the process used up its ids) or ENOMEM.
int64_t sc_faults_add(const sc_fault_rule *rule, const char *path_substring, const char *path_prefix,
                      const char *snapshot_dir);
/// Parses one rule of SPARSECACHE_FAULTS syntax ("ops:key=value:flag...") without adding it:
/// writes the rule, its path filters (`path=`, `prefix=`) and its snapshot directory, each
/// empty when absent (buffers of SC_FAULT_TEXT_MAX bytes). Returns 0, or -1 with a message
/// naming the token that does not parse.
int sc_faults_parse_rule(const char *text, sc_fault_rule *rule, char *path, char *prefix, char *dir,
                         char *error, size_t error_size);
/// Parses SPARSECACHE_FAULTS syntax and adds its rules. Returns how many were added and
/// writes their ids (up to max_ids); on a syntax error adds nothing, writes a message to
/// `error` and returns -1.
int sc_faults_parse(const char *spec, int64_t *ids, int max_ids, char *error, size_t error_size);
/// Removes one rule; returns 0, or -1 when no such rule exists.
int sc_faults_remove(int64_t id);
/// Removes every rule (counters are kept; see sc_faults_reset_counters).
void sc_faults_clear(void);
/// How many times the rule fired (also after it was removed, until counters are reset).
int64_t sc_faults_fired(int64_t id);
/// Calls the rule matched (operation and path), whether it fired or not. A snapshot rule
/// names its snapshots by this count: "<dir>/<k>-<v>" is taken before its k-th match (from 0).
int64_t sc_faults_matches(int64_t id);
/// Calls sleeping in the rule's `delay` right now (for tests that must know a call really
/// waits: while it sleeps, its thread is taken).
int64_t sc_faults_delaying(int64_t id);
/// The fault hook of a read the shim does not issue (DispatchIO's own preads): counts it as a
/// pread of `fd`, applies a matching rule's delay on the calling thread, and returns the
/// errno of a failure to inject, or 0 to go on with the read.
int sc_fault_check_read(int fd, int64_t offset, int64_t count);
/// Calls of one operation seen while armed (counting on, a rule set, or power loss on).
int64_t sc_faults_calls(int op);
/// All calls seen while armed: the index of the next call.
int64_t sc_faults_operation_count(void);
/// Counting alone arms the slow path without any rule.
void sc_faults_set_counting(int on);
void sc_faults_reset_counters(void);
/// 1 when the slow path is armed.
int sc_faults_is_armed(void);
/// Sets the function that names the scope the calling thread or task is in (0: none). A rule
/// with a non-zero `scope` matches only calls made while it answers that scope. The provider
/// is called on the slow path only, while some scoped rule is set, before the table lock.
void sc_faults_set_scope_provider(int64_t (*provider)(void));

// MARK: - Power-loss simulation (CShim/powerloss.c)

/// Starts recording: files in directory `root` (not its subdirectories) are tracked from
/// their current contents, which count as durable. Every unsynced pwrite, ftruncate,
/// fallocate and punch-hole is kept with its pre-image until fsync/fdatasync of the file;
/// creates, renames and unlinks in `root` until fsync of the directory. Returns 0 or -1.
int sc_powerloss_begin(const char *root);
/// Stops recording and forgets everything.
void sc_powerloss_end(void);
/// Writes into `dest` (an existing empty directory) the files of `root` as they could look
/// after a power cut now. `keep_all` = 1 models a process crash instead (every completed
/// call persists). The live files are not touched. Returns 0 or -1 with errno.
int sc_powerloss_snapshot(const char *dest, uint64_t seed, int keep_all);
/// Unsynced operations currently remembered (file and directory).
int64_t sc_powerloss_pending(void);

// MARK: - ThreadSanitizer annotations (CShim/sanitizer.c)

/// 1 when this C module was compiled with ThreadSanitizer (`swift build --sanitize=thread`
/// passes -fsanitize=thread to C targets; Swift code has no compile-time test for it).
int sc_tsan_enabled(void);
/// Tells ThreadSanitizer that the calling thread acquires (after taking a lock) or releases
/// (before giving it back) the synchronization object at `address`: what one thread did before
/// the release happens before what the next does after its acquire. No-ops in a build without
/// ThreadSanitizer.
void sc_tsan_acquire(void *address);
void sc_tsan_release(void *address);
/// ThreadSanitizer reports printed so far by this process (0 in a build without it): a test
/// compares it before and after to fail on a race it provoked.
int64_t sc_tsan_reports(void);

#ifdef __cplusplus
}
#endif

#endif
