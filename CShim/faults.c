// The fault table: rules consulted by the syscall wrappers when armed, their effects, the
// per-operation counters, and the SPARSECACHE_FAULTS parser (run once at process start).
//
// Policy stays out of here: a rule says which call fails and how; what the engine does about
// it is the Swift side's business.
#define _GNU_SOURCE
#include "faults_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

atomic_int sc_faults_armed = 0;

#define MAX_RULES 64
#define MAX_PATH_MATCH SC_FAULT_TEXT_MAX

// Counters by rule id, kept after the rule is removed. Ids are handed out once per process
// (sweeps add tens of thousands), so they live in chunks allocated as ids are handed out and
// never moved or freed: a delayed call and a reader find theirs without the table lock.
#define COUNTER_CHUNK 1024
#define MAX_COUNTER_CHUNKS 16384
typedef struct rule_counters {
    int64_t fired;              // under table_lock
    int64_t matches;            // under table_lock
    atomic_llong delaying;      // calls sleeping in the rule's delay right now
} rule_counters;
static _Atomic(rule_counters *) counter_chunks[MAX_COUNTER_CHUNKS];

typedef struct rule_slot {
    int64_t id;  // 0: free
    sc_fault_rule rule;
    char path[MAX_PATH_MATCH];
    char prefix[MAX_PATH_MATCH];
    char snapshot_dir[MAX_PATH_MATCH];
    int64_t matches;  // since the counters were last reset
    rule_counters *counters;
    uint64_t random_state;
} rule_slot;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static rule_slot rules[MAX_RULES];
static int rule_count = 0;
static int64_t next_id = 1;
static int counting = 0;
static int64_t calls[SC_OP_COUNT];
static int64_t operation_index = 0;
// Rules set with a scope, and the function that names the caller's scope (both read before
// the table lock: the provider is Swift code reading a task-local value).
static atomic_int scoped_rules = 0;
static _Atomic(int64_t (*)(void)) scope_provider = NULL;

/// The counters of rule `id`, or NULL for an id never handed out.
static rule_counters *counters_of(int64_t id) {
    if (id <= 0 || id >= (int64_t)COUNTER_CHUNK * MAX_COUNTER_CHUNKS) return NULL;
    rule_counters *chunk = atomic_load_explicit(&counter_chunks[id / COUNTER_CHUNK], memory_order_acquire);
    return chunk ? &chunk[id % COUNTER_CHUNK] : NULL;
}

/// Makes sure the counters of `id` exist (under table_lock). Returns 0, or an errno value.
static int provide_counters_locked(int64_t id) {
    if (id >= (int64_t)COUNTER_CHUNK * MAX_COUNTER_CHUNKS) return ENOSPC;
    _Atomic(rule_counters *) *slot = &counter_chunks[id / COUNTER_CHUNK];
    if (atomic_load_explicit(slot, memory_order_relaxed) != NULL) return 0;
    rule_counters *chunk = calloc(COUNTER_CHUNK, sizeof *chunk);
    if (chunk == NULL) return ENOMEM;
    atomic_store_explicit(slot, chunk, memory_order_release);
    return 0;
}

static void rearm_locked(void) {
    int armed = rule_count > 0 || counting || sc_pl_active();
    atomic_store_explicit(&sc_faults_armed, armed, memory_order_relaxed);
}

void sc_faults_rearm(void) {
    pthread_mutex_lock(&table_lock);
    rearm_locked();
    pthread_mutex_unlock(&table_lock);
}

sc_fault_rule sc_fault_rule_default(void) {
    sc_fault_rule rule;
    memset(&rule, 0, sizeof rule);
    rule.trigger = SC_TRIGGER_AFTER;
    rule.short_bytes = -1;
    rule.torn_bytes = -1;
    return rule;
}

