"""The RemoteLogManager's pure parts: leader-epoch lineage rules (cases of Kafka's
RemoteLogManagerTest), exponential backoff, windowed quotas, the bounded reader pool, offset
specs; and its config checks."""

from __future__ import annotations

import threading

import pytest

from engine.common import Uuid
from engine.config import BrokerConfig, ConfigError
from engine.errors import RemoteLogReaderRejectedError
from engine.log.checkpoint import EpochEntry
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from engine.rlm.lineage import (
    epochs_with_offsets,
    is_remote_segment_within_leader_epochs,
    leader_epoch_checkpoint_text,
)
from engine.rlm.offsets import parse_spec
from engine.rlm.pools import ExponentialBackoff, RemoteLogReaderPool, WorkerPool
from engine.rlm.quota import RLMQuota

TIP = TopicIdPartition(Uuid.random(), "t", 0)


def _md(start, end, epochs):
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TIP), start, end, 0, 0, 0,
                                    100, epochs)


def test_epochs_with_offsets_drops_empty_epochs():
    entries = [EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(2, 5), EpochEntry(4, 9)]
    assert epochs_with_offsets(entries) == {0: 0, 2: 5, 4: 9}


LINEAGE = {0: 0, 1: 10, 2: 20, 3: 30}


@pytest.mark.parametrize("start,end,epochs,leo,valid", [
    (0, 9, {0: 0}, 40, True),                 # wholly in epoch 0
    (5, 24, {0: 5, 1: 10, 2: 20}, 40, True),  # spans epochs as the lineage does
    (5, 24, {0: 5, 1: 12, 2: 20}, 40, False),  # epoch 1 starts elsewhere (diverged)
    (0, 14, {0: 0, 1: 10}, 40, True),
    (0, 25, {0: 0, 1: 10}, 40, False),        # epoch 1 runs past the lineage's epoch 2
    (30, 39, {3: 30}, 40, True),
    (30, 40, {3: 30}, 40, False),             # reaches the log end offset
    (0, 9, {5: 0}, 40, False),                # epoch beyond the lineage
    (0, 9, {7: 0, 8: 5}, 40, False),
])
def test_is_remote_segment_within_leader_epochs(start, end, epochs, leo, valid):
    assert is_remote_segment_within_leader_epochs(_md(start, end, epochs), leo,
                                                  LINEAGE) is valid


def test_lineage_after_log_start_moved_keeps_overlapping_segment_valid():
    # Kafka's example: lineage {(5, 10), (7, 15), (9, 100)} then log start 51 truncates it
    # to {(7, 51), (9, 100)}; a segment {(5, 14), (7, 15), (9, 100)} ending at 150 is valid
    lineage = {7: 51, 9: 100}
    assert is_remote_segment_within_leader_epochs(_md(14, 150, {5: 14, 7: 15, 9: 100}), 200,
                                                  lineage)
    # but a segment whose first lineage epoch starts before that epoch's start is not,
    # unless it is the lineage's first epoch
    assert not is_remote_segment_within_leader_epochs(_md(95, 150, {9: 95}), 200, lineage)


def test_leader_epoch_checkpoint_text_stops_before_next_segment():
    entries = [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(3, 30)]
    assert leader_epoch_checkpoint_text(entries, 30) == b"0\n2\n0 0\n2 10\n"
    assert leader_epoch_checkpoint_text([], 30) == b"0\n0\n"


def test_exponential_backoff_doubles_with_jitter_up_to_max():
    import random

    b = ExponentialBackoff(500, 30_000, 0.2, rng=random.Random(7))
    for attempt, base in enumerate([500, 1000, 2000, 4000, 8000, 16000]):
        assert base * 0.8 <= b.backoff(attempt) <= base * 1.2
    assert all(b.backoff(n) <= 30_000 for n in range(6, 40))
    assert ExponentialBackoff(500, 500, 0.2).backoff(5) == 500
    assert ExponentialBackoff(100, 1000, 0.0).backoff(2) == 400


def test_quota_rate_and_throttle_time_follow_kafkas_rule():
    now = [0]
    q = RLMQuota(1000, 11, 1, lambda: now[0])
    q.record(5000)
    # the span counts at least 10 whole windows: 5000 B / 10 s = 500 B/s
    assert q.rate() == pytest.approx(500)
    assert q.throttle_time_ms() == 0
    q.record(10_000)
    assert q.rate() == pytest.approx(1500)
    assert q.throttle_time_ms() == 5000  # (1500 - 1000) / 1000 * 10 s
    now[0] = 12_000  # every sample has left the 11-window span
    assert q.rate() == 0 and q.throttle_time_ms() == 0


