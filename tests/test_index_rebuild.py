"""Index rebuild from batch headers (Kafka's LogSegment.recover rule), checked against a model
that replays the rule through the Python append paths, and against real Kafka indexes."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InvalidOffsetError
from engine.log import IndexFullError, OffsetIndex, TimeIndex, rebuild_indexes
from engine.log.index_rebuild import (
    encode_offset_index,
    encode_time_index,
    write_offset_index,
    write_time_index,
)

DATADIR = (Path(__file__).resolve().parents[1].parent / "shared" / "vectors"
           / "codecrafters-kafka-tester-kraft-datadir")
HEADER_DTYPE = np.dtype([("position", np.int64), ("size", np.int32), ("base_offset", np.int64),
                         ("last_offset", np.int64), ("max_timestamp", np.int64),
                         ("magic", np.int8)])


def headers(batches):
    """Hand-made scan headers from (size, base offset, last offset, max timestamp) tuples."""
    out = np.zeros(len(batches), dtype=HEADER_DTYPE)
    position = 0
    for row, (size, base, last, max_ts) in zip(out, batches):
        row["position"], row["size"] = position, size
        row["base_offset"], row["last_offset"], row["max_timestamp"] = base, last, max_ts
        row["magic"] = 2
        position += size
    return out


def model(tmp_path, batches, base_offset, interval, max_index_size=10485760):
    """LogSegment.recover, step by step, through OffsetIndex.append / TimeIndex.maybe_append."""
    offset_index = OffsetIndex(tmp_path / "m.index", base_offset, max_index_size)
    time_index = TimeIndex(tmp_path / "m.timeindex", base_offset, max_index_size)
    valid_bytes = last_entry = 0
    max_ts, max_ts_offset = -1, -1
    for size, _, last, batch_max in batches:
        if batch_max > max_ts:
            max_ts, max_ts_offset = batch_max, last
        if valid_bytes - last_entry > interval:
            offset_index.append(last, valid_bytes)
            time_index.maybe_append(max_ts, max_ts_offset)
            last_entry = valid_bytes
        valid_bytes += size
    time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
    result = offset_index.entries_array(), time_index.entries_array()
    offset_index.delete_if_exists()
    time_index.delete_if_exists()
    return result


batch_lists = st.lists(
    st.tuples(st.integers(12, 3000), st.integers(1, 20), st.integers(-1, 60)), max_size=80)


def concrete(base_offset, draws):
    """Turns (size, record count, timestamp step) draws into contiguous batches."""
    batches, next_offset, ts = [], base_offset, 1_000
    for size, count, step in draws:
        ts += step
        batch_ts = -1 if step < 0 else ts
        batches.append((size, next_offset, next_offset + count - 1, batch_ts))
        next_offset += count
    return batches


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(draws=batch_lists, base=st.integers(0, 10**12), interval=st.sampled_from([0, 100, 4096]))
def test_rebuild_matches_the_recovery_model(tmp_path, draws, base, interval):
    batches = concrete(base, draws)
    offset_entries, time_entries = rebuild_indexes(headers(batches), base, interval)
    want_offsets, want_times = model(tmp_path, batches, base, interval)
    assert offset_entries.tolist() == want_offsets.tolist()
    assert time_entries.tolist() == want_times.tolist()


def test_hand_made_segment():
    batches = [
        (4000, 0, 9, 100),     # first batch: never indexed
        (200, 10, 19, 300),    # 4000 bytes since the last entry: not > 4096
        (500, 20, 29, 300),    # 4200 > 4096: entry (29, 4200), time (300, 19)
        (4097, 30, 39, 250),   # 500 since: nothing
        (20, 40, 49, 400),     # 4597 > 4096: entry (49, 8797), time (400, 49)
        (20, 50, 59, 500),     # max rises to 500 at 59, no entry: the final entry takes it
    ]
    offset_entries, time_entries = rebuild_indexes(headers(batches), 0)
    assert offset_entries.tolist() == [(29, 4200), (49, 8797)]
    assert time_entries.tolist() == [(300, 19), (400, 49), (500, 59)]
    assert encode_offset_index(offset_entries, 0) == bytes.fromhex(
        "0000001d00001068" "000000310000225d")
    assert encode_time_index(time_entries, 0) == bytes.fromhex(
        "000000000000012c00000013" "000000000000019000000031" "00000000000001f40000003b")


def test_no_timestamps_and_empty_input():
    offset_entries, time_entries = rebuild_indexes(headers([(5000, 0, 0, -1)] * 1), 0)
    assert len(offset_entries) == 0 and len(time_entries) == 0
    offset_entries, time_entries = rebuild_indexes(headers([]), 7)
    assert offset_entries.dtype.names == ("offset", "position") and len(time_entries) == 0


def test_rebuild_stops_at_the_first_invalid_crc():
    rows = headers([(5000, 0, 0, 10), (5000, 1, 1, 20), (5000, 2, 2, 30)])
    dtype = np.dtype(HEADER_DTYPE.descr + [("crc_valid", "?")])
    with_crc = np.zeros(len(rows), dtype=dtype)
    for name in HEADER_DTYPE.names:
        with_crc[name] = rows[name]
    with_crc["crc_valid"] = [True, True, False]
    offset_entries, time_entries = rebuild_indexes(with_crc, 0)
    assert offset_entries.tolist() == [(1, 5000)]
    assert time_entries.tolist() == [(20, 1)]


@pytest.mark.parametrize("batches, error, where, position", [
    ([(5000, 0, 5, 1), (5000, 6, 9, 1), (5000, 10, 9, 1)], InvalidOffsetError, "not above",
     10000),
    ([(5000, 0, 0, 1), (5000, 1, 2**31 + 5, 1)], InvalidOffsetError, "outside", 5000),
    ([(11, 0, 0, 1)], ValueError, "12-byte", None),
])
def test_rebuild_errors(batches, error, where, position):
    with pytest.raises(error, match=where) as err:
        rebuild_indexes(headers(batches), 0)
    assert getattr(err.value, "position", None) == position


def test_rebuild_respects_max_index_size():
    batches = [(5000, i, i, 10 * i) for i in range(10)]
    with pytest.raises(IndexFullError):
        rebuild_indexes(headers(batches), 0, max_index_size=24)  # 2 time entries: 1 usable
    # 3 offset slots, 2 time slots of which the first is usable: the second index point fills
    # the time index.
    offset_entries, time_entries = rebuild_indexes(headers(batches[:2]), 0, max_index_size=24)
    assert offset_entries.tolist() == [(1, 5000)] and time_entries.tolist() == [(10, 1)]
    with pytest.raises(IndexFullError) as err:
        rebuild_indexes(headers(batches[:3]), 0, max_index_size=24)
    assert err.value.offset == 2 and err.value.position == 10000


def test_rebuild_rejects_bad_header_arrays():
    rows = headers([(100, 0, 0, 1), (100, 1, 1, 1)])
    rows["position"][1] = 101
    with pytest.raises(ValueError, match="contiguously"):
        rebuild_indexes(rows, 0)
    with pytest.raises(ValueError, match="lack"):
        rebuild_indexes(np.zeros(1, dtype=[("size", np.int32)]), 0)


def test_writers_match_the_index_classes(tmp_path):
    batches = concrete(100, [(3000, 3, 5)] * 30)
    offset_entries, time_entries = rebuild_indexes(headers(batches), 100, 4096)
    write_offset_index(tmp_path / "w.index", offset_entries, 100)
    write_time_index(tmp_path / "w.timeindex", time_entries, 100)
    want_offsets, want_times = model(tmp_path, batches, 100, 4096)
    with OffsetIndex(tmp_path / "r.index", 100) as index:
        for offset, position in want_offsets.tolist():
            index.append(offset, position)
    with TimeIndex(tmp_path / "r.timeindex", 100) as index:
        for timestamp, offset in want_times.tolist():
            index.maybe_append(timestamp, offset)
    assert (tmp_path / "w.index").read_bytes() == (tmp_path / "r.index").read_bytes()
    assert (tmp_path / "w.timeindex").read_bytes() == (tmp_path / "r.timeindex").read_bytes()
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(InvalidOffsetError):
        encode_offset_index(offset_entries, 10**6)


@pytest.mark.parametrize("commit, partition", [
    ("510714e", "__cluster_metadata-0"), ("510714e", "foo-0"), ("e856b9a", "foo-0")])
def test_rebuild_reproduces_real_kafka_indexes(commit, partition):
    import engine.records as records
    segment = DATADIR / commit / "kraft-combined-logs" / partition / "00000000000000000000"
    if not segment.with_suffix(".log").exists():
        pytest.fail(f"conformance vectors not found at {segment}")
    scan = records.scan_batches(segment.with_suffix(".log").read_bytes())
    offset_entries, time_entries = rebuild_indexes(scan.headers, 0)
    assert encode_offset_index(offset_entries, 0) == segment.with_suffix(".index").read_bytes()
    assert encode_time_index(time_entries, 0) == segment.with_suffix(".timeindex").read_bytes()


@pytest.mark.parametrize("commit, partition", [
    ("510714e", "__cluster_metadata-0"), ("510714e", "foo-0"), ("e856b9a", "foo-0")])
def test_segment_recovery_writes_kafkas_index_files(tmp_path, commit, partition):
    # the whole recovery path (scan, rebuild, bulk writes into the mapped files, final time
    # entry, trim on close) on a copy of the segment, with its index files deleted first
    import shutil

    from engine.log import LogSegment
    source = DATADIR / commit / "kraft-combined-logs" / partition / "00000000000000000000"
    if not source.with_suffix(".log").exists():
        pytest.fail(f"conformance vectors not found at {source}")
    shutil.copyfile(source.with_suffix(".log"), tmp_path / source.with_suffix(".log").name)
    segment = LogSegment.open(tmp_path, 0)
    assert segment.recover() == 0
    segment.close()
    for suffix in (".index", ".timeindex"):
        assert (tmp_path / source.with_suffix(suffix).name).read_bytes() == \
            source.with_suffix(suffix).read_bytes(), suffix


def test_live_kafka_index_with_a_restart_differs_as_expected(tmp_path):
    # e856b9a's metadata log was written by two broker runs (leader epoch 2 starts at 81). A
    # clean shutdown appended the final time entry (max so far, offset 80) and the restart
    # reset the byte counter, so Kafka's live files differ from what recovery rebuilds; the
    # rebuild still equals the recovery model.
    import engine.records as records
    segment = (DATADIR / "e856b9a" / "kraft-combined-logs" / "__cluster_metadata-0"
               / "00000000000000000000")
    if not segment.with_suffix(".log").exists():
        pytest.fail(f"conformance vectors not found at {segment}")
    rows = records.scan_batches(segment.with_suffix(".log").read_bytes()).headers
    offset_entries, time_entries = rebuild_indexes(rows, 0)
    batches = [(int(r["size"]), int(r["base_offset"]), int(r["last_offset"]),
                int(r["max_timestamp"])) for r in rows]
    want_offsets, want_times = model(tmp_path, batches, 0, 4096)
    assert offset_entries.tolist() == want_offsets.tolist()
    assert time_entries.tolist() == want_times.tolist()
    live = OffsetIndex(segment.with_suffix(".index"), 0, writable=False)
    assert live.entries_array().tolist() == [(56, 4123)] == offset_entries.tolist()[:1]
    live.close()
