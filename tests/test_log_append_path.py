"""The leader-append fast path: native offset assignment, stamped pwritev writes, append
summaries, epoch rises, bulk index appends, and what UnifiedLog/LogSegment do with them.
Hostile inputs included: every native entry point must refuse bad rows with a typed error and
never touch memory outside its buffers."""

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine._native import records as _records
from engine._native.index import IndexFullError
from engine.errors import CorruptRecordError, InvalidOffsetError, InvalidRecordError
from engine.log import LogSegment, OffsetIndex, TimeIndex, UnifiedLog
from engine.records import MemoryRecords, RecordBatchBuilder, scan_batches
from engine.records.sample import sample_batches

SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _batch(n=3, base_offset=0, ts=1_000, epoch=-1, value=b"v" * 40):
    b = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i in range(n):
        b.append(value + bytes([i]), key=b"k%d" % i, timestamp=ts + i)
    return b.build()


def _rows(data):
    headers, valid = _records.scan(data, True)
    assert valid == len(data)
    return headers


# ---- assign_offsets / append_summary / epoch_rises ---------------------------------------


def test_assign_offsets_keeps_spans_and_sets_epoch():
    data = _batch(3, base_offset=500) + _batch(1, base_offset=7) + _batch(5, base_offset=0)
    rows = _rows(data)
    assert _records.assign_offsets(rows, 1000, 9) == (1000, 1008)
    assert rows["base_offset"].tolist() == [1000, 1003, 1004]
    assert rows["last_offset"].tolist() == [1002, 1003, 1008]
    assert rows["partition_leader_epoch"].tolist() == [9, 9, 9]
    assert _records.append_summary(rows) == (1000, 1008, 1004, 1008, 1002, len(data))


def test_append_summary_takes_the_first_batch_reaching_the_max():
    data = _batch(1, ts=50) + _batch(2, ts=90) + _batch(1, ts=91) + _batch(1, ts=10)
    rows = _rows(data)
    _records.assign_offsets(rows, 0, 0)
    first, last, max_ts, shallow, first_max, size = _records.append_summary(rows)
    assert (first, last, max_ts, shallow, first_max, size) == (0, 4, 91, 2, 50, len(data))


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.__setitem__("magic", 1), "magic v1"),
    (lambda r: r.__setitem__("last_offset", r["base_offset"] - 1), "last offset delta"),
    (lambda r: r.__setitem__("last_offset", r["base_offset"] + 2**31), "last offset delta"),
])
def test_assign_offsets_refuses_bad_rows_and_changes_nothing(mutate, message):
    rows = _rows(_batch(2) + _batch(2, base_offset=2))
    mutate(rows[1])
    before = rows.copy()
    with pytest.raises(InvalidRecordError, match=message) as err:
        _records.assign_offsets(rows, 10, 1)
    assert err.value.position == int(rows[1]["position"])
    assert rows.tobytes() == before.tobytes()


def test_assign_offsets_refuses_overflow_and_bad_arrays():
    rows = _rows(_batch(3))
    with pytest.raises(InvalidRecordError, match="beyond"):
        _records.assign_offsets(rows, 2**63 - 2, 0)
    with pytest.raises(ValueError):
        _records.assign_offsets(rows, -1, 0)
    with pytest.raises(ValueError):
        _records.assign_offsets(rows[:0], 0, 0)
    with pytest.raises(TypeError):
        _records.assign_offsets(np.zeros(3, dtype=np.int64), 0, 0)
    with pytest.raises(TypeError):
        _records.assign_offsets(np.concatenate([rows, rows, rows])[::2], 0, 0)
    frozen = rows.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError):
        _records.assign_offsets(frozen, 0, 0)
    with pytest.raises(ValueError):
        _records.append_summary(rows[:0])
    with pytest.raises(TypeError):
        _records.append_summary(rows[["position", "size"]])


def test_epoch_rises_follow_the_cache_rule():
    parts = [_batch(1, base_offset=o, epoch=e) for o, e in
             [(0, -1), (1, 2), (2, 2), (3, 1), (4, 5), (5, 5), (6, 7)]]
    rows = _rows(b"".join(parts))
    assert _records.epoch_rises(rows, -1) == [(2, 1), (5, 4), (7, 6)]
    assert _records.epoch_rises(rows, 5) == [(7, 6)]
    assert _records.epoch_rises(rows, 7) == []
    assert _records.epoch_rises(rows[:0], -1) == []
    with pytest.raises(TypeError):
        _records.epoch_rises(np.zeros(2), -1)


def test_scan_for_append_names_the_first_refused_row():
    good, bad = _batch(2), bytearray(_batch(2, base_offset=2))
    bad[-1] ^= 1  # inside the CRC range
    _, valid, row = _records.scan_for_append(good + bytes(bad) + good)
    assert valid == 3 * len(good) and row == 1
    assert _records.scan_for_append(good)[2] == -1


