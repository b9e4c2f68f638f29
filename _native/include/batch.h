/*
 * Kafka record batches: scan of batch headers and parse of v2 records.
 *
 * Every entry of a log (any magic) starts with the same 17 bytes:
 *   0  int64 offset / baseOffset      8  int32 size (bytes after this field)
 *   12 int32 crc (v0/v1) / partitionLeaderEpoch (v2)      16 int8 magic
 * v2 batch header (61 bytes, DefaultRecordBatch):
 *   17 uint32 crc (CRC-32C over [21, end))   21 int16 attributes   23 int32 lastOffsetDelta
 *   27 int64 baseTimestamp  35 int64 maxTimestamp  43 int64 producerId  51 int16 producerEpoch
 *   53 int32 baseSequence   57 int32 recordsCount  61 records (raw or one compressed stream)
 * v0/v1 message (LegacyRecord), after offset+size:
 *   12 uint32 crc (CRC-32 IEEE over [16, end))  16 magic  17 attributes  [18 int64 timestamp, v1]
 *   then int32 keyLength, key, int32 valueLength, value.
 * Kernels never read outside [buf, buf+len) and report the first problem in eng_error.
 */
#ifndef ENGINE_BATCH_H
#define ENGINE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "kbytes.h"
#include "status.h" /* ENG_OK, ENG_ERR_*, eng_error */

#define ENG_LOG_OVERHEAD 12
#define ENG_HEADER_SIZE_UP_TO_MAGIC 17
#define ENG_RECORD_BATCH_OVERHEAD 61
#define ENG_RECORD_OVERHEAD_V0 14
#define ENG_RECORD_OVERHEAD_V1 22
#define ENG_MIN_RECORD_SIZE 7 /* length, attributes, ts delta, offset delta, key, value, headers */

/* One row of the scan: field order and types mirror BATCH_HEADER_DTYPE (aligned). */
typedef struct {
    int64_t position;
    int64_t base_offset;
    int64_t last_offset;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int32_t size;
    int32_t partition_leader_epoch;
    int32_t base_sequence;
    int32_t record_count;
    uint32_t crc;
    int16_t attributes;
    int16_t producer_epoch;
    int8_t magic;
    int8_t compression;
    int8_t timestamp_type;
    uint8_t is_transactional;
    uint8_t is_control;
    uint8_t has_delete_horizon;
    uint8_t crc_valid;
    uint8_t _pad;
} eng_batch_header;

/* View of one v2 record inside a (decompressed) records section; *_off relative to its start. */
typedef struct {
    int64_t timestamp_delta;
    int32_t offset_delta;
    int32_t key_off, key_len;     /* key_len -1: null */
    int32_t value_off, value_len; /* value_len -1: null */
    int32_t headers_off;          /* first header's bytes */
    int32_t headers_count;
    int32_t headers_bytes;        /* sum of header key + value lengths */
} eng_record_view;

/* One header inside a records section. */
typedef struct {
    int32_t key_off, key_len;
    int32_t value_off, value_len; /* -1: null */
} eng_header_view;

/*
 * Counts whole entries in buf (stopping at a partial trailing entry) and checks each one's
 * framing. On success sets *count and *valid_bytes (end of the last whole entry).
 */
int eng_scan_count(const uint8_t *buf, size_t len, size_t *count, size_t *valid_bytes,
                   eng_error *err);

/* Fills out[0..count) (count from eng_scan_count); verifies CRCs when verify_crc. */
void eng_scan_fill(const uint8_t *buf, size_t count, int verify_crc, eng_batch_header *out);

/*
 * Parses `count` v2 records from [p, p+len). `base_position`/`base_offset` only feed error
 * messages. Every record's length, key, value and headers are bounds-checked; the section
 * must be consumed exactly.
 */
int eng_parse_records(const uint8_t *p, size_t len, int32_t count, eng_record_view *out,
                      int64_t base_position, int64_t base_offset, eng_error *err);

/* Parses the headers of one record (already validated by eng_parse_records). Inline:
 * called once a record by decoders in other modules. */
static inline void eng_parse_headers(const uint8_t *section, const eng_record_view *rec,
                                     eng_header_view *out)
{
    const uint8_t *p = section + rec->headers_off;
    /* bounds were proven by eng_parse_records: each varint ends within 5 bytes */
    for (int32_t h = 0; h < rec->headers_count; h++) {
        int32_t v = 0;
        kb_read_varint(&p, p + 5, &v);
        out[h].key_len = v;
        out[h].key_off = (int32_t)(p - section);
        p += v;
        kb_read_varint(&p, p + 5, &v);
        out[h].value_len = v;
        out[h].value_off = (int32_t)(p - section);
        if (v > 0) p += v;
    }
}

/* Kafka's sequence arithmetic: baseSequence + delta, wrapping past INT32_MAX to 0. */
int32_t eng_increment_sequence(int32_t sequence, int32_t increment);

/* Reads [p, p+n) into cache, one load a cache line, ahead of a parse. Records are found by
 * chasing their lengths, so a parse of bytes not in cache waits a memory round trip per
 * record; independent loads of the lines ahead stream them in at memory bandwidth instead
 * (a batch's CRC check does the same). Loads, not prefetch instructions: those may be
 * dropped on a TLB miss, and a batch spans many pages. */
static inline void eng_touch(const uint8_t *p, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += 64)
        sum += p[i];
#if defined(__GNUC__)
    __asm__ volatile("" : : "r"(sum)); /* the loads are the point: keep them */
#else
    volatile uint64_t keep = sum;
    (void)keep;
/* Asks for [p, p+n) to be brought into cache while other work goes on (a hint: unlike
 * eng_touch it never waits for memory, and the CPU may drop it). */
static inline void eng_prefetch(const uint8_t *p, size_t n)
{
#if defined(__GNUC__)
    for (size_t i = 0; i < n; i += 64)
        __builtin_prefetch(p + i);
#else
    (void)p;
    (void)n;
#endif
}

#endif
}

/* Asks for [p, p+n) to be brought into cache while other work goes on (a hint: unlike
 * eng_touch it never waits for memory, and the CPU may drop it). */
static inline void eng_prefetch(const uint8_t *p, size_t n)
{
#if defined(__GNUC__)
    for (size_t i = 0; i < n; i += 64)
        __builtin_prefetch(p + i);
#else
    (void)p;
    (void)n;
#endif
}

#endif
