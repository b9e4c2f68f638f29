/*
 * Offset- and time-index searches and the recovery rebuild rule. See index.h for layouts.
 *
 * Every function takes the kind of index as an argument and dispatches once to a copy
 * specialised for that kind (the always-inline helpers fold the entry size and key width).
 */
#include <stdlib.h>

#include "kbytes.h"
#include "index.h"

/* Entries per bucket the table aims at: about one cache line of offset-index entries. */
#define IX_TABLE_ENTRIES_PER_BUCKET 4
/* Searches run in lockstep by the batched kernel without a table. */
#define IX_LANES 32
/* Targets handled per round by the batched kernel with a table (prefetch distance). */
#define IX_BLOCK 32
#define IX_LOG_OVERHEAD 12

#if defined(__GNUC__) || defined(__clang__)
#define IX_PREFETCH(p) __builtin_prefetch(p)
#else
#define IX_PREFETCH(p) ((void)0)
#endif

struct ix_table {
    ptrdiff_t n;         /* entries covered */
    int64_t min_key;     /* key of entry 0 */
    int64_t max_key;     /* key of entry n - 1 */
    unsigned shift;      /* bucket of key k = (k - min_key) >> shift */
    ptrdiff_t buckets;
    int32_t first[];     /* first[b] = first slot in bucket >= b; first[buckets] = n */
};

KB_INLINE ptrdiff_t ix_stride(int kind) { return kind == IX_TIME ? IX_TIME_ENTRY_SIZE : IX_OFFSET_ENTRY_SIZE; }

KB_INLINE int64_t ix_key(int kind, const uint8_t *e, ptrdiff_t slot)
{
    const uint8_t *p = e + slot * ix_stride(kind);
    return kind == IX_TIME ? kb_load_i64(p) : (int64_t)kb_load_i32(p);
}

KB_INLINE int64_t ix_value(int kind, const uint8_t *e, ptrdiff_t slot)
{
    return kb_load_i32(e + slot * ix_stride(kind) + (kind == IX_TIME ? 8 : 4));
}

int64_t ix_relative(int64_t target, int64_t base)
{
    if (base >= 0 && target < INT64_MIN + base) return INT64_MIN;
    if (base < 0 && target > INT64_MAX + base) return INT64_MAX;
    return target - base;
}

/*
 * Last slot in [lo, lo + len) whose key (or value, if by_value) <= t, else lo - 1.
 * Branch-free: the window [lo, lo + len) keeps the answer (or lo is the start and nothing
 * qualifies); each step halves it with a conditional move, so no mispredicted jumps.
 */
KB_INLINE ptrdiff_t ix_last_le_range(int kind, int by_value, const uint8_t *e, ptrdiff_t lo,
                                     ptrdiff_t len, int64_t t)
{
    if (len <= 0) return lo - 1;
    while (len > 1) {
        ptrdiff_t half = len >> 1;
        int64_t k = by_value ? ix_value(kind, e, lo + half) : ix_key(kind, e, lo + half);
        lo += (k <= t) ? half : 0;
        len -= half;
    }
    return lo - ((by_value ? ix_value(kind, e, lo) : ix_key(kind, e, lo)) > t);
}

/*
 * Kafka's warm-section search (AbstractIndex.indexSlotRangeFor). Appends write the tail of an
 * index and most lookups (consumers near the log end) land there too, but a plain binary
 * search first probes the middle, then the quarters...: pages all over the file, which stay
 * in the page cache only by luck. So first check whether the target falls in the last 8 KiB
 * of entries (at most 2-3 pages) and search only there if it does; otherwise search the rest.
 * The slot found is the one a plain binary search finds.
 */
KB_INLINE ptrdiff_t ix_warm_last_le(int kind, const uint8_t *e, ptrdiff_t n, int64_t t)
{
    ptrdiff_t warm = IX_WARM_BYTES / ix_stride(kind), first_hot;
    if (n <= 0) return -1;
    first_hot = n - 1 - warm;
    if (first_hot < 0) first_hot = 0;
    if (ix_key(kind, e, first_hot) <= t)
        return ix_last_le_range(kind, 0, e, first_hot, n - first_hot, t);
    return ix_last_le_range(kind, 0, e, 0, first_hot, t);
}

