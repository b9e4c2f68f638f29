# distutils: sources = [_native/src/crc32c.c]
# cython: language_level=3
"""The v2 record batch builder: what the local log and the tests write."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from batch cimport (
    ENG_LOG_OVERHEAD,
    ENG_RECORD_BATCH_OVERHEAD,
    kb_store_u16,
    kb_store_u32,
    kb_store_u64,
    kb_varint_size,
    kb_varlong_size,
    kb_write_varint,
    kb_write_varlong,
)
from checksums cimport eng_crc32c
from engine._native.codecs cimport compress
from engine._native.decode cimport _wrap_sub

from engine._native.errors import UnsupportedCompressionTypeError


cdef inline bytes _as_bytes(object v):
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, str):
        return (<str>v).encode("utf-8", "surrogateescape")
    return bytes(v)


def build_v2_batch(list records, int64_t base_offset=0, int compression=0, int level=-1,
                   int timestamp_type=0, int64_t producer_id=-1, int producer_epoch=-1,
                   int32_t base_sequence=-1, bint is_transactional=False,
                   bint is_control=False, int32_t partition_leader_epoch=-1,
                   int64_t log_append_time=-1, int64_t delete_horizon_ms=-1):
    """Builds one v2 record batch and returns its bytes.

    `records` is a list of (offset_delta, timestamp, key, value, headers) with headers a
    sequence of (str | bytes, bytes | None). The base timestamp is the first record's (or
    `delete_horizon_ms` when given, with the delete-horizon bit set), the max timestamp the
    largest (or `log_append_time` for LogAppendTime); the CRC-32C is computed here.
    """
    cdef int64_t base_ts = -1
    if compression < 0 or compression > 4:
        raise UnsupportedCompressionTypeError(f"Unknown compression type id {compression}")
    if timestamp_type not in (0, 1):
        raise ValueError("timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime)")
    if records:
        base_ts = records[0][1]
    if delete_horizon_ms >= 0:
        base_ts = delete_horizon_ms
    section, max_ts, last_delta = _records_section(records, base_ts)
    if timestamp_type == 1:
        max_ts = log_append_time
    if not records:
        # no records: no records section and codec none, as Kafka writes an empty batch
        # (DefaultRecordBatch's empty header); peers choke on a compressed empty stream
        compression = 0
    if compression != 0:
        section = compress(compression, section, level)
    attributes = (compression | (timestamp_type << 3) | (is_transactional << 4)
                  | (is_control << 5) | ((delete_horizon_ms >= 0) << 6))
    out = bytearray(ENG_RECORD_BATCH_OVERHEAD + len(section))
    cdef uint8_t *p = out
    kb_store_u64(p, <unsigned long long>base_offset)
    kb_store_u32(p + 8, <uint32_t>(len(out) - ENG_LOG_OVERHEAD))
    kb_store_u32(p + 12, <uint32_t>partition_leader_epoch)
    p[16] = 2
    kb_store_u16(p + 21, <unsigned short>attributes)
    kb_store_u32(p + 23, <uint32_t><int32_t>last_delta)
    kb_store_u64(p + 27, <unsigned long long>base_ts)
    kb_store_u64(p + 35, <unsigned long long><int64_t>max_ts)
    kb_store_u64(p + 43, <unsigned long long>producer_id)
    kb_store_u16(p + 51, <unsigned short>producer_epoch)
    kb_store_u32(p + 53, <uint32_t>base_sequence)
    kb_store_u32(p + 57, <uint32_t>len(records))
    out[ENG_RECORD_BATCH_OVERHEAD:] = section
    p = out
    kb_store_u32(p + 17, eng_crc32c(0, p + 21, len(out) - 21))
    return bytes(out)


cdef tuple _records_section(list records, int64_t base_ts):
    """The uncompressed records section of `records` (see build_v2_batch) with the largest
    timestamp (-1 when empty) and the last offset delta: (section, max_ts, last_delta)."""
    cdef Py_ssize_t n = len(records), i, total = 0
    cdef int64_t max_ts = -1, ts
    cdef int32_t delta, last_delta = 0, size
    cdef list keys = [None] * n, values = [None] * n, hdrs = [None] * n
    cdef object key, value, headers
    cdef int32_t *sizes = <int32_t *>malloc((n if n else 1) * sizeof(int32_t))
    if sizes == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            delta, ts, key, value, headers = records[i]
            if delta < last_delta and i:
                raise ValueError(f"offset deltas must not decrease (record {i})")
            last_delta = delta
            max_ts = ts if ts > max_ts or i == 0 else max_ts
            keys[i] = key = _as_bytes(key)
            values[i] = value = _as_bytes(value)
            hdrs[i] = hl = [(_as_bytes(hk), _as_bytes(hv)) for hk, hv in headers] \
                if headers else []
            size = 1 + kb_varlong_size(_wrap_sub(ts, base_ts)) + kb_varint_size(delta)
            size += _field_size(key) + _field_size(value) + kb_varint_size(len(hl))
            for hk, hv in hl:
                size += kb_varint_size(len(hk)) + len(hk) + _field_size(hv)  # keys: never null
            sizes[i] = size
            total += kb_varint_size(size) + size
        section = bytearray(total)
        _write_records(section, records, keys, values, hdrs, sizes, base_ts)
    finally:
        free(sizes)
    return section, max_ts, last_delta


cdef inline int32_t _field_size(object field):
    """Bytes of a varint-length-prefixed key, value or header field (None: length -1)."""
    if field is None:
        return kb_varint_size(-1)
    return kb_varint_size(len(field)) + len(field)


cdef void _write_records(bytearray section, list records, list keys, list values, list hdrs,
                         int32_t *sizes, int64_t base_ts):
    cdef uint8_t *p = section
    cdef Py_ssize_t i, n = len(records)
    for i in range(n):
        delta = records[i][0]
        ts = records[i][1]
        p += kb_write_varint(p, sizes[i])
        p[0] = 0
        p += 1
        p += kb_write_varlong(p, _wrap_sub(<int64_t>ts, base_ts))  # wraps as Java's long
        p += kb_write_varint(p, delta)
        p = _write_field(p, keys[i])
        p = _write_field(p, values[i])
        p += kb_write_varint(p, len(hdrs[i]))
        for hk, hv in hdrs[i]:
            p = _write_field(p, hk)
            p = _write_field(p, hv)


cdef uint8_t *_write_field(uint8_t *p, object value):
    cdef Py_ssize_t n
    if value is None:
        return p + kb_write_varint(p, -1)
    n = len(<bytes>value)
    p += kb_write_varint(p, <int32_t>n)
    if n:
        memcpy(p, <const char *><bytes>value, n)
    return p + n
