"""LogSegment: appends, index entries, reads, timestamp search, roll, truncation, recovery."""

import logging
import os

import numpy as np
import pytest
from broker_support import engine_in_process

from engine.errors import InvalidRecordError
from engine.log import (
    FetchDataInfo,
    LogSegment,
    LogSegmentOffsetOverflowError,
    OffsetIndex,
    TimeIndex,
    rebuild_indexes,
)
from engine.log.offset_index import OFFSET_INDEX_FILE_DTYPE
from engine.log.time_index import TIME_INDEX_FILE_DTYPE
from engine.records import CompressionType, MemoryRecords, RecordBatchBuilder, scan_batches
from engine.records.sample import sample_batches

INTERVAL = 4096
MAX_INDEX = 64 * 1024
CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4,
          CompressionType.ZSTD, CompressionType.SNAPPY]


def _batches(n=600, codec=CompressionType.NONE, base_offset=0, batch_size=10, seed=1,
             start_timestamp=1_700_000_000_000):
    return list(sample_batches(n, codec, batch_size=batch_size, base_offset=base_offset,
                               seed=seed, start_timestamp=start_timestamp, min_value=50,
                               max_value=400))


def _append_batch(seg, data):
    h = scan_batches(data).headers[0]
    seg.append(int(h["last_offset"]), int(h["max_timestamp"]), int(h["last_offset"]), data)


def _segment(tmp_path, batches, base_offset=0, **kw):
    kw.setdefault("index_interval_bytes", INTERVAL)
    kw.setdefault("max_index_size", MAX_INDEX)
    seg = LogSegment.create(tmp_path, base_offset, **kw)
    for b in batches:
        _append_batch(seg, b)
    return seg


def _names(base=0):
    return {s: f"{base:020d}{s}" for s in (".log", ".index", ".timeindex", ".txnindex")}


def _verify(tmp_path, base=0, ok=True):
    n = _names(base)
    files = [tmp_path / n[s] for s in (".log", ".index", ".timeindex")]
    proc = engine_in_process("dump-log", "--verify", *map(str, files), check=False)
    assert (proc.returncode == 0) == ok, proc.stdout[-2000:] + proc.stderr[-2000:]


def _expected_entries(data, base=0, interval=INTERVAL):
    return rebuild_indexes(scan_batches(data).headers, base, interval, MAX_INDEX)


def _index_arrays(seg):
    return seg.offset_index.entries_array(), seg.time_index.entries_array()


@pytest.mark.parametrize("codec", CODECS)
def test_append_read_round_trip_and_index_entries_match_rebuild(tmp_path, codec):
    batches = _batches(codec=codec)
    data = b"".join(batches)
    seg = _segment(tmp_path, batches)
    assert seg.size_in_bytes == len(data)
    assert (tmp_path / _names()[".log"]).read_bytes() == data
    offsets, times = _index_arrays(seg)
    want_off, want_time = _expected_entries(data)
    assert len(offsets) > 2 or codec != CompressionType.NONE
    np.testing.assert_array_equal(offsets, want_off)
    # the rebuild ends with the final entry; the active segment writes it on roll
    np.testing.assert_array_equal(times, want_time[: len(times)])
    seg.on_become_inactive_segment()
    np.testing.assert_array_equal(seg.time_index.entries_array(), want_time)
    got = seg.read(0, len(data) + 10)
    assert got.position == 0 and bytes(got.records) == data
    values = [r.value for r in MemoryRecords(got.records).records()]
    assert len(values) == 600
    assert seg.next_offset() == 600
    seg.close()


def test_first_append_gets_no_entry_and_entry_is_chunk_start(tmp_path):
    batches = _batches(200)
    seg = _segment(tmp_path, [], index_interval_bytes=0)
    chunk = b"".join(batches[:3])
    last = scan_batches(chunk).headers[-1]
    seg.append(int(last["last_offset"]), int(last["max_timestamp"]), int(last["last_offset"]),
               chunk)
    assert seg.offset_index.entries == 0
    chunk2 = b"".join(batches[3:6])
    h2 = scan_batches(chunk2).headers
    seg.append(int(h2["last_offset"][-1]), int(h2["max_timestamp"].max()),
               int(h2["last_offset"][-1]), chunk2)
    assert seg.offset_index.entries == 1
    entry = seg.offset_index.entry(0)
    assert (entry.offset, entry.position) == (int(h2["last_offset"][-1]), len(chunk))
    seg.close()


