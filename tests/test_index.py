"""Offset, time and transaction indexes: searches against a brute-force model, Kafka's append
and truncation rules, file sizing, byte layouts, sanity checks and real Kafka files."""

import io
import mmap
import os
import shutil
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine._native.index import (
    IndexFullError,
    OffsetIndexCore,
    OffsetPosition,
    TimeIndexCore,
    TimestampOffset,
    offset_index_slots,
    time_index_slots,
)
from engine.errors import CorruptIndexError, InvalidOffsetError
from engine.log import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex

DATADIR = (Path(__file__).resolve().parents[1].parent / "shared" / "vectors"
           / "codecrafters-kafka-tester-kraft-datadir")
COMMITS = ("e856b9a", "510714e")
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def last_le(keys, target):
    """The model: last slot whose key <= target, or -1."""
    slot = -1
    for i, key in enumerate(keys):
        if key <= target:
            slot = i
    return slot


def offset_bytes(rel_offsets, positions):
    return b"".join(struct.pack(">ii", r, p) for r, p in zip(rel_offsets, positions))


def time_bytes(timestamps, rel_offsets):
    return b"".join(struct.pack(">qi", t, r) for t, r in zip(timestamps, rel_offsets))


sorted_rel_offsets = st.lists(st.integers(0, 2**31 - 1), max_size=300).map(sorted)
targets_st = st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-10, 2**31 + 10),
                      min_size=1, max_size=60)


# ---- searches ---------------------------------------------------------------------------

@SETTINGS
@given(keys=sorted_rel_offsets, targets=targets_st, base=st.integers(0, 2**40),
       table=st.booleans(), tail=st.integers(0, 40))
def test_offset_searches_match_model(keys, targets, base, table, tail):
    # Keys may repeat (damaged files): every path must still return the last equal slot.
    core = OffsetIndexCore()
    data = offset_bytes(keys, range(len(keys)))
    core._bind(data, base, max(0, len(keys) - tail) if table else len(keys))
    if table:
        core.build_search_table()
        core._set_entries(len(keys))  # entries appended after the table form its tail
    abs_keys = [base + k for k in keys]
    expected = [last_le(abs_keys, t) for t in targets]
    assert [core.slot_for(t) for t in targets] == expected
    assert core.slots_for(np.array(targets, dtype=np.int64)).tolist() == expected
    offsets, positions = core.lookup_many(targets)
    for t, slot, off, pos in zip(targets, expected, offsets, positions):
        want = (base, 0) if slot < 0 else (abs_keys[slot], slot)
        assert core.lookup(t) == want == (off, pos)


@SETTINGS
@given(timestamps=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300).map(sorted),
       targets=targets_st, table=st.booleans())
def test_time_searches_match_model(timestamps, targets, table):
    core = TimeIndexCore()
    core._bind(time_bytes(timestamps, range(len(timestamps))), 1000, len(timestamps))
    if table:
        core.build_search_table()
    expected = [last_le(timestamps, t) for t in targets]
    assert [core.slot_for(t) for t in targets] == expected
    assert core.slots_for(targets).tolist() == expected
    ts, offs = core.lookup_many(np.array(targets))
    for t, slot, a, b in zip(targets, expected, ts, offs):
        want = (-1, 1000) if slot < 0 else (timestamps[slot], 1000 + slot)
        assert core.lookup(t) == want == (a, b)


@pytest.mark.parametrize("n", [1, 681, 682, 683, 1023, 1024, 1025, 1026, 5000])
def test_warm_section_boundaries(n):
    # Kafka's warm section is the last 8 KiB: 1024 offset-index or 682 time-index entries.
    # Probe both sides of it, for single and batched searches.
    keys = np.arange(n, dtype=np.int64) * 3 + 1
    offsets, times = OffsetIndexCore(), TimeIndexCore()
    offsets._bind(offset_bytes(keys.tolist(), range(n)), 0, n)
    times._bind(time_bytes(keys.tolist(), range(n)), 0, n)
    probes = sorted({0, 1, 2, int(keys[-1]), int(keys[-1]) + 1}
                    | {int(keys[max(0, n - 1 - warm)]) + d for warm in (682, 1024)
                       for d in (-1, 0, 1)})
    want = (np.searchsorted(keys, probes, side="right") - 1).tolist()
    for core in (offsets, times):
        assert [core.slot_for(t) for t in probes] == want
        assert core.slots_for(probes).tolist() == want


