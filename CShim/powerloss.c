// Power-loss simulation: remembers every change to files in one directory that no fsync has
// made durable yet, and writes out on request what those files could look like after a power
// cut at this instant, without touching the live files.
//
// The model (after SQLite's crash VFS and LevelDB/RocksDB's fault-injection file systems):
//   - each unsynced pwrite persists (3/8), vanishes (3/8), or turns to garbage over its sectors
//     (1/4: each 512 B or 4 KiB sector independently new, old, or random bytes);
//   - each unsynced ftruncate, fallocate or punch-hole persists or is reverted (1/2 each);
//   - a file that grew since its last sync has its tail torn at a random sector (1/4);
//   - creates, renames and unlinks since the directory's last fsync persist as a random prefix
//     of the order they happened in (so a new file may be missing, a renamed one under its old
//     name).
// fsync/fdatasync of a file makes everything before it durable; fsync of the directory makes
// its entries durable. "keep all" snapshots model a process crash instead: every call that
// returned persists.
#define _GNU_SOURCE
#include "faults_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void sc_faults_rearm(void);

enum { OP_WRITE, OP_TRUNCATE, OP_ALLOCATE, OP_PUNCH };
enum { DIR_CREATE, DIR_RENAME, DIR_UNLINK };

typedef struct pl_op {
    int kind;
    int64_t offset;     // write/allocate/punch offset; truncate: the new length
    int64_t length;     // bytes written / allocated / punched
    int64_t pre_size;   // file size before the call
    uint8_t *pre;       // the bytes the call overwrote, at pre_offset
    int64_t pre_offset;
    int64_t pre_length;
    uint8_t *data;      // write: the bytes written
    int file;
} pl_op;

typedef struct pl_file {
    dev_t dev;
    ino_t ino;
    int fd;  // our own read-only descriptor: content stays reachable after rename or unlink
    pl_op **ops;
    size_t count, capacity;
    // Ops ever appended, and ever dropped by a sync: a sync drops only those appended before
    // it began (a write that returns while the sync runs may have missed it).
    uint64_t appended, dropped;
} pl_file;

typedef struct pl_name {
    char name[NAME_MAX + 1];
    int file;
} pl_name;

typedef struct pl_names {
    pl_name *items;
    size_t count, capacity;
} pl_names;

typedef struct pl_dirop {
    int kind;
    char from[NAME_MAX + 1];
    char to[NAME_MAX + 1];
    int file;
} pl_dirop;

static pthread_mutex_t pl_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int pl_on = 0;
static char pl_root[PATH_MAX];
static dev_t root_dev;
static ino_t root_ino;
static pl_file *files;
static size_t file_count, file_capacity;
static pl_names durable, live;
static pl_dirop *dirops;
static size_t dirop_count, dirop_capacity;

int sc_pl_active(void) { return atomic_load_explicit(&pl_on, memory_order_acquire); }
void sc_pl_lock(void) { pthread_mutex_lock(&pl_mutex); }
void sc_pl_unlock(void) { pthread_mutex_unlock(&pl_mutex); }

static void *grow(void *items, size_t *capacity, size_t needed, size_t size) {
    if (needed <= *capacity) return items;
    size_t next = *capacity ? *capacity * 2 : 16;
    while (next < needed) next *= 2;
    void *moved = realloc(items, next * size);
    if (moved == NULL) abort();
    *capacity = next;
    return moved;
}

// MARK: Names

static int names_find(const pl_names *names, const char *name) {
    for (size_t i = 0; i < names->count; i++)
        if (strcmp(names->items[i].name, name) == 0) return (int)i;
    return -1;
}

static void names_remove(pl_names *names, const char *name) {
    int at = names_find(names, name);
    if (at < 0) return;
    names->items[at] = names->items[names->count - 1];
    names->count--;
}

static void names_set(pl_names *names, const char *name, int file) {
    int at = names_find(names, name);
    if (at >= 0) {
        names->items[at].file = file;
        return;
    }
    names->items = grow(names->items, &names->capacity, names->count + 1, sizeof(pl_name));
    snprintf(names->items[names->count].name, sizeof names->items[0].name, "%s", name);
    names->items[names->count].file = file;
    names->count++;
}

