"""Remote reads through each byte-range path of the RSM contract (engine.remote.storage):
the filesystem tier's zero-copy `map_range`, `read_range_into` into recycled buffers, and
the contract's defaults down to plain `fetch_log_segment` streams, as a plugin implementing
only Kafka's interface gets them. Each must answer exactly what a local read of the same
offsets answers."""

from __future__ import annotations

import threading

import pytest
from test_rlm_helpers import TOPIC, Env

from engine.errors import (
    RemoteFetchTimeoutError,
    RemoteLogReaderRejectedError,
    RemoteStorageError,
)
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.storage import RemoteStorageManager

PATHS = ("map_range", "read_range_into", "read_range", "fetch_log_segment")


def _rsm_using(path: str, remote_dir):
    """The filesystem tier whose faster paths than `path` are the contract's defaults (so
    the reads reach `path`), counting calls of `path`."""
    defaults = {name: getattr(RemoteStorageManager, name)
                for name in PATHS[:PATHS.index(path)]}
    if path != "map_range":
        defaults["map_range_if_open"] = RemoteStorageManager.map_range_if_open

    def counted(self, *args, **kwargs):
        self.calls += 1
        return getattr(FileSystemRemoteStorageManager, path)(self, *args, **kwargs)

    cls = type("Only" + path.title().replace("_", ""), (FileSystemRemoteStorageManager,),
               {**defaults, path: counted, "calls": 0,
                "zero_copy_ranges": path == "map_range"})
    return cls([remote_dir], fsync=False)


@pytest.mark.parametrize("path", PATHS)
def test_every_range_read_path_matches_the_local_read(tmp_path, path):
    rsm = _rsm_using(path, tmp_path / "remote")
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1}, rsm=rsm)
    try:
        env.produce(24, per_batch=2, size=120)
        unified = env.log()
        end = unified.segments[-1].base_offset
        sizes = [1, 300, 301, 5000]
        before = {}
        for o in range(end):
            for mb in sizes:
                view, nxt = unified.read(o, mb, True)
                before[(o, mb)] = (bytes(view), nxt)
        env.rlm.run_once()
        assert unified.local_log_start_offset == end
        for (o, mb), (data, nxt) in before.items():
            got = env.rlm.read(TOPIC, 0, o, mb)
            assert got.from_remote
            assert bytes(got.records) == data, (path, o, mb)
            assert got.next_offset == nxt
        assert rsm.calls > 0  # the reads went through the path under test
    finally:
        env.close()


def test_mapped_records_outlive_the_remote_segment(tmp_path):
    """A zero-copy answer stays readable after the remote segment is deleted."""
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(12, per_batch=2, size=120)
        unified = env.log()
        want, _ = unified.read(0, 5000, True)
        want = bytes(want)
        env.rlm.run_once()
        got = env.rlm.read(TOPIC, 0, 0, 5000)
        assert got.from_remote and isinstance(got.records, memoryview)
        assert got.records.readonly
        tip = env.rlm._partitions[(TOPIC, 0)].tip
        for md in env.rlmm.list_remote_log_segments(tip):
            env.rsm.delete_log_segment_data(md)
        assert bytes(got.records) == want
    finally:
        env.close()


def test_reads_needing_no_storage_io_stay_on_the_calling_thread(tmp_path):
    """The first remote read of a segment opens, checks and maps its `.log` and downloads its
    indexes (unless it reads from the segment's base offset) on the reader pool; once both
    are done, reads of it need no storage I/O and are served on the caller's thread with
    the same answer. read_committed (transaction
    indexes of later segments) keeps using the pool."""
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(12, per_batch=2, size=120)
        unified = env.log()
        end = unified.segments[-1].base_offset
        expected = {o: unified.read(o, 400, True) for o in range(end)}
        expected = {o: (bytes(v), n) for o, (v, n) in expected.items()}
        env.rlm.run_once()
        assert unified.local_log_start_offset == end
        submitted = []
        submit = env.rlm.reader_pool.submit
        env.rlm.reader_pool.submit = lambda work: submitted.append(1) or submit(work)
        first = env.rlm.read(TOPIC, 0, 0, 400)
        assert (bytes(first.records), first.next_offset) == expected[0]
        assert len(submitted) == 1  # nothing cached yet: the pool did the I/O
        for o in range(end):
            got = env.rlm.read(TOPIC, 0, o, 400)
            assert got.from_remote and (bytes(got.records), got.next_offset) == expected[o]
        segments = len({md.remote_log_segment_id for md in env.rlmm.list_remote_log_segments(
            env.rlm._sync_partitions()[0].tip)})
        # twice per segment at most, the rest inline: a read at the segment's base offset
        # opens and maps its `.log` without its indexes, a read elsewhere downloads them
        assert len(submitted) <= 2 * segments
        before = len(submitted)
        env.rlm.read(TOPIC, 0, 0, 400, isolation="read_committed")
        assert len(submitted) == before + 1
    finally:
        env.close()


