/*
 * Searches over Kafka's offset and time indexes, in place, on any buffer.
 *
 * Layouts (no header, no checksum, big-endian, any alignment):
 *   offset index (IX_OFFSET), 8-byte entries:  relativeOffset int32 | position int32
 *   time index   (IX_TIME),  12-byte entries:  timestamp int64      | relativeOffset int32
 * The first field is the key (non-decreasing along a valid index); the second the value.
 *
 * Search rule (Kafka's AbstractIndex.largestLowerBoundSlotFor): the slot of the last entry
 * whose key is <= the target, or -1 if there is none. With duplicate keys (damaged files only)
 * every kernel here returns the last of them.
 *
 * Nothing here allocates except ix_table_build, touches Python, or needs the GIL. Kernels never
 * read outside [entries, entries + n * entry size) and stay memory-safe on unsorted keys (the
 * answers are then meaningless, as in Kafka).
 */
#ifndef ENGINE_INDEX_H
#define ENGINE_INDEX_H

#include <stddef.h>
#include <stdint.h>

enum { IX_OFFSET = 0, IX_TIME = 1 };
enum { IX_OFFSET_ENTRY_SIZE = 8, IX_TIME_ENTRY_SIZE = 12 };
/* Kafka keeps the last 8 KiB of an index "warm" (AbstractIndex.warmEntries). */
enum { IX_WARM_BYTES = 8192 };
enum { IX_NO_TIMESTAMP = -1 };

/* Last slot whose key <= target (Kafka's warm-section binary search), or -1. */
ptrdiff_t ix_last_le(int kind, const uint8_t *entries, ptrdiff_t n, int64_t target);

/* First slot whose value (position, or relative offset for IX_TIME) >= value, or n. */
ptrdiff_t ix_first_value_ge(int kind, const uint8_t *entries, ptrdiff_t n, int64_t value);

/* First slot whose key >= target, or n (entries truncate_to keeps for the offset index). */
ptrdiff_t ix_first_key_ge(int kind, const uint8_t *entries, ptrdiff_t n, int64_t target);

/*
 * A bucket table over the first `n` entries: keys are split into ranges of 2^shift and the
 * table holds the first slot of each range, so a search reads one table slot and then a few
 * neighbouring entries (one or two cache lines) instead of ~log2(n) scattered ones. Entries
 * appended after the build form a tail searched directly. Opaque; built from sorted keys only.
 */
typedef struct ix_table ix_table;

/* Returns NULL if the keys are not sorted or memory is short; n must be >= 1. */
ix_table *ix_table_build(int kind, const uint8_t *entries, ptrdiff_t n);
void ix_table_free(ix_table *table);
/* Entries the table covers. */
ptrdiff_t ix_table_size(const ix_table *table);

/* Like ix_last_le, through `table` (which must cover at most the first n entries). */
ptrdiff_t ix_table_last_le(const ix_table *table, int kind, const uint8_t *entries, ptrdiff_t n,
                           int64_t target);

/*
 * out[i] = last slot whose key <= targets[i] - shift, or -1, for i < m (shift saturates; it is
 * the base offset for offset-index lookups by absolute offset). `table` may be NULL.
 */
void ix_last_le_many(const ix_table *table, int kind, const uint8_t *entries, ptrdiff_t n,
                     const int64_t *targets, ptrdiff_t m, int64_t shift, int64_t *out);

/* target - base, saturated to the int64 range. */
int64_t ix_relative(int64_t target, int64_t base);

/* Status of ix_rebuild. */
enum {
    IX_OK = 0,
    IX_OFFSET_NOT_INCREASING = 1,  /* an offset-index key <= the previous one */
    IX_OFFSET_OVERFLOW = 2,        /* offset - base outside [0, INT32_MAX] */
    IX_POSITION_OVERFLOW = 3,      /* byte position above INT32_MAX */
    IX_OFFSET_INDEX_FULL = 4,
    IX_TIME_INDEX_FULL = 5,
    IX_TIME_OFFSET_DECREASING = 6, /* a time-index offset below the previous entry's */
    IX_SIZE_INVALID = 7,           /* a batch size below the 12-byte log overhead */
    IX_TIME_DECREASING = 8         /* a timestamp below the previous time-index entry's */
};

/*
 * Index entries that LogSegment.recover writes for n consecutive batches. Outputs hold n + 1
 * items each; *n_offset / *n_time receive the counts, *failed the batch number on error.
 */
int ix_rebuild(const int64_t *sizes, const int64_t *last_offsets, const int64_t *max_timestamps,
               ptrdiff_t n, int64_t base_offset, int64_t interval_bytes,
               ptrdiff_t max_offset_entries, ptrdiff_t max_time_entries,
               int64_t *offset_keys, int64_t *offset_positions, ptrdiff_t *n_offset,
               int64_t *time_keys, int64_t *time_offsets, ptrdiff_t *n_time, ptrdiff_t *failed);

/*
 * OffsetIndex.append of m entries (absolute offsets) after the first n of an index of
 * `capacity` slots: Kafka's checks (a free slot, offsets strictly increasing, offset - base
 * and position within int32), all before anything is written. On IX_OK the caller publishes
 * the count n + m; otherwise *failed is the entry that failed and nothing was written.
 */
int ix_append_offsets(uint8_t *entries, ptrdiff_t n, ptrdiff_t capacity, int64_t base_offset,
                      const int64_t *offsets, const int64_t *positions, ptrdiff_t m,
                      ptrdiff_t *failed);

/*
 * TimeIndex.maybeAppend of m (timestamp, offset) pairs in turn after the first n entries:
 * the full check keeps the last slot free unless skip_full_check; an offset or timestamp
 * below the last entry's fails; a timestamp not above the last one is skipped. Entries are
 * written past the count; on IX_OK the caller publishes n + *appended, otherwise *failed is
 * the pair that failed and the count must stay n.
 */
int ix_maybe_append_times(uint8_t *entries, ptrdiff_t n, ptrdiff_t capacity, int64_t base_offset,
                          const int64_t *timestamps, const int64_t *offsets, ptrdiff_t m,
                          int skip_full_check, ptrdiff_t *appended, ptrdiff_t *failed);

#endif