static void names_copy(pl_names *to, const pl_names *from) {
    to->items = grow(to->items, &to->capacity, from->count + 1, sizeof(pl_name));
    memcpy(to->items, from->items, from->count * sizeof(pl_name));
    to->count = from->count;
}

static void apply_dirop(pl_names *names, const pl_dirop *op) {
    switch (op->kind) {
    case DIR_CREATE: names_set(names, op->from, op->file); break;
    case DIR_RENAME:
        names_remove(names, op->from);
        names_set(names, op->to, op->file);
        break;
    default: names_remove(names, op->from); break;
    }
}

static void add_dirop(int kind, const char *from, const char *to, int file) {
    dirops = grow(dirops, &dirop_capacity, dirop_count + 1, sizeof(pl_dirop));
    pl_dirop *op = &dirops[dirop_count++];
    op->kind = kind;
    snprintf(op->from, sizeof op->from, "%s", from);
    snprintf(op->to, sizeof op->to, "%s", to ? to : "");
    op->file = file;
    apply_dirop(&live, op);
}

/// When `path` names an entry directly in the root, writes its name and returns 1.
static int in_root(const char *path, char *name) {
    const char *slash = strrchr(path, '/');
    char parent[PATH_MAX];
    const char *base = path;
    if (slash == NULL) {
        strcpy(parent, ".");
    } else {
        size_t length = (size_t)(slash - path);
        if (length == 0) length = 1;
        if (length >= sizeof parent) return 0;
        memcpy(parent, path, length);
        parent[length] = 0;
        base = slash + 1;
    }
    if (base[0] == 0 || strlen(base) > NAME_MAX) return 0;
    struct stat st;
    if (stat(parent, &st) != 0 || st.st_dev != root_dev || st.st_ino != root_ino) return 0;
    strcpy(name, base);
    return 1;
}

// MARK: Files

static int find_file(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < file_count; i++)
        if (files[i].dev == dev && files[i].ino == ino) return (int)i;
    return -1;
}

/// The tracked file for descriptor `fd`, or -1 when it is not a file in the root.
static int file_of_fd(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    return find_file(st.st_dev, st.st_ino);
}

/// Starts tracking the file `fd` refers to (an open descriptor of ours or the caller's).
static int track_fd(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    int existing = find_file(st.st_dev, st.st_ino);
    if (existing >= 0) return existing;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int own = open(link, O_RDONLY | O_CLOEXEC);
    if (own < 0) return -1;
    files = grow(files, &file_capacity, file_count + 1, sizeof(pl_file));
    pl_file *file = &files[file_count];
    memset(file, 0, sizeof *file);
    file->dev = st.st_dev;
    file->ino = st.st_ino;
    file->fd = own;
    return (int)file_count++;
}

static void free_op(pl_op *op) {
    if (op == NULL) return;
    free(op->pre);
    free(op->data);
    free(op);
}

static void clear_ops(pl_file *file) {
    for (size_t i = 0; i < file->count; i++) free_op(file->ops[i]);
    file->dropped += file->count;
    file->count = 0;
}

/// Drops the ops appended before the `mark`-th (the count when a sync began): they are durable.
static void drop_ops_before(pl_file *file, uint64_t mark) {
    if (mark <= file->dropped) return;
    size_t drop = (size_t)(mark - file->dropped);
    if (drop > file->count) drop = file->count;
    for (size_t i = 0; i < drop; i++) free_op(file->ops[i]);
    memmove(file->ops, file->ops + drop, (file->count - drop) * sizeof(pl_op *));
    file->count -= drop;
    file->dropped += drop;
}

static int64_t size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (int64_t)st.st_size : 0;
}

/// A new operation on `file` with the pre-image of [offset, offset+length) captured.
static pl_op *new_op(int file, int kind, int64_t offset, int64_t length) {
    pl_op *op = calloc(1, sizeof *op);
    if (op == NULL) abort();
    op->kind = kind;
    op->file = file;
    op->offset = offset;
    op->length = length;
    op->pre_size = size_of(files[file].fd);
    return op;
}

