/*
 * Checksums and hashes of Kafka's formats, all implemented in _native/src/crc32c.c (link that
 * one file to get every function below).
 *
 *   CRC-32C (Castagnoli)  v2 record batches (bytes [21, end)), producer-state snapshots
 *   CRC-32 (IEEE)         legacy magic 0/1 messages (java.util.zip.CRC32, zlib's crc32)
 *   XXH32                 LZ4 frame header (HC byte) and block/content checksums
 *   murmur2               Kafka's default partitioner (org.apache.kafka.common.utils.Utils)
 *
 * Every function is thread-safe, allocation-free, never touches Python and may run without
 * the GIL. Lengths are in bytes; `p` may be NULL when the length is 0.
 *
 * CRC-32C picks its implementation once, on first use, from what the CPU offers at run time
 * (AVX-512 VPCLMULQDQ folding, PCLMULQDQ folding, SSE4.2 crc32q, ARMv8 CRC32C instructions,
 * or portable slicing-by-8); the build itself never assumes a CPU. The environment variable
 * ENGINE_CRC32C_IMPL=<name> forces an available implementation (for testing fallbacks).
 */
#ifndef ENGINE_CHECKSUMS_H
#define ENGINE_CHECKSUMS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * CRC-32C of p[0..n), chained like zlib's crc32: `crc` is a previous result (0 to start) and
 * the result is final (already complemented), so
 *   eng_crc32c(eng_crc32c(0, a, na), b, nb) == CRC-32C of a followed by b, and
 *   eng_crc32c(0, "123456789", 9) == 0xE3069283.
 */
uint32_t eng_crc32c(uint32_t crc, const uint8_t *p, size_t n);

/* Name of the implementation eng_crc32c uses on this machine ("avx512_vpclmul", ...). */
const char *eng_crc32c_impl(void);

/* Implementations known to this build, available or not: indexes 0 .. count-1. */
int eng_crc32c_impl_count(void);
const char *eng_crc32c_impl_name(int index);       /* NULL when index is out of range */
int eng_crc32c_impl_available(int index);          /* 1 when this CPU and build can run it */

enum { ENG_CRC_OK = 0, ENG_CRC_UNKNOWN_IMPL = -1, ENG_CRC_IMPL_UNAVAILABLE = -2 };

/*
 * Runs the named implementation (same contract as eng_crc32c) and stores the result in *out.
 * Returns ENG_CRC_OK, ENG_CRC_UNKNOWN_IMPL or ENG_CRC_IMPL_UNAVAILABLE (nothing stored).
 */
int eng_crc32c_with(const char *name, uint32_t crc, const uint8_t *p, size_t n, uint32_t *out);

/*
 * CRC-32C of A followed by B from crc1 = CRC(A), crc2 = CRC(B) and len2 = |B| in bytes, in
 * O(log len2) without the data (zlib's crc32_combine for CRC-32C).
 */
uint32_t eng_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/*
 * The arithmetic behind the fast paths, exposed so tests can check it independently:
 * x^n mod P as a reflected 32-bit value (bit 31 is the x^0 coefficient), and the folding
 * constants (x^(d+31) mod P, x^(d-33) mod P) used to move 128 bits forward by d bits.
 * eng_crc32c_fold_constants returns 0, or -1 when d is not a distance the kernels use.
 */
uint32_t eng_crc32c_xpow(uint64_t n);
int eng_crc32c_fold_constants(unsigned distance_bits, uint32_t *k_lo, uint32_t *k_hi);

/* CRC-32 (IEEE 802.3, reflected 0xEDB88320), chained exactly like zlib.crc32. */
uint32_t eng_crc32(uint32_t crc, const uint8_t *p, size_t n);

/* XXH32 of p[0..n) with the given seed (LZ4 frames use seed 0). */
uint32_t eng_xxh32(const uint8_t *p, size_t n, uint32_t seed);

/*
 * Kafka's Utils.murmur2: seed 0x9747b28c, m 0x5bd1e995, r 24, little-endian 4-byte words,
 * tail bytes taken unsigned (Java's `& 0xff`) with the switch falling through; the result is
 * Java's signed int.
 */
int32_t eng_murmur2(const uint8_t *p, size_t n);

/* Kafka's Utils.toPositive: clears the sign bit (not abs: toPositive(-1) == 0x7fffffff). */
static inline int32_t eng_to_positive(int32_t x) { return (int32_t)((uint32_t)x & 0x7fffffffu); }

#ifdef __cplusplus
}
#endif

#endif
