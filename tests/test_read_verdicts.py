"""Remote reads verified once: a read skips its CRC pass only over bytes a read in this
process checked under the same read generation of the RSM (engine.remote.read_verdicts),
and every way those bytes may change drops the verdict: a chunk fetched from the store
again, the tier's file replaced or rewritten, another segment id."""

from __future__ import annotations

import os

import numpy as np
import obstore
import pytest
from test_objectstore_rsm import copy, make_rsm, rsm_configs, segment  # noqa: F401 (fixture)
from test_rlm_helpers import TOPIC, Env, read_all

from engine._native import records as _native_records
from engine.errors import CorruptRecordError
from engine.remote import remote_log as remote_log_module
from engine.remote.checked_batches import CHECKED_BATCHES, CheckedAnswer, CheckedBatches
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import RemoteLogSegmentState
from engine.remote.read_verdicts import VERIFIED, VerifiedRanges
from engine.remote.remote_log import ChainSegments, RemoteLog, SegmentSpan, StoreIndexes


@pytest.fixture(autouse=True)
def _fresh_verdicts():
    VERIFIED.clear()
    CHECKED_BATCHES.clear()
    yield
    VERIFIED.clear()
    CHECKED_BATCHES.clear()


@pytest.fixture
def crc_passes(monkeypatch):
    """The `crc` argument of every scan the remote read model makes of the bytes it serves."""
    seen: list[bool] = []

    class Spy:
        def __getattr__(self, name):
            return getattr(_native_records, name)

        @staticmethod
        def scan(view, crc=True):
            seen.append(bool(crc))
            return _native_records.scan(view, crc)

    monkeypatch.setattr(remote_log_module, "_records", Spy())
    return seen


def test_verified_ranges_merge_and_never_cross_a_generation_or_a_segment():
    v = VerifiedRanges()
    v.checked("a", 1, 0, 100)
    v.checked("a", 1, 200, 300)
    assert v.covers("a", 1, 10, 100) and not v.covers("a", 1, 50, 250)
    v.checked("a", 1, 100, 200)  # touching both: one range
    assert v.covers("a", 1, 0, 300)
    assert not v.covers("a", 2, 0, 10)  # another generation of the segment
    assert not v.covers("b", 1, 0, 10)  # another segment id
    v.checked("a", None, 0, 1000)  # no generation: never recorded, never vouched for
    assert not v.covers("a", None, 0, 10) and not v.covers("a", 1, 0, 301)
    small = VerifiedRanges(capacity=2)
    for seg in ("x", "y", "z"):
        small.checked(seg, 1, 0, 10)
    assert not small.covers("x", 1, 0, 10) and small.covers("z", 1, 0, 10)