static void capture(pl_op *op, int64_t offset, int64_t length) {
    if (offset >= op->pre_size || length <= 0) return;
    if (offset + length > op->pre_size) length = op->pre_size - offset;
    op->pre = malloc((size_t)length);
    if (op->pre == NULL) abort();
    ssize_t got = pread(files[op->file].fd, op->pre, (size_t)length, (off_t)offset);
    op->pre_offset = offset;
    op->pre_length = got > 0 ? got : 0;
}

static void append_op(pl_op *op) {
    pl_file *file = &files[op->file];
    file->ops = grow(file->ops, &file->capacity, file->count + 1, sizeof(pl_op *));
    file->ops[file->count++] = op;
    file->appended++;
}

// MARK: Hooks (called by faults.c with pl_mutex held)

void sc_pl_before_open(const char *path, int flags, int *existed) {
    (void)flags;
    struct stat st;
    *existed = lstat(path, &st) == 0;
}

void sc_pl_after_open(const char *path, int fd, int existed) {
    char name[NAME_MAX + 1];
    if (!in_root(path, name)) return;
    int file = track_fd(fd);
    if (file < 0) return;
    if (!existed) {
        add_dirop(DIR_CREATE, name, NULL, file);
    } else if (names_find(&live, name) < 0) {
        // Made outside the shim after recording began: take it as durable.
        names_set(&durable, name, file);
        names_set(&live, name, file);
    }
}

void sc_pl_record_write(int fd, const void *buffer, int64_t offset, size_t count, void **token) {
    *token = NULL;
    int file = file_of_fd(fd);
    if (file < 0 || count == 0) return;
    pl_op *op = new_op(file, OP_WRITE, offset, (int64_t)count);
    capture(op, offset, (int64_t)count);
    op->data = malloc(count);
    if (op->data == NULL) abort();
    memcpy(op->data, buffer, count);
    *token = op;
}

void sc_pl_commit_write(void *token, ssize_t written) {
    pl_op *op = token;
    if (op == NULL) return;
    if (written <= 0) {
        free_op(op);
        return;
    }
    op->length = written;
    append_op(op);
}

void sc_pl_record_truncate(int fd, int64_t length, void **token) {
    *token = NULL;
    int file = file_of_fd(fd);
    if (file < 0) return;
    pl_op *op = new_op(file, OP_TRUNCATE, length, 0);
    if (length < op->pre_size) capture(op, length, op->pre_size - length);
    *token = op;
}

void sc_pl_record_fallocate(int fd, int64_t offset, int64_t length, int punch, void **token) {
    *token = NULL;
    int file = file_of_fd(fd);
    if (file < 0) return;
    pl_op *op = new_op(file, punch ? OP_PUNCH : OP_ALLOCATE, offset, length);
    if (punch) capture(op, offset, length);
    *token = op;
}

void sc_pl_commit_op(void *token, int ok) {
    pl_op *op = token;
    if (op == NULL) return;
    if (ok) append_op(op); else free_op(op);
}

int64_t sc_pl_sync_mark(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) return -1;
    int file = find_file(st.st_dev, st.st_ino);
    return file < 0 ? -1 : (int64_t)files[file].appended;
}

void sc_pl_synced(int fd, int64_t mark) {
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        if (st.st_dev == root_dev && st.st_ino == root_ino) {
            names_copy(&durable, &live);
            dirop_count = 0;
        }
        return;
    }
    int file = find_file(st.st_dev, st.st_ino);
    // Writes from another thread may complete while the sync runs: only those recorded
    // before it began are known durable (a file first seen during the sync: none).
    if (file >= 0 && mark >= 0) drop_ops_before(&files[file], (uint64_t)mark);
}

typedef struct rename_token {
    char from[NAME_MAX + 1];
    char to[NAME_MAX + 1];
    int file;
} rename_token;

void sc_pl_before_rename(const char *from, const char *to, void **token) {
    *token = NULL;
    rename_token *t = calloc(1, sizeof *t);
    if (t == NULL) abort();
    if (!in_root(from, t->from) || !in_root(to, t->to)) {
        free(t);
        return;
    }
    int at = names_find(&live, t->from);
    if (at >= 0) {
        t->file = live.items[at].file;
    } else {
        int fd = open(from, O_RDONLY | O_CLOEXEC);
        t->file = fd >= 0 ? track_fd(fd) : -1;
        if (fd >= 0) close(fd);
        if (t->file >= 0) {
            names_set(&durable, t->from, t->file);
            names_set(&live, t->from, t->file);
        }
    }
    *token = t;
}