ptrdiff_t ix_last_le(int kind, const uint8_t *entries, ptrdiff_t n, int64_t target)
{
    if (kind == IX_TIME) return ix_warm_last_le(IX_TIME, entries, n, target);
    return ix_warm_last_le(IX_OFFSET, entries, n, target);
}

ptrdiff_t ix_first_value_ge(int kind, const uint8_t *entries, ptrdiff_t n, int64_t value)
{
    if (value == INT64_MIN) return 0;
    if (kind == IX_TIME) return ix_last_le_range(IX_TIME, 1, entries, 0, n, value - 1) + 1;
    return ix_last_le_range(IX_OFFSET, 1, entries, 0, n, value - 1) + 1;
}

ptrdiff_t ix_first_key_ge(int kind, const uint8_t *entries, ptrdiff_t n, int64_t target)
{
    if (target == INT64_MIN) return 0;
    if (kind == IX_TIME) return ix_last_le_range(IX_TIME, 0, entries, 0, n, target - 1) + 1;
    return ix_last_le_range(IX_OFFSET, 0, entries, 0, n, target - 1) + 1;
}

/* ---- bucket table ---------------------------------------------------------------------- */

KB_INLINE ix_table *ix_table_build_kind(int kind, const uint8_t *e, ptrdiff_t n)
{
    int64_t lo, hi, prev;
    uint64_t span, want;
    unsigned shift = 0;
    ptrdiff_t buckets, i, b_prev = -1;
    ix_table *t;

    if (n < 1 || n > INT32_MAX) return NULL;
    lo = ix_key(kind, e, 0);
    hi = ix_key(kind, e, n - 1);
    if (hi < lo) return NULL;
    span = (uint64_t)hi - (uint64_t)lo;
    want = (uint64_t)(n / IX_TABLE_ENTRIES_PER_BUCKET) + 1;
    while (shift < 63 && (span >> shift) >= want) shift++;
    buckets = (ptrdiff_t)(span >> shift) + 1;
    t = malloc(sizeof(*t) + (size_t)(buckets + 1) * sizeof(int32_t));
    if (t == NULL) return NULL;
    t->n = n;
    t->min_key = lo;
    t->max_key = hi;
    t->shift = shift;
    t->buckets = buckets;
    prev = lo;
    for (i = 0; i < n; i++) {
        int64_t k = ix_key(kind, e, i);
        ptrdiff_t b;
        if (k < prev || k > hi) { free(t); return NULL; }   /* unsorted: no table */
        prev = k;
        b = (ptrdiff_t)(((uint64_t)k - (uint64_t)lo) >> shift);
        while (b_prev < b) t->first[++b_prev] = (int32_t)i;
    }
    while (b_prev < buckets) t->first[++b_prev] = (int32_t)n;
    return t;
}

ix_table *ix_table_build(int kind, const uint8_t *entries, ptrdiff_t n)
{
    if (kind == IX_TIME) return ix_table_build_kind(IX_TIME, entries, n);
    return ix_table_build_kind(IX_OFFSET, entries, n);
}

void ix_table_free(ix_table *table) { free(table); }

ptrdiff_t ix_table_size(const ix_table *table) { return table ? table->n : 0; }

/*
 * The slot range [*lo, *hi) that holds the answer for t, given that the answer is lo - 1 when
 * no entry in the range qualifies. Reads one table slot pair (or the first tail entry).
 */
KB_INLINE void ix_table_range(const ix_table *t, int kind, const uint8_t *e, ptrdiff_t n,
                              int64_t target, ptrdiff_t *lo, ptrdiff_t *hi)
{
    ptrdiff_t tn = t->n, b;
    if (n > tn && ix_key(kind, e, tn) <= target) { *lo = tn; *hi = n; return; }
    if (target < t->min_key) { *lo = 0; *hi = 0; return; }
    if (target >= t->max_key) { *lo = tn - 1; *hi = tn; return; }
    b = (ptrdiff_t)(((uint64_t)target - (uint64_t)t->min_key) >> t->shift);
    *lo = t->first[b];
    *hi = t->first[b + 1];
}