int64_t sc_faults_add(const sc_fault_rule *rule, const char *path_substring, const char *path_prefix,
                      const char *snapshot_dir) {
    if (rule == NULL || rule->ops == 0 || rule->ops >= (1u << SC_OP_COUNT) || rule->trigger < 0 ||
        rule->trigger > SC_TRIGGER_PROBABILITY || rule->n < 0 || rule->probability < 0 ||
        rule->probability > 1 || (path_substring && strlen(path_substring) >= MAX_PATH_MATCH) ||
        (path_prefix && strlen(path_prefix) >= MAX_PATH_MATCH) ||
        (snapshot_dir && strlen(snapshot_dir) >= MAX_PATH_MATCH) ||
        (rule->snapshot_variants > 0 && (snapshot_dir == NULL || snapshot_dir[0] == 0))) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&table_lock);
    int64_t id = -1;
    int failure = ENOSPC;  // every slot taken
    for (int i = 0; i < MAX_RULES; i++) {
        if (rules[i].id != 0) continue;
        failure = provide_counters_locked(next_id);
        if (failure != 0) break;
        rule_slot *slot = &rules[i];
        memset(slot, 0, sizeof *slot);
        id = next_id++;
        slot->id = id;
        slot->counters = counters_of(id);
        slot->rule = *rule;
        if (path_substring) strcpy(slot->path, path_substring);
        if (path_prefix) strcpy(slot->prefix, path_prefix);
        if (snapshot_dir) strcpy(slot->snapshot_dir, snapshot_dir);
        slot->random_state = rule->seed ^ 0x9E3779B97F4A7C15ull;
        if (rule->scope != 0) atomic_fetch_add(&scoped_rules, 1);
        rule_count++;
        break;
    }
    rearm_locked();
    pthread_mutex_unlock(&table_lock);
    if (id < 0) errno = failure;
    return id;
}

int sc_faults_remove(int64_t id) {
    int found = -1;
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < MAX_RULES; i++) {
        if (rules[i].id == id && id != 0) {
            if (rules[i].rule.scope != 0) atomic_fetch_sub(&scoped_rules, 1);
            rules[i].id = 0;
            rule_count--;
            found = 0;
        }
    }
    rearm_locked();
    pthread_mutex_unlock(&table_lock);
    return found;
}

void sc_faults_clear(void) {
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < MAX_RULES; i++) rules[i].id = 0;
    rule_count = 0;
    atomic_store(&scoped_rules, 0);
    rearm_locked();
    pthread_mutex_unlock(&table_lock);
}

int64_t sc_faults_fired(int64_t id) {
    rule_counters *counters = counters_of(id);
    if (counters == NULL) return 0;
    pthread_mutex_lock(&table_lock);
    int64_t count = counters->fired;
    pthread_mutex_unlock(&table_lock);
    return count;
}

int64_t sc_faults_matches(int64_t id) {
    rule_counters *counters = counters_of(id);
    if (counters == NULL) return 0;
    pthread_mutex_lock(&table_lock);
    int64_t count = counters->matches;
    pthread_mutex_unlock(&table_lock);
    return count;
}

int64_t sc_faults_delaying(int64_t id) {
    rule_counters *counters = counters_of(id);
    return counters ? atomic_load(&counters->delaying) : 0;
}

int64_t sc_faults_calls(int op) {
    if (op < 0 || op >= SC_OP_COUNT) return 0;
    pthread_mutex_lock(&table_lock);
    int64_t count = calls[op];
    pthread_mutex_unlock(&table_lock);
    return count;
}

int64_t sc_faults_operation_count(void) {
    pthread_mutex_lock(&table_lock);
    int64_t count = operation_index;
    pthread_mutex_unlock(&table_lock);
    return count;
}

void sc_faults_set_counting(int on) {
    pthread_mutex_lock(&table_lock);
    counting = on != 0;
    rearm_locked();
    pthread_mutex_unlock(&table_lock);
}

void sc_faults_reset_counters(void) {
    pthread_mutex_lock(&table_lock);
    memset(calls, 0, sizeof calls);
    operation_index = 0;
    for (int i = 0; i < MAX_RULES; i++) rules[i].matches = 0;
    pthread_mutex_unlock(&table_lock);
}

int sc_faults_is_armed(void) { return atomic_load_explicit(&sc_faults_armed, memory_order_relaxed); }

void sc_faults_set_scope_provider(int64_t (*provider)(void)) { atomic_store(&scope_provider, provider); }

// MARK: - Deciding

/// What the rules that fired on one call ask for, merged (first rule wins per field).
typedef struct decision {
    int error;
    int crash;
    int exit_status;
    int64_t short_bytes;
    int64_t torn_bytes;
    int64_t delay_us;
    rule_counters *delay_rule;  // the first rule that asked for a delay (counted while it sleeps)
    int snapshot_variants;
    uint64_t snapshot_seed;
    char snapshot_dir[MAX_PATH_MATCH];
    int64_t op_index;
} decision;

