# C declarations of the batch kernels (_native/include/batch.h); their statuses and error
# record are in status.pxd.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t

from status cimport eng_error


cdef extern from "batch.h" nogil:
    enum:
        ENG_LOG_OVERHEAD
        ENG_RECORD_BATCH_OVERHEAD

    ctypedef struct eng_batch_header:
        int64_t position
        int64_t base_offset
        int64_t last_offset
        int64_t base_timestamp
        int64_t max_timestamp
        int64_t producer_id
        int32_t size
        int32_t partition_leader_epoch
        int32_t base_sequence
        int32_t record_count
        uint32_t crc
        int16_t attributes
        int16_t producer_epoch
        int8_t magic
        int8_t compression
        int8_t timestamp_type
        uint8_t is_transactional
        uint8_t is_control
        uint8_t has_delete_horizon
        uint8_t crc_valid

    ctypedef struct eng_record_view:
        int64_t timestamp_delta
        int32_t offset_delta
        int32_t key_off, key_len
        int32_t value_off, value_len
        int32_t headers_off
        int32_t headers_count
        int32_t headers_bytes

    ctypedef struct eng_header_view:
        int32_t key_off, key_len
        int32_t value_off, value_len

    int eng_scan_count(const uint8_t *buf, size_t len, size_t *count, size_t *valid_bytes,
                       eng_error *err)
    void eng_scan_fill(const uint8_t *buf, size_t count, int verify_crc, eng_batch_header *out)
    int eng_parse_records(const uint8_t *p, size_t len, int32_t count, eng_record_view *out,
                          int64_t base_position, int64_t base_offset, eng_error *err)
    void eng_parse_headers(const uint8_t *section, const eng_record_view *rec,
                           eng_header_view *out)
    int32_t eng_increment_sequence(int32_t sequence, int32_t increment)
    void eng_touch(const uint8_t *p, size_t n)
    void eng_prefetch(const uint8_t *p, size_t n)


cdef extern from "kbytes.h" nogil:
    int64_t kb_load_i64(const uint8_t *p)
    int32_t kb_load_i32(const uint8_t *p)
    int16_t kb_load_i16(const uint8_t *p)
    uint32_t kb_load_u32(const uint8_t *p)
    void kb_store_u16(uint8_t *p, unsigned short v)
    void kb_store_u32(uint8_t *p, uint32_t v)
    void kb_store_u64(uint8_t *p, unsigned long long v)
    int kb_write_varint(uint8_t *p, int32_t v)
    int kb_write_varlong(uint8_t *p, int64_t v)
    int kb_varint_size(int32_t v)
    int kb_varlong_size(int64_t v)
    int kb_read_uvarint(const uint8_t **pp, const uint8_t *end, uint32_t *out)
