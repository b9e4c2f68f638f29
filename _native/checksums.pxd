# C declarations of the checksum and hash kernels (_native/include/checksums.h, implemented in
# _native/src/crc32c.c). All are thread-safe, allocation-free and callable without the GIL.
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t


cdef extern from "checksums.h" nogil:
    enum:
        ENG_CRC_OK
        ENG_CRC_UNKNOWN_IMPL
        ENG_CRC_IMPL_UNAVAILABLE

    uint32_t eng_crc32c(uint32_t crc, const uint8_t *p, size_t n)
    const char *eng_crc32c_impl()
    int eng_crc32c_impl_count()
    const char *eng_crc32c_impl_name(int index)
    int eng_crc32c_impl_available(int index)
    int eng_crc32c_with(const char *name, uint32_t crc, const uint8_t *p, size_t n,
                        uint32_t *out)
    uint32_t eng_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
    uint32_t eng_crc32c_xpow(uint64_t n)
    int eng_crc32c_fold_constants(unsigned distance_bits, uint32_t *k_lo, uint32_t *k_hi)

    uint32_t eng_crc32(uint32_t crc, const uint8_t *p, size_t n)
    uint32_t eng_xxh32(const uint8_t *p, size_t n, uint32_t seed)
    int32_t eng_murmur2(const uint8_t *p, size_t n)
    int32_t eng_to_positive(int32_t x)