KB_INLINE ptrdiff_t ix_table_last_le_kind(const ix_table *t, int kind, const uint8_t *e,
                                          ptrdiff_t n, int64_t target)
{
    ptrdiff_t lo, hi;
    if (t == NULL || t->n > n) return ix_warm_last_le(kind, e, n, target);
    ix_table_range(t, kind, e, n, target, &lo, &hi);
    return ix_last_le_range(kind, 0, e, lo, hi - lo, target);
}

ptrdiff_t ix_table_last_le(const ix_table *table, int kind, const uint8_t *entries, ptrdiff_t n,
                           int64_t target)
{
    if (kind == IX_TIME) return ix_table_last_le_kind(table, IX_TIME, entries, n, target);
    return ix_table_last_le_kind(table, IX_OFFSET, entries, n, target);
}

/* ---- batched searches -------------------------------------------------------------------- */

/*
 * Without a table: IX_LANES branch-free searches advance together. The window length after
 * each step depends only on n, so one loop serves all lanes, and their loads are independent:
 * the CPU keeps many cache misses in flight instead of waiting for each in turn.
 */
KB_INLINE void ix_lanes_kind(int kind, const uint8_t *e, ptrdiff_t n, const int64_t *targets,
                             ptrdiff_t m, int64_t shift, int64_t *out)
{
    ptrdiff_t base[IX_LANES];
    int64_t t[IX_LANES];
    ptrdiff_t i = 0, g, lanes, len, half;
    if (n <= 0) {
        for (i = 0; i < m; i++) out[i] = -1;
        return;
    }
    while (i < m) {
        lanes = m - i < IX_LANES ? m - i : IX_LANES;
        for (g = 0; g < lanes; g++) {
            base[g] = 0;
            t[g] = ix_relative(targets[i + g], shift);
        }
        for (len = n; len > 1; len -= half) {
            half = len >> 1;
            for (g = 0; g < lanes; g++)
                base[g] += (ix_key(kind, e, base[g] + half) <= t[g]) ? half : 0;
        }
        for (g = 0; g < lanes; g++)
            out[i + g] = base[g] - (ix_key(kind, e, base[g]) > t[g]);
        i += lanes;
    }
}

/*
 * With a table: per block of targets, compute the buckets and prefetch their table slots,
 * then read the ranges and prefetch the first entry of each, then search the ranges. By the
 * time a search runs, its cache lines are (mostly) on their way.
 */
KB_INLINE void ix_table_many_kind(const ix_table *tb, int kind, const uint8_t *e, ptrdiff_t n,
                                  const int64_t *targets, ptrdiff_t m, int64_t shift,
                                  int64_t *out)
{
    int64_t t[IX_BLOCK];
    ptrdiff_t lo[IX_BLOCK], hi[IX_BLOCK];
    ptrdiff_t i, j, end;
    for (i = 0; i < m; i = end) {
        end = m - i < IX_BLOCK ? m : i + IX_BLOCK;
        for (j = i; j < end; j++) {
            int64_t x = ix_relative(targets[j], shift);
            t[j - i] = x;
            if (x > tb->min_key && x < tb->max_key)
                IX_PREFETCH(&tb->first[((uint64_t)x - (uint64_t)tb->min_key) >> tb->shift]);
        }
        for (j = i; j < end; j++) {
            ix_table_range(tb, kind, e, n, t[j - i], &lo[j - i], &hi[j - i]);
            IX_PREFETCH(e + lo[j - i] * ix_stride(kind));
        }
        for (j = i; j < end; j++)
            out[j] = ix_last_le_range(kind, 0, e, lo[j - i], hi[j - i] - lo[j - i], t[j - i]);
    }
}