def _size_tier(tmp_path, batches=30):
    rsm = FileSystemRemoteStorageManager([tmp_path / "remote"], fsync=False,
                                         log_read_verification="size")
    env = Env(tmp_path, rsm=rsm, topic_config={"local.retention.bytes": 1})
    env.produce(batches)
    env.rlm.run_once()
    tip = env.rlm._partitions[(TOPIC, 0)].tip
    mds = sorted((m for m in env.rlmm.list_remote_log_segments(tip)
                  if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
                 key=lambda m: m.start_offset)
    return env, mds


def _read_tier(env, mds):
    return read_all(env.rlm, TOPIC, 0, 0, mds[-1].end_offset + 1, max_bytes=200)


def _flip(path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def _value_byte(path) -> int:
    rows, _ = _native_records.scan(path.read_bytes(), False)
    return int(rows[1]["position"] + rows[1]["size"]) - 3


def test_a_size_tier_checks_each_range_once_under_one_file_identity(tmp_path, crc_passes):
    env, mds = _size_tier(tmp_path)
    try:
        first = _read_tier(env, mds)
        _read_tier(env, mds)  # a segment's first read opens its file: no generation yet
        crc_passes.clear()
        assert _read_tier(env, mds) == first
        assert not crc_passes  # every read cut from checked rows: no scan at all
        CHECKED_BATCHES.clear()
        assert _read_tier(env, mds) == first
        assert crc_passes and not any(crc_passes)  # every range was checked before
        env.rsm.read_generation = lambda md: None  # an RSM that never vouches
        crc_passes.clear()
        assert _read_tier(env, mds) == first
        assert all(crc_passes)
    finally:
        env.close()


@pytest.mark.parametrize("how", ["rewritten in place", "replaced"])
def test_a_changed_file_drops_the_verdict_and_its_flipped_byte_is_caught(tmp_path, how):
    env, mds = _size_tier(tmp_path)
    try:
        for _ in range(3):
            _read_tier(env, mds)
        path = env.rsm.segment_path(mds[0], ".log")
        at = _value_byte(path)
        st = os.stat(path)
        if how == "replaced":
            raw = bytearray(path.read_bytes())
            raw[at] ^= 0x01
            fresh = path.with_name(path.name + ".new")
            fresh.write_bytes(bytes(raw))
            os.replace(fresh, path)
            env.rsm._open_logs.clear()  # the next read opens the new file
        else:  # the open, mapped file's bytes change under the reader; so does its mtime
            _flip(path, at)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        with pytest.raises(CorruptRecordError, match="CRC"):
            _read_tier(env, mds)
    finally:
        env.close()


def test_a_verdict_never_covers_another_segment_id(tmp_path, crc_passes):
    env, mds = _size_tier(tmp_path)
    try:
        for _ in range(2):
            _read_tier(env, mds)
        md = mds[0]
        generation = env.rsm.read_generation(md)
        assert VERIFIED.covers(md.remote_log_segment_id.id, generation, 0,
                               md.segment_size_in_bytes)
        other = next(m for m in mds if m.remote_log_segment_id != md.remote_log_segment_id)
        assert not VERIFIED.covers(other.remote_log_segment_id.id, generation, 0, 1)
    finally:
        env.close()


def test_a_chunk_fetched_after_the_verdict_drops_it_and_a_flipped_byte_is_caught(
        s3_server, segment, crc_passes):  # noqa: F811 (the fixture)
    """Object store, memory chunk cache: reads check each range once per chunk fetches of
    the segment; chunks evicted and fetched again (from an object that changed meanwhile)
    move the generation on, so the flipped byte in them is a CRC error."""
    data, last, size = segment
    configs = rsm_configs(s3_server, fetch_chunk_cache_class="memory",
                          fetch_chunk_cache_size=str(size * 3 // 2))
    with make_rsm(configs) as rsm:
        rsm._verdicts.check_after = lambda *a: None  # only the readers' verdicts here
        md = copy(rsm, segment)
        log = RemoteLog(rsm, ChainSegments("t-0", [SegmentSpan(md, last + 1)]),
                        StoreIndexes(rsm))

        def read_through():
            offset = md.start_offset
            while offset <= last:
                offset = log.read(offset, 2000).next_offset

        for _ in range(2):
            read_through()
        before = rsm.read_generation(md)
        crc_passes.clear()
        read_through()
        assert not crc_passes  # cut from checked rows
        CHECKED_BATCHES.clear()
        read_through()
        assert crc_passes and not any(crc_passes)

        raw = bytearray(data.log_segment.read_bytes())
        at = _value_byte(data.log_segment)
        raw[at] ^= 0x01
        key = rsm._log_of(md, rsm._cached_segment(md)).key
        obstore.put(s3_server.raw_store(), key, bytes(raw))
        other = copy(rsm, segment)  # reading it evicts the first chunks of `md`
        rsm.read_range(other, 0, size)
        with pytest.raises(CorruptRecordError, match="CRC"):
            read_through()
        assert rsm.read_generation(md) != before


def _rows(first_offset: int, sizes: list[int], records: int = 10, magic: int = 2):
    """Header rows as a scan gives them (positions relative to the first batch's): batches
    of `records` offsets each, from `first_offset`."""
    rows = np.zeros(len(sizes), dtype=[("position", np.int64), ("size", np.int32),
                                       ("base_offset", np.int64), ("last_offset", np.int64),
                                       ("magic", np.int8)])
    rows["magic"] = magic
    rows["size"] = sizes
    rows["position"] = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rows["base_offset"] = first_offset + records * np.arange(len(sizes))
    rows["last_offset"] = rows["base_offset"] + records - 1
    return rows


def test_checked_rows_decide_a_read_only_where_they_reach():
    t = CheckedBatches()
    t.checked("s", 1, 0, _rows(0, [100] * 5))  # offsets 0-49, bytes 0-500
    assert t.answer("s", 1, 0, 250, 10**9, 1000) == CheckedAnswer(0, 200, 20, False)
    assert t.answer("s", 1, 15, 100, 10**9, 1000) == CheckedAnswer(100, 200, 20, False)
    assert t.answer("s", 1, 0, 50, 10**9, 1000) == CheckedAnswer(0, 100, 10, False)  # whole
    assert t.answer("s", 1, 0, 1000, 25, 1000) == CheckedAnswer(0, 300, 30, False)  # upto
    # the read may go past the last checked batch: only where to start is known
    assert t.answer("s", 1, 30, 1000, 10**9, 1000) == 300
    # ... unless the segment ends with the rows, or the upper bound stops the read there
    assert t.answer("s", 1, 30, 1000, 10**9, 500) == CheckedAnswer(300, 500, 50, True)
    assert t.answer("s", 1, 30, 1000, 50, 1000) == CheckedAnswer(300, 500, 50, True)
    assert t.answer("s", 1, 50, 100, 10**9, 1000) is None  # past the rows
    assert t.answer("s", None, 0, 100, 10**9, 1000) is None  # no generation: never
    assert t.answer("other", 1, 0, 100, 10**9, 1000) is None  # another segment id


def test_checked_rows_join_only_where_bytes_and_offsets_continue():
    t = CheckedBatches()
    t.checked("s", 1, 200, _rows(20, [100] * 2))  # bytes 200-400
    t.checked("s", 1, 0, _rows(0, [100] * 2))  # bytes 0-200: joins it
    assert t.rows("s", 1) == 4
    assert t.answer("s", 1, 0, 1000, 10**9, 400) == CheckedAnswer(0, 400, 40, True)
    t.checked("s", 1, 100, _rows(10, [100] * 3))  # read again: same rows
    assert t.rows("s", 1) == 4
    t.checked("s", 1, 400, _rows(41, [100]))  # offsets skip 40: not kept
    t.checked("s", 1, 350, _rows(40, [50]))  # starts inside a checked batch: not kept
    t.checked("s", 1, 0, _rows(0, [60, 100]))  # a batch read twice disagrees: not kept
    assert t.rows("s", 1) == 4
    assert t.answer("s", 1, 30, 1000, 10**9, 1000) == 300
    t.checked("s", 1, 0, _rows(0, [100, 100, 60, 100]))  # framing with a gap in it
    t.checked("s", 1, 600, _rows(60, [100]))  # apart from the run: a run of its own
    assert t.rows("s", 1) == 5
    t.checked("s", 1, 700, _rows(70, [100], magic=1))  # offsets may have gaps: not kept
    assert t.rows("s", 1) == 5
    assert t.answer("s", 1, 65, 50, 10**9, 1000) == CheckedAnswer(600, 700, 70, True)


def test_checked_rows_of_a_reader_going_on_extend_its_run():
    t = CheckedBatches()
    t.checked("s", 1, 0, _rows(0, [100] * 2))
    t.checked("s", 1, 200, _rows(20, [100] * 2))  # where the run ends
    t.checked("s", 1, 100, _rows(10, [100] * 5))  # over its tail, and on past it
    assert t.rows("s", 1) == 6
    assert t.answer("s", 1, 0, 10**6, 10**9, 600) == CheckedAnswer(0, 600, 60, True)
    t.checked("s", 1, 100, _rows(10, [100] * 6, records=9))  # offsets disagree: refused
    t.checked("s", 1, 550, _rows(55, [100]))  # inside the run's last batch: refused
    t.checked("s", 1, 600, _rows(61, [100]))  # offsets skip one: refused
    assert t.rows("s", 1) == 6
    t.checked("s", 1, 500, _rows(50, [100, 100]))
    assert t.answer("s", 1, 65, 10**6, 10**9, 700) == CheckedAnswer(600, 700, 70, True)


def test_checked_rows_never_outlive_their_generation_and_stay_bounded():
    t = CheckedBatches(max_rows=8)
    t.checked("s", 1, 0, _rows(0, [100] * 4))
    assert t.answer("s", 2, 0, 100, 10**9, 400) is None  # other bytes now: rows dropped
    assert t.rows("s", 1) == 0 and t.rows("s", 2) == 0
    t.checked("s", 1, 0, _rows(0, [100] * 4))
    t.checked("s", 2, 0, _rows(0, [100] * 2))  # recorded under a new generation
    assert t.rows("s", 1) == 0 and t.rows("s", 2) == 2
    for seg in ("x", "y", "z"):
        t.checked(seg, 1, 0, _rows(0, [100] * 3))
    assert t.rows("s", 2) == 0 and t.rows("x", 1) == 0  # the least recently used went
    assert t.rows("y", 1) == 3 and t.rows("z", 1) == 3
    t.drop("z")
    assert t.answer("z", 1, 0, 100, 10**9, 300) is None
    t.checked("big", 1, 0, _rows(0, [100] * 6))
    t.checked("big", 1, 600, _rows(60, [100] * 3))  # more than all may have: dropped
    assert t.rows("big", 1) == 0 and t.rows("y", 1) == 0


def test_rows_serve_only_a_read_whose_generation_stays_and_a_new_one_drops_them(
        tmp_path, crc_passes):
    env, mds = _size_tier(tmp_path)
    try:
        first = _read_tier(env, mds)
        _read_tier(env, mds)
        md = mds[0]
        seg_id, generation = md.remote_log_segment_id.id, env.rsm.read_generation(md)
        assert CHECKED_BATCHES.rows(seg_id, generation)
        real = env.rsm.read_generation
        calls = [0]

        def moved_after_the_first_ask(m):  # the 2nd ask of a read sees another generation
            calls[0] += 1
            return (real(m), "moved") if calls[0] == 2 else real(m)

        env.rsm.read_generation = moved_after_the_first_ask
        crc_passes.clear()
        result = env.rlm.read(TOPIC, 0, 0, 200)
        # rows matched the generation before the read, not after: the bytes were scanned
        # (no CRC pass: they are still the ones the 3rd ask names, checked before)
        assert crc_passes == [False] and result.next_offset > 0
        calls = iter(range(10**6))
        # the generation moves on during every read: no answer from rows, every byte
        # checked again, and nothing recorded under either generation
        env.rsm.read_generation = lambda m: (real(m), next(calls))
        crc_passes.clear()
        assert _read_tier(env, mds) == first
        assert crc_passes and all(crc_passes)
        assert not CHECKED_BATCHES.rows(seg_id, generation)  # dropped for another one
        env.rsm.read_generation = real
        crc_passes.clear()
        assert _read_tier(env, mds) == first
        # its rows were dropped: scanned again, the CRC verdicts of its bytes still count
        assert crc_passes and not any(crc_passes)
    finally:
        env.close()


def test_a_full_tier_cuts_rereads_from_checked_rows(tmp_path, crc_passes):
    rsm = FileSystemRemoteStorageManager([tmp_path / "remote"], fsync=False)
    env = Env(tmp_path, rsm=rsm, topic_config={"local.retention.bytes": 1})
    env.produce(30)
    env.rlm.run_once()
    try:
        tip = env.rlm._partitions[(TOPIC, 0)].tip
        mds = sorted(env.rlmm.list_remote_log_segments(tip), key=lambda m: m.start_offset)
        first = _read_tier(env, mds)
        _read_tier(env, mds)
        crc_passes.clear()
        assert _read_tier(env, mds) == first
        assert not crc_passes
    finally:
        env.close()
