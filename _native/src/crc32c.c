/*
 * CRC-32C, CRC-32, XXH32 and Kafka's murmur2 (API and contracts in checksums.h).
 *
 * Polynomial arithmetic. Both CRCs are reflected: a 32-bit value r stands for the polynomial
 * sum(r_i * x^(31-i)) over GF(2), so bit 31 is the x^0 coefficient and multiplying by x is a
 * right shift that folds P back in when bit 0 falls off (P = 0x82F63B78 for CRC-32C reflected,
 * 0xEDB88320 for CRC-32). Message bits enter least significant bit of each byte first; a
 * little-endian load of w bytes therefore gives a value whose bit j is the x^(8w-1-j)
 * coefficient of that piece of message. After a message M the register holds M(x)*x^32 mod P
 * where the starting register (the complement of the chained CRC) is xored into the first 32
 * message bits; the result is the complement of the register.
 *
 * Facts the fast paths use (all products are carry-less):
 *  - crc32 instruction on 64 bits d:   r' = (r*x^64 + d*x^32) mod P, so a 128-bit block
 *    v = lo|hi (lo = first 8 bytes) with a zero register gives crc32(crc32(0, lo), hi)
 *    = v*x^32 mod P: the CRC of a message that has been folded down to 128 bits.
 *  - a 64-bit reflected a (bit i = x^(63-i)) carry-less multiplied by a 64-bit operand whose
 *    low half holds a register-style constant k gives, read as a reflected 128-bit value,
 *    a*k*x^33 (k sits x^32 high in its operand, and the 127-bit product one more). Moving a
 *    128-bit block v forward by d bits (v*x^d = lo*x^(64+d) + hi*x^d) thus takes two
 *    multiplications, by K_lo = x^(d+31) mod P and K_hi = x^(d-33) mod P, computed at init
 *    from x^n mod P (square-and-multiply) and checked by the tests against Python arithmetic.
 *  - combining CRCs of consecutive pieces: CRC(A|B) register = reg(A)*x^(8|B|) + reg0(B),
 *    where reg0 starts from zero. The 3-stream crc32 path multiplies by x^(8L) through
 *    per-constant nibble tables built at init.
 *
 * Implementations: portable slicing-by-8; SSE4.2 crc32q over three interleaved streams;
 * PCLMULQDQ folding of 4x128 bits per step; AVX-512 VPCLMULQDQ folding of 4x512 bits per
 * step; ARMv8 crc32cx over three streams (aarch64 only). The folding paths xor the starting
 * register into the first 4 bytes, fold everything to 128 bits and finish it and the tail
 * with the crc32 instruction, so no Barrett reduction is needed. Code for a CPU feature is
 * compiled with a function target attribute and chosen at run time (cpuid + xgetbv on x86,
 * getauxval(AT_HWCAP) on Linux aarch64); no -march flag is needed. Dispatch prefers AVX-512,
 * then SSE4.2 (see k_impls); each fast kernel hands short inputs down (AVX-512 below 256
 * bytes to the 128-bit folding, that below 64 bytes to the crc32 instruction), thresholds
 * measured on a Sapphire Rapids-class Xeon.
 *
 * Thread safety: tables and the choice of implementation are set up once, on first use,
 * under a compare-and-swap guard and published with release/acquire ordering.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checksums.h"
#include "kbytes.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ENG_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define ENG_X86 0
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define ENG_ARM64 1
#if defined(__linux__)
#include <sys/auxv.h>
#endif
#else
#define ENG_ARM64 0
#endif

#if defined(_MSC_VER) && !defined(__clang__)
/* MSVC: portable code only, with Interlocked operations for the one-time setup. */
#include <intrin.h>
#define ENG_LOAD_ACQ(ptr) (_ReadWriteBarrier(), *(volatile long *)(ptr))
#define ENG_STORE_REL(ptr, v) (_ReadWriteBarrier(), *(volatile long *)(ptr) = (v))
#define ENG_CAS(ptr, expect, want) \
    (_InterlockedCompareExchange((volatile long *)(ptr), (want), (expect)) == (expect))
