# cython: language_level=3
"""C declarations of the index kernels (`_native/src/index.h`, implemented in index.c).

Every kernel takes a pointer to entry 0 of a Kafka index (big-endian, no header, any
alignment), the entry count and plain integers; none touches Python objects or fails, so all
run without the GIL. Slots are 0-based entry numbers; -1 means "no such entry".

(Cython looks for a module's own .pxd under its full name, `engine/_native/index.pxd`, which
this layout does not have, so index.pyx and index_rebuild.pyx cimport this file explicitly.
It therefore holds only extern declarations: nothing here needs a runtime import.)
"""

from libc.stddef cimport ptrdiff_t
from libc.stdint cimport int32_t, int64_t, uint8_t


cdef extern from "kbytes.h" nogil:
    int32_t kb_load_i32(const uint8_t *p)
    int64_t kb_load_i64(const uint8_t *p)


cdef extern from "src/index.h" nogil:
    enum:
        IX_OFFSET
        IX_TIME
        IX_OFFSET_ENTRY_SIZE
        IX_TIME_ENTRY_SIZE
        IX_WARM_BYTES
        IX_NO_TIMESTAMP

    ctypedef struct ix_table:
        pass

    ptrdiff_t ix_last_le(int kind, const uint8_t *entries, ptrdiff_t n, int64_t target)
    ptrdiff_t ix_first_value_ge(int kind, const uint8_t *entries, ptrdiff_t n, int64_t value)
    ptrdiff_t ix_first_key_ge(int kind, const uint8_t *entries, ptrdiff_t n, int64_t target)

    ix_table *ix_table_build(int kind, const uint8_t *entries, ptrdiff_t n)
    void ix_table_free(ix_table *table)
    ptrdiff_t ix_table_size(const ix_table *table)
    ptrdiff_t ix_table_last_le(const ix_table *table, int kind, const uint8_t *entries,
                               ptrdiff_t n, int64_t target)

    void ix_last_le_many(const ix_table *table, int kind, const uint8_t *entries, ptrdiff_t n,
                         const int64_t *targets, ptrdiff_t m, int64_t shift, int64_t *out)
    int64_t ix_relative(int64_t target, int64_t base)

    enum:
        IX_OK
        IX_OFFSET_NOT_INCREASING
        IX_OFFSET_OVERFLOW
        IX_POSITION_OVERFLOW
        IX_OFFSET_INDEX_FULL
        IX_TIME_INDEX_FULL
        IX_TIME_OFFSET_DECREASING
        IX_SIZE_INVALID
        IX_TIME_DECREASING

    int ix_rebuild(const int64_t *sizes, const int64_t *last_offsets,
                   const int64_t *max_timestamps, ptrdiff_t n, int64_t base_offset,
                   int64_t interval_bytes, ptrdiff_t max_offset_entries,
                   ptrdiff_t max_time_entries, int64_t *offset_keys, int64_t *offset_positions,
                   ptrdiff_t *n_offset, int64_t *time_keys, int64_t *time_offsets,
                   ptrdiff_t *n_time, ptrdiff_t *failed)
    int ix_append_offsets(uint8_t *entries, ptrdiff_t n, ptrdiff_t capacity,
                          int64_t base_offset, const int64_t *offsets,
                          const int64_t *positions, ptrdiff_t m, ptrdiff_t *failed)
    int ix_maybe_append_times(uint8_t *entries, ptrdiff_t n, ptrdiff_t capacity,
                              int64_t base_offset, const int64_t *timestamps,
                              const int64_t *offsets, ptrdiff_t m, int skip_full_check,
                              ptrdiff_t *appended, ptrdiff_t *failed)