def test_search_table_builds_after_enough_lookups_and_tracks_appends():
    n = 8192
    keys = np.arange(n, dtype=np.int64) * 2
    buf = bytearray(offset_bytes(keys.tolist(), range(n)) + bytes(8 * 100))
    core = OffsetIndexCore()
    core._bind(buf, 0, n)
    assert core._search_table_entries == 0
    rng = np.random.default_rng(7)
    targets = rng.integers(-5, 2 * n + 5, 5000)
    core.slots_for(targets)  # n/8 = 1024 searches earn a table
    assert core._search_table_entries == n
    model = np.searchsorted(keys, targets, side="right") - 1
    assert (core.slots_for(targets) == model).all()
    struct.pack_into(">ii", buf, 8 * n, 2 * n + 10, 7)  # an append lands in the tail
    core._set_entries(n + 1)
    assert core.slot_for(2 * n + 10) == n and core.lookup(2 * n + 11) == (2 * n + 10, 7)
    core._set_entries(10)  # truncation below the table drops it
    assert core._search_table_entries == 0 and core.slot_for(10**9) == 9


def test_unsorted_index_is_refused_a_table_and_stays_in_bounds():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 1000, 4096)
    core = OffsetIndexCore()
    core._bind(offset_bytes(keys.tolist(), range(len(keys))), 0, len(keys))
    assert core.build_search_table() is False
    slots = core.slots_for(rng.integers(-10, 1010, 3000))
    assert ((slots >= -1) & (slots < len(keys))).all()


@SETTINGS
@given(positions=st.lists(st.integers(0, 2**31 - 1), max_size=100).map(sorted),
       start=st.integers(-(2**31), 2**32), size=st.integers(-(2**31), 2**32))
def test_fetch_upper_bound_offset_is_first_entry_at_or_after_the_end(positions, start, size):
    core = OffsetIndexCore()
    core._bind(offset_bytes(range(1, len(positions) + 1), positions), 50, len(positions))
    first = next((i for i, p in enumerate(positions) if p >= start + size), None)
    result = core.fetch_upper_bound_offset(start, size)
    assert result == (None if first is None else (51 + first, positions[first]))


def test_stateless_slots_over_any_buffer():
    keys = [1, 5, 9]
    data = offset_bytes(keys, [0, 10, 20])
    targets = np.array([0, 1, 6, 100])
    for buffer in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        assert offset_index_slots(buffer, targets, base_offset=0).tolist() == [-1, 0, 1, 2]
        assert offset_index_slots(buffer, targets + 10, base_offset=10).tolist() == [-1, 0, 1, 2]
    tdata = time_bytes([10, 20], [0, 1]) + b"\x00" * 5  # a torn entry is ignored
    assert time_index_slots(tdata, [9, 10, 25]).tolist() == [-1, 0, 1]


def test_batched_lookups_keep_shape_and_refuse_unsafe_dtypes():
    core = OffsetIndexCore()
    core._bind(offset_bytes([1, 2], [0, 8]), 0, 2)
    assert core.slots_for(np.array([[0, 1], [2, 3]], dtype=np.int32)).tolist() == [[-1, 0], [1, 1]]
    assert core.slots_for([]).shape == (0,)
    with pytest.raises(TypeError):
        core.slots_for(np.array([1.5]))
    with pytest.raises(TypeError):
        core.slots_for(np.array([1], dtype=np.uint64))


def test_value_types_behave_like_tuples():
    assert OffsetPosition(5, 7) == (5, 7) and tuple(OffsetPosition(5, 7)) == (5, 7)
    assert hash(TimestampOffset(1, 2)) == hash((1, 2)) and TimestampOffset(1, 2)[1] == 2
    assert OffsetPosition(1, 2) != OffsetPosition(1, 3)
    assert repr(TimestampOffset(-1, 0)) == "TimestampOffset(timestamp=-1, offset=0)"


# ---- offset index file --------------------------------------------------------------------

def test_created_offset_index_is_preallocated_and_trimmed_on_close(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100)
    assert path.stat().st_size == 10485760 and index.max_entries == 1310720
    index.append(105, 0)
    index.append(110, 4200)
    index.close()
    assert path.read_bytes() == struct.pack(">iiii", 5, 0, 10, 4200)
    assert OffsetIndex(tmp_path / "x.index", 0, max_index_size=1001).length == 1000