# ---- write_batches -------------------------------------------------------------------------


def _stamped(data, rows):
    out = bytearray(data)
    for r in rows:
        p = int(r["position"])
        struct.pack_into(">q", out, p, int(r["base_offset"]))
        struct.pack_into(">i", out, p + 12, int(r["partition_leader_epoch"]))
    return bytes(out)


@pytest.mark.parametrize("count", [1, 2, 255, 256, 257, 700])
def test_write_batches_stamps_every_batch_without_touching_the_input(tmp_path, count):
    # more than 256 batches: several pwritev calls of at most 2 * 256 + 1 iovecs
    data = b"".join(_batch(1 + i % 3, base_offset=i, value=b"x" * (i % 17)) for i in range(count))
    original = bytes(data)
    rows = _rows(data)
    _records.assign_offsets(rows, 10_000, 3)
    fd = os.open(tmp_path / "f.log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"HEAD")
        assert _records.write_batches(fd, memoryview(data), rows, 4) == len(data)
    finally:
        os.close(fd)
    written = (tmp_path / "f.log").read_bytes()
    assert data == original
    assert written == b"HEAD" + _stamped(data, rows)
    scan = scan_batches(written[4:], verify_crc=True)
    assert scan.headers["crc_valid"].all()  # the fields lie outside the CRC
    assert scan.headers["base_offset"].tolist() == rows["base_offset"].tolist()


def test_write_batches_with_unchanged_rows_writes_the_bytes(tmp_path):
    data = _batch(2) + _batch(2, base_offset=2)
    path = tmp_path / "f.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert _records.write_batches(fd, data, _rows(data), 0) == len(data)
    finally:
        os.close(fd)
    assert path.read_bytes() == data


@pytest.mark.parametrize("case", ["short", "long", "subset", "shifted", "size", "tiny"])
def test_write_batches_refuses_rows_that_do_not_tile_the_buffer(tmp_path, case):
    data = _batch(2) + _batch(3, base_offset=2)
    rows = _rows(data)
    buf = data
    if case == "short":
        buf = data[:-1]
    elif case == "long":
        buf = data + b"\0"
    elif case == "subset":
        rows = rows[1:].copy()
    elif case == "shifted":
        rows["position"][1] += 1
    elif case == "size":
        rows["size"][0] += 4
    elif case == "tiny":
        rows["size"][0] = 3
    path = tmp_path / "f.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with pytest.raises(ValueError):
            _records.write_batches(fd, buf, rows, 0)
        with pytest.raises(ValueError):
            _records.write_batches(fd, data, _rows(data), -5)
    finally:
        os.close(fd)
    assert path.read_bytes() == b""


def test_write_batches_reports_os_errors(tmp_path):
    data = _batch(1)
    fd = os.open(tmp_path / "ro.log", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError):
            _records.write_batches(fd, data, _rows(data), 0)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        _records.write_batches(-1, data, _rows(data), 0)


@SETTINGS
@given(blob=st.binary(min_size=0, max_size=400), cut=st.integers(0, 400))
def test_native_append_entry_points_survive_garbage(tmp_path, blob, cut):
    # garbage bytes with rows from a real scan of other bytes: refused, never a crash
    rows = _rows(_batch(2) + _batch(1, base_offset=2))
    fd = os.open(tmp_path / "g.log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            _records.write_batches(fd, blob[:cut], rows, 0)
        except ValueError:
            pass
    finally:
        os.close(fd)
    try:
        headers, _valid, bad = _records.scan_for_append(blob)
    except (CorruptRecordError, InvalidRecordError):
        return
    if len(headers) and bad < 0:
        _records.assign_offsets(headers, 5, 1)
        assert _records.append_summary(headers)[0] == 5


# ---- bulk index appends --------------------------------------------------------------------


def _model_time_appends(entries, start, capacity, pairs, skip):
    """TimeIndex.maybe_append one pair at a time (the Python rule), as a model."""
    out = list(entries)
    for ts, off in pairs:
        last_ts, last_off = out[-1] if out else (-1, start)
        if not skip and len(out) >= capacity - 1:
            return None
        if out and (off < last_off or ts < last_ts):
            return None
        if ts <= last_ts:
            continue
        if not 0 <= off - start <= 2**31 - 1 or len(out) >= capacity:
            return None
        out.append((ts, off))
    return out


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(-2, 40), st.integers(95, 140)), max_size=12),
       skip=st.booleans())
