/* Batch scan and v2 record parse kernels; layouts are documented in batch.h. */
#include <stdio.h>
#include <string.h>

#include "batch.h"
#include "checksums.h"
#include "kbytes.h"

#define SET_ERR(err, c, pos, off, ...)                                   \
    do {                                                                 \
        (err)->code = (c);                                               \
        (err)->position = (pos);                                         \
        (err)->offset = (off);                                           \
        snprintf((err)->message, sizeof((err)->message), __VA_ARGS__);   \
    } while (0)

int eng_scan_count(const uint8_t *buf, size_t len, size_t *count, size_t *valid_bytes,
                   eng_error *err)
{
    size_t pos = 0, n = 0;
    while (len - pos >= ENG_HEADER_SIZE_UP_TO_MAGIC) {
        const uint8_t *e = buf + pos;
        int64_t offset = kb_load_i64(e);
        int32_t size = kb_load_i32(e + 8);
        int8_t magic = (int8_t)e[16];
        if (size < ENG_RECORD_OVERHEAD_V0) {
            SET_ERR(err, ENG_ERR_CORRUPT, (int64_t)pos, offset,
                    "Record size %d is less than the minimum record overhead (%d)",
                    size, ENG_RECORD_OVERHEAD_V0);
            return err->code;
        }
        if ((size_t)size + ENG_LOG_OVERHEAD > len - pos)
            break; /* partial trailing entry: stop as Kafka's readers do */
        if (size > INT32_MAX - ENG_LOG_OVERHEAD) {
            /* the entry's total size (size + 12) must fit eng_batch_header.size (int32) */
            SET_ERR(err, ENG_ERR_CORRUPT, (int64_t)pos, offset,
                    "Record size %d exceeds the largest entry size (%d)",
                    size, INT32_MAX - ENG_LOG_OVERHEAD);
            return err->code;
        }
        if (magic < 0 || magic > 2) {
            SET_ERR(err, ENG_ERR_CORRUPT, (int64_t)pos, offset,
                    "Invalid magic %d (expected 0, 1 or 2)", magic);
            return err->code;
        }
        if (magic == 2 && size + ENG_LOG_OVERHEAD < ENG_RECORD_BATCH_OVERHEAD) {
            SET_ERR(err, ENG_ERR_CORRUPT, (int64_t)pos, offset,
                    "Record batch size %d is less than the batch overhead (%d)",
                    size + ENG_LOG_OVERHEAD, ENG_RECORD_BATCH_OVERHEAD);
            return err->code;
        }
        if (magic == 1 && size < ENG_RECORD_OVERHEAD_V1) {
            SET_ERR(err, ENG_ERR_CORRUPT, (int64_t)pos, offset,
                    "Record size %d is less than the v1 record overhead (%d)",
                    size, ENG_RECORD_OVERHEAD_V1);
            return err->code;
        }
        pos += (size_t)size + ENG_LOG_OVERHEAD;
        n++;
    }
    *count = n;
    *valid_bytes = pos;
    return ENG_OK;
}

static void fill_v2(const uint8_t *e, eng_batch_header *h, int verify_crc)
{
    h->base_offset = kb_load_i64(e);
    h->partition_leader_epoch = kb_load_i32(e + 12);
    h->crc = kb_load_u32(e + 17);
    h->attributes = kb_load_i16(e + 21);
    /* wrapping as Java's longs (no signed overflow): base offset and delta are untrusted */
    h->last_offset = (int64_t)((uint64_t)h->base_offset + (uint64_t)(int64_t)kb_load_i32(e + 23));
    h->base_timestamp = kb_load_i64(e + 27);
    h->max_timestamp = kb_load_i64(e + 35);
    h->producer_id = kb_load_i64(e + 43);
    h->producer_epoch = kb_load_i16(e + 51);
    h->base_sequence = kb_load_i32(e + 53);
    h->record_count = kb_load_i32(e + 57);
    h->compression = (int8_t)(h->attributes & 0x07);
    h->timestamp_type = (int8_t)((h->attributes >> 3) & 1);
    h->is_transactional = (uint8_t)((h->attributes >> 4) & 1);
    h->is_control = (uint8_t)((h->attributes >> 5) & 1);
    h->has_delete_horizon = (uint8_t)((h->attributes >> 6) & 1);
    if (verify_crc)
        h->crc_valid = eng_crc32c(0, e + 21, (size_t)h->size - 21) == h->crc;
}

static void fill_legacy(const uint8_t *e, eng_batch_header *h, int verify_crc)
{
    int64_t offset = kb_load_i64(e);
    uint8_t attrs = e[17];
    h->base_offset = offset;
    h->last_offset = offset;
    h->partition_leader_epoch = -1;
    h->crc = kb_load_u32(e + 12);
    h->attributes = attrs;
    h->compression = (int8_t)(attrs & 0x07);
    if (h->magic == 1) {
        h->timestamp_type = (int8_t)((attrs >> 3) & 1);
        h->base_timestamp = h->max_timestamp = kb_load_i64(e + 18);
    } else {
        h->timestamp_type = -1;
        h->base_timestamp = h->max_timestamp = -1;
    }
    h->producer_id = -1;
    h->producer_epoch = -1;
    h->base_sequence = -1;
    /* a compressed wrapper's inner count is known only after decompression */
    h->record_count = h->compression == 0 ? 1 : -1;
    if (verify_crc)
        h->crc_valid = eng_crc32(0, e + 16, (size_t)h->size - 16) == h->crc;
}

