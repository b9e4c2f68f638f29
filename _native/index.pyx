# distutils: sources = _native/src/index.c
# cython: language_level=3
"""Offset- and time-index searches over any buffer (mmap, bytes, numpy), one target or many.

Layouts (Kafka's `OffsetIndex` / `TimeIndex`; no header, no checksum, all big-endian):

    offset index entry, 8 bytes:   relativeOffset int32 | position int32
    time index entry,  12 bytes:   timestamp int64      | relativeOffset int32

relativeOffset = offset - the segment's base offset; position = byte position of a batch in the
segment's `.log`. Keys (offsets, timestamps) increase strictly along a valid index.

Search rule (Kafka's `largestLowerBoundSlotFor`): the slot of the last entry whose key is <= the
target, or -1 when every entry is above it. The kernels live in `_native/src/index.c`: Kafka's
warm-section binary search for single lookups, lockstep branch-free searches for arrays of
targets, and, once an index has served about n/8 lookups, a bucket table (about one int32 per
4 entries) that turns a search into one table read plus a cache line or two of entries. All
give the same slot; on duplicate keys (damaged files only) all give the last one.

GIL: batched searches always release it. Single searches release it while an index is cold
(no table yet: pages may still come from disk) and keep it once the table exists, because the
search then takes less time than releasing and retaking the GIL (see `_IndexCore._slot`).

`OffsetIndexCore` and `TimeIndexCore` hold a buffer export of the mapped file and are the
bases of `engine.log.OffsetIndex` / `TimeIndex`, which add file handling and append rules.
The rebuild of entries from batch headers and the words and errors for IX statuses are
engine._native.index_rebuild; their names are re-exported here.
"""