def test_reader_pool_refuses_beyond_its_pending_bound():
    pool = RemoteLogReaderPool(1, 2)
    gate, started = threading.Event(), threading.Event()

    def block():
        started.set()
        gate.wait()
        return "done"

    try:
        running = pool.submit(block)
        assert started.wait(30)
        queued = [pool.submit(lambda: 1), pool.submit(lambda: 2)]
        assert pool.queue_size() == 2
        with pytest.raises(RemoteLogReaderRejectedError, match="max.pending.tasks"):
            pool.submit(lambda: 3)
        gate.set()
        assert running.result(30) == "done"
        assert [f.result(30) for f in queued] == [1, 2]
    finally:
        gate.set()
        pool.close()


def test_worker_pool_close_stops_every_worker_with_a_small_queue():
    # more workers than queue slots: each must still get its stop sentinel
    pool = WorkerPool(4, 1, "close-test")
    assert pool.submit(lambda: 7).result(30) == 7
    pool.close()
    for worker in pool._workers:
        worker.join(30)
    assert not any(w.is_alive() for w in pool._workers)


def test_parse_spec():
    assert parse_spec("earliest") == -2 and parse_spec("LATEST") == -1
    assert parse_spec("earliest-local") == -4 and parse_spec("latest-tiered") == -5
    assert parse_spec("1700000000000") == 1_700_000_000_000 and parse_spec(-5) == -5
    assert parse_spec(-3) == -3 and parse_spec("max-timestamp") == -3
    for bad in (-6, -7, "soon", 1.5, True):
        with pytest.raises(ValueError):
            parse_spec(bad)


def test_rlm_refuses_a_broker_without_tiering(tmp_path):
    from engine.log import LogManager
    from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
    from engine.remote.filesystem import FileSystemRemoteStorageManager
    from engine.rlm import RemoteLogManager

    config = BrokerConfig({"log.dirs": str(tmp_path / "l")})
    lm = LogManager([tmp_path / "l"], broker_config=config)
    rsm = FileSystemRemoteStorageManager([tmp_path / "r"], fsync=False)
    rlmm = EmbeddedRemoteLogMetadataManager(tmp_path / "m")
    try:
        with pytest.raises(ConfigError, match="remote.log.storage.system.enable"):
            RemoteLogManager(config, lm, rsm, rlmm)
    finally:
        rlmm.close()
        rsm.close()
        lm.shutdown()
    with pytest.raises(ConfigError, match="engine.metrics.port"):
        BrokerConfig({"engine.metrics.port": "70000"})


def test_read_buffers_are_recycled_only_after_their_last_view_goes():
    import gc

    from engine.remote.segment_access import BufferPool

    pool = BufferPool(max_bytes=1 << 20)
    a = pool.get(100_000)
    a[:] = 1
    view = memoryview(a)[10:20]
    del a
    gc.collect()
    b = pool.get(100_000)  # `a` is still referenced through `view`: a new buffer
    b[:] = 2
    assert bytes(view) == b"\x01" * 10
    base_a = view.obj.base
    del view
    gc.collect()
    c = pool.get(120_000)  # same size class (128 KiB): the freed buffer comes back
    assert c.base is base_a
    big = pool.get(2 << 20)
    base_big = big.base
    del big
    gc.collect()
    assert pool.get(2 << 20).base is not base_big  # beyond max_bytes: not kept


class _MappedStore:
    """An RSM's `map_range_if_open` over bytes in memory, counting calls; ranges ending past
    `at_hand` are not at hand (None)."""

    zero_copy_ranges = True

    def __init__(self, data: bytes, at_hand: int):
        self.data, self.at_hand, self.calls = data, at_hand, []

    def map_range_if_open(self, md, start, end):
        self.calls.append((start, end))
        return None if end > self.at_hand else memoryview(self.data)[start:end]


def test_a_spanned_reader_maps_a_fetch_once_and_falls_back_to_the_range_asked():
    from engine.remote.segment_access import RemoteSegmentReader
    data = bytes(range(256)) * 64
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TIP), 0, 99, 0, 0, 0,
                                  len(data), {0: 0})
    store = _MappedStore(data, at_hand=len(data))
    reader = RemoteSegmentReader(store, md, nonblocking=True, span=3000)
    assert bytes(reader.read(100, 200)) == data[100:200]  # the header walk's window
    assert bytes(reader.read(150, 2900)) == data[150:2900]  # the records after it
    assert store.calls == [(100, 3100)]
    store = _MappedStore(data, at_hand=1000)  # only the window is at hand
    reader = RemoteSegmentReader(store, md, nonblocking=True, span=3000)
    assert bytes(reader.read(100, 200)) == data[100:200]
    assert store.calls == [(100, 3100), (100, 200)]