void ix_last_le_many(const ix_table *table, int kind, const uint8_t *entries, ptrdiff_t n,
                     const int64_t *targets, ptrdiff_t m, int64_t shift, int64_t *out)
{
    if (table != NULL && n > 0 && table->n <= n) {
        if (kind == IX_TIME) ix_table_many_kind(table, IX_TIME, entries, n, targets, m, shift, out);
        else ix_table_many_kind(table, IX_OFFSET, entries, n, targets, m, shift, out);
    } else {
        if (kind == IX_TIME) ix_lanes_kind(IX_TIME, entries, n, targets, m, shift, out);
        else ix_lanes_kind(IX_OFFSET, entries, n, targets, m, shift, out);
    }
}

/* ---- recovery rebuild -------------------------------------------------------------------- */

KB_INLINE int ix_fits_relative(int64_t offset, int64_t base)
{
    return offset >= base && offset - base <= INT32_MAX;
}

/*
 * LogSegment.recover, over batch headers: per batch, first track the max timestamp (with the
 * last offset of the batch that first reached it); then, if more than interval_bytes were
 * read since the last entry, append offset entry (batch last offset, batch position) and
 * time entry maybeAppend(max so far); then count the batch's bytes. At the end a final
 * maybeAppend(max, skipFullCheck). Appends follow OffsetIndex.append (full check, strictly
 * increasing offsets) and TimeIndex.maybeAppend (full check with the last slot reserved,
 * offsets not decreasing, only a strictly larger timestamp is written).
 */
int ix_rebuild(const int64_t *sizes, const int64_t *last_offsets, const int64_t *max_timestamps,
               ptrdiff_t n, int64_t base_offset, int64_t interval_bytes,
               ptrdiff_t max_offset_entries, ptrdiff_t max_time_entries,
               int64_t *offset_keys, int64_t *offset_positions, ptrdiff_t *n_offset,
               int64_t *time_keys, int64_t *time_offsets, ptrdiff_t *n_time, ptrdiff_t *failed)
{
    ptrdiff_t i, no = 0, nt = 0;
    int64_t valid_bytes = 0, last_entry_bytes = 0;
    int64_t max_ts = IX_NO_TIMESTAMP, max_ts_offset = -1;
    int64_t last_ts = IX_NO_TIMESTAMP, last_time_offset = base_offset;
    int status = IX_OK;

    *failed = -1;
    for (i = 0; i <= n; i++) {
        int final = i == n;
        if (!final) {
            if (sizes[i] < IX_LOG_OVERHEAD) { status = IX_SIZE_INVALID; break; }
            if (!ix_fits_relative(last_offsets[i], base_offset)) { status = IX_OFFSET_OVERFLOW; break; }
            if (max_timestamps[i] > max_ts) {
                max_ts = max_timestamps[i];
                max_ts_offset = last_offsets[i];
            }
            if (valid_bytes - last_entry_bytes <= interval_bytes) {
                valid_bytes += sizes[i];
                continue;
            }
            if (no >= max_offset_entries) { status = IX_OFFSET_INDEX_FULL; break; }
            if (no > 0 && last_offsets[i] <= offset_keys[no - 1]) { status = IX_OFFSET_NOT_INCREASING; break; }
            if (valid_bytes > INT32_MAX) { status = IX_POSITION_OVERFLOW; break; }
            offset_keys[no] = last_offsets[i];
            offset_positions[no] = valid_bytes;
            no++;
            if (nt >= max_time_entries - 1) { status = IX_TIME_INDEX_FULL; break; }
        }
        /* maybeAppend(max_ts, max_ts_offset, skipFullCheck = final): the final entry takes
         * the slot the full check keeps free, so it always fits. */
        if (nt > 0 && max_ts_offset < last_time_offset) { status = IX_TIME_OFFSET_DECREASING; break; }
        if (max_ts > last_ts) {
            if (!ix_fits_relative(max_ts_offset, base_offset)) { status = IX_OFFSET_OVERFLOW; break; }
            time_keys[nt] = max_ts;
            time_offsets[nt] = max_ts_offset;
            nt++;
            last_ts = max_ts;
            last_time_offset = max_ts_offset;
        }
        if (final) break;
        last_entry_bytes = valid_bytes;
        valid_bytes += sizes[i];
    }
    *n_offset = no;
    *n_time = nt;
    if (status != IX_OK) *failed = i;
    return status;
}