def test_offset_index_append_rules(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 100, max_index_size=24)
    index.append(100, 0)  # the first entry may equal the base offset
    with pytest.raises(InvalidOffsetError) as err:
        index.append(100, 10)
    assert err.value.offset == 100 and "a.index" in str(err.value)
    index.append(101, 10)
    with pytest.raises(ValueError):
        index.append(102, -1)
    index.append(102, 20)
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.append(103, 30)
    other = OffsetIndex(tmp_path / "b.index", 100)
    with pytest.raises(InvalidOffsetError):
        other.append(100 + 2**31, 0)
    with pytest.raises(InvalidOffsetError):
        other.append(99, 0)
    assert not other.can_append_offset(99) and other.can_append_offset(100 + 2**31 - 1)


@SETTINGS
@given(gaps=st.lists(st.integers(1, 50), min_size=0, max_size=40), cut=st.integers(0, 2500))
def test_truncate_to_drops_offsets_at_or_after_target(tmp_path, gaps, cut):
    path = tmp_path / f"t{len(gaps)}-{cut}.index"
    index = OffsetIndex(path, 1000)
    offsets = (1000 + np.cumsum(gaps)).tolist()
    for i, offset in enumerate(offsets):
        index.append(offset, i * 100)
    index.truncate_to(1000 + cut)
    kept = [o for o in offsets if o < 1000 + cut]
    assert index.entries == len(kept)
    assert index.last_offset == (kept[-1] if kept else 1000)
    index.close()
    reopened = OffsetIndex(path, 1000)
    assert reopened.entries_array()["offset"].tolist() == kept
    reopened.close()
    path.unlink()


def test_resize_reset_reopen_and_read_only(tmp_path):
    path = tmp_path / "r.index"
    index = OffsetIndex(path, 0, max_index_size=80)
    for i in range(1, 6):
        index.append(i, i * 10)
    index.trim_to_valid_size()
    assert path.stat().st_size == 40 and index.is_full()
    assert index.resize(80) and index.max_entries == 10 and index.entries == 5
    with pytest.raises(ValueError):
        index.resize(16)
    index.flush()
    index.close()
    ro = OffsetIndex(path, 0, writable=False)
    assert ro.entries == 5 and ro.lookup(3) == (3, 30)
    with pytest.raises(io.UnsupportedOperation):
        ro.append(9, 0)
    ro.close()
    index = OffsetIndex(path, 0, max_index_size=80)
    index.reset()
    assert index.entries == 0 and path.stat().st_size == 80
    index.close()
    assert path.stat().st_size == 0
    empty = OffsetIndex(path, 0)  # a 0-byte file maps nothing and holds no entries
    assert empty.entries == 0 and empty.lookup(7) == (0, 0) and empty.is_full()
    assert empty.delete_if_exists() and not path.exists()
    with pytest.raises(ValueError, match="closed"):
        empty.lookup(7)
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)


def test_rename_keeps_the_mapping(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 0)
    index.append(3, 7)
    index.rename_to(tmp_path / "a.index.deleted")
    assert index.lookup(3) == (3, 7) and index.file.name == "a.index.deleted"
    index.close()
    assert (tmp_path / "a.index.deleted").read_bytes() == struct.pack(">ii", 3, 7)


def test_from_buffer_index(tmp_path):
    index = OffsetIndex.from_buffer(offset_bytes([1, 4], [0, 99]), 10)
    assert index.entries == 2 and index.lookup(14) == (14, 99) and index.file is None
    assert index.entries_array().tolist() == [(11, 0), (14, 99)]
    with pytest.raises(io.UnsupportedOperation):
        index.append(20, 0)
    index.close()