#else
#define ENG_LOAD_ACQ(ptr) __atomic_load_n((ptr), __ATOMIC_ACQUIRE)
#define ENG_STORE_REL(ptr, v) __atomic_store_n((ptr), (v), __ATOMIC_RELEASE)
#define ENG_CAS(ptr, expect, want) __extension__({                                       \
        long _e = (expect);                                                              \
        __atomic_compare_exchange_n((ptr), &_e, (want), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE); })
#endif

#define POLY_CRC32C 0x82F63B78u /* Castagnoli 0x1EDC6F41, reflected */
#define POLY_CRC32 0xEDB88320u  /* IEEE 802.3 0x04C11DB7, reflected */
#define X0_REFLECTED 0x80000000u /* the polynomial 1 */

/* Block lengths (bytes per stream) of the 3-stream crc32 instruction path, longest first. */
enum { N_LEVELS = 3 };
static const size_t k_level_bytes[N_LEVELS] = {4096, 512, 128};

/* Folding distances in bits and their slots in g.fold. */
enum { F128, F256, F384, F512, F1024, F1536, F2048, N_FOLDS };
static const unsigned k_fold_bits[N_FOLDS] = {128, 256, 384, 512, 1024, 1536, 2048};

/* CPU features (bit flags). */
enum { HAS_SSE42 = 1, HAS_PCLMUL = 2, HAS_AVX512 = 4, HAS_VPCLMUL = 8, HAS_ARMCRC = 16 };

typedef uint32_t (*crc_kernel)(uint32_t reg, const uint8_t *p, size_t n);

static struct {
    uint32_t t32c[8][256];                   /* slicing-by-8, CRC-32C */
    uint32_t t32[8][256];                    /* slicing-by-8, CRC-32 */
    uint32_t x2n[64];                        /* x^(2^k) mod P */
    uint32_t shift[N_LEVELS][2][8][16];      /* multiply by x^(8L), x^(16L): nibble tables */
    uint64_t fold[N_FOLDS][2];               /* (K_lo, K_hi) per distance */
    unsigned features;
    int best;                                /* index into k_impls */
} g;

static long g_state;               /* 0 untouched, 1 being set up, 2 ready (publishes g) */

static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = KB_BSWAP64(v);
#endif
    return v;
}

static inline uint16_t load_le16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = KB_BSWAP16(v);
#endif
    return v;
}

static inline uint32_t load_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = KB_BSWAP32(v);
#endif
    return v;
}

/* ---------------------------------------------------------------- portable: slicing-by-8 */

static void make_tables(uint32_t poly, uint32_t t[8][256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (poly & (0u - (c & 1)));
        t[0][i] = c;
    }
    /* t[k][b]: byte b followed by k zero bytes. */
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++)
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
}

static uint32_t slice8(const uint32_t t[8][256], uint32_t r, const uint8_t *p, size_t n)
{
    for (; n && ((uintptr_t)p & 7); n--)
        r = (r >> 8) ^ t[0][(r ^ *p++) & 0xff];
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v = load_le64(p) ^ r;
        r = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff]
            ^ t[4][(v >> 24) & 0xff] ^ t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff]
            ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
    }
    for (; n; n--)
        r = (r >> 8) ^ t[0][(r ^ *p++) & 0xff];
    return r;
}

static uint32_t crc32c_portable(uint32_t r, const uint8_t *p, size_t n)
{
    return slice8(g.t32c, r, p, n);
}

/* ------------------------------------------------------------ GF(2)[x] / P arithmetic */

/* a*b mod P, both reflected. */
static uint32_t mulmod(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (uint32_t bit = X0_REFLECTED; bit; bit >>= 1) {   /* a's x^0, x^1, ... coefficients */
        if (a & bit)
            prod ^= b;
        b = (b >> 1) ^ (POLY_CRC32C & (0u - (b & 1)));    /* b *= x */
    }
    return prod;
}

static uint32_t xpow(uint64_t n)
{
    uint32_t r = X0_REFLECTED;
    for (int k = 0; n; k++, n >>= 1)
        if (n & 1)
            r = mulmod(r, g.x2n[k]);
    return r;
}

/* Nibble tables of v -> v*k mod P (linear in v): t[i][d] = (d << 4i) * k. */
static void make_shift(uint32_t k, uint32_t t[8][16])
{
    for (int i = 0; i < 8; i++)
        for (uint32_t d = 0; d < 16; d++)
            t[i][d] = mulmod(d << (4 * i), k);
}