cimport cython
from cpython.buffer cimport (
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint8_t, uint64_t

from index cimport (
    IX_NO_TIMESTAMP,
    IX_OFFSET,
    IX_OFFSET_ENTRY_SIZE,
    IX_OK,
    IX_TIME,
    IX_TIME_ENTRY_SIZE,
    IX_WARM_BYTES,
    ix_append_offsets,
    ix_first_key_ge,
    ix_first_value_ge,
    ix_last_le_many,
    ix_maybe_append_times,
    ix_relative,
    ix_table,
    ix_table_build,
    ix_table_free,
    ix_table_last_le,
    kb_load_i32,
    kb_load_i64,
)

import numpy as np

from engine._native.errors import IndexFullError  # re-exported
from engine._native.index_rebuild import (  # re-exported
    STATUS_OFFSET_INDEX_FULL,
    STATUS_OFFSET_NOT_INCREASING,
    STATUS_OFFSET_OVERFLOW,
    STATUS_POSITION_OVERFLOW,
    STATUS_TIME_DECREASING,
    STATUS_TIME_INDEX_FULL,
    STATUS_TIME_OFFSET_DECREASING,
    append_status_message,
    rebuild_entries,
    status_error,
)

__all__ = [
    "OffsetPosition", "TimestampOffset", "OffsetIndexCore", "TimeIndexCore", "IndexFullError",
    "OFFSET_ENTRY_SIZE", "TIME_ENTRY_SIZE", "WARM_BYTES", "NO_TIMESTAMP",
    "offset_index_slots", "time_index_slots", "rebuild_entries", "append_status_message",
    "append_entry_pair", "status_error", "STATUS_OFFSET_NOT_INCREASING", "STATUS_OFFSET_OVERFLOW",
    "STATUS_POSITION_OVERFLOW", "STATUS_OFFSET_INDEX_FULL", "STATUS_TIME_INDEX_FULL",
    "STATUS_TIME_OFFSET_DECREASING", "STATUS_TIME_DECREASING",
]

OFFSET_ENTRY_SIZE = IX_OFFSET_ENTRY_SIZE
TIME_ENTRY_SIZE = IX_TIME_ENTRY_SIZE
WARM_BYTES = IX_WARM_BYTES
NO_TIMESTAMP = IX_NO_TIMESTAMP

cdef enum:
    # Below this many entries an index fits in L1/L2 and plain searches are as fast.
    _TABLE_MIN_ENTRIES = 2048
    # A table is built once the searches since the last decision reach entries / this.
    _TABLE_CREDIT_DIVISOR = 8
    # Bulk appends of at least this many entries release the GIL.
    _NOGIL_MIN_ENTRIES = 4096


# ---------------------------------------------------------------------------------------------
# Value types

@cython.final
@cython.freelist(32)
cdef class OffsetPosition:
    """An offset-index entry: (offset, position), both ints; position in bytes of the `.log`.

    Immutable; unpacks and compares like the tuple (offset, position).
    """
    cdef readonly int64_t offset
    cdef readonly int64_t position

    def __init__(self, int64_t offset, int64_t position):
        self.offset = offset
        self.position = position

    def __iter__(self):
        return iter((self.offset, self.position))

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return (self.offset, self.position)[i]

    def __eq__(self, other):
        if isinstance(other, (OffsetPosition, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self):
        return hash((self.offset, self.position))

    def __repr__(self):
        return f"OffsetPosition(offset={self.offset}, position={self.position})"

    def __reduce__(self):
        return (OffsetPosition, (self.offset, self.position))


@cython.final
@cython.freelist(32)
cdef class TimestampOffset:
    """A time-index entry: (timestamp in ms, offset). Immutable; unpacks and compares like the
    tuple (timestamp, offset)."""
    cdef readonly int64_t timestamp
    cdef readonly int64_t offset

    def __init__(self, int64_t timestamp, int64_t offset):
        self.timestamp = timestamp
        self.offset = offset

    def __iter__(self):
        return iter((self.timestamp, self.offset))

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return (self.timestamp, self.offset)[i]

    def __eq__(self, other):
        if isinstance(other, (TimestampOffset, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self):
        return hash((self.timestamp, self.offset))

    def __repr__(self):
        return f"TimestampOffset(timestamp={self.timestamp}, offset={self.offset})"

    def __reduce__(self):
        return (TimestampOffset, (self.timestamp, self.offset))


cdef inline OffsetPosition _offset_position(int64_t offset, int64_t position):
    cdef OffsetPosition r = OffsetPosition.__new__(OffsetPosition)
    r.offset = offset
    r.position = position
    return r


cdef inline TimestampOffset _timestamp_offset(int64_t timestamp, int64_t offset):
    cdef TimestampOffset r = TimestampOffset.__new__(TimestampOffset)
    r.timestamp = timestamp
    r.offset = offset
    return r


# ---------------------------------------------------------------------------------------------
# Buffer-holding cores

cdef class _IndexCore:
    """A buffer export, the entry count and an optional search table; base of the two cores.

    Thread-safety: searches may run in many threads at once, with the GIL released (batched
    searches always; single ones while the index is cold, see `_slot`).
    Operations that drop the buffer or entries (`_bind`, `_unbind`, shrinking `_set_entries`)
    raise BufferError while a search is in flight, so nothing is freed under a running search.
    The Python layer calls `_drain(1)` and waits for `_idle()`: while draining, new searches
    keep the GIL (so they cannot overlap a mutation) and the ones in flight finish, so a
    mutation cannot starve however many threads keep searching. Growing `_set_entries`
    (appends) is always allowed.
    """
    cdef Py_buffer _view
    cdef bint _bound
    cdef const uint8_t *_data
    cdef uint8_t *_wdata           # _data when the export is writable, else NULL
    cdef ptrdiff_t _entries
    cdef ptrdiff_t _capacity
    cdef ptrdiff_t _entry_size
    cdef int _kind
    cdef int64_t _base_offset
    cdef int _readers
    cdef ix_table *_table
    cdef ptrdiff_t _table_n        # entries the table covers (0 without a table)
    cdef int64_t _credit           # searches since the last table decision
    cdef ptrdiff_t _refused_at     # entry count at which a build failed (unsorted keys)
    cdef bint _building
    cdef uint64_t _generation      # bumped whenever entries may be rewritten (shrink, bind)
    cdef int _draining             # > 0 while a mutation waits for in-flight searches

    def __cinit__(self, *args, **kwargs):
        self._bound = False
        self._data = NULL
        self._wdata = NULL
        self._table = NULL
        self._refused_at = -1

    def __dealloc__(self):
        if self._table != NULL:
            ix_table_free(self._table)
        if self._bound:
            PyBuffer_Release(&self._view)

    cdef int _check_idle(self) except -1:
        if self._readers:
            raise BufferError(f"{self._readers} search(es) still read this index")
        return 0

    cdef void _drop_table(self) noexcept:
        self._generation += 1
        if self._table != NULL:
            ix_table_free(self._table)
        self._table = NULL
        self._table_n = 0
        self._credit = 0
        self._refused_at = -1

    cdef int _release(self) except -1:
        self._check_idle()
        self._drop_table()
        if self._bound:
            PyBuffer_Release(&self._view)
            self._bound = False
        self._data = NULL
        self._wdata = NULL
        self._entries = 0
        self._capacity = 0
        return 0

    def _bind(self, buffer, int64_t base_offset, ptrdiff_t entries):
        """Searches from now on read the first `entries` entries of `buffer` (keeps an export).

        ValueError if the buffer holds fewer entries; BufferError if a search runs.
        """
        cdef Py_buffer view
        cdef bint writable = True
        self._check_idle()
        try:
            PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
        except Exception:  # read-only exporter (bytes, ACCESS_READ mmap): searches only
            writable = False
            PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
        capacity = view.len // self._entry_size
        if entries < 0 or entries > capacity:
            PyBuffer_Release(&view)
            raise ValueError(f"{entries} entries do not fit a {view.len}-byte buffer")
        self._release()
        self._view = view
        self._bound = True
        self._data = <const uint8_t *>view.buf
        self._wdata = <uint8_t *>view.buf if writable else NULL
        self._capacity = capacity
        self._entries = entries
        self._base_offset = base_offset

    def _unbind(self):
        """Drops the buffer export (BufferError while a search is in flight)."""
        self._release()

    def _drain(self, int delta):
        """Enters (+1) or leaves (-1) draining: see the class docstring."""
        if self._draining + delta < 0:
            raise ValueError("unbalanced _drain")
        self._draining += delta

    def _idle(self):
        """True when no search runs without the GIL (none can start while draining)."""
        return self._readers == 0

    cdef int _check_writable(self) except -1:
        if self._wdata == NULL:
            raise ValueError("append to an index whose buffer is closed or read-only")
        return 0

    cdef void _publish(self, ptrdiff_t appended) noexcept:
        """Counts entries just written past the end (searches never read past the count, so
        they see either none or all of them)."""
        if appended > 0:
            self._entries += appended
            self._refused_at = -1

    @property
    def _buffer_writable(self):
        """Whether the bound buffer accepts appends."""
        return self._wdata != NULL

    def _set_entries(self, ptrdiff_t entries):
        """Sets the entry count after an append (grow) or truncation (shrink; BufferError while
        a search is in flight and a search table covers dropped entries)."""
        if entries < 0 or entries > self._capacity:
            raise ValueError(f"entry count {entries} outside [0, {self._capacity}]")
        if entries < self._table_n:
            self._check_idle()
            self._drop_table()
        elif entries < self._entries:
            self._generation += 1  # a table being built may cover entries now dropped
        if entries != self._entries:
            self._refused_at = -1
        self._entries = entries

    @property
    def entries(self):
        """Number of valid entries."""
        return self._entries

    @property
    def base_offset(self):
        """The segment's base offset (offsets in the file are relative to it)."""
        return self._base_offset

    @property
    def _bound_capacity(self):
        """Entries the bound buffer can hold."""
        return self._capacity

    @property
    def _search_table_entries(self):
        """Entries covered by the search table (0 without one)."""
        return self._table_n

    def build_search_table(self):
        """Builds the bucket table now instead of after ~entries/8 searches (e.g. right after
        loading an index that will serve many lookups). Reads every entry once, without the
        GIL. Returns True if a table now covers all entries (False: empty or unsorted index,
        or a search was in flight)."""
        self._maybe_build(True)
        return self._table_n == self._entries and self._entries > 0

    cdef void _maybe_build(self, bint now) noexcept:
        """Builds or rebuilds the table when it pays: enough entries, enough searches since
        the last decision, and a missing table or a tail above a quarter of it."""
        cdef ptrdiff_t n = self._entries
        cdef uint64_t generation = self._generation
        cdef ix_table *table
        if self._building or self._draining or self._refused_at == n or n == 0:
            return
        if not now:
            if n < _TABLE_MIN_ENTRIES:
                return
            if self._table != NULL and (n - self._table_n) * 4 <= self._table_n:
                return
            if self._credit * _TABLE_CREDIT_DIVISOR < n:
                return
        if self._readers:
            return
        self._credit = 0
        self._building = True
        self._readers += 1
        with nogil:
            table = ix_table_build(self._kind, self._data, n)
        self._readers -= 1
        self._building = False
        if generation != self._generation:
            # Entries were dropped (or the buffer replaced) while building: the table may
            # describe keys that no longer exist.
            ix_table_free(table)
        elif table == NULL:
            self._refused_at = n
        elif self._readers == 0 or self._table == NULL:
            # An old table may still be read by searches that started during the build.
            if self._table != NULL:
                ix_table_free(self._table)
            self._table = table
            self._table_n = n
        else:
            ix_table_free(table)

    cdef inline ptrdiff_t _slot(self, int64_t key) noexcept:
        """Single search by key (relative offset or timestamp).

        A cold index (no table yet) is searched with the GIL released: its pages may still
        have to come from disk. A hot one keeps the GIL: building its table read every page,
        and the search (~30 ns) is shorter than handing the GIL over and back (~40 ns here),
        the same trade numpy makes when it holds the GIL for small inputs.
        """
        cdef ptrdiff_t slot
        if self._table_n != self._entries:
            self._credit += 1
            self._maybe_build(False)  # may release the GIL while it builds
        cdef ptrdiff_t n = self._entries
        cdef const ix_table *table = self._table
        cdef const uint8_t *data = self._data
        cdef int kind = self._kind
        if table != NULL or self._draining:
            return ix_table_last_le(table, kind, data, n, key)
        self._readers += 1
        with nogil:
            slot = ix_table_last_le(table, kind, data, n, key)
        self._readers -= 1
        return slot

    cdef _slots(self, targets, int64_t shift):
        """int64 slots for an integer array of targets (minus `shift`), in its shape."""
        self._check_open()
        arr = np.asarray(targets)
        if arr.dtype != np.int64:  # an empty list arrives as float64
            arr = arr.astype(np.int64, casting="safe" if arr.size else "unsafe")
        arr = np.ascontiguousarray(arr)
        out = np.empty(arr.shape, dtype=np.int64)
        cdef const int64_t[::1] t = arr.reshape(-1)
        cdef int64_t[::1] o = out.reshape(-1)
        cdef ptrdiff_t m = t.shape[0]
        if m == 0:
            return out
        if self._table_n != self._entries:
            self._credit += m
            self._maybe_build(False)
        cdef const ix_table *table = self._table
        if self._draining:
            ix_last_le_many(table, self._kind, self._data, self._entries, &t[0], m, shift, &o[0])
            return out
        self._readers += 1
        with nogil:
            ix_last_le_many(table, self._kind, self._data, self._entries, &t[0], m, shift, &o[0])
        self._readers -= 1
        return out

    cdef inline int _check_open(self) except -1:
        if not self._bound:
            raise ValueError("search of a closed index")
        return 0

    cdef int _check_slot(self, ptrdiff_t n) except -1:
        self._check_open()
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} requested from an index of {self._entries} entries")
        return 0


cdef class OffsetIndexCore(_IndexCore):
    """Searches of an offset index (8-byte entries; see the module docstring).

    Thread-safe for concurrent searches; the owner serializes mutations (`_bind`, ...).
    """

    def __cinit__(self, *args, **kwargs):
        self._entry_size = IX_OFFSET_ENTRY_SIZE
        self._kind = IX_OFFSET

    cdef inline OffsetPosition _at(self, ptrdiff_t slot):
        cdef const uint8_t *e
        if slot < 0:
            return _offset_position(self._base_offset, 0)
        e = self._data + slot * IX_OFFSET_ENTRY_SIZE
        return _offset_position(self._base_offset + kb_load_i32(e), kb_load_i32(e + 4))

    def lookup(self, int64_t target_offset):
        """OffsetPosition of the largest entry whose offset <= target_offset, or
        (base_offset, 0) when there is none (Kafka's OffsetIndex.lookup). GIL released while
        the index is cold (see `_slot`). ValueError once closed."""
        self._check_open()
        return self._at(self._slot(ix_relative(target_offset, self._base_offset)))

    def slot_for(self, int64_t target_offset):
        """Slot of the largest entry whose offset <= target_offset, or -1 (GIL as lookup)."""
        self._check_open()
        return self._slot(ix_relative(target_offset, self._base_offset))

    def slots_for(self, targets):
        """slot_for for every item of an integer array: int64 slots (-1 = none) in the shape
        of `targets`. GIL released. TypeError for non-integer or uint64 input."""
        return self._slots(targets, self._base_offset)

    def lookup_many(self, targets):
        """lookup for every item of an integer array: (offsets, positions), int64 arrays in
        the shape of `targets`. GIL released. TypeError for non-integer or uint64 input."""
        slots = self._slots(targets, self._base_offset)
        return self._entries_at(slots)

    def _entries_at(self, slots):
        """(offsets, positions) of int64 slots; -1 gives (base_offset, 0)."""
        offsets = np.empty(slots.shape, dtype=np.int64)
        positions = np.empty(slots.shape, dtype=np.int64)
        cdef const int64_t[::1] s = slots.reshape(-1)
        cdef int64_t[::1] o = offsets.reshape(-1), p = positions.reshape(-1)
        cdef ptrdiff_t i, m = s.shape[0]
        cdef const uint8_t *e
        cdef int64_t base = self._base_offset
        for i in range(m):
            if s[i] < 0 or s[i] >= self._entries:
                o[i] = base
                p[i] = 0
            else:
                e = self._data + s[i] * IX_OFFSET_ENTRY_SIZE
                o[i] = base + kb_load_i32(e)
                p[i] = kb_load_i32(e + 4)
        return offsets, positions

    def entry(self, ptrdiff_t n):
        """The n-th entry as OffsetPosition (IndexError unless 0 <= n < entries)."""
        self._check_slot(n)
        return self._at(n)

    @property
    def last_offset(self):
        """Offset of the last entry, or base_offset when empty (Kafka's lastOffset)."""
        if self._entries == 0:
            return self._base_offset
        return self._base_offset + kb_load_i32(
            self._data + (self._entries - 1) * IX_OFFSET_ENTRY_SIZE)

    def fetch_upper_bound_offset(self, int64_t start_position, int64_t fetch_size):
        """The first entry whose position >= start_position + fetch_size, as OffsetPosition,
        or None (Kafka's OffsetIndex.fetchUpperBoundOffset; the sum saturates in 64 bits)."""
        cdef int64_t target
        cdef ptrdiff_t slot
        self._check_open()
        if fetch_size > 0 and start_position > INT64_MAX - fetch_size:
            target = INT64_MAX
        elif fetch_size < 0 and start_position < INT64_MIN - fetch_size:
            target = INT64_MIN
        else:
            target = start_position + fetch_size
        if self._draining:
            slot = ix_first_value_ge(IX_OFFSET, self._data, self._entries, target)
        else:
            self._readers += 1
            with nogil:
                slot = ix_first_value_ge(IX_OFFSET, self._data, self._entries, target)
            self._readers -= 1
        if slot >= self._entries:
            return None
        return self._at(slot)

    def _append_entry(self, int64_t offset, int64_t position):
        """OffsetIndex.append's checks and write in one step; returns an IX status (0 when
        appended; see `append_status_message`). The caller serializes mutations."""
        cdef ptrdiff_t failed
        self._check_writable()
        cdef int status = ix_append_offsets(self._wdata, self._entries, self._capacity,
                                            self._base_offset, &offset, &position, 1, &failed)
        if status == IX_OK:
            self._publish(1)
        return status

    def _append_entries(self, const int64_t[::1] offsets, const int64_t[::1] positions):
        """`_append_entry` for every pair, all or nothing: returns (status, failed entry or
        -1). GIL released for long arrays."""
        cdef ptrdiff_t m = offsets.shape[0], failed = -1
        cdef int status
        if positions.shape[0] != m:
            raise ValueError(f"{m} offsets but {positions.shape[0]} positions")
        self._check_writable()
        if m == 0:
            return IX_OK, -1
        if m < _NOGIL_MIN_ENTRIES:
            status = ix_append_offsets(self._wdata, self._entries, self._capacity,
                                       self._base_offset, &offsets[0], &positions[0], m, &failed)
        else:
            self._readers += 1  # holds off _bind/_unbind while the GIL is away
            with nogil:
                status = ix_append_offsets(self._wdata, self._entries, self._capacity,
                                           self._base_offset, &offsets[0], &positions[0], m,
                                           &failed)
            self._readers -= 1
        if status == IX_OK:
            self._publish(m)
        return status, failed

    def _count_below(self, int64_t offset):
        """Number of entries whose offset < `offset` (the entries truncate_to keeps)."""
        self._check_open()
        return ix_first_key_ge(IX_OFFSET, self._data, self._entries,
                               ix_relative(offset, self._base_offset))


cdef class TimeIndexCore(_IndexCore):
    """Searches of a time index (12-byte entries; see the module docstring).

    Thread-safe for concurrent searches; the owner serializes mutations (`_bind`, ...).
    """

    def __cinit__(self, *args, **kwargs):
        self._entry_size = IX_TIME_ENTRY_SIZE
        self._kind = IX_TIME

    cdef inline TimestampOffset _at(self, ptrdiff_t slot):
        cdef const uint8_t *e
        if slot < 0:
            return _timestamp_offset(IX_NO_TIMESTAMP, self._base_offset)
        e = self._data + slot * IX_TIME_ENTRY_SIZE
        return _timestamp_offset(kb_load_i64(e), self._base_offset + kb_load_i32(e + 8))

    def lookup(self, int64_t target_timestamp):
        """TimestampOffset of the largest entry whose timestamp <= target_timestamp, or
        (-1, base_offset) when there is none (Kafka's TimeIndex.lookup). GIL released while
        the index is cold (see `_slot`). ValueError once closed."""
        self._check_open()
        return self._at(self._slot(target_timestamp))

    def slot_for(self, int64_t target_timestamp):
        """Slot of the largest entry whose timestamp <= target_timestamp, or -1."""
        self._check_open()
        return self._slot(target_timestamp)

    def slots_for(self, targets):
        """slot_for for every item of an integer array: int64 slots (-1 = none) in the shape
        of `targets`. GIL released. TypeError for non-integer or uint64 input."""
        return self._slots(targets, 0)

    def lookup_many(self, targets):
        """lookup for every item of an integer array: (timestamps, offsets), int64 arrays in
        the shape of `targets`. GIL released. TypeError for non-integer or uint64 input."""
        return self._entries_at(self._slots(targets, 0))

    def _entries_at(self, slots):
        """(timestamps, offsets) of int64 slots; -1 gives (-1, base_offset)."""
        timestamps = np.empty(slots.shape, dtype=np.int64)
        offsets = np.empty(slots.shape, dtype=np.int64)
        cdef const int64_t[::1] s = slots.reshape(-1)
        cdef int64_t[::1] ts = timestamps.reshape(-1), o = offsets.reshape(-1)
        cdef ptrdiff_t i, m = s.shape[0]
        cdef const uint8_t *e
        cdef int64_t base = self._base_offset
        for i in range(m):
            if s[i] < 0 or s[i] >= self._entries:
                ts[i] = IX_NO_TIMESTAMP
                o[i] = base
            else:
                e = self._data + s[i] * IX_TIME_ENTRY_SIZE
                ts[i] = kb_load_i64(e)
                o[i] = base + kb_load_i32(e + 8)
        return timestamps, offsets

    def entry(self, ptrdiff_t n):
        """The n-th entry as TimestampOffset (IndexError unless 0 <= n < entries)."""
        self._check_slot(n)
        return self._at(n)

    @property
    def last_entry(self):
        """The last entry, or (-1, base_offset) when empty (Kafka's lastEntryFromIndexFile)."""
        return self._at(self._entries - 1)

    def _maybe_append_entry(self, int64_t timestamp, int64_t offset, bint skip_full_check=False):
        """TimeIndex.maybeAppend's checks and write in one step; returns an IX status (0 when
        appended or skipped). The caller serializes mutations."""
        cdef ptrdiff_t failed, appended
        self._check_writable()
        cdef int status = ix_maybe_append_times(self._wdata, self._entries, self._capacity,
                                                self._base_offset, &timestamp, &offset, 1,
                                                skip_full_check, &appended, &failed)
        if status == IX_OK:
            self._publish(appended)
        return status

    def _maybe_append_entries(self, const int64_t[::1] timestamps, const int64_t[::1] offsets,
                              bint skip_full_check=False):
        """`_maybe_append_entry` for every pair in turn, all or nothing: returns (status,
        failed pair or -1). GIL released for long arrays."""
        cdef ptrdiff_t m = timestamps.shape[0], failed = -1, appended = 0
        cdef int status
        if offsets.shape[0] != m:
            raise ValueError(f"{m} timestamps but {offsets.shape[0]} offsets")
        self._check_writable()
        if m == 0:
            return IX_OK, -1
        if m < _NOGIL_MIN_ENTRIES:
            status = ix_maybe_append_times(self._wdata, self._entries, self._capacity,
                                           self._base_offset, &timestamps[0], &offsets[0], m,
                                           skip_full_check, &appended, &failed)
        else:
            self._readers += 1
            with nogil:
                status = ix_maybe_append_times(self._wdata, self._entries, self._capacity,
                                               self._base_offset, &timestamps[0], &offsets[0],
                                               m, skip_full_check, &appended, &failed)
            self._readers -= 1
        if status == IX_OK:
            self._publish(appended)
        return status, failed

    def _count_below(self, int64_t offset):
        """Number of entries whose offset < `offset` (the entries truncate_to keeps)."""
        self._check_open()
        return ix_first_value_ge(IX_TIME, self._data, self._entries,
                                 ix_relative(offset, self._base_offset))


def append_entry_pair(OffsetIndexCore offset_index, TimeIndexCore time_index, int64_t offset,
                      int64_t position, int64_t timestamp, int64_t timestamp_offset):
    """What a segment append does to its indexes, in one call: OffsetIndex.append(offset,
    position), then TimeIndex.maybeAppend(timestamp, timestamp_offset). Returns 0 when both
    are done, 1 when the offset index refused (nothing written), 2 when the time index
    refused (the offset entry stays: the caller truncates it). The caller serializes
    mutations of both indexes and raises the refusal through the public methods."""
    cdef ptrdiff_t failed, appended
    offset_index._check_writable()
    time_index._check_writable()
    if ix_append_offsets(offset_index._wdata, offset_index._entries, offset_index._capacity,
                         offset_index._base_offset, &offset, &position, 1, &failed) != IX_OK:
        return 1
    offset_index._publish(1)
    if ix_maybe_append_times(time_index._wdata, time_index._entries, time_index._capacity,
                             time_index._base_offset, &timestamp, &timestamp_offset, 1, False,
                             &appended, &failed) != IX_OK:
        return 2
    time_index._publish(appended)
    return 0


# ---------------------------------------------------------------------------------------------
# Stateless batched searches over any buffer

def offset_index_slots(buffer, targets, int64_t base_offset=0):
    """Slots (int64, -1 = none) of the largest entries with offset <= each target, over every
    whole 8-byte entry of `buffer` (exported for the call only). GIL released."""
    cdef OffsetIndexCore core = OffsetIndexCore()
    core._bind(buffer, base_offset, memoryview(buffer).nbytes // IX_OFFSET_ENTRY_SIZE)
    try:
        return core.slots_for(targets)
    finally:
        core._unbind()


def time_index_slots(buffer, targets):
    """Slots (int64, -1 = none) of the largest entries with timestamp <= each target, over
    every whole 12-byte entry of `buffer` (exported for the call only). GIL released."""
    cdef TimeIndexCore core = TimeIndexCore()
    core._bind(buffer, 0, memoryview(buffer).nbytes // IX_TIME_ENTRY_SIZE)
    try:
        return core.slots_for(targets)
    finally:
        core._unbind()
