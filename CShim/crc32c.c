// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4 and LevelDB.
// Hardware path: the SSE4.2 crc32 instruction, 8 bytes per step. Software path: slicing-by-8.
// The choice is made once at run time from cpuid.
#include "cshim.h"

#include <string.h>

#define SC_CRC32C_POLY 0x82F63B78u

static uint32_t table[8][256];

__attribute__((constructor)) static void sc_crc32c_init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ SC_CRC32C_POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int t = 1; t < 8; t++) {
            c = table[0][c & 0xff] ^ (c >> 8);
            table[t][n] = c;
        }
    }
}

uint32_t sc_crc32c_software(uint32_t crc, const void *buffer, size_t count) {
    const unsigned char *p = buffer;
    uint32_t c = ~crc;
    while (count && ((uintptr_t)p & 7)) {
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        count--;
    }
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= c;
        c = table[7][word & 0xff] ^ table[6][(word >> 8) & 0xff] ^ table[5][(word >> 16) & 0xff] ^
            table[4][(word >> 24) & 0xff] ^ table[3][(word >> 32) & 0xff] ^
            table[2][(word >> 40) & 0xff] ^ table[1][(word >> 48) & 0xff] ^ table[0][word >> 56];
        p += 8;
        count -= 8;
    }
    while (count--) c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

// The crc32 instruction has a latency of three cycles and a throughput of one per cycle, so
// one dependent chain runs at a third of the unit's speed. Long inputs are cut into three
// streams checksummed side by side; each block's three register values are then combined by
// "shifting" the earlier ones over the later streams' length (multiplying by x^(8n) modulo
// the polynomial), which a table does in four lookups.
enum { SC_CRC_LONG = 8192, SC_CRC_SHORT = 256 };
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];

static inline uint64_t load64(const unsigned char *p) {
    uint64_t word;
    memcpy(&word, p, 8);
    return word;
}

/// The register after `length` zero bytes (a multiple of 8), starting from `reg`.
__attribute__((target("sse4.2"))) static uint32_t zeros(uint32_t reg, size_t length) {
    uint64_t c = reg;
    for (size_t i = 0; i < length / 8; i++) c = _mm_crc32_u64(c, 0);
    return (uint32_t)c;
}

/// Tables for the linear map reg -> zeros(reg, length), one per register byte.
static void build_shift(uint32_t table[4][256], size_t length) {
    uint32_t column[32];
    for (int bit = 0; bit < 32; bit++) column[bit] = zeros(1u << bit, length);
    for (int byte = 0; byte < 4; byte++) {
        for (int value = 0; value < 256; value++) {
            uint32_t sum = 0;
            for (int bit = 0; bit < 8; bit++)
                if (value & (1 << bit)) sum ^= column[8 * byte + bit];
            table[byte][value] = sum;
        }
    }
}

static inline uint32_t shift(const uint32_t table[4][256], uint32_t reg) {
    return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^ table[2][(reg >> 16) & 0xff] ^
           table[3][reg >> 24];
}

__attribute__((constructor)) static void sc_crc32c_init_shifts(void) {
    if (!sc_crc32c_hardware_available()) return;
    build_shift(shift_long, SC_CRC_LONG);
    build_shift(shift_short, SC_CRC_SHORT);
}

/// Checksums `blocks` blocks of three streams of `stride` bytes each; returns the register.
__attribute__((target("sse4.2"))) static uint64_t three_streams(uint64_t c, const unsigned char **position,
                                                                size_t *count, size_t stride,
                                                                const uint32_t table[4][256]) {
    const unsigned char *p = *position;
    while (*count >= 3 * stride) {
        uint64_t c0 = c, c1 = 0, c2 = 0;
        const unsigned char *end = p + stride;
        do {
            c0 = _mm_crc32_u64(c0, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + stride));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * stride));
            p += 8;
        } while (p < end);
        c = shift(table, (uint32_t)c0) ^ (uint32_t)c1;
        c = shift(table, (uint32_t)c) ^ (uint32_t)c2;
        p += 2 * stride;
        *count -= 3 * stride;
    }
    *position = p;
    return c;
}

__attribute__((target("sse4.2"))) uint32_t sc_crc32c_hardware(uint32_t crc, const void *buffer,
                                                               size_t count) {
    const unsigned char *p = buffer;
    uint64_t c = (uint32_t)~crc;
    while (count && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        count--;
    }
    c = three_streams(c, &p, &count, SC_CRC_LONG, shift_long);
    c = three_streams(c, &p, &count, SC_CRC_SHORT, shift_short);
    while (count >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        count -= 8;
    }
    while (count--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

int sc_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}
#else
uint32_t sc_crc32c_hardware(uint32_t crc, const void *buffer, size_t count) {
    return sc_crc32c_software(crc, buffer, count);
}
int sc_crc32c_hardware_available(void) { return 0; }
#endif

typedef uint32_t (*sc_crc_fn)(uint32_t, const void *, size_t);
static sc_crc_fn chosen;

__attribute__((constructor)) static void sc_crc32c_choose(void) {
    chosen = sc_crc32c_hardware_available() ? sc_crc32c_hardware : sc_crc32c_software;
}

uint32_t sc_crc32c(uint32_t crc, const void *buffer, size_t count) {
    return chosen(crc, buffer, count);
}

int sc_all_zero(const void *buffer, size_t count) {
    const unsigned char *p = buffer;
    while (count > 0 && ((uintptr_t)p & 7) != 0) {
        if (*p != 0) return 0;
        p++, count--;
    }
    for (; count >= 8; p += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        if (word != 0) return 0;
    }
    for (; count > 0; p++, count--) {
        if (*p != 0) return 0;
    }
    return 1;
}