static inline uint32_t shift_apply(const uint32_t t[8][16], uint32_t v)
{
    return t[0][v & 15] ^ t[1][(v >> 4) & 15] ^ t[2][(v >> 8) & 15] ^ t[3][(v >> 12) & 15]
        ^ t[4][(v >> 16) & 15] ^ t[5][(v >> 20) & 15] ^ t[6][(v >> 24) & 15] ^ t[7][v >> 28];
}

/*
 * Three-stream driver for a crc32-on-8-bytes instruction: per block, three streams of L bytes
 * run independently (hiding the instruction's 3-cycle latency), then
 * reg = a*x^(16L) + b*x^(8L) + c.
 */
#define ENG_DEFINE_HW_CRC(NAME, ATTR, CRC64, CRC32, CRC16, CRC8)                        \
    ATTR static uint32_t NAME##_serial(uint32_t r, const uint8_t *p, size_t n)          \
    {                                                                                    \
        for (; n >= 8; n -= 8, p += 8)           /* unaligned loads cost no more here */ \
            r = CRC64(r, load_le64(p));                                                  \
        if (n & 4) {                                                                     \
            r = CRC32(r, load_le32(p));                                                  \
            p += 4;                                                                      \
        }                                                                                \
        if (n & 2) {                                                                     \
            r = CRC16(r, load_le16(p));                                                  \
            p += 2;                                                                      \
        }                                                                                \
        if (n & 1)                                                                       \
            r = CRC8(r, *p);                                                             \
        return r;                                                                        \
    }                                                                                    \
    ATTR static uint32_t NAME##_3way(uint32_t r, const uint8_t *p, size_t n)            \
    {                                                                                    \
        for (int lv = 0; lv < N_LEVELS; lv++) {                                          \
            const size_t len = k_level_bytes[lv];                                        \
            for (; n >= 3 * len; n -= 3 * len, p += 3 * len) {                           \
                uint32_t a = r, b = 0, c = 0;                                            \
                for (size_t i = 0; i < len; i += 8) {                                    \
                    a = CRC64(a, load_le64(p + i));                                      \
                    b = CRC64(b, load_le64(p + len + i));                                \
                    c = CRC64(c, load_le64(p + 2 * len + i));                            \
                }                                                                        \
                r = shift_apply(g.shift[lv][1], a) ^ shift_apply(g.shift[lv][0], b) ^ c; \
            }                                                                            \
        }                                                                                \
        return NAME##_serial(r, p, n);                                                   \
    }

/* ------------------------------------------------------------------------------ x86-64 */
#if ENG_X86

#define ATTR_SSE42 __attribute__((target("sse4.2")))
#define ATTR_PCLMUL __attribute__((target("sse4.2,pclmul")))
#define ATTR_AVX512 __attribute__((target("sse4.2,pclmul,avx2,avx512f,avx512vl,vpclmulqdq")))

#define X86_CRC64(r, v) ((uint32_t)_mm_crc32_u64((r), (v)))
#define X86_CRC32(r, v) _mm_crc32_u32((r), (v))
#define X86_CRC16(r, v) _mm_crc32_u16((r), (v))
#define X86_CRC8(r, b) _mm_crc32_u8((r), (b))
ENG_DEFINE_HW_CRC(sse42, ATTR_SSE42, X86_CRC64, X86_CRC32, X86_CRC16, X86_CRC8)

static uint32_t crc32c_sse42(uint32_t r, const uint8_t *p, size_t n)
{
    return sse42_3way(r, p, n);
}

ATTR_PCLMUL static inline __m128i fold_constants_128(int slot)
{
    return _mm_set_epi64x((long long)g.fold[slot][1], (long long)g.fold[slot][0]);
}

/* v moved forward by the constants' distance, xored with t. */
ATTR_PCLMUL static inline __m128i fold_128(__m128i v, __m128i k, __m128i t)
{
    __m128i lo = _mm_clmulepi64_si128(v, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(v, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), t);
}