def test_bulk_time_appends_match_one_at_a_time(tmp_path, pairs, skip):
    path = tmp_path / "bulk.timeindex"
    path.unlink(missing_ok=True)
    index = TimeIndex(path, 100, max_index_size=12 * 6)
    index.maybe_append(3, 100)
    expected = _model_time_appends([(3, 100)], 100, 6, pairs, skip)
    ts = np.array([p[0] for p in pairs], dtype=np.int64)
    offs = np.array([p[1] for p in pairs], dtype=np.int64)
    if expected is None:
        with pytest.raises((InvalidOffsetError, IndexFullError)):
            index.maybe_append_entries(ts, offs, skip_full_check=skip)
        assert index.entries == 1  # all or nothing
    else:
        index.maybe_append_entries(ts, offs, skip_full_check=skip)
        got = index.entries_array()
        assert list(zip(got["timestamp"].tolist(), got["offset"].tolist())) == expected
    index.close()


@SETTINGS
@given(offsets=st.lists(st.integers(95, 140), max_size=10),
       positions=st.lists(st.integers(-3, 2**31 + 3), min_size=10, max_size=10))
def test_bulk_offset_appends_are_all_or_nothing(tmp_path, offsets, positions):
    path = tmp_path / "bulk.index"
    path.unlink(missing_ok=True)
    index = OffsetIndex(path, 100, max_index_size=8 * 7)
    index.append(101, 0)
    pos = positions[:len(offsets)]
    ok = (len(offsets) <= 6
          and all(b > a for a, b in zip([101] + offsets, offsets))
          and all(0 <= p <= 2**31 - 1 for p in pos))
    if ok:
        index.append_entries(offsets, pos)
        got = index.entries_array()
        assert got["offset"].tolist() == [101] + offsets
        assert got["position"].tolist() == [0] + pos
    else:
        with pytest.raises((InvalidOffsetError, IndexFullError, ValueError)):
            index.append_entries(offsets, pos)
        assert index.entries == 1
    index.close()


def test_index_appends_refuse_read_only_buffers_and_huge_values(tmp_path):
    ro = OffsetIndex.from_buffer(struct.pack(">ii", 1, 0), 0)
    with pytest.raises(ValueError, match="read-only"):
        ro._append_entry(5, 5)
    rt = TimeIndex.from_buffer(struct.pack(">qi", 1, 0), 0)
    with pytest.raises(ValueError, match="read-only"):
        rt._maybe_append_entries(np.array([5]), np.array([1]))
    index = OffsetIndex(tmp_path / "h.index", 0)
    with pytest.raises(InvalidOffsetError):
        index.append(2**70, 0)
    with pytest.raises(ValueError):
        index.append_entries([1, 2], [0])
    index.close()


# ---- LogSegment / UnifiedLog ----------------------------------------------------------------


def test_segment_append_writes_the_rows_offsets_and_epochs(tmp_path):
    data = _batch(2, base_offset=77, epoch=1) + _batch(3, base_offset=0, epoch=1)
    rows = _rows(data)
    _records.assign_offsets(rows, 40, 6)
    seg = LogSegment.create(tmp_path, 40, index_interval_bytes=1, max_index_size=1024)
    seg.append(44, int(rows["max_timestamp"].max()), 44, data, rows)
    assert seg.next_offset() == 45
    got = scan_batches(seg.read(40, 1 << 20).records, verify_crc=True).headers
    assert got["base_offset"].tolist() == [40, 42]
    assert got["partition_leader_epoch"].tolist() == [6, 6] and got["crc_valid"].all()
    seg.close()


def test_segment_append_with_bad_rows_leaves_no_trace(tmp_path):
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=1, max_index_size=1024)
    first = _batch(3)
    seg.append(2, 1002, 2, first)
    before = (seg.size_in_bytes, seg.offset_index.entries, seg.time_index.entries,
              seg.max_timestamp_so_far)
    data = _batch(3, base_offset=3, ts=5000)
    rows = _rows(data + data)  # rows of other bytes: do not tile `data`
    with pytest.raises(ValueError):
        seg.append(5, 5002, 5, data, rows)
    assert (seg.size_in_bytes, seg.offset_index.entries, seg.time_index.entries,
            seg.max_timestamp_so_far) == before
    seg.append(5, 5002, 5, data)
    assert seg.offset_index.entries == before[1] + 1 and seg.next_offset() == 6
    seg.close()


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_leader_append_leaves_the_callers_bytes_alone(tmp_path, kind):
    batches = list(sample_batches(40, batch_size=10, partition_leader_epoch=0))
    with UnifiedLog.open(tmp_path / "p-0", index_interval_bytes=1) as log:
        log.append_as_leader(batches[0], 3)
        payload = kind(b"".join(batches[1:]))
        snapshot = bytes(payload)
        assert log.append_as_leader(payload, 4) == (10, 39)
        assert bytes(payload) == snapshot
        view, _ = log.read(0, 1 << 20)
        headers = scan_batches(view, verify_crc=True).headers
        assert headers["base_offset"].tolist() == [0, 10, 20, 30]
        assert headers["partition_leader_epoch"].tolist() == [3, 4, 4, 4]
        assert headers["crc_valid"].all()
        records = [r.offset for b in MemoryRecords(view).batches() for r in b.records()]
        assert records == list(range(40))
        assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == \
            [(3, 0), (4, 10)]