static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void path_of_fd(int fd, char *out, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, size - 1);
    out[n > 0 ? n : 0] = 0;
}

/// Counts the call and matches it against the rules. `path` may be NULL for descriptor calls,
/// in which case it is resolved from `fd` only if some candidate rule filters by path.
static void decide(int op, const char *path, int fd, decision *d) {
    memset(d, 0, sizeof *d);
    d->short_bytes = -1;
    d->torn_bytes = -1;
    char resolved[4096];
    int have_path = path != NULL;
    int64_t scope = 0;
    if (atomic_load(&scoped_rules) > 0) {
        int64_t (*provider)(void) = atomic_load(&scope_provider);
        if (provider) scope = provider();
    }
    pthread_mutex_lock(&table_lock);
    calls[op]++;
    d->op_index = operation_index++;
    for (int i = 0; i < MAX_RULES; i++) {
        rule_slot *slot = &rules[i];
        if (slot->id == 0 || !(slot->rule.ops & (1u << op))) continue;
        if (slot->rule.scope != 0 && slot->rule.scope != scope) continue;
        if (slot->path[0] || slot->prefix[0]) {
            if (!have_path) {
                path_of_fd(fd, resolved, sizeof resolved);
                path = resolved;
                have_path = 1;
            }
            if (slot->path[0] && strstr(path, slot->path) == NULL) continue;
            if (slot->prefix[0] && strncmp(path, slot->prefix, strlen(slot->prefix)) != 0) continue;
        }
        slot->matches++;
        slot->counters->matches = slot->matches;
        const sc_fault_rule *rule = &slot->rule;
        if (rule->max_fires > 0 && slot->counters->fired >= rule->max_fires) continue;
        int fire = 0;
        switch (rule->trigger) {
        case SC_TRIGGER_NTH: fire = slot->matches == rule->n; break;
        case SC_TRIGGER_AFTER: fire = slot->matches > rule->n; break;
        default: fire = (double)(next_random(&slot->random_state) >> 11) * 0x1.0p-53 < rule->probability; break;
        }
        if (!fire) continue;
        slot->counters->fired++;
        if (d->error == 0) d->error = rule->error;
        if (rule->crash && !d->crash) {
            d->crash = 1;
            d->exit_status = rule->exit_status ? rule->exit_status : SC_FAULT_CRASH_STATUS;
        }
        if (d->short_bytes < 0) d->short_bytes = rule->short_bytes;
        if (d->torn_bytes < 0) d->torn_bytes = rule->torn_bytes;
        d->delay_us += rule->delay_us;
        if (rule->delay_us > 0 && d->delay_rule == NULL) d->delay_rule = slot->counters;
        if (rule->snapshot_variants > 0 && d->snapshot_variants == 0) {
            d->snapshot_variants = rule->snapshot_variants;
            d->snapshot_seed = rule->seed;
            d->op_index = slot->matches - 1;
            strcpy(d->snapshot_dir, slot->snapshot_dir);
        }
    }
    pthread_mutex_unlock(&table_lock);
}

static void crash_now(const decision *d) {
    // No atexit handlers, no stdio flush: as close to a kill as a process can do to itself.
    _exit(d->exit_status);
}