/* CRC register of a message folded down to one 128-bit block v (see the header comment). */
ATTR_PCLMUL static inline uint32_t finish_128(__m128i v)
{
    uint32_t r = (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(v));
    return (uint32_t)_mm_crc32_u64(r, (uint64_t)_mm_extract_epi64(v, 1));
}

/* Folds 16-byte blocks into v while they last. */
ATTR_PCLMUL static inline __m128i fold_tail_16(__m128i v, const uint8_t **pp, size_t *np)
{
    const __m128i k128 = fold_constants_128(F128);
    for (; *np >= 16; *np -= 16, *pp += 16)
        v = fold_128(v, k128, _mm_loadu_si128((const __m128i *)*pp));
    return v;
}

/* Below these lengths the crc32 instruction alone is faster; from ALIGN_MIN on, the head up
 * to a 64-byte boundary goes through it so that no vector load splits a cache line. */
enum { PCLMUL_MIN = 64, AVX512_MIN = 256, ALIGN_MIN = 16384 };

ATTR_PCLMUL static uint32_t crc32c_pclmul(uint32_t r, const uint8_t *p, size_t n)
{
    if (n < PCLMUL_MIN)
        return sse42_3way(r, p, n);
    if (n >= ALIGN_MIN) {
        size_t head = (size_t)(-(uintptr_t)p & 15);
        r = sse42_serial(r, p, head);
        p += head;
        n -= head;
    }
    const __m128i *q = (const __m128i *)p;
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128(q), _mm_cvtsi32_si128((int)r));
    __m128i x1 = _mm_loadu_si128(q + 1), x2 = _mm_loadu_si128(q + 2);
    __m128i x3 = _mm_loadu_si128(q + 3);
    p += 64;
    n -= 64;
    const __m128i k512 = fold_constants_128(F512);
    for (; n >= 64; n -= 64, p += 64) {
        q = (const __m128i *)p;
        x0 = fold_128(x0, k512, _mm_loadu_si128(q));
        x1 = fold_128(x1, k512, _mm_loadu_si128(q + 1));
        x2 = fold_128(x2, k512, _mm_loadu_si128(q + 2));
        x3 = fold_128(x3, k512, _mm_loadu_si128(q + 3));
    }
    __m128i v = fold_128(x0, fold_constants_128(F384), x3);
    v = fold_128(x1, fold_constants_128(F256), v);
    v = fold_128(x2, fold_constants_128(F128), v);
    v = fold_tail_16(v, &p, &n);
    return sse42_serial(finish_128(v), p, n);
}

ATTR_AVX512 static inline __m512i fold_constants_512(int slot)
{
    return _mm512_broadcast_i32x4(fold_constants_128(slot));
}

ATTR_AVX512 static inline __m512i fold_512(__m512i v, __m512i k, __m512i t)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(v, k, 0x00),
                                     _mm512_clmulepi64_epi128(v, k, 0x11), t, 0x96);
}

