"""Remote reads verified once: a read skips its CRC pass only over bytes a read in this
process checked under the same read generation of the RSM (engine.remote.read_verdicts),
and every way those bytes may change drops the verdict: a chunk fetched from the store
again, the tier's file replaced or rewritten, another segment id."""

from __future__ import annotations

import os

import numpy as np
import obstore
import pytest
from objectstore_support import plain_segment, wait_for
from test_objectstore_rsm import copy, make_rsm, rsm_configs, segment  # noqa: F401 (fixture)
from test_rlm_helpers import TOPIC, Env, read_all

from engine._native import records as _native_records
from engine.errors import CorruptRecordError
from engine.remote import checked_batches as checked_batches_module
from engine.remote import remote_log as remote_log_module
from engine.remote.checked_batches import CHECKED_BATCHES, CheckedAnswer, CheckedBatches
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import RemoteLogSegmentState
from engine.remote.objectstore import verdicts as verdicts_module
from engine.remote.objectstore.verdicts import BatchCrcVerdicts
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


@pytest.mark.parametrize("segment_pass", [False, True])
def test_a_chunk_fetched_after_the_verdict_drops_it_and_a_flipped_byte_is_caught(
        s3_server, segment, crc_passes, segment_pass):  # noqa: F811 (the fixture)
    """Object store, memory chunk cache: reads check each range once per chunk fetches of
    the segment; chunks evicted and fetched again (from an object that changed meanwhile)
    move the generation on, so the flipped byte in them is a CRC error. The same with the
    background pass, which builds its segment verdict on the readers' checks."""
    data, last, size = segment
    configs = rsm_configs(s3_server, fetch_chunk_cache_class="memory",
                          fetch_chunk_cache_size=str(size * 3 // 2))
    with make_rsm(configs) as rsm:
        if not segment_pass:
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
        if segment_pass:
            wait_for(lambda: rsm.verifies_batch_crcs(md), "the segment's pass")
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


def _cost(rows: int, runs: int = 1) -> int:
    """A segment's share of CheckedBatches.max_rows: its rows, and its runs' and its own
    objects."""
    return rows + runs * checked_batches_module._RUN_COST + checked_batches_module._SEGMENT_COST


def test_checked_rows_never_outlive_their_generation_and_stay_bounded():
    t = CheckedBatches(max_rows=_cost(2) + 2 * _cost(3))
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
    t.checked("big", 1, 600, _rows(60, [100] * 130))  # more than all may have: dropped
    assert t.rows("big", 1) == 0 and t.rows("y", 1) == 0


def test_many_small_runs_and_segments_stay_within_the_bound_and_cheap():
    """Rows are counted with what their runs and segments take: one-row segments by the
    thousand stay within the bound's memory, and a segment read at random keeps at most
    _MAX_RUNS runs (adding a row stays a short walk)."""
    import tracemalloc

    max_rows = 1 << 14  # 256 KiB of rows
    t = CheckedBatches(max_rows=max_rows)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20_000):
            t.checked(f"segment-{n}", 1, 0, _rows(n * 10, [100]))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * 16 * max_rows, held
    t.clear()
    for n in range(1000):  # disjoint one-batch reads of one segment
        t.checked("random", 1, n * 1000, _rows(n * 100, [100]))
    runs = t._segments["random"].runs
    assert len(runs) == checked_batches_module._MAX_RUNS
    assert t.answer("random", 1, 0, 100, 10**9, 10**6) == CheckedAnswer(0, 100, 10, True)


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


def test_a_cold_read_s_checks_count_toward_the_segment_verdict(
        s3_server, segment, monkeypatch):  # noqa: F811 (the fixture)
    """A cold sequential read fetches each chunk for the first time, which leaves the read
    generation as it was: the reads' checks are kept, and the background pass over the
    segment CRCs only what no read checked (the first read, which met the upload's first
    fetch, and the last read when the pass it queued overtakes it), not the segment
    again."""
    _, last, size = segment
    configs = rsm_configs(s3_server, fetch_chunk_cache_class="memory",
                          fetch_chunk_cache_size=str(size * 3 // 2),
                          fetch_chunk_cache_prefetch_max_size=str(4 * 1000))
    passed: list[int] = []

    class Spy:
        def __getattr__(self, name):
            return getattr(_native_records, name)

        @staticmethod
        def scan(view, crc=True):
            if crc:
                passed.append(len(view))
            return _native_records.scan(view, crc)

    monkeypatch.setattr(verdicts_module, "_records", Spy())
    with make_rsm(configs) as rsm:
        md = copy(rsm, segment)
        log = RemoteLog(rsm, ChainSegments("t-0", [SegmentSpan(md, last + 1)]),
                        StoreIndexes(rsm))
        offset = md.start_offset
        while offset <= last:
            offset = log.read(offset, 2000).next_offset
        wait_for(lambda: rsm.verifies_batch_crcs(md), "the segment's pass")
        generation = rsm.read_generation(md)
        assert VERIFIED.covers(md.remote_log_segment_id.id, generation, 2000 + 1000,
                               size - 2000 - 1000)
        assert 0 < sum(passed) < size // 8  # a read or two of ~2 KiB, of 64 KiB


def _verdicts_over(blob: bytes, chunk_size: int):
    """BatchCrcVerdicts over a dict of `blob`'s chunks (every one cached)."""
    seg = plain_segment("k.log", len(blob), chunk_size)
    chunks = {seg.chunk_key(i): blob[i * chunk_size:(i + 1) * chunk_size]
              for i in range(seg.index.chunk_count)}

    class Cache:
        def get(self, key, background=False):
            return chunks.get(key)

        def contains(self, key):
            return key in chunks

    return seg, chunks, BatchCrcVerdicts(Cache(), pool=None)


def test_an_uploads_fetch_record_is_a_bit_a_chunk():
    """What is fetched of an upload is kept as a bit per chunk: thousands of records of
    uploads of 1024 chunks stay small (a set of ints took about 55 bytes a chunk)."""
    import tracemalloc

    class Empty:
        def get(self, key, background=False):
            return None

        def contains(self, key):
            return False

    verdicts = BatchCrcVerdicts(Empty(), pool=None)
    segs = [plain_segment(f"k{n}.log", 1024 * 1000, 1000) for n in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for seg in segs:
            for first in range(0, 1024, 16):
                verdicts.fetched(seg, range(first, first + 16))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 200 * 1024, held  # under 1 KiB an upload
    g = verdicts.generation(segs[0].key, segs[0].identity)
    verdicts.fetched(segs[0], [1023])  # fetched again: the generation moves on
    assert verdicts.generation(segs[0].key, segs[0].identity) != g


def test_only_a_chunk_fetched_again_moves_the_read_generation(monkeypatch):
    """The first fetch of each chunk leaves the generation (nobody read other bytes of it);
    a chunk fetched again moves it on; so does every fetch of an upload this process cannot
    vouch for: chunks of it cached before its first recorded fetch, or its record dropped."""
    seg, chunks, verdicts = _verdicts_over(bytes(4000), 1000)
    cached = dict(chunks)
    chunks.clear()
    g0 = verdicts.generation(seg.key, seg.identity)
    verdicts.fetched(seg, [0])  # the upload's first recorded fetch: readers had none
    g1 = verdicts.generation(seg.key, seg.identity)
    assert g1 != g0
    verdicts.fetched(seg, [1, 2])
    verdicts.fetched(seg, [3])
    assert verdicts.generation(seg.key, seg.identity) == g1
    verdicts.fetched(seg, [2])  # evicted and fetched again
    g2 = verdicts.generation(seg.key, seg.identity)
    assert g2 != g1

    other, _, _ = _verdicts_over(bytes(4000), 1000)
    chunks.update(cached)  # cached before its first fetch here (a disk cache's entries)
    verdicts.fetched(other, [0])
    g = verdicts.generation(other.key, other.identity)
    verdicts.fetched(other, [1])
    assert verdicts.generation(other.key, other.identity) != g

    monkeypatch.setattr(verdicts_module, "_VERDICTS_KEPT", 1)
    chunks.clear()
    third = plain_segment("k3.log", 4000, 1000)
    verdicts.fetched(third, [0])  # drops the record of `seg`
    verdicts.fetched(seg, [0])
    g = verdicts.generation(seg.key, seg.identity)
    verdicts.fetched(seg, [1])
    assert verdicts.generation(seg.key, seg.identity) != g


def test_the_segment_pass_skips_what_readers_checked_under_its_generation():
    """The pass trusts bytes readers checked under the generation it starts with and CRCs
    the rest: a flipped byte outside them fails it; a checked range that does not start
    where the pass's batches end fails it; a chunk fetched again moves the generation on,
    so the pass checks everything, and the flipped byte in that chunk fails it."""
    from engine.records.sample import sample_batches

    blob = b"".join(sample_batches(60, batch_size=7, seed=3))
    rows, _ = _native_records.scan(blob, False)
    cut = int(rows[4]["position"])  # a batch start inside the segment
    seg, chunks, verdicts = _verdicts_over(blob, 333)
    verdicts.fetched(seg, list(range(seg.index.chunk_count)))
    first = verdicts.generation(seg.key, seg.identity)

    def passes(skip: tuple[int, int], generation=first) -> bool:
        """Whether the pass records a verdict, readers having checked `skip`."""
        VERIFIED.clear()
        VERIFIED.checked("sid", generation, *skip)
        verdicts._checked.clear()
        verdicts._checking[(seg.key, seg.identity)] = True
        verdicts._check(seg, "sid")
        return verdicts.holds(seg.key, seg.identity)

    def flip(at: int) -> None:
        i = at // 333
        chunk = bytearray(chunks[seg.chunk_key(i)])
        chunk[at - i * 333] ^= 0x01
        chunks[seg.chunk_key(i)] = bytes(chunk)

    assert passes((cut, len(blob)))
    at = int(rows[6]["position"]) + 70
    flip(at)  # inside the checked range: trusted, not read
    assert passes((cut, len(blob)))
    assert not passes((0, len(blob) - 1))  # the checked bytes end inside the last batch
    assert not passes((cut + 1, len(blob)))  # not where a batch of the pass ends
    assert not passes((0, cut - 10))  # the flipped byte is outside: the pass CRCs it
    verdicts.fetched(seg, [at // 333])  # that chunk fetched again: the flip is in it now
    assert not passes((cut, len(blob)))  # checked under the generation before
    assert passes((cut, len(blob)), verdicts.generation(seg.key, seg.identity))