/* ---- appends ----------------------------------------------------------------------------- */

int ix_append_offsets(uint8_t *entries, ptrdiff_t n, ptrdiff_t capacity, int64_t base_offset,
                      const int64_t *offsets, const int64_t *positions, ptrdiff_t m,
                      ptrdiff_t *failed)
{
    ptrdiff_t i;
    int64_t last = INT64_MIN;
    *failed = -1;
    if (n < 0 || n > capacity) { *failed = 0; return IX_OFFSET_INDEX_FULL; }
    if (n > 0) last = base_offset + kb_load_i32(entries + (n - 1) * IX_OFFSET_ENTRY_SIZE);
    /* check everything first: nothing is written unless every entry fits */
    for (i = 0; i < m; i++) {
        int status = IX_OK;
        if (n + i >= capacity) status = IX_OFFSET_INDEX_FULL;
        else if ((n + i > 0) && offsets[i] <= last) status = IX_OFFSET_NOT_INCREASING;
        else if (!ix_fits_relative(offsets[i], base_offset)) status = IX_OFFSET_OVERFLOW;
        else if (positions[i] < 0 || positions[i] > INT32_MAX) status = IX_POSITION_OVERFLOW;
        if (status != IX_OK) { *failed = i; return status; }
        last = offsets[i];
    }
    for (i = 0; i < m; i++) {
        uint8_t *e = entries + (n + i) * IX_OFFSET_ENTRY_SIZE;
        kb_store_u32(e, (uint32_t)(offsets[i] - base_offset));
        kb_store_u32(e + 4, (uint32_t)positions[i]);
    }
    return IX_OK;
}

int ix_maybe_append_times(uint8_t *entries, ptrdiff_t n, ptrdiff_t capacity, int64_t base_offset,
                          const int64_t *timestamps, const int64_t *offsets, ptrdiff_t m,
                          int skip_full_check, ptrdiff_t *appended, ptrdiff_t *failed)
{
    ptrdiff_t i, k = n;
    int64_t last_ts = IX_NO_TIMESTAMP, last_offset = base_offset;
    *failed = -1;
    *appended = 0;
    if (n < 0 || n > capacity) { *failed = 0; return IX_TIME_INDEX_FULL; }
    if (n > 0) {
        const uint8_t *e = entries + (n - 1) * IX_TIME_ENTRY_SIZE;
        last_ts = kb_load_i64(e);
        last_offset = base_offset + kb_load_i32(e + 8);
    }
    /* entries are written past the count as they pass, and the caller publishes them only
     * when all did: a failure leaves the index as it was */
    for (i = 0; i < m; i++) {
        int status = IX_OK;
        if (!skip_full_check && k >= capacity - 1) status = IX_TIME_INDEX_FULL;
        else if (k > 0 && offsets[i] < last_offset) status = IX_TIME_OFFSET_DECREASING;
        else if (k > 0 && timestamps[i] < last_ts) status = IX_TIME_DECREASING;
        if (status != IX_OK) { *failed = i; return status; }
        if (timestamps[i] <= last_ts)
            continue; /* equal (or -1 on an empty index): nothing to record */
        if (!ix_fits_relative(offsets[i], base_offset)) status = IX_OFFSET_OVERFLOW;
        else if (k >= capacity) status = IX_TIME_INDEX_FULL;
        if (status != IX_OK) { *failed = i; return status; }
        uint8_t *e = entries + k * IX_TIME_ENTRY_SIZE;
        kb_store_u64(e, (uint64_t)timestamps[i]);
        kb_store_u32(e + 8, (uint32_t)(offsets[i] - base_offset));
        last_ts = timestamps[i];
        last_offset = offsets[i];
        k++;
    }
    *appended = k - n;
    return IX_OK;
}