/* The four 128-bit lanes of z (lane 0 first in the message) folded into one block. */
ATTR_AVX512 static inline __m128i reduce_lanes(__m512i z)
{
    const __m512i k = _mm512_set_epi64(0, 0,
        (long long)g.fold[F128][1], (long long)g.fold[F128][0],
        (long long)g.fold[F256][1], (long long)g.fold[F256][0],
        (long long)g.fold[F384][1], (long long)g.fold[F384][0]);
    __m512i t = fold_512(z, k, _mm512_maskz_mov_epi64(0xC0, z));    /* lane 3 moves 0 bits */
    __m256i y = _mm256_xor_si256(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    return _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
}

ATTR_AVX512 static uint32_t crc32c_avx512(uint32_t r, const uint8_t *p, size_t n)
{
    if (n < AVX512_MIN)
        return crc32c_pclmul(r, p, n);
    if (n >= ALIGN_MIN) {
        size_t head = (size_t)(-(uintptr_t)p & 63);
        r = sse42_serial(r, p, head);
        p += head;
        n -= head;
    }
    __m512i z0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_maskz_set1_epi32(1, (int)r));
    __m512i z1 = _mm512_loadu_si512(p + 64);
    __m512i z2 = _mm512_loadu_si512(p + 128);
    __m512i z3 = _mm512_loadu_si512(p + 192);
    p += 256;
    n -= 256;
    const __m512i k2048 = fold_constants_512(F2048);
    for (; n >= 256; n -= 256, p += 256) {
        z0 = fold_512(z0, k2048, _mm512_loadu_si512(p));
        z1 = fold_512(z1, k2048, _mm512_loadu_si512(p + 64));
        z2 = fold_512(z2, k2048, _mm512_loadu_si512(p + 128));
        z3 = fold_512(z3, k2048, _mm512_loadu_si512(p + 192));
    }
    __m512i z = fold_512(z0, fold_constants_512(F1536), z3);
    z = fold_512(z1, fold_constants_512(F1024), z);
    z = fold_512(z2, fold_constants_512(F512), z);
    const __m512i k512 = fold_constants_512(F512);
    for (; n >= 64; n -= 64, p += 64)
        z = fold_512(z, k512, _mm512_loadu_si512(p));
    __m128i v = fold_tail_16(reduce_lanes(z), &p, &n);
    return sse42_serial(finish_128(v), p, n);
}

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static unsigned detect_features(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if (c & (1u << 20))
        f |= HAS_SSE42;
    if (c & (1u << 1))
        f |= HAS_PCLMUL;
    int osxsave = (c >> 27) & 1;
    /* The OS must save XMM, YMM, opmask and both ZMM halves (XCR0 bits 1, 2, 5, 6, 7). */
    int zmm_state = osxsave && (xgetbv0() & 0xE6) == 0xE6;
    if (zmm_state && __get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if ((b & (1u << 16)) && (b & (1u << 31)))     /* AVX512F, AVX512VL */
            f |= HAS_AVX512;
        if (c & (1u << 10))
            f |= HAS_VPCLMUL;
    }
    return f;
}

#endif /* ENG_X86 */

/* ----------------------------------------------------------------------------- aarch64 */
#if ENG_ARM64

#if defined(__clang__)
#define ATTR_ARMCRC __attribute__((target("crc")))
#define ARM_CRC64(r, v) __builtin_arm_crc32cd((r), (v))
#define ARM_CRC32(r, v) __builtin_arm_crc32cw((r), (v))
#define ARM_CRC16(r, v) __builtin_arm_crc32ch((r), (v))
#define ARM_CRC8(r, b) __builtin_arm_crc32cb((r), (b))
#else
#define ATTR_ARMCRC __attribute__((target("+crc")))
#define ARM_CRC64(r, v) __builtin_aarch64_crc32cx((r), (v))
#define ARM_CRC32(r, v) __builtin_aarch64_crc32cw((r), (v))
#define ARM_CRC16(r, v) __builtin_aarch64_crc32ch((r), (v))
#define ARM_CRC8(r, b) __builtin_aarch64_crc32cb((r), (b))
#endif
ENG_DEFINE_HW_CRC(armcrc, ATTR_ARMCRC, ARM_CRC64, ARM_CRC32, ARM_CRC16, ARM_CRC8)

static uint32_t crc32c_armv8(uint32_t r, const uint8_t *p, size_t n)
{
    return armcrc_3way(r, p, n);
}

static unsigned detect_features(void)
{
#if defined(__ARM_FEATURE_CRC32) || defined(__APPLE__)
    return HAS_ARMCRC;                       /* guaranteed by the build target / platform */
#elif defined(__linux__) && defined(HWCAP_CRC32)
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) ? HAS_ARMCRC : 0;
#else
    return 0;
#endif
}

#endif /* ENG_ARM64 */

#if !ENG_X86 && !ENG_ARM64
static unsigned detect_features(void) { return 0; }
#endif

/* ------------------------------------------------------------------------ set-up, dispatch */