def test_relative_offset_overflow_is_typed_error(tmp_path):
    seg = _segment(tmp_path, [], base_offset=100)
    b = RecordBatchBuilder(base_offset=100 + 2**31)
    b.append(b"x", timestamp=5)
    data = b.build()
    with pytest.raises(LogSegmentOffsetOverflowError) as info:
        seg.append(100 + 2**31, 5, 100 + 2**31, data)
    assert isinstance(info.value, ValueError) and info.value.offset == 100 + 2**31
    with pytest.raises(InvalidRecordError):
        good = _batches(10)[0]
        seg.append(109, 0, 109, good[:-3])
    assert seg.size_in_bytes == 0
    seg.close()


def test_read_slices(tmp_path):
    batches = _batches(300)
    data = b"".join(batches)
    headers = scan_batches(data).headers
    seg = _segment(tmp_path, batches)
    # an offset in the middle of a batch starts at that batch, found after an index entry
    i = len(headers) - 3
    mid = int(headers["base_offset"][i]) + 4
    got = seg.read(mid, 1 << 20)
    assert isinstance(got, FetchDataInfo) and got.position == int(headers["position"][i])
    assert bytes(got.records) == data[got.position:]
    # max_size below the first batch: whole first batch with min_one_message, else nothing
    got = seg.read(mid, 10)
    assert got.records.nbytes == int(headers["size"][i])
    assert seg.read(mid, 10, min_one_message=False).records.nbytes == 0
    # whole batches only, up to max_size
    size2 = int(headers["size"][i] + headers["size"][i + 1])
    assert seg.read(mid, size2 + 5).records.nbytes == size2
    assert seg.read(mid, size2 - 1).records.nbytes == int(headers["size"][i])
    # max_position bounds the read
    got = seg.read(0, 1 << 20, max_position=int(headers["position"][2]))
    assert got.records.nbytes == int(headers["position"][2])
    # past the end
    assert seg.read(300, 100) is None and seg.read(10_000, 100) is None
    assert seg.read(299, 1).records.nbytes == int(headers["size"][-1])
    # zero copy: the view shares the mapping
    assert isinstance(got.records, memoryview) and got.records.readonly
    del got
    seg.close()


def test_find_offset_by_timestamp(tmp_path):
    batches = _batches(400, codec=CompressionType.LZ4)
    seg = _segment(tmp_path, batches)
    records = list(MemoryRecords(b"".join(batches)).records())
    for target in (records[0].timestamp - 5, records[37].timestamp, records[250].timestamp + 1,
                   records[-1].timestamp):
        want = next(r for r in records if r.timestamp >= target)
        got = seg.find_offset_by_timestamp(target)
        assert (got.timestamp, got.offset, got.leader_epoch) == (want.timestamp, want.offset, 0)
    start = 300
    target = records[10].timestamp
    want = next(r for r in records if r.timestamp >= target and r.offset >= start)
    assert seg.find_offset_by_timestamp(target, start).offset == want.offset
    assert seg.find_offset_by_timestamp(records[-1].timestamp + 1) is None
    assert seg.largest_timestamp == max(r.timestamp for r in records)
    seg.close()


