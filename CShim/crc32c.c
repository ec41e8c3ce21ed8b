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

__attribute__((target("sse4.2"))) uint32_t sc_crc32c_hardware(uint32_t crc, const void *buffer,
                                                               size_t count) {
    const unsigned char *p = buffer;
    uint64_t c = (uint32_t)~crc;
    while (count && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        count--;
    }
    while (count >= 32) {
        uint64_t w0, w1, w2, w3;
        memcpy(&w0, p, 8);
        memcpy(&w1, p + 8, 8);
        memcpy(&w2, p + 16, 8);
        memcpy(&w3, p + 24, 8);
        c = _mm_crc32_u64(c, w0);
        c = _mm_crc32_u64(c, w1);
        c = _mm_crc32_u64(c, w2);
        c = _mm_crc32_u64(c, w3);
        p += 32;
        count -= 32;
    }
    while (count >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
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