def test_segment_append_refused_by_the_time_index_rolls_back_the_offset_entry(tmp_path):
    # 36 bytes: 4 offset slots, 3 time slots of which the last is reserved, so the time
    # index refuses first and the offset entry written just before must go again
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=0, max_index_size=36)
    for i in range(3):
        seg.append(i, 100 + i, i, _batch(1, base_offset=i, ts=100 + i))
    assert (seg.offset_index.entries, seg.time_index.entries) == (2, 2)
    size = seg.size_in_bytes
    with pytest.raises(IndexFullError):
        seg.append(3, 103, 3, _batch(1, base_offset=3, ts=103))
    assert (seg.offset_index.entries, seg.time_index.entries) == (2, 2)
    assert seg.size_in_bytes == size == os.path.getsize(seg.log_file)
    assert seg.max_timestamp_so_far == 102 and seg.next_offset() == 3
    seg.close()


def _one_record(timestamp):
    b = RecordBatchBuilder()
    b.append(b"v" * 100, key=b"k", timestamp=timestamp)
    return b.build()


def test_the_roll_check_follows_update_config_and_epochs_follow_each_append(tmp_path):
    # The append path keeps segment.bytes / segment.ms as plain attributes: a config update
    # must reach them, and the leader's epoch shortcut must keep the cache's rules.
    from engine.config import BrokerConfig, TopicConfig
    t0 = 1_700_000_000_000
    log = UnifiedLog.open(tmp_path / "t-0")
    for i in range(3):
        log.append_as_leader(_one_record(t0 + i), 0)
    assert len(log.segments) == 1
    size = log.active_segment.size_in_bytes
    log.update_config(TopicConfig.resolve({"segment.bytes": str(size + 10)}, BrokerConfig({})))
    assert log.segment_bytes == size + 10
    log.append_as_leader(_one_record(t0 + 3), 0)  # would pass segment.bytes: rolls
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.update_config(TopicConfig.resolve({"segment.ms": "1000"}, BrokerConfig({})))
    log.append_as_leader(_one_record(t0 + 3 + 1000), 0)  # 1000 ms after: not more
    log.append_as_leader(_one_record(t0 + 3 + 1001), 0)  # more than segment.ms: rolls
    assert [s.base_offset for s in log.segments] == [0, 3, 5]
    log.append_as_leader(_one_record(t0 + 3 + 1001), 2)
    log.append_as_leader(_one_record(t0 + 3 + 1001), 1)  # a lower epoch changes nothing
    log.append_as_leader(_one_record(t0 + 3 + 1001), 4)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == \
        [(0, 0), (2, 6), (4, 8)]
    log.close()


def test_segment_jitter_ms_is_subtracted_from_segment_ms(tmp_path, monkeypatch):
    from engine.config import BrokerConfig, TopicConfig
    from engine.log import local_log

    class Draws:
        def __init__(self):
            self.bounds = []

        def randrange(self, bound):
            self.bounds.append(bound)
            return 300

    draws = Draws()
    monkeypatch.setattr(local_log, "_jitter_random", draws)
    t0 = 1_700_000_000_000
    # The broker synonym in hours gives the default; segment.ms bounds the draw.
    config = TopicConfig.resolve({"segment.ms": "1000"},
                                 BrokerConfig({"log.roll.jitter.hours": "1"}))
    assert config["segment.jitter.ms"] == 3_600_000
    log = UnifiedLog.open(tmp_path / "t-0", config=config)
    assert draws.bounds == [1000]
    log.append_as_leader(_one_record(t0), 0)
    log.append_as_leader(_one_record(t0 + 700), 0)  # 700 ms: not more than 1000 - 300
    assert len(log.segments) == 1
    log.append_as_leader(_one_record(t0 + 701), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert draws.bounds == [1000, 1000]  # one draw per segment
    # Without jitter (Kafka's default 0) nothing is drawn and segment.ms applies as is.
    draws.bounds.clear()
    plain = UnifiedLog.open(tmp_path / "u-0", config=TopicConfig.resolve(
        {"segment.ms": "1000", "segment.jitter.ms": "0"}, BrokerConfig({})))
    plain.append_as_leader(_one_record(t0), 0)
    plain.append_as_leader(_one_record(t0 + 1000), 0)
    assert len(plain.segments) == 1 and draws.bounds == []
    log.close()
    plain.close()