def test_roll_trims_indexes_and_reopen_gives_identical_files(tmp_path):
    seg = _segment(tmp_path, _batches(600))
    n = _names()
    assert os.path.getsize(tmp_path / n[".index"]) == MAX_INDEX
    assert os.path.getsize(tmp_path / n[".timeindex"]) == MAX_INDEX - MAX_INDEX % 12
    seg.on_become_inactive_segment()
    assert os.path.getsize(tmp_path / n[".index"]) == seg.offset_index.entries * 8
    assert os.path.getsize(tmp_path / n[".timeindex"]) == seg.time_index.entries * 12
    assert seg.time_index.last_entry.timestamp == seg.max_timestamp_so_far
    seg.close()
    assert not (tmp_path / n[".txnindex"]).exists()
    before = {s: (tmp_path / f).read_bytes() for s, f in n.items() if s != ".txnindex"}
    _verify(tmp_path)
    seg = LogSegment.open(tmp_path, 0, max_index_size=MAX_INDEX)
    assert seg.next_offset() == 600
    assert seg.max_timestamp_so_far == seg.time_index.last_entry.timestamp
    seg.close()
    after = {s: (tmp_path / f).read_bytes() for s, f in n.items() if s != ".txnindex"}
    assert after == before
    with pytest.raises(FileExistsError):
        LogSegment.create(tmp_path, 0)


def test_close_of_active_segment_writes_final_time_entry(tmp_path):
    batches = _batches(600)
    seg = _segment(tmp_path, batches)
    seg.close()
    _, want_time = _expected_entries(b"".join(batches))
    n = _names()
    raw = np.frombuffer((tmp_path / n[".timeindex"]).read_bytes(), TIME_INDEX_FILE_DTYPE)
    assert [int(x) for x in raw["timestamp"]] == [int(x) for x in want_time["timestamp"]]
    _verify(tmp_path)


def test_truncate_to(tmp_path):
    batches = _batches(600)
    data = b"".join(batches)
    headers = scan_batches(data).headers
    seg = _segment(tmp_path, batches)
    i = len(headers) // 2
    cut = int(headers["base_offset"][i]) + 3  # inside batch i: the whole batch goes
    removed = seg.truncate_to(cut)
    kept = int(headers["position"][i])
    assert removed == len(data) - kept and seg.size_in_bytes == kept
    assert seg.next_offset() == int(headers["base_offset"][i])
    offsets, times = _index_arrays(seg)
    assert (offsets["offset"] < cut).all() and (times["offset"] < cut).all()
    want_off, _ = _expected_entries(data[:kept])
    np.testing.assert_array_equal(offsets, want_off)
    assert seg.offset_index.max_entries == MAX_INDEX // 8  # active again
    assert seg.max_timestamp_so_far == int(headers["max_timestamp"][:i].max())
    assert seg.truncate_to(10_000) == 0
    # appending continues where it stopped
    for b in batches[i:]:
        _append_batch(seg, b)
    assert (tmp_path / _names()[".log"]).read_bytes() == data
    assert seg.truncate_to(0) == len(data) and seg.next_offset() == 0
    assert seg.offset_index.entries == 0 and seg.time_index.entries == 0
    seg.close()


def _torn_copy(tmp_path, data, name):
    d = tmp_path / name
    d.mkdir()
    (d / _names()[".log"]).write_bytes(data)
    return d


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, 200, -1])
def test_recover_torn_tail(tmp_path, cut, caplog):
    batches = _batches(400, codec=CompressionType.GZIP)
    data = b"".join(batches)
    last_pos = len(data) - len(batches[-1])
    torn = data[: last_pos + (cut if cut > 0 else len(batches[-1]) + cut)]
    d = _torn_copy(tmp_path, torn, "torn")
    seg = LogSegment.open(d, 0, max_index_size=MAX_INDEX)
    with caplog.at_level(logging.WARNING, logger="engine.log.segment"):
        assert seg.recover() == len(torn) - last_pos
    assert f"byte position {last_pos}" in caplog.text
    assert seg.size_in_bytes == last_pos and seg.next_offset() == 390
    want_off, want_time = _expected_entries(data[:last_pos])
    np.testing.assert_array_equal(seg.offset_index.entries_array(), want_off)
    np.testing.assert_array_equal(seg.time_index.entries_array(), want_time)
    seg.close()
    assert (d / _names()[".log"]).read_bytes() == data[:last_pos]
    _verify(d)