/// Effects that come before the call: latency, snapshots, and a plain crash.
static void before_call(const decision *d) {
    if (d->delay_us > 0) {
        if (d->delay_rule) atomic_fetch_add(&d->delay_rule->delaying, 1);
        struct timespec ts = {.tv_sec = d->delay_us / 1000000, .tv_nsec = (d->delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
        if (d->delay_rule) atomic_fetch_sub(&d->delay_rule->delaying, 1);
    }
    if (d->snapshot_variants > 0 && sc_pl_active()) {
        sc_pl_lock();
        sc_pl_snapshot_point(d->snapshot_dir, d->snapshot_variants, d->snapshot_seed, d->op_index);
        sc_pl_unlock();
    }
}

/// An injected failure without a torn write: the call does not happen.
static int injected_failure(const decision *d) {
    if (d->error != 0 && d->torn_bytes < 0) {
        if (d->crash) crash_now(d);
        errno = d->error;
        return 1;
    }
    if (d->crash && d->torn_bytes < 0) crash_now(d);
    return 0;
}

// MARK: - Slow paths

int sc_fault_open(const char *path, int flags, unsigned int mode) {
    decision d;
    decide(SC_OP_OPEN, path, -1, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    if (!sc_pl_active()) return open(path, flags | O_CLOEXEC, (mode_t)mode);
    sc_pl_lock();
    int existed = 1;
    sc_pl_before_open(path, flags, &existed);
    int fd = open(path, flags | O_CLOEXEC, (mode_t)mode);
    int saved = errno;
    if (fd >= 0) sc_pl_after_open(path, fd, existed);
    sc_pl_unlock();
    errno = saved;
    return fd;
}

ssize_t sc_fault_pread(int fd, void *buffer, size_t count, int64_t offset) {
    decision d;
    decide(SC_OP_PREAD, NULL, fd, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    if (d.short_bytes >= 0 && (size_t)d.short_bytes < count) count = (size_t)d.short_bytes;
    return pread(fd, buffer, count, (off_t)offset);
}

ssize_t sc_fault_pread_nowait(int fd, void *buffer, size_t count, int64_t offset) {
    decision d;
    decide(SC_OP_PREAD, NULL, fd, &d);
    // A read that may not wait does not sleep on a slow device: it finds the data uncached.
    int slow = d.delay_us > 0;
    d.delay_us = 0;
    before_call(&d);
    if (injected_failure(&d)) return -1;
    if (slow) {
        errno = EAGAIN;
        return -1;
    }
    if (d.short_bytes >= 0 && (size_t)d.short_bytes < count) count = (size_t)d.short_bytes;
    struct iovec vector = {.iov_base = buffer, .iov_len = count};
    return preadv2(fd, &vector, 1, (off_t)offset, RWF_NOWAIT);
}

ssize_t sc_fault_pwrite(int fd, const void *buffer, size_t count, int64_t offset) {
    decision d;
    decide(SC_OP_PWRITE, NULL, fd, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    size_t real = count;
    if (d.short_bytes >= 0 && (size_t)d.short_bytes < real) real = (size_t)d.short_bytes;
    if (d.torn_bytes >= 0 && (size_t)d.torn_bytes < real) real = (size_t)d.torn_bytes;
    int active = sc_pl_active();
    void *token = NULL;
    if (active) {
        sc_pl_lock();
        sc_pl_record_write(fd, buffer, offset, real, &token);
    }
    ssize_t n = real > 0 || d.torn_bytes < 0 ? pwrite(fd, buffer, real, (off_t)offset) : 0;
    int saved = errno;
    if (active) {
        sc_pl_commit_write(token, n);
        sc_pl_unlock();
    }
    if (d.torn_bytes >= 0) {
        if (d.crash) crash_now(&d);
        if (n < 0) {
            errno = saved;
            return -1;
        }
        if (d.error != 0) {
            errno = d.error;
            return -1;
        }
        // A lying device: the caller is told everything was written.
        return (ssize_t)count;
    }
    errno = saved;
    return n;
}

int sc_fault_fsync(int fd, int data_only) {
    decision d;
    decide(data_only ? SC_OP_FDATASYNC : SC_OP_FSYNC, NULL, fd, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    int64_t mark = -1;
    if (sc_pl_active()) {
        sc_pl_lock();
        mark = sc_pl_sync_mark(fd);
        sc_pl_unlock();
    }
    int result = data_only ? fdatasync(fd) : fsync(fd);
    int saved = errno;
    if (result == 0 && sc_pl_active()) {
        sc_pl_lock();
        sc_pl_synced(fd, mark);
        sc_pl_unlock();
    }
    errno = saved;
    return result;
}

int sc_fault_ftruncate(int fd, int64_t length) {
    decision d;
    decide(SC_OP_FTRUNCATE, NULL, fd, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    if (!sc_pl_active()) return ftruncate(fd, (off_t)length);
    sc_pl_lock();
    void *token = NULL;
    sc_pl_record_truncate(fd, length, &token);
    int result = ftruncate(fd, (off_t)length);
    int saved = errno;
    sc_pl_commit_op(token, result == 0);
    sc_pl_unlock();
    errno = saved;
    return result;
}

int sc_fault_fallocate(int fd, int64_t offset, int64_t length, int punch) {
    decision d;
    decide(punch ? SC_OP_PUNCH_HOLE : SC_OP_FALLOCATE, NULL, fd, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    int mode = punch ? (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) : 0;
    if (!sc_pl_active()) return fallocate(fd, mode, (off_t)offset, (off_t)length);
    sc_pl_lock();
    void *token = NULL;
    sc_pl_record_fallocate(fd, offset, length, punch, &token);
    int result = fallocate(fd, mode, (off_t)offset, (off_t)length);
    int saved = errno;
    sc_pl_commit_op(token, result == 0);
    sc_pl_unlock();
    errno = saved;
    return result;
}

int sc_fault_reserve(int fd, int64_t offset, int64_t length) {
    decision d;
    decide(SC_OP_FALLOCATE, NULL, fd, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    // No power-loss record: a reservation changes neither the size nor any byte.
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
}

int sc_fault_check_read(int fd, int64_t offset, int64_t count) {
    (void)offset;
    (void)count;
    if (!SC_FAULTS_ARMED()) return 0;
    decision d;
    decide(SC_OP_PREAD, NULL, fd, &d);
    before_call(&d);
    if (injected_failure(&d)) return errno;
    return 0;
}

int sc_fault_rename(const char *from, const char *to) {
    decision d;
    decide(SC_OP_RENAME, from, -1, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    if (!sc_pl_active()) return rename(from, to);
    sc_pl_lock();
    void *token = NULL;
    sc_pl_before_rename(from, to, &token);
    int result = rename(from, to);
    int saved = errno;
    sc_pl_after_rename(token, result == 0);
    sc_pl_unlock();
    errno = saved;
    return result;
}

int sc_fault_unlink(const char *path) {
    decision d;
    decide(SC_OP_UNLINK, path, -1, &d);
    before_call(&d);
    if (injected_failure(&d)) return -1;
    if (!sc_pl_active()) return unlink(path);
    sc_pl_lock();
    void *token = NULL;
    sc_pl_before_unlink(path, &token);
    int result = unlink(path);
    int saved = errno;
    sc_pl_after_unlink(token, result == 0);
    sc_pl_unlock();
    errno = saved;
    return result;
}

// MARK: - SPARSECACHE_FAULTS

static const struct { const char *name; uint32_t ops; } op_names[] = {
    {"open", 1u << SC_OP_OPEN},
    {"pread", 1u << SC_OP_PREAD},
    {"read", 1u << SC_OP_PREAD},
    {"pwrite", 1u << SC_OP_PWRITE},
    {"write", 1u << SC_OP_PWRITE},
    {"fsync", 1u << SC_OP_FSYNC},
    {"fdatasync", 1u << SC_OP_FDATASYNC},
    {"sync", (1u << SC_OP_FSYNC) | (1u << SC_OP_FDATASYNC)},
    {"ftruncate", 1u << SC_OP_FTRUNCATE},
    {"truncate", 1u << SC_OP_FTRUNCATE},
    {"fallocate", 1u << SC_OP_FALLOCATE},
    {"punch", 1u << SC_OP_PUNCH_HOLE},
    {"punch-hole", 1u << SC_OP_PUNCH_HOLE},
    {"rename", 1u << SC_OP_RENAME},
    {"unlink", 1u << SC_OP_UNLINK},
    {"mutating", (1u << SC_OP_COUNT) - 1 - (1u << SC_OP_PREAD)},
    {"any", (1u << SC_OP_COUNT) - 1},
    {"*", (1u << SC_OP_COUNT) - 1},
};

static const struct { const char *name; int value; } errno_names[] = {
    {"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EINTR", EINTR}, {"EOPNOTSUPP", EOPNOTSUPP},
    {"EDQUOT", EDQUOT}, {"EROFS", EROFS}, {"EAGAIN", EAGAIN}, {"EBADF", EBADF},
    {"EACCES", EACCES}, {"EPERM", EPERM}, {"ENOENT", ENOENT}, {"EFBIG", EFBIG},
    {"ENOMEM", ENOMEM}, {"EINVAL", EINVAL},
};

static int parse_int(const char *text, int64_t *out) {
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != 0 || value < 0) return -1;
    *out = value;
    return 0;
}

/// Parses one rule ("ops:key=value:flag..."). Returns 0 or -1 with a message.
static int parse_rule(char *text, sc_fault_rule *rule, char *path, char *prefix, char *dir, char *error,
                      size_t error_size) {
    *rule = sc_fault_rule_default();
    path[0] = 0;
    prefix[0] = 0;
    dir[0] = 0;
    int has_effect = 0, has_trigger = 0;
    char *save = NULL;
    char *ops = strtok_r(text, ":", &save);
    if (ops == NULL) {
        snprintf(error, error_size, "empty rule");
        return -1;
    }
    char *op_save = NULL;
    for (char *name = strtok_r(ops, ",", &op_save); name; name = strtok_r(NULL, ",", &op_save)) {
        uint32_t found = 0;
        for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
            if (strcmp(name, op_names[i].name) == 0) found = op_names[i].ops;
        if (!found) {
            snprintf(error, error_size, "unknown operation '%s' (open, pread, pwrite, fsync, fdatasync, sync, "
                     "ftruncate, fallocate, punch, rename, unlink, mutating, any)", name);
            return -1;
        }
        rule->ops |= found;
    }
    for (char *field = strtok_r(NULL, ":", &save); field; field = strtok_r(NULL, ":", &save)) {
        char *value = strchr(field, '=');
        if (value) *value++ = 0;
        int64_t number = 0;
        int bad = 0;
        if ((strcmp(field, "path") == 0 || strcmp(field, "prefix") == 0) && value) {
            char *target = field[1] == 'a' ? path : prefix;
            if (target[0]) {
                snprintf(error, error_size, "'%s=' given twice (at '%s=%s')", field, field, value);
                return -1;
            }
            if (strlen(value) >= MAX_PATH_MATCH || value[0] == 0) bad = 1; else strcpy(target, value);
        } else if (strcmp(field, "nth") == 0 && value) {
            bad = parse_int(value, &number) || number < 1;
            rule->trigger = SC_TRIGGER_NTH;
            rule->n = number;
            has_trigger++;
        } else if (strcmp(field, "after") == 0 && value) {
            bad = parse_int(value, &number);
            rule->trigger = SC_TRIGGER_AFTER;
            rule->n = number;
            has_trigger++;
        } else if (strcmp(field, "every") == 0 && !value) {
            rule->trigger = SC_TRIGGER_AFTER;
            rule->n = 0;
            has_trigger++;
        } else if (strcmp(field, "prob") == 0 && value) {
            char *end;
            double p = strtod(value, &end);
            bad = end == value || *end != 0 || !(p >= 0 && p <= 1);
            rule->trigger = SC_TRIGGER_PROBABILITY;
            rule->probability = p;
            has_trigger++;
        } else if (strcmp(field, "seed") == 0 && value) {
            bad = parse_int(value, &number);
            rule->seed = (uint64_t)number;
        } else if (strcmp(field, "times") == 0 && value) {
            bad = parse_int(value, &number) || number < 1;
            rule->max_fires = number;
        } else if (strcmp(field, "errno") == 0 && value) {
            int found = 0;
            for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
                if (strcasecmp(value, errno_names[i].name) == 0) found = errno_names[i].value;
            if (!found && parse_int(value, &number) == 0 && number > 0 && number < 4096) found = (int)number;
            bad = !found;
            rule->error = found;
            has_effect = 1;
        } else if (strcmp(field, "short") == 0 && value) {
            bad = parse_int(value, &number);
            rule->short_bytes = number;
            has_effect = 1;
        } else if (strcmp(field, "torn") == 0 && value) {
            bad = parse_int(value, &number);
            rule->torn_bytes = number;
            has_effect = 1;
        } else if ((strcmp(field, "delay") == 0 || strcmp(field, "delay_ms") == 0) && value) {
            bad = parse_int(value, &number);
            rule->delay_us = number * 1000;
            has_effect = 1;
        } else if (strcmp(field, "delay_us") == 0 && value) {
            bad = parse_int(value, &number);
            rule->delay_us = number;
            has_effect = 1;
        } else if (strcmp(field, "crash") == 0) {
            rule->crash = 1;
            if (value) {
                bad = parse_int(value, &number) || number > 255;
                rule->exit_status = (int32_t)number;
            }
            has_effect = 1;
        } else if (strcmp(field, "snapshot") == 0 && value) {
            if (strlen(value) >= MAX_PATH_MATCH) bad = 1; else strcpy(dir, value);
            if (rule->snapshot_variants == 0) rule->snapshot_variants = 1;
            has_effect = 1;
        } else if (strcmp(field, "variants") == 0 && value) {
            bad = parse_int(value, &number) || number < 1 || number > 64;
            rule->snapshot_variants = (int32_t)number;
        } else {
            snprintf(error, error_size, "unknown or incomplete field '%s%s%s'", field, value ? "=" : "", value ? value : "");
            return -1;
        }
        if (bad) {
            snprintf(error, error_size, "invalid value '%s' for '%s'", value ? value : "", field);
            return -1;
        }
    }
    if (has_trigger > 1) {
        snprintf(error, error_size, "more than one trigger (nth=, after=, every, prob=)");
        return -1;
    }
    if (!has_effect) {
        snprintf(error, error_size, "no effect (errno=, short=, torn=, delay=, crash, snapshot=)");
        return -1;
    }
    if (rule->snapshot_variants > 0 && dir[0] == 0) {
        snprintf(error, error_size, "variants= needs snapshot=DIR");
        return -1;
    }
    return 0;
}

int sc_faults_parse_rule(const char *text, sc_fault_rule *rule, char *path, char *prefix, char *dir,
                         char *error, size_t error_size) {
    if (text == NULL || rule == NULL || path == NULL || prefix == NULL || dir == NULL) {
        snprintf(error, error_size, "internal: missing buffer");
        return -1;
    }
    while (*text == ' ' || *text == '\n' || *text == '\t') text++;
    if (strchr(text, ';') != NULL) {
        snprintf(error, error_size, "one rule expected, found ';' (add each rule on its own)");
        return -1;
    }
    char *copy = strdup(text);
    if (copy == NULL) {
        snprintf(error, error_size, "out of memory");
        return -1;
    }
    int result = parse_rule(copy, rule, path, prefix, dir, error, error_size);
    free(copy);
    return result;
}

int sc_faults_parse(const char *spec, int64_t *ids, int max_ids, char *error, size_t error_size) {
    if (spec == NULL) spec = "";
    char *copy = strdup(spec);
    if (copy == NULL) {
        snprintf(error, error_size, "out of memory");
        return -1;
    }
    sc_fault_rule parsed[MAX_RULES];
    static char paths[MAX_RULES][MAX_PATH_MATCH];
    static char prefixes[MAX_RULES][MAX_PATH_MATCH];
    static char dirs[MAX_RULES][MAX_PATH_MATCH];
    static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&parse_lock);
    int count = 0;
    char *save = NULL;
    int failed = 0;
    for (char *text = strtok_r(copy, ";", &save); text; text = strtok_r(NULL, ";", &save)) {
        while (*text == ' ' || *text == '\n' || *text == '\t') text++;
        if (*text == 0) continue;
        if (count == MAX_RULES) {
            snprintf(error, error_size, "more than %d rules", MAX_RULES);
            failed = 1;
            break;
        }
        char message[400];
        if (parse_rule(text, &parsed[count], paths[count], prefixes[count], dirs[count], message, sizeof message) != 0) {
            snprintf(error, error_size, "rule %d: %s", count + 1, message);
            failed = 1;
            break;
        }
        count++;
    }
    int added = 0;
    if (!failed) {
        for (int i = 0; i < count; i++) {
            int64_t id = sc_faults_add(&parsed[i], paths[i][0] ? paths[i] : NULL, prefixes[i][0] ? prefixes[i] : NULL,
                                       dirs[i][0] ? dirs[i] : NULL);
            if (id < 0) {
                snprintf(error, error_size, "rule %d: the fault table is full", i + 1);
                failed = 1;
                break;
            }
            if (added < max_ids && ids) ids[added] = id;
            added++;
        }
    }
    pthread_mutex_unlock(&parse_lock);
    free(copy);
    return failed ? -1 : added;
}

/// Reads SPARSECACHE_FAULTS once when the program starts, so any program linking the shim
/// (the sparsecache CLI, a user's app) can be run under fault rules without code changes.
/// A malformed value stops the program: running without the faults asked for would make a
/// test pass for the wrong reason.
__attribute__((constructor)) static void sc_faults_from_environment(void) {
    const char *spec = getenv("SPARSECACHE_FAULTS");
    if (spec == NULL || spec[0] == 0) return;
    char error[512];
    if (sc_faults_parse(spec, NULL, 0, error, sizeof error) < 0) {
        fprintf(stderr, "sparsecache: SPARSECACHE_FAULTS: %s\n", error);
        _exit(64);
    }
}