void sc_pl_after_rename(void *token, int ok) {
    rename_token *t = token;
    if (t == NULL) return;
    if (ok && t->file >= 0) add_dirop(DIR_RENAME, t->from, t->to, t->file);
    free(t);
}

void sc_pl_before_unlink(const char *path, void **token) {
    *token = NULL;
    rename_token *t = calloc(1, sizeof *t);
    if (t == NULL) abort();
    if (!in_root(path, t->from) || names_find(&live, t->from) < 0) {
        free(t);
        return;
    }
    *token = t;
}

void sc_pl_after_unlink(void *token, int ok) {
    rename_token *t = token;
    if (t == NULL) return;
    if (ok) add_dirop(DIR_UNLINK, t->from, NULL, -1);
    free(t);
}

// MARK: Begin / end

int sc_powerloss_begin(const char *root) {
    struct stat st;
    if (root == NULL || strlen(root) >= sizeof pl_root || stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = EINVAL;
        return -1;
    }
    sc_powerloss_end();
    pthread_mutex_lock(&pl_mutex);
    strcpy(pl_root, root);
    root_dev = st.st_dev;
    root_ino = st.st_ino;
    DIR *dir = opendir(root);
    if (dir) {
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", root, entry->d_name);
            struct stat est;
            if (lstat(path, &est) != 0 || !S_ISREG(est.st_mode)) continue;
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            int file = track_fd(fd);
            close(fd);
            if (file >= 0) names_set(&durable, entry->d_name, file);
        }
        closedir(dir);
    }
    names_copy(&live, &durable);
    atomic_store_explicit(&pl_on, 1, memory_order_release);
    pthread_mutex_unlock(&pl_mutex);
    sc_faults_rearm();
    return 0;
}

void sc_powerloss_end(void) {
    pthread_mutex_lock(&pl_mutex);
    atomic_store_explicit(&pl_on, 0, memory_order_release);
    for (size_t i = 0; i < file_count; i++) {
        clear_ops(&files[i]);
        free(files[i].ops);
        close(files[i].fd);
    }
    free(files);
    files = NULL;
    file_count = file_capacity = 0;
    durable.count = live.count = 0;
    dirop_count = 0;
    pthread_mutex_unlock(&pl_mutex);
    sc_faults_rearm();
}

int64_t sc_powerloss_pending(void) {
    pthread_mutex_lock(&pl_mutex);
    int64_t total = (int64_t)dirop_count;
    for (size_t i = 0; i < file_count; i++) total += (int64_t)files[i].count;
    pthread_mutex_unlock(&pl_mutex);
    return total;
}

// MARK: Snapshots

typedef struct image {
    uint8_t *bytes;
    int64_t size, capacity;
} image;

static void image_resize(image *im, int64_t size) {
    if (size > im->capacity) {
        int64_t next = im->capacity ? im->capacity : 4096;
        while (next < size) next *= 2;
        uint8_t *moved = realloc(im->bytes, (size_t)next);
        if (moved == NULL) abort();
        im->bytes = moved;
        im->capacity = next;
    }
    if (size > im->size) memset(im->bytes + im->size, 0, (size_t)(size - im->size));
    im->size = size;
}