def write_raw(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("data, reason", [
    (offset_bytes([1], [0]) + b"\x00" * 5, "multiple"),
    (offset_bytes([3, 0], [0, 8]), "not above the base offset"),
])
def test_offset_index_sanity_check(tmp_path, data, reason):
    index = OffsetIndex(write_raw(tmp_path / "bad.index", data), 100)
    with pytest.raises(CorruptIndexError) as err:
        index.sanity_check()
    assert reason in str(err.value) and "bad.index" in str(err.value.file)
    index.close_handler()


# ---- time index file ----------------------------------------------------------------------

def test_time_index_rules(tmp_path):
    path = tmp_path / "t.timeindex"
    index = TimeIndex(path, 50, max_index_size=12 * 3 + 5)
    assert path.stat().st_size == 36 and index.max_entries == 3
    index.maybe_append(-1, 50)  # NO_TIMESTAMP on an empty index is ignored
    index.maybe_append(100, 51)
    index.maybe_append(100, 52)  # equal timestamp: ignored
    assert index.entries == 1
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(99, 53)  # smaller timestamp
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(200, 50)  # smaller offset
    index.maybe_append(200, 51)  # equal offset with a larger timestamp is fine
    assert index.is_full()  # 2 of 3: the last slot is reserved
    with pytest.raises(IndexFullError):
        index.maybe_append(300, 60)
    index.maybe_append(300, 60, skip_full_check=True)
    with pytest.raises(IndexFullError):
        index.maybe_append(400, 61, skip_full_check=True)
    assert index.lookup(250) == (200, 51) and index.lookup(0) == (-1, 50)
    assert index.last_entry == (300, 60)
    index.truncate_to(60)
    assert index.last_entry == (200, 51)
    index.close()
    assert path.read_bytes() == struct.pack(">qiqi", 100, 1, 200, 1)
    assert TimeIndex(tmp_path / "d.timeindex", 0).length == 10485756


@pytest.mark.parametrize("data, reason", [
    (time_bytes([5, 3], [1, 2]), "below the first timestamp"),
    (time_bytes([5, 6], [1, -1]), "below the base offset"),
    (time_bytes([5], [1]) + b"\x00" * 11, "multiple"),
])
def test_time_index_sanity_check(tmp_path, data, reason):
    index = TimeIndex(write_raw(tmp_path / "bad.timeindex", data), 100)
    with pytest.raises(CorruptIndexError) as err:
        index.sanity_check()
    assert reason in str(err.value) and err.value.file.name == "bad.timeindex"
    index.close_handler()


def test_concurrent_lookups_while_truncating_and_resizing(tmp_path):
    # Readers search without pause (batched ones release the GIL); truncation and resizing
    # must still get through (no starvation) and readers must never see freed memory.
    index = OffsetIndex(tmp_path / "c.index", 0, max_index_size=8 * 20000)
    for i in range(1, 20001):
        index.append(i, i)
    stop = threading.Event()
    failures = []

    def reader():
        targets = np.arange(0, 20001, 7)
        while not stop.is_set():
            offsets, positions = index.lookup_many(targets)
            if not (offsets == positions).all():  # every entry maps offset i to position i
                failures.append("mismatch")
            if index.lookup(123) != (123, 123):  # offset 123 is never truncated
                failures.append("single")

    def writer():
        try:
            for cut in range(20000, 0, -1000):
                index.truncate_to(cut)
                index.resize(8 * (cut + 10))
                index.trim_to_valid_size()
        except Exception as exc:  # noqa: BLE001 - any error fails the assertion below
            failures.append(repr(exc))

    readers = [threading.Thread(target=reader, daemon=True) for _ in range(3)]
    for t in readers:
        t.start()
    mutations = threading.Thread(target=writer, daemon=True)
    mutations.start()
    mutations.join(timeout=60)
    stop.set()
    for t in readers:
        t.join(timeout=60)
    assert not mutations.is_alive(), "truncate/resize starved by concurrent lookups"
    assert index.entries == 999 and index.length == 999 * 8
    index.close()
    assert not failures


# ---- transaction index ----------------------------------------------------------------------

def test_transaction_index_layout_and_rules(tmp_path):
    path = tmp_path / "00000000000000000010.txnindex"
    index = TransactionIndex(10, path)
    assert index.is_empty() and not path.exists()
    txns = [AbortedTxn(7, 5, 12, 11), AbortedTxn(8, 11, 20, 15), AbortedTxn(7, 21, 30, 40)]
    for txn in txns:
        index.append(txn)
    assert path.read_bytes()[:34] == struct.pack(">hqqqq", 0, 7, 5, 12, 11)
    assert path.stat().st_size == 3 * 34 and index.all_aborted_txns() == txns
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(9, 1, 30, 30))
    with pytest.raises(InvalidOffsetError):  # the last offset is known after reopening too
        TransactionIndex(10, path).append(AbortedTxn(9, 1, 25, 30))
    result = index.collect_aborted_txns(13, 50)
    assert result.aborted_transactions == txns[1:] and not result.is_complete
    result = index.collect_aborted_txns(13, 21)  # entry 2's LSO 40 >= 21: complete
    assert result.aborted_transactions == txns[1:2] and result.is_complete
    result = index.collect_aborted_txns(0, 15)  # entry 1's LSO 15 >= 15: complete
    assert result.aborted_transactions == txns[:2] and result.is_complete
    index.sanity_check()
    index.truncate_to(20)
    assert index.all_aborted_txns() == txns[:1]
    index.append(AbortedTxn(1, 13, 14, 14))
    index.reset()
    assert index.is_empty() and path.stat().st_size == 0
    assert index.delete_if_exists() and not index.delete_if_exists()


