"""UnifiedLog: leader/follower appends, rolls, reads across segments, recovery, deletion;
LeaderEpochFileCache."""

import logging
import os
import struct
import zlib

import pytest
from broker_support import engine_in_process

from engine.common import Uuid
from engine.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    KafkaEngineError,
    OffsetOutOfRangeError,
)
from engine.log import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
    PartitionMetadataFile,
    UnifiedLog,
)
from engine.records import CompressionType, FileRecords, MemoryRecords, RecordBatchBuilder
from engine.records.sample import sample_batches

CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4,
          CompressionType.ZSTD, CompressionType.SNAPPY]
T0 = 1_700_000_000_000


def _batches(n, codec=CompressionType.NONE, *, batch_size=10, base_offset=12345, seed=1):
    # Offsets and epochs in the input are deliberately wrong: the leader must replace them.
    return list(sample_batches(n, codec, batch_size=batch_size, base_offset=base_offset,
                               seed=seed, min_value=50, max_value=400,
                               partition_leader_epoch=77))


def _batch(values=(b"v",), *, base_offset=0, timestamp=T0, epoch=-1, codec=0):
    b = RecordBatchBuilder(base_offset=base_offset, compression_type=codec,
                           partition_leader_epoch=epoch)
    for v in values:
        b.append(v, key=b"k", timestamp=timestamp)
    return b.build()


def _file_batches(log):
    """(base offset, last offset, leader epoch) of every batch in every .log, in order."""
    out = []
    for seg in log.segments:
        with FileRecords(seg.log_file) as fr:
            fr.validate()
            out += [(int(h["base_offset"]), int(h["last_offset"]),
                     int(h["partition_leader_epoch"])) for h in fr.scan(verify_crc=True)]
    return out


def _read_all(log, max_bytes=3000):
    """Every record (offset, value) by fetching from the log start with the hints."""
    offset, out = log.log_start_offset, []
    while offset < log.log_end_offset:
        view, nxt = log.read(offset, max_bytes)
        assert nxt > offset
        for r in MemoryRecords(bytes(view)).records():
            if r.offset >= offset:
                out.append((r.offset, r.value))
        offset = nxt
    return out