void eng_scan_fill(const uint8_t *buf, size_t count, int verify_crc, eng_batch_header *out)
{
    size_t pos = 0;
    for (size_t i = 0; i < count; i++) {
        const uint8_t *e = buf + pos;
        eng_batch_header *h = &out[i];
        memset(h, 0, sizeof(*h));
        h->position = (int64_t)pos;
        h->size = kb_load_i32(e + 8) + ENG_LOG_OVERHEAD;
        h->magic = (int8_t)e[16];
        h->crc_valid = 1;
        if (h->magic == 2)
            fill_v2(e, h, verify_crc);
        else
            fill_legacy(e, h, verify_crc);
        pos += (size_t)h->size;
    }
}

int32_t eng_increment_sequence(int32_t sequence, int32_t increment)
{
    /* Java's int arithmetic wraps (any increment, even a negative offset delta, may come
     * from the data): do it in uint32_t, where C wraps too, instead of signed overflow */
    const uint32_t max = (uint32_t)INT32_MAX;
    if (sequence > (int32_t)(max - (uint32_t)increment))
        return (int32_t)((uint32_t)increment - (max - (uint32_t)sequence) - 1u);
    return (int32_t)((uint32_t)sequence + (uint32_t)increment);
}

#define VARINT_OR_FAIL(kind, fn, pp, end, out)                                       \
    do {                                                                             \
        int _s = fn(pp, end, out);                                                   \
        if (_s != KB_VARINT_OK) {                                                    \
            SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(*(pp) - start),  \
                    base_offset, "%s reading the %s of record %d",                   \
                    _s == KB_VARINT_OVERFLOW ? "Varint overflow" : "Truncated varint", \
                    kind, i);                                                        \
            return err->code;                                                        \
        }                                                                            \
    } while (0)

#define NEED(n, what)                                                                \
    do {                                                                             \
        if ((size_t)(body_end - p) < (size_t)(n)) {                                  \
            SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(p - start),      \
                    base_offset, "Record %d: %s of %lld bytes runs past the record end", \
                    i, what, (long long)(n));                                        \
            return err->code;                                                        \
        }                                                                            \
    } while (0)

int eng_parse_records(const uint8_t *start, size_t len, int32_t count, eng_record_view *out,
                      int64_t base_position, int64_t base_offset, eng_error *err)
{
    const uint8_t *p = start, *end = start + len;
    int32_t i = 0;
    if (count < 0 || (size_t)count > len / ENG_MIN_RECORD_SIZE) {
        SET_ERR(err, ENG_ERR_INVALID, base_position, base_offset,
                "Record count %d is impossible for a records section of %zu bytes", count, len);
        return err->code;
    }
    for (i = 0; i < count; i++) {
        int32_t length, v;
        int64_t ts;
        eng_record_view *r = &out[i];
        const uint8_t *field = p; /* errors about a field's value name where the field starts */
        VARINT_OR_FAIL("length", kb_read_varint, &p, end, &length);
        if (length < 0 || (size_t)length > (size_t)(end - p)) {
            SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(field - start), base_offset,
                    "Invalid record size: record %d declares %d bytes but %zd remain",
                    i, length, (ssize_t)(end - p));
            return err->code;
        }
        const uint8_t *body_end = p + length;
        NEED(1, "attributes");
        p++; /* record attributes: unused */
        VARINT_OR_FAIL("timestamp delta", kb_read_varlong, &p, body_end, &ts);
        r->timestamp_delta = ts;
        VARINT_OR_FAIL("offset delta", kb_read_varint, &p, body_end, &r->offset_delta);
        field = p;
        VARINT_OR_FAIL("key length", kb_read_varint, &p, body_end, &v);
        if (v < -1) {
            SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(field - start), base_offset,
                    "Record %d: invalid key length %d", i, v);
            return err->code;
        }
        r->key_len = v;
        r->key_off = (int32_t)(p - start);
        if (v > 0) { NEED(v, "key"); p += v; }
        field = p;
        VARINT_OR_FAIL("value length", kb_read_varint, &p, body_end, &v);
        if (v < -1) {
            SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(field - start), base_offset,
                    "Record %d: invalid value length %d", i, v);
            return err->code;
        }
        r->value_len = v;
        r->value_off = (int32_t)(p - start);
        if (v > 0) { NEED(v, "value"); p += v; }
        int32_t nh;
        field = p;
        VARINT_OR_FAIL("header count", kb_read_varint, &p, body_end, &nh);
        if (nh < 0 || nh > body_end - p) {
            SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(field - start), base_offset,
                    "Record %d: invalid header count %d", i, nh);
            return err->code;
        }
        r->headers_count = nh;
        r->headers_off = (int32_t)(p - start);
        int32_t hbytes = 0;
        for (int32_t h = 0; h < nh; h++) {
            field = p;
            VARINT_OR_FAIL("header key length", kb_read_varint, &p, body_end, &v);
            if (v < 0) {
                SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(field - start),
                        base_offset, "Record %d: invalid header key length %d", i, v);
                return err->code;
            }
            NEED(v, "header key");
            p += v;
            hbytes += v;
            field = p;
            VARINT_OR_FAIL("header value length", kb_read_varint, &p, body_end, &v);
            if (v < -1) {
                SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(field - start),
                        base_offset, "Record %d: invalid header value length %d", i, v);
                return err->code;
            }
            if (v > 0) { NEED(v, "header value"); p += v; hbytes += v; }
        }
        r->headers_bytes = hbytes;
        if (p != body_end) {
            SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(p - start), base_offset,
                    "Invalid record size: record %d declares %d bytes but its fields use %zd",
                    i, length, (ssize_t)(length - (body_end - p)));
            return err->code;
        }
    }
    if (p != end) {
        SET_ERR(err, ENG_ERR_INVALID, base_position + (int64_t)(p - start), base_offset,
                "Incorrect declared batch size, %zd bytes remain after %d records",
                (ssize_t)(end - p), count);
        return err->code;
    }
    return ENG_OK;
}