static const struct {
    const char *name;
    crc_kernel kernel;                       /* NULL when not compiled for this architecture */
    unsigned needs;
} k_impls[] = {
    /* Preferred last: dispatch picks the last available one. Without VPCLMULQDQ the three
     * crc32q streams are preferred to 128-bit folding: where PCLMULQDQ issues once a cycle
     * folding gains little (1.3x on the Sapphire Rapids-class Xeon we measured), while on
     * older parts that issue it every 2 to 8 cycles it would lose several times over. */
    {"portable", crc32c_portable, 0},
#if ENG_ARM64
    {"armv8_crc", crc32c_armv8, HAS_ARMCRC},
#else
    {"armv8_crc", NULL, HAS_ARMCRC},
#endif
#if ENG_X86
    {"pclmul", crc32c_pclmul, HAS_SSE42 | HAS_PCLMUL},
    {"sse42", crc32c_sse42, HAS_SSE42},
    {"avx512_vpclmul", crc32c_avx512, HAS_SSE42 | HAS_PCLMUL | HAS_AVX512 | HAS_VPCLMUL},
#else
    {"pclmul", NULL, HAS_SSE42 | HAS_PCLMUL},
    {"sse42", NULL, HAS_SSE42},
    {"avx512_vpclmul", NULL, HAS_SSE42 | HAS_PCLMUL | HAS_AVX512 | HAS_VPCLMUL},
#endif
};
enum { N_IMPLS = (int)(sizeof k_impls / sizeof k_impls[0]) };

static int available(int i)
{
    return k_impls[i].kernel != NULL && (g.features & k_impls[i].needs) == k_impls[i].needs;
}

static void setup_tables(void)
{
    make_tables(POLY_CRC32C, g.t32c);
    make_tables(POLY_CRC32, g.t32);
    g.x2n[0] = X0_REFLECTED >> 1;                          /* x^1 */
    for (int k = 1; k < 64; k++)
        g.x2n[k] = mulmod(g.x2n[k - 1], g.x2n[k - 1]);
    for (int lv = 0; lv < N_LEVELS; lv++) {
        make_shift(xpow(8 * (uint64_t)k_level_bytes[lv]), g.shift[lv][0]);
        make_shift(xpow(16 * (uint64_t)k_level_bytes[lv]), g.shift[lv][1]);
    }
    for (int f = 0; f < N_FOLDS; f++) {
        g.fold[f][0] = xpow(k_fold_bits[f] + 31);
        g.fold[f][1] = xpow(k_fold_bits[f] - 33);
    }
}

static void setup(void)
{
    setup_tables();
    g.features = detect_features();
    g.best = 0;
    for (int i = 0; i < N_IMPLS; i++)
        if (available(i))
            g.best = i;
    const char *forced = getenv("ENGINE_CRC32C_IMPL");
    for (int i = 0; forced && i < N_IMPLS; i++)
        if (strcmp(forced, k_impls[i].name) == 0 && available(i))
            g.best = i;
}

static void ensure_setup(void)
{
    if (ENG_LOAD_ACQ(&g_state) == 2)
        return;
    if (ENG_CAS(&g_state, 0, 1)) {
        setup();
        ENG_STORE_REL(&g_state, 2);
        return;
    }
    while (ENG_LOAD_ACQ(&g_state) != 2) {
        /* another thread is filling the tables (tens of microseconds) */
    }
}

uint32_t eng_crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
    assert(p != NULL || n == 0);
    ensure_setup();
    return ~k_impls[g.best].kernel(~crc, p, n);
}

const char *eng_crc32c_impl(void)
{
    ensure_setup();
    return k_impls[g.best].name;
}

int eng_crc32c_impl_count(void) { return N_IMPLS; }

const char *eng_crc32c_impl_name(int index)
{
    return index >= 0 && index < N_IMPLS ? k_impls[index].name : NULL;
}

int eng_crc32c_impl_available(int index)
{
    ensure_setup();
    return index >= 0 && index < N_IMPLS && available(index);
}

int eng_crc32c_with(const char *name, uint32_t crc, const uint8_t *p, size_t n, uint32_t *out)
{
    ensure_setup();
    for (int i = 0; i < N_IMPLS; i++) {
        if (strcmp(name, k_impls[i].name) != 0)
            continue;
        if (!available(i))
            return ENG_CRC_IMPL_UNAVAILABLE;
        *out = ~k_impls[i].kernel(~crc, p, n);
        return ENG_CRC_OK;
    }
    return ENG_CRC_UNKNOWN_IMPL;
}

uint32_t eng_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    ensure_setup();
    /* The complements cancel: ~(reg1*x^8n + reg0(B)) == crc1*x^8n ^ crc2. x^(8n) is
     * (x^n)^8, which stays exact for every 64-bit n. */
    uint32_t k = xpow(len2);
    for (int i = 0; i < 3; i++)
        k = mulmod(k, k);
    return mulmod(crc1, k) ^ crc2;
}

