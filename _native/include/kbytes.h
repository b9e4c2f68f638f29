/*
 * Bounded big-endian loads/stores and Kafka varints.
 *
 * Every multi-byte field in Kafka's formats is big-endian and may sit at any alignment, so
 * loads go through memcpy + byte swap (never an unaligned cast). Varints are zig-zag,
 * base-128 little-endian groups (protobuf sint32/sint64); a varint is at most 5 bytes and a
 * varlong at most 10 (Kafka's ByteUtils). Readers take an end pointer and never read past it.
 */
#ifndef ENGINE_KBYTES_H
#define ENGINE_KBYTES_H

#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER)
#include <stdlib.h>
#define KB_BSWAP16(x) _byteswap_ushort(x)
#define KB_BSWAP32(x) _byteswap_ulong(x)
#define KB_BSWAP64(x) _byteswap_uint64(x)
#define KB_INLINE static __inline
#else
#define KB_BSWAP16(x) __builtin_bswap16(x)
#define KB_BSWAP32(x) __builtin_bswap32(x)
#define KB_BSWAP64(x) __builtin_bswap64(x)
#define KB_INLINE static inline __attribute__((always_inline))
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define KB_BE16(x) (x)
#define KB_BE32(x) (x)
#define KB_BE64(x) (x)
#else
#define KB_BE16(x) KB_BSWAP16(x)
#define KB_BE32(x) KB_BSWAP32(x)
#define KB_BE64(x) KB_BSWAP64(x)
#endif

KB_INLINE uint16_t kb_load_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return KB_BE16(v); }
KB_INLINE uint32_t kb_load_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return KB_BE32(v); }
KB_INLINE uint64_t kb_load_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return KB_BE64(v); }
KB_INLINE int16_t kb_load_i16(const uint8_t *p) { return (int16_t)kb_load_u16(p); }
KB_INLINE int32_t kb_load_i32(const uint8_t *p) { return (int32_t)kb_load_u32(p); }
KB_INLINE int64_t kb_load_i64(const uint8_t *p) { return (int64_t)kb_load_u64(p); }

KB_INLINE void kb_store_u16(uint8_t *p, uint16_t v) { v = KB_BE16(v); memcpy(p, &v, 2); }
KB_INLINE void kb_store_u32(uint8_t *p, uint32_t v) { v = KB_BE32(v); memcpy(p, &v, 4); }
KB_INLINE void kb_store_u64(uint8_t *p, uint64_t v) { v = KB_BE64(v); memcpy(p, &v, 8); }

/* Status of a varint read. */
enum { KB_VARINT_OK = 0, KB_VARINT_TRUNCATED = 1, KB_VARINT_OVERFLOW = 2 };

/*
 * Reads a zig-zag varint (int32). Returns KB_VARINT_*; on success stores the value and
 * advances *pp. A 5th byte carrying bits beyond 32 is an overflow (Kafka silently drops
 * them; we refuse, which only ever affects malformed input).
 */
KB_INLINE int kb_read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out)
{
    const uint8_t *p = *pp;
    uint32_t raw = 0;
    int shift = 0;
    /* most record fields fit one byte (offset delta, key length, header count, ...) */
    if (p < end && !(*p & 0x80)) {
        raw = *p++;
        goto done;
    }
    for (;;) {
        if (p >= end) return KB_VARINT_TRUNCATED;
        uint8_t b = *p++;
        if (shift == 28) {
            if (b & 0xF0) return KB_VARINT_OVERFLOW;
            raw |= (uint32_t)b << 28;
            break;
        }
        raw |= (uint32_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
done:
    *out = (int32_t)((raw >> 1) ^ (~(raw & 1) + 1));
    *pp = p;
    return KB_VARINT_OK;
}

/* Reads a zig-zag varlong (int64); at most 10 bytes, the 10th carrying one bit. */
KB_INLINE int kb_read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t raw = 0;
    int shift = 0;
    if (p < end && !(*p & 0x80)) { /* as kb_read_varint */
        raw = *p++;
        goto done;
    }
    for (;;) {
        if (p >= end) return KB_VARINT_TRUNCATED;
        uint8_t b = *p++;
        if (shift == 63) {
            if (b & 0xFE) return KB_VARINT_OVERFLOW;
            raw |= (uint64_t)b << 63;
            break;
        }
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
done:
    *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    *pp = p;
    return KB_VARINT_OK;
}

/* Unsigned varint (no zig-zag), at most 5 bytes; used by flexible protocol fields. */
KB_INLINE int kb_read_uvarint(const uint8_t **pp, const uint8_t *end, uint32_t *out)
{
    const uint8_t *p = *pp;
    uint32_t raw = 0;
    int shift = 0;
    for (;;) {
        if (p >= end) return KB_VARINT_TRUNCATED;
        uint8_t b = *p++;
        if (shift == 28) {
            if (b & 0xF0) return KB_VARINT_OVERFLOW;
            raw |= (uint32_t)b << 28;
            break;
        }
        raw |= (uint32_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
    *out = raw;
    *pp = p;
    return KB_VARINT_OK;
}

/* Writers return the number of bytes written; the caller guarantees room (5 or 10 bytes). */
KB_INLINE int kb_write_uvarint64(uint8_t *p, uint64_t v)
{
    int n = 0;
    while (v >= 0x80) { p[n++] = (uint8_t)(v | 0x80); v >>= 7; }
    p[n++] = (uint8_t)v;
    return n;
}
KB_INLINE int kb_write_varint(uint8_t *p, int32_t v)
{
    return kb_write_uvarint64(p, (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)));
}
KB_INLINE int kb_write_varlong(uint8_t *p, int64_t v)
{
    return kb_write_uvarint64(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}
KB_INLINE int kb_varint_size(int32_t v)
{
    uint32_t z = ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}
KB_INLINE int kb_varlong_size(int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}

#endif