def test_read_many_serves_warm_reads_on_the_calling_thread(tmp_path):
    """read_many (what `serve` calls) takes the path `read` takes: a remote read needing no
    storage I/O is answered on the caller's thread, the others go to the reader pool, each
    with the answer a local read gives."""
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(12, per_batch=2, size=120)
        unified = env.log()
        end = unified.segments[-1].base_offset
        expected = {o: unified.read(o, 400, True) for o in range(end)}
        expected = {o: (bytes(v), n) for o, (v, n) in expected.items()}
        env.rlm.run_once()
        assert unified.local_log_start_offset == end
        submitted = []
        submit = env.rlm.reader_pool.submit
        env.rlm.reader_pool.submit = lambda work: submitted.append(1) or submit(work)
        requests = [(TOPIC, 0, o, 400) for o in range(end)]
        cold = env.rlm.read_many(requests)
        assert [(bytes(r.records), r.next_offset) for r in cold] == \
            [expected[o] for o in range(end)]
        assert submitted  # nothing was cached: the pool did the I/O
        before = len(submitted)
        warm = env.rlm.read_many(requests)
        assert all(r.from_remote and r.error is None for r in warm)
        assert [(bytes(r.records), r.next_offset) for r in warm] == \
            [expected[o] for o in range(end)]
        assert len(submitted) == before  # every read answered on this thread
        env.rlm.read_many(requests[:1], isolation="read_committed")
        assert len(submitted) == before + 1
    finally:
        env.close()


def test_map_range_if_open_never_opens_a_file(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(8, per_batch=2, size=120)
        env.rlm.run_once()
        st = env.rlm._sync_partitions()[0]
        md = next(iter(env.rlmm.list_remote_log_segments(st.tip)))
        rsm = env.rsm
        assert rsm.map_range_if_open(md, 0, 10) is None
        assert env.rlm.index_cache.cached_entry(md) is None
        mapped = rsm.map_range(md, 0, 10)
        assert bytes(rsm.map_range_if_open(md, 0, 10)) == bytes(mapped)
        with pytest.raises(ValueError):
            rsm.map_range_if_open(md, 0, md.segment_size_in_bytes + 1)
        env.rlm.index_cache.get_index_entry(md)
        assert env.rlm.index_cache.cached_entry(md) is not None
    finally:
        env.close()


def _tiered_partitions(tmp_path, rsm=None, partitions=4, **broker):
    """An Env whose `partitions` partitions are tiered but for their active segments."""
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1}, rsm=rsm, broker=broker)
    for p in range(partitions):
        env.produce(10, partition=p)
    env.rlm.run_once()
    return env


def _counting_submits(env) -> list:
    submitted = []
    submit = env.rlm.reader_pool.submit
    env.rlm.reader_pool.submit = lambda work: submitted.append(work) or submit(work)
    return submitted