static uint64_t mix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// The file's contents after a crash now.
static void crashed_image(const pl_file *file, image *im, uint64_t *rng, int keep_all) {
    im->size = 0;
    image_resize(im, size_of(file->fd));
    int64_t got = 0;
    while (got < im->size) {
        ssize_t n = pread(file->fd, im->bytes + got, (size_t)(im->size - got), (off_t)got);
        if (n <= 0) break;
        got += n;
    }
    // Undo every unsynced call, newest first: the durable contents.
    for (size_t i = file->count; i-- > 0;) {
        const pl_op *op = file->ops[i];
        if (op->kind == OP_TRUNCATE && op->pre_size > im->size) image_resize(im, op->pre_size);
        if (op->pre_length > 0) {
            if (op->pre_offset + op->pre_length > im->size) image_resize(im, op->pre_offset + op->pre_length);
            memcpy(im->bytes + op->pre_offset, op->pre, (size_t)op->pre_length);
        }
        if (op->kind != OP_PUNCH) {
            if (op->pre_size < im->size) im->size = op->pre_size; else image_resize(im, op->pre_size);
        }
    }
    int64_t base_size = im->size;
    int64_t sector = (mix(rng) & 1) ? 512 : 4096;
    // Replay them, oldest first, each with its fate.
    for (size_t i = 0; i < file->count; i++) {
        const pl_op *op = file->ops[i];
        unsigned fate = keep_all ? 0 : (unsigned)(mix(rng) % 8);
        switch (op->kind) {
        case OP_WRITE: {
            if (fate >= 3 && fate < 6) break;  // vanished
            int64_t end = op->offset + op->length;
            if (end > im->size) image_resize(im, end);
            if (fate < 3) {
                memcpy(im->bytes + op->offset, op->data, (size_t)op->length);
                break;
            }
            // Garbage over its sectors: each one new, old, or random.
            for (int64_t s = op->offset - op->offset % sector; s < end; s += sector) {
                int64_t lo = s < op->offset ? op->offset : s;
                int64_t hi = s + sector > end ? end : s + sector;
                unsigned pick = (unsigned)(mix(rng) % 3);
                if (pick == 0) {
                    memcpy(im->bytes + lo, op->data + (lo - op->offset), (size_t)(hi - lo));
                } else if (pick == 2) {
                    for (int64_t b = lo; b < hi; b++) im->bytes[b] = (uint8_t)mix(rng);
                }
            }
            break;
        }
        case OP_TRUNCATE:
            if (fate < 4) {
                if (op->offset < im->size) im->size = op->offset; else image_resize(im, op->offset);
            }
            break;
        case OP_ALLOCATE:
            if (fate < 4 && op->offset + op->length > im->size) image_resize(im, op->offset + op->length);
            break;
        default:
            if (fate < 4 && op->offset < im->size) {
                int64_t hi = op->offset + op->length > im->size ? im->size : op->offset + op->length;
                memset(im->bytes + op->offset, 0, (size_t)(hi - op->offset));
            }
            break;
        }
    }
    // A tail that grew since the last sync may be cut at any sector.
    if (!keep_all && im->size > base_size && mix(rng) % 4 == 0) {
        int64_t cut = base_size + (int64_t)(mix(rng) % (uint64_t)(im->size - base_size + 1));
        cut -= cut % sector;
        if (cut < base_size) cut = base_size;
        im->size = cut;
    }
}

static int write_file(const char *path, const image *im) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int64_t done = 0;
    while (done < im->size) {
        ssize_t n = write(fd, im->bytes + done, (size_t)(im->size - done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        done += n;
    }
    return close(fd);
}

static int snapshot_locked(const char *dest, uint64_t seed, int keep_all) {
    uint64_t rng = seed ^ 0xD1B54A32D192ED03ull;
    pl_names names = {0};
    names_copy(&names, &durable);
    size_t prefix = keep_all ? dirop_count : (size_t)(mix(&rng) % (dirop_count + 1));
    for (size_t i = 0; i < prefix; i++) apply_dirop(&names, &dirops[i]);
    image im = {0};
    int result = 0;
    for (size_t i = 0; i < names.count && result == 0; i++) {
        int file = names.items[i].file;
        if (file < 0 || (size_t)file >= file_count) continue;
        crashed_image(&files[file], &im, &rng, keep_all);
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dest, names.items[i].name);
        result = write_file(path, &im);
    }
    free(im.bytes);
    free(names.items);
    return result;
}

int sc_powerloss_snapshot(const char *dest, uint64_t seed, int keep_all) {
    if (!sc_pl_active()) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&pl_mutex);
    int result = snapshot_locked(dest, seed, keep_all);
    int saved = errno;
    pthread_mutex_unlock(&pl_mutex);
    errno = saved;
    return result;
}

void sc_pl_snapshot_point(const char *dir, int variants, uint64_t seed, int64_t op_index) {
    for (int v = 0; v < variants; v++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%lld-%d", dir, (long long)op_index, v);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) continue;
        uint64_t variant_seed = seed ^ ((uint64_t)op_index * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)v << 56);
        snapshot_locked(path, variant_seed, v == 0);
    }
}