uint32_t eng_crc32c_xpow(uint64_t n)
{
    ensure_setup();
    return xpow(n);
}

int eng_crc32c_fold_constants(unsigned distance_bits, uint32_t *k_lo, uint32_t *k_hi)
{
    ensure_setup();
    for (int f = 0; f < N_FOLDS; f++) {
        if (k_fold_bits[f] == distance_bits) {
            *k_lo = (uint32_t)g.fold[f][0];
            *k_hi = (uint32_t)g.fold[f][1];
            return 0;
        }
    }
    return -1;
}

/* ----------------------------------------------------------------------- CRC-32 (IEEE) */

uint32_t eng_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    assert(p != NULL || n == 0);
    ensure_setup();
    return ~slice8(g.t32, ~crc, p, n);
}

/* ------------------------------------------------------------------------------- XXH32 */

#define XXH_P1 0x9E3779B1u
#define XXH_P2 0x85EBCA77u
#define XXH_P3 0xC2B2AE3Du
#define XXH_P4 0x27D4EB2Fu
#define XXH_P5 0x165667B1u

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint32_t xxh_round(uint32_t acc, uint32_t lane)
{
    return rotl32(acc + lane * XXH_P2, 13) * XXH_P1;
}

uint32_t eng_xxh32(const uint8_t *p, size_t n, uint32_t seed)
{
    assert(p != NULL || n == 0);
    size_t i = 0;                                 /* indexes, so that p may be NULL */
    uint32_t h;
    if (n >= 16) {
        uint32_t v1 = seed + XXH_P1 + XXH_P2, v2 = seed + XXH_P2, v3 = seed, v4 = seed - XXH_P1;
        for (; n - i >= 16; i += 16) {            /* stripes of four little-endian lanes */
            v1 = xxh_round(v1, load_le32(p + i));
            v2 = xxh_round(v2, load_le32(p + i + 4));
            v3 = xxh_round(v3, load_le32(p + i + 8));
            v4 = xxh_round(v4, load_le32(p + i + 12));
        }
        h = rotl32(v1, 1) + rotl32(v2, 7) + rotl32(v3, 12) + rotl32(v4, 18);
    } else {
        h = seed + XXH_P5;
    }
    h += (uint32_t)n;                             /* the length modulo 2^32 */
    for (; n - i >= 4; i += 4)
        h = rotl32(h + load_le32(p + i) * XXH_P3, 17) * XXH_P4;
    for (; i < n; i++)
        h = rotl32(h + p[i] * XXH_P5, 11) * XXH_P1;
    h ^= h >> 15;                                 /* avalanche */
    h *= XXH_P2;
    h ^= h >> 13;
    h *= XXH_P3;
    h ^= h >> 16;
    return h;
}

/* ------------------------------------------------------------------------ Kafka murmur2 */

#define MURMUR2_SEED 0x9747b28cu
#define MURMUR2_M 0x5bd1e995u
#define MURMUR2_R 24

int32_t eng_murmur2(const uint8_t *p, size_t n)
{
    assert(p != NULL || n == 0);
    /* Java's int arithmetic wraps: unsigned 32-bit arithmetic here, the bits reinterpreted
     * as a signed int at the end. The length enters as Java's int (data.length). */
    uint32_t h = MURMUR2_SEED ^ (uint32_t)n;
    size_t words = n / 4;
    for (size_t i = 0; i < words; i++) {
        uint32_t k = load_le32(p + 4 * i);
        k *= MURMUR2_M;
        k ^= k >> MURMUR2_R;
        k *= MURMUR2_M;
        h *= MURMUR2_M;
        h ^= k;
    }
    size_t t = 4 * words;                         /* the 0-3 tail bytes, taken unsigned */
    switch (n & 3) {                              /* falls through, as in Java */
    case 3:
        h ^= (uint32_t)p[t + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)p[t + 1] << 8;
        /* fall through */
    case 1:
        h ^= p[t];
        h *= MURMUR2_M;
    }
    h ^= h >> 13;
    h *= MURMUR2_M;
    h ^= h >> 15;
    return (int32_t)h;
}