def test_read_many_hands_the_cold_reads_of_a_local_files_tier_to_one_reader_task(tmp_path):
    """The filesystem tier's reads that need storage I/O (files not opened yet) go to the
    reader pool as one task for the whole request, each answered as alone; a store's go
    as a task each."""
    env = _tiered_partitions(tmp_path)
    try:
        requests = [(TOPIC, p, o, 500) for p in range(4) for o in (0, 13)]
        expected = [(bytes(r.records), r.next_offset) for r in
                    (env.rlm.read(*request) for request in requests)]
        env.rsm._open_logs.clear()  # cold again: every read needs its file opened
        submitted = _counting_submits(env)
        results = env.rlm.read_many(requests)
        assert [(bytes(r.records), r.next_offset) for r in results] == expected
        assert all(r.from_remote and r.error is None for r in results)
        assert len(submitted) == 1
        env.rsm._open_logs.clear()
        env.rsm.reads_local_files = False  # as a store's RSM says
        assert [(bytes(r.records), r.next_offset) for r in env.rlm.read_many(requests)] \
            == expected
        assert len(submitted) == 1 + len(requests)
    finally:
        env.close()


class _HangingReads(FileSystemRemoteStorageManager):
    """The filesystem tier whose reads of `hang` partitions wait for `release`."""

    def __init__(self, dirs):
        super().__init__(dirs, fsync=False)
        self.hang: set[int] = set()
        self.release = threading.Event()

    def map_range(self, metadata, start, end_exclusive):
        if metadata.topic_id_partition.partition in self.hang:
            assert self.release.wait(30)
        return super().map_range(metadata, start, end_exclusive)


def test_one_reader_task_answers_each_partition_alone_and_by_the_deadline(tmp_path):
    """A failed read in the task is its partition's error only; when the task outlasts
    remote.fetch.max.wait.ms, the reads it finished by then are answered (as with a task a
    partition) and the others are RemoteFetchTimeoutError, counted per partition."""
    rsm = _HangingReads([tmp_path / "remote"])
    env = _tiered_partitions(tmp_path, rsm, partitions=3, **{"remote.fetch.max.wait.ms": 300})
    try:
        md = next(iter(env.rlmm.list_remote_log_segments(
            env.rlm._partitions[(TOPIC, 1)].tip)))
        rsm.segment_path(md, ".log").write_bytes(b"damaged")
        results = env.rlm.read_many([(TOPIC, p, 0, 500) for p in range(3)])
        assert [r.error is None for r in results] == [True, False, True]
        assert isinstance(results[1].error, RemoteStorageError)
        rsm._open_logs.clear()
        errors = env.rlm.metrics.value("RemoteFetchErrorsPerSec", topic=TOPIC)
        rsm.hang = {2}
        results = env.rlm.read_many([(TOPIC, 0, 0, 500), (TOPIC, 2, 0, 500)])
        assert results[0].error is None and results[0].next_offset > 0
        assert bytes(results[0].records) == bytes(env.rlm.read(TOPIC, 0, 0, 500).records)
        assert isinstance(results[1].error, RemoteFetchTimeoutError)
        assert "remote.fetch.max.wait.ms" in str(results[1].error)
        assert env.rlm.metrics.value("RemoteFetchErrorsPerSec", topic=TOPIC) == errors + 1
        # a read queued behind the one that hangs never finishes by the deadline
        rsm._open_logs.clear()
        results = env.rlm.read_many([(TOPIC, 2, 0, 500), (TOPIC, 0, 0, 500)])
        assert all(isinstance(r.error, RemoteFetchTimeoutError) for r in results)
    finally:
        rsm.release.set()
        env.close()


def test_a_full_reader_queue_refuses_every_read_of_the_one_task(tmp_path):
    rsm = _HangingReads([tmp_path / "remote"])
    env = _tiered_partitions(tmp_path, rsm, partitions=2, **{
        "remote.log.reader.threads": 1, "remote.log.reader.max.pending.tasks": 1,
        "remote.fetch.max.wait.ms": 200})
    try:
        rsm.hang = {0}
        requests = [(TOPIC, 0, 0, 500), (TOPIC, 1, 0, 500)]
        for _ in range(2):  # the first task holds the one thread, the second the queue
            assert all(isinstance(r.error, RemoteFetchTimeoutError)
                       for r in env.rlm.read_many(requests))
        refused = env.rlm.read_many(requests)
        assert all(isinstance(r.error, RemoteLogReaderRejectedError) for r in refused)
        assert "remote.log.reader.max.pending.tasks" in str(refused[1].error)
    finally:
        rsm.release.set()
        env.close()
