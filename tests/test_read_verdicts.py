"""Remote reads verified once: a read skips its CRC pass only over bytes a read in this
process checked under the same read generation of the RSM (engine.remote.read_verdicts),
and every way those bytes may change drops the verdict: a chunk fetched from the store
again, the tier's file replaced or rewritten, another segment id."""

from __future__ import annotations

import os

import obstore
import pytest
from test_objectstore_rsm import copy, make_rsm, rsm_configs, segment  # noqa: F401 (fixture)
from test_rlm_helpers import TOPIC, Env, read_all

from engine._native import records as _native_records
from engine.errors import CorruptRecordError
from engine.remote import remote_log as remote_log_module
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import RemoteLogSegmentState
from engine.remote.read_verdicts import VERIFIED, VerifiedRanges
from engine.remote.remote_log import ChainSegments, RemoteLog, SegmentSpan, StoreIndexes


@pytest.fixture(autouse=True)
def _fresh_verdicts():
    VERIFIED.clear()
    yield
    VERIFIED.clear()


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