def test_recover_bit_flip_in_the_middle(tmp_path, caplog):
    batches = _batches(600)
    data = b"".join(batches)
    headers = scan_batches(data).headers
    i = len(headers) // 2
    bad = int(headers["position"][i])
    for name, where in (("crc", bad + 100), ("magic", bad + 16), ("length", bad + 9)):
        flipped = bytearray(data)
        flipped[where] ^= 0x40
        d = _torn_copy(tmp_path, bytes(flipped), name)
        seg = LogSegment.open(d, 0, max_index_size=MAX_INDEX)
        with caplog.at_level(logging.WARNING, logger="engine.log.segment"):
            assert seg.recover() == len(data) - bad, name
        assert seg.next_offset() == int(headers["base_offset"][i])
        want_off, want_time = _expected_entries(data[:bad])
        np.testing.assert_array_equal(seg.offset_index.entries_array(), want_off)
        np.testing.assert_array_equal(seg.time_index.entries_array(), want_time)
        seg.close()
        assert (d / _names()[".log"]).read_bytes() == data[:bad]
        _verify(d)
    assert f"byte position {bad}" in caplog.text


def test_recover_of_valid_log_keeps_everything_and_appends_continue(tmp_path):
    batches = _batches(600)
    data = b"".join(batches)
    seg = _segment(tmp_path, batches[:30])
    seg.close()
    seg = LogSegment.open(tmp_path, 0, max_index_size=MAX_INDEX)

    class Producers:
        rows = None

        def update(self, headers):
            Producers.rows = len(headers)

    assert seg.recover(Producers()) == 0 and Producers.rows == 30
    seg.resize_indexes()
    for b in batches[30:]:
        _append_batch(seg, b)
    seg.on_become_inactive_segment()
    want_off, want_time = _expected_entries(data)
    np.testing.assert_array_equal(seg.offset_index.entries_array(), want_off)
    # recovery wrote its final entry (the max of the first 30 batches) in between
    _, first = _expected_entries(b"".join(batches[:30]))
    later = want_time[want_time["timestamp"] > first["timestamp"][-1]]
    np.testing.assert_array_equal(seg.time_index.entries_array(), np.concatenate([first, later]))
    seg.close()
    _verify(tmp_path)


def test_nonzero_base_offset_suffix_flush_and_delete(tmp_path):
    base = 1234
    batches = _batches(100, base_offset=base, codec=CompressionType.ZSTD)
    seg = _segment(tmp_path, batches, base_offset=base, index_interval_bytes=100)
    seg.flush()
    assert seg.read(base + 55, 1).position > 0
    assert seg.next_offset() == base + 100
    seg.on_become_inactive_segment()
    raw = np.frombuffer((tmp_path / _names(base)[".index"]).read_bytes(), OFFSET_INDEX_FILE_DTYPE)
    assert raw["relative_offset"].min() > 0 and raw["relative_offset"].max() < 100
    seg.close()
    _verify(tmp_path, base)
    idx = OffsetIndex(tmp_path / _names(base)[".index"], base, writable=False)
    tix = TimeIndex(tmp_path / _names(base)[".timeindex"], base, writable=False)
    assert idx.entries == len(raw) and tix.entries >= 1
    idx.close()
    tix.close()
    seg = LogSegment.open(tmp_path, base)
    seg.delete()
    assert not list(tmp_path.iterdir())
    other = LogSegment.open(tmp_path, 7, file_suffix=".cleaned", max_index_size=MAX_INDEX)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{7:020d}.index.cleaned", f"{7:020d}.log.cleaned", f"{7:020d}.timeindex.cleaned"]
    other.delete()


def test_verify_helper_notices_an_index_that_disagrees_with_the_log(tmp_path):
    seg = _segment(tmp_path, _batches(600))
    seg.close()
    index = tmp_path / _names()[".index"]
    raw = bytearray(index.read_bytes())
    raw[-1] ^= 0x01  # the last entry's position no longer starts a batch
    index.write_bytes(bytes(raw))
    _verify(tmp_path, ok=False)