def test_transaction_index_version_quirk_and_sanity(tmp_path):
    path = tmp_path / "v.txnindex"
    # Readers look at the first byte only: 0x00 0x05 passes, 0xFF.. (-1) passes, 0x01 fails.
    path.write_bytes(struct.pack(">Hqqqq", 0x0005, 1, 1, 11, 11)
                     + struct.pack(">Hqqqq", 0xFF00, 1, 1, 12, 12)
                     + struct.pack(">Hqqqq", 0x0100, 1, 1, 13, 13) + b"\x00" * 7)
    index = TransactionIndex(10, path)
    assert len(index.collect_aborted_txns(0, 12).aborted_transactions) == 2  # stops before it
    with pytest.raises(CorruptIndexError) as err:
        index.all_aborted_txns()
    assert err.value.position == 68 and "version 1" in str(err.value)
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 1, 9, 9))
    with pytest.raises(CorruptIndexError) as err:
        TransactionIndex(10, path).sanity_check()
    assert err.value.offset == 9 and "start offset 10" in str(err.value)


# ---- real Kafka files -----------------------------------------------------------------------

KAFKA_INDEXES = {
    ("e856b9a", "foo-0"): ([], [(1725272041932, 2)]),
    ("510714e", "foo-0"): ([], [(1726045973899, 0)]),
    ("e856b9a", "__cluster_metadata-0"): (
        [(56, 4123)], [(1725272038072, 56), (1725272048281, 80), (1725272098040, 115)]),
    ("510714e", "__cluster_metadata-0"): (
        [(57, 4154), (114, 8258)],
        [(1726045967500, 57), (1726045996206, 114), (1726046001742, 128)]),
}


def kafka_dir(commit, partition):
    path = DATADIR / commit / "kraft-combined-logs" / partition
    if not path.is_dir():
        pytest.fail(f"conformance vectors not found at {path}")
    return path


@pytest.mark.parametrize("commit, partition", sorted(KAFKA_INDEXES))
def test_real_kafka_indexes(tmp_path, commit, partition):
    offset_entries, time_entries = KAFKA_INDEXES[commit, partition]
    src = kafka_dir(commit, partition)
    index = OffsetIndex(src / "00000000000000000000.index", 0, writable=False)
    times = TimeIndex(src / "00000000000000000000.timeindex", 0, writable=False)
    assert index.length == 8 * len(offset_entries) and index.length in (0, 8, 16)
    assert index.entries_array().tolist() == offset_entries
    assert times.entries_array().tolist() == time_entries
    index.sanity_check()
    times.sanity_check()
    for offset, position in offset_entries:
        assert index.lookup(offset + 1) == (offset, position)
    assert index.lookup(0) == (0, 0) and times.lookup(0) == (-1, 0)
    assert times.lookup(2**62) == time_entries[-1]
    ts = [t for t, _ in time_entries]
    assert times.lookup_many(np.array(ts))[1].tolist() == [o for _, o in time_entries]
    # Re-create the files through the append API and compare bytes.
    rebuilt = OffsetIndex(tmp_path / "0.index", 0)
    for offset, position in offset_entries:
        rebuilt.append(offset, position)
    rebuilt.close()
    rebuilt_t = TimeIndex(tmp_path / "0.timeindex", 0)
    for timestamp, offset in time_entries:
        rebuilt_t.maybe_append(timestamp, offset)
    rebuilt_t.close()
    assert (tmp_path / "0.index").read_bytes() == (src / "00000000000000000000.index").read_bytes()
    assert ((tmp_path / "0.timeindex").read_bytes()
            == (src / "00000000000000000000.timeindex").read_bytes())
    # Opening a copy for writing and closing it leaves the bytes untouched.
    copy = shutil.copy(src / "00000000000000000000.timeindex", tmp_path / "copy.timeindex")
    TimeIndex(copy, 0).close()
    assert Path(copy).read_bytes() == (src / "00000000000000000000.timeindex").read_bytes()
    index.close()
    times.close()


def test_real_kafka_index_through_mmap_buffer():
    src = kafka_dir("510714e", "__cluster_metadata-0") / "00000000000000000000.index"
    with open(src, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert offset_index_slots(mm, [56, 57, 113, 114, 10**6]).tolist() == [-1, 0, 0, 1, 1]
        core = OffsetIndexCore()
        core._bind(mm, 0, len(mm) // 8)
        assert core.fetch_upper_bound_offset(4154, 1) == (114, 8258)
        core._unbind()
    assert os.path.getsize(src) == 16