def _verify_dir(path):
    files = sorted(str(p) for p in path.iterdir())
    proc = engine_in_process("dump-log", "--verify", *files, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return files


# -- appends, rolls, reads ---------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CompressionType(c).name)
def test_leader_append_roll_read_across_segments(tmp_path, codec):
    d = tmp_path / "topic-0"
    log = UnifiedLog.open(d, segment_bytes=6000, index_interval_bytes=1024)
    batches = _batches(400, codec)
    expected = []
    for i, data in enumerate(batches):
        first, last = log.append_as_leader(data, 5 + i // 15)
        assert (first, last) == (10 * i, 10 * i + 9)
        expected += [(10 * i + j, r.value) for j, r in
                     enumerate(MemoryRecords(data).records())]
    assert log.log_start_offset == 0 and log.log_end_offset == 400
    assert len(log.segments) > 2
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    for seg in log.segments[:-1]:
        assert seg.size_in_bytes <= 6000
    # Offsets rewritten and epochs stamped in the files; CRCs still valid.
    on_disk = _file_batches(log)
    assert [(b, last) for b, last, _ in on_disk] == [(10 * i, 10 * i + 9) for i in range(40)]
    assert [e for _, _, e in on_disk] == [5 + i // 15 for i in range(40)]
    # Each segment's base offset is its first batch's base offset.
    for seg in log.segments:
        with FileRecords(seg.log_file) as fr:
            assert int(fr.scan()["base_offset"][0]) == seg.base_offset
    assert _read_all(log) == expected
    assert log.leader_epoch_cache.entries == [EpochEntry(5, 0), EpochEntry(6, 150),
                                              EpochEntry(7, 300)]
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n3\n5 0\n6 150\n7 300\n"
    log.close()
    _verify_dir(d)


def test_read_returns_whole_batches_and_hints(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", segment_bytes=5000)
    for data in _batches(200):
        log.append_as_leader(data, 0)
    # Inside a batch: the whole batch from its base offset; the hint is the next batch.
    view, nxt = log.read(13, 1)
    assert [b.base_offset for b in MemoryRecords(bytes(view)).batches()] == [10]
    assert nxt == 20
    # min_one_message=False with too small a budget gives nothing.
    view, nxt = log.read(13, 1, min_one_message=False)
    assert view.nbytes == 0 and nxt == 13
    # A read never crosses a segment boundary (Kafka reads one segment per fetch).
    seg1 = log.segments[1]
    view, nxt = log.read(seg1.base_offset - 1, 10 ** 9)
    assert nxt == seg1.base_offset
    # At the log end: empty.
    view, nxt = log.read(log.log_end_offset, 1000)
    assert view.nbytes == 0 and nxt == log.log_end_offset
    log.close()


def test_offset_out_of_range_names_the_valid_range(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", segment_bytes=5000)
    for data in _batches(100):
        log.append_as_leader(data, 0)
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(101, 100)
    err = info.value
    assert isinstance(err, KafkaEngineError) and isinstance(err, ValueError)
    assert (err.offset, err.log_start_offset, err.log_end_offset) == (101, 0, 100)
    assert "[0, 100]" in str(err)
    log.delete_records(35)
    with pytest.raises(OffsetOutOfRangeError, match=r"\[35, 100\]"):
        log.read(34, 100)
    view, _ = log.read(35, 100)
    assert [b.base_offset for b in MemoryRecords(bytes(view)).batches()] == [30]
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(101)
    log.close()


def test_roll_on_full_index(tmp_path):
    # 24-byte indexes: the time index (12-byte entries, one slot reserved) is full after
    # one entry, and with index_interval_bytes=0 every append after the first adds one.
    log = UnifiedLog.open(tmp_path / "t-0", segment_index_bytes=24, index_interval_bytes=0)
    for i in range(6):
        log.append_as_leader(_batch(timestamp=T0 + i), 0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    for seg in log.segments[:-1]:
        assert seg.offset_index.entries == 1
    log.close()
    _verify_dir(tmp_path / "t-0")


def test_roll_on_segment_ms_uses_batch_timestamps(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", segment_ms=1000)
    log.append_as_leader(_batch(timestamp=T0), 0)
    log.append_as_leader(_batch(timestamp=T0 + 1000), 0)  # not more than segment.ms
    assert len(log.segments) == 1
    log.append_as_leader(_batch(timestamp=T0 + 1001), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append_as_leader(_batch(timestamp=T0 + 1500), 0)
    assert len(log.segments) == 2
    log.append_as_leader(_batch(timestamp=T0 + 2002), 0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    # The rolled segment's final time-index entry holds its max timestamp.
    assert log.segments[0].time_index.last_entry.timestamp == T0 + 1000
    log.close()


def test_roll_on_size_and_on_request(tmp_path):
    one = _batch([b"x" * 100])
    log = UnifiedLog.open(tmp_path / "t-0", segment_bytes=3 * len(one))
    for _ in range(4):
        log.append_as_leader(one, 0)
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 3, 4]
    log.roll()  # the active segment is empty: nothing to do
    assert [s.base_offset for s in log.segments] == [0, 3, 4]
    log.append_as_leader(one, 0)
    assert log.log_end_offset == 5
    log.close()
    _verify_dir(tmp_path / "t-0")


def test_append_validation(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0")
    good = _batch([b"a", b"b"])
    with pytest.raises(InvalidRecordError, match="partial"):
        log.append_as_leader(good[:-3], 0)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(bad), 0)
    # A magic v1 message (legacy format): refused.
    body = struct.pack(">bbqi", 1, 0, T0, -1) + struct.pack(">i", 1) + b"v"
    v1 = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body
    with pytest.raises(InvalidRecordError, match="magic v1"):
        log.append_as_leader(v1, 0)
    with pytest.raises(ValueError):
        log.append_as_leader(good, -1)
    assert log.log_end_offset == 0 and log.active_segment.size_in_bytes == 0
    assert log.append_as_leader(good, 0) == (0, 1)
    log.close()


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0")
    assert log.append_as_follower(_batch(base_offset=0, epoch=2)) == (0, 0)
    assert log.append_as_follower(_batch([b"a", b"b"], base_offset=5, epoch=4)) == (5, 6)
    with pytest.raises(InvalidOffsetError):
        log.append_as_follower(_batch(base_offset=6, epoch=4))
    assert log.log_end_offset == 7
    assert _file_batches(log) == [(0, 0, 2), (5, 6, 4)]
    assert log.leader_epoch_cache.entries == [EpochEntry(2, 0), EpochEntry(4, 5)]
    _, nxt = log.read(1, 1000)
    assert nxt == 7
    log.close()


def test_reopen_after_close_gives_same_reads(tmp_path):
    d = tmp_path / "t-0"
    topic_id = Uuid.random()
    log = UnifiedLog.open(d, segment_bytes=8000, index_interval_bytes=500, topic_id=topic_id)
    for i, data in enumerate(_batches(300, CompressionType.LZ4)):
        log.append_as_leader(data, i // 10)
    reads = {o: bytes(log.read(o, 2000)[0]) for o in range(0, 300, 7)}
    everything = _read_all(log)
    log.close()
    assert PartitionMetadataFile(d / "partition.metadata").read().topic_id == topic_id
    for clean in (True, False):
        log = UnifiedLog.open(d, segment_bytes=8000, index_interval_bytes=500,
                              clean_shutdown=clean, topic_id=str(topic_id))
        assert (log.log_start_offset, log.log_end_offset) == (0, 300)
        assert {o: bytes(log.read(o, 2000)[0]) for o in reads} == reads
        assert _read_all(log) == everything
        assert log.leader_epoch_cache.latest_entry == EpochEntry(2, 200)
        log.append_as_leader(_batch(), 3)
        log.truncate_to(300)
        log.close()
    with pytest.raises(ValueError):
        UnifiedLog.open(d, topic_id=Uuid.random())
    _verify_dir(d)


# -- recovery -----------------------------------------------------------------------------

def _fill(d, n=300, **kw):
    log = UnifiedLog.open(d, segment_bytes=6000, index_interval_bytes=1000, **kw)
    for i, data in enumerate(_batches(n, CompressionType.ZSTD)):
        log.append_as_leader(data, i // 10)
    everything = _read_all(log)
    log.close()
    return everything


def test_recovery_truncates_a_torn_tail(tmp_path, caplog):
    d = tmp_path / "t-0"
    everything = _fill(d)
    last = max(d.glob("*.log"))
    with FileRecords(last) as fr:
        h = fr.scan()[-1]
        cut_from, lost_base = int(h["position"]) + 5, int(h["base_offset"])
    size = last.stat().st_size
    os.truncate(last, cut_from)
    with caplog.at_level(logging.WARNING):
        log = UnifiedLog.open(d, segment_bytes=6000, index_interval_bytes=1000)
    assert log.log_end_offset == lost_base
    assert last.stat().st_size == cut_from - 5
    assert _read_all(log) == [r for r in everything if r[0] < lost_base]
    assert "truncated 5 bytes" in caplog.text
    log.append_as_leader(_batch(), 9)  # the log goes on from the clean end
    assert log.log_end_offset == lost_base + 1
    log.close()
    assert size > cut_from
    _verify_dir(d)


def test_recovery_of_corrupt_middle_segment_drops_only_what_follows(tmp_path, caplog):
    d = tmp_path / "t-0"
    everything = _fill(d)
    logs = sorted(d.glob("*.log"))
    assert len(logs) >= 4
    middle = logs[1]
    with FileRecords(middle) as fr:
        h = fr.scan()[2]  # third batch of the second segment
        bad_pos, bad_base = int(h["position"]), int(h["base_offset"])
    raw = bytearray(middle.read_bytes())
    raw[bad_pos + 70] ^= 0x55  # inside the CRC-covered records
    middle.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        log = UnifiedLog.open(d, segment_bytes=6000, index_interval_bytes=1000,
                              recovery_point=0)
    assert [s.log_file for s in log.segments] == logs[:2]
    assert not any(p.exists() for p in logs[2:])
    assert middle.stat().st_size == bad_pos
    assert log.log_end_offset == bad_base
    assert _read_all(log) == [r for r in everything if r[0] < bad_base]
    # The warning names the truncated segment and every dropped one.
    assert middle.name in caplog.text and "bad CRC" in caplog.text
    for p in logs[2:]:
        assert p.name in caplog.text
    assert log.leader_epoch_cache.entries[-1].start_offset < bad_base
    assert (d / "leader-epoch-checkpoint").read_text().endswith(
        "".join(f"{e.epoch} {e.start_offset}\n" for e in log.leader_epoch_cache.entries))
    log.close()
    _verify_dir(d)


def test_recovery_point_and_clean_shutdown(tmp_path, caplog):
    d = tmp_path / "t-0"
    _fill(d)
    logs = sorted(d.glob("*.log"))
    # A corrupt batch before the recovery point's segment is not scanned for...
    raw = bytearray(logs[0].read_bytes())
    raw[100] ^= 0x01
    logs[0].write_bytes(bytes(raw))
    last_base = int(logs[-1].name[:20])
    log = UnifiedLog.open(d, segment_bytes=6000, recovery_point=last_base)
    assert len(log.segments) == len(logs)
    log.close()
    # ... and neither is anything on a clean shutdown, unless an index is insane.
    log = UnifiedLog.open(d, segment_bytes=6000, clean_shutdown=True)
    assert len(log.segments) == len(logs)
    log.close()
    index = logs[0].with_suffix(".index")
    index.write_bytes(index.read_bytes() + b"\x00\x00\x00")  # not a multiple of 8
    with caplog.at_level(logging.WARNING):
        log = UnifiedLog.open(d, segment_bytes=6000, clean_shutdown=True)
    assert "corrupt" in caplog.text
    assert len(log.segments) == 1  # recovery of segment 0 found the bad batch
    log.close()
    _verify_dir(d)


def test_leftover_files_are_cleaned(tmp_path):
    d = tmp_path / "t-0"
    _fill(d, n=50)
    (d / "00000000000000000010.log.deleted").write_bytes(b"junk")
    (d / "00000000000000000010.index.cleaned").write_bytes(b"junk")
    (d / "00000000000000000099.index").write_bytes(b"")  # no .log
    (d / "00000000000000000000.index.swap").write_bytes(b"junk")
    log = UnifiedLog.open(d)
    assert log.log_end_offset == 50
    log.close()
    names = {p.name for p in d.iterdir()}
    assert not any(n.endswith((".deleted", ".cleaned", ".swap")) for n in names)
    assert "00000000000000000099.index" not in names
    assert {"00000000000000000000.log", "00000000000000000000.index",
            "00000000000000000000.timeindex", "leader-epoch-checkpoint"} <= names
    _verify_dir(d)


# -- truncation and deletion ----------------------------------------------------------------

def test_truncate_to_and_delete_segments(tmp_path):
    d = tmp_path / "t-0"
    log = UnifiedLog.open(d, segment_bytes=6000, index_interval_bytes=1000)
    for i, data in enumerate(_batches(300)):
        log.append_as_leader(data, i // 10)
    bases = [s.base_offset for s in log.segments]
    # Truncate into the second segment: later segments go, epochs after it too.
    cut = bases[1] + 5
    assert log.truncate_to(cut)
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert log.log_end_offset == cut - cut % 10  # whole batches only
    assert log.leader_epoch_cache.latest_entry.start_offset < log.log_end_offset
    assert not log.truncate_to(10 ** 6)
    end = log.log_end_offset
    first, _ = log.append_as_leader(_batch(), 50)
    assert first == end
    # Retention's hook: delete the oldest segment only.
    assert log.delete_segments(lambda seg, nxt: seg.base_offset == 0) == 1
    assert log.log_start_offset == bases[1]
    assert log.leader_epoch_cache.entries[0].start_offset == bases[1]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # DeleteRecords moves the start; the breached segments go through the same hook.
    log.roll()
    log.append_as_leader(_batch(), 50)
    log.delete_records(log.log_end_offset - 1)
    assert len(log.segments) == 2
    assert log.delete_log_start_offset_breached_segments() == 1
    assert [s.base_offset for s in log.segments] == [log.log_end_offset - 1]
    # Deleting everything rolls first, so an empty active segment remains.
    assert log.delete_segments(lambda seg, nxt: True) == 1
    assert log.log_start_offset == log.log_end_offset == log.active_segment.base_offset
    assert log.active_segment.size_in_bytes == 0
    log.close()
    _verify_dir(d)


def test_truncate_below_log_start_restarts_the_log(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0")
    for data in _batches(30):
        log.append_as_leader(data, 1)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.leader_epoch_cache.entries == []
    assert log.append_as_leader(_batch(), 2) == (0, 0)
    log.close()


# -- the epoch cache ------------------------------------------------------------------------

def test_leader_epoch_cache_rules(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch, later offset: nothing to do
    assert cache.assign(2, 10) and cache.assign(4, 20)
    assert [cache.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 99)] == [1, 1, 2, 2, 4, 4]
    assert cache.end_offset_for(4, 50) == (4, 50)
    assert cache.end_offset_for(2, 50) == (2, 20)
    assert cache.end_offset_for(3, 50) == (2, 20)  # unknown epoch: the floor one's end
    assert cache.end_offset_for(0, 50) == (0, 0)
    assert cache.end_offset_for(5, 50) == (-1, -1)
    assert cache.end_offset_for(-1, 50) == (-1, -1)
    # A lower epoch or earlier offset removes the entries it conflicts with.
    assert cache.assign(3, 15)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(3, 15)]
    assert path.read_text() == "0\n3\n1 0\n2 10\n3 15\n"
    cache.truncate_from_end(15)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [EpochEntry(2, 12)]
    assert LeaderEpochFileCache(LeaderEpochCheckpointFile(path)).entries == [EpochEntry(2, 12)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_log_swap_replaces_the_segments_it_covers(tmp_path):
    d = tmp_path / "t-0"
    everything = _fill(d, n=100)
    logs = sorted(d.glob("*.log"))
    assert len(logs) >= 2
    # An interrupted replacement: the new content is in .log.swap, the old .log is damaged.
    swap = logs[0].with_name(logs[0].name + ".swap")
    swap.write_bytes(logs[0].read_bytes())
    os.truncate(logs[0], 10)
    log = UnifiedLog.open(d, segment_bytes=6000, index_interval_bytes=1000)
    assert not swap.exists()
    assert [s.log_file for s in log.segments] == logs
    assert _read_all(log) == everything
    log.close()
    _verify_dir(d)
