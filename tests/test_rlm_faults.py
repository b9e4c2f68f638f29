"""RemoteLogManager under plugin faults: an RSM that fails (retry with backoff, partial copy
cleaned), hangs (other work goes on; remote reads fail within the wait bound), is slow;
custom metadata over the limit; a full reader queue; an orphaned copy after a crash
(kill -9 of a real process)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from test_rlm_helpers import TOPIC, Env, read_all, records_of

from engine.errors import (
    CustomMetadataSizeLimitExceededError,
    RemoteFetchTimeoutError,
    RemoteLogReaderRejectedError,
    RemoteStorageError,
)
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)
from engine.rlm import RemoteLogManager
from engine.rlm import tasks as rlm_tasks

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
WAIT_S = 60  # upper bound of a wait for the scheduler's progress, never a timing claim


def _wait_for(predicate, what):
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class FaultyRSM(FileSystemRemoteStorageManager):
    """The filesystem tier with faults injected per partition."""

    def __init__(self, dirs):
        super().__init__(dirs, fsync=False)
        self.copy_fail_after_write = 0  # copies to fail after writing the files
        self.copy_calls = 0
        self.hang_copy = set()          # partitions whose copy blocks on `release`
        self.hang_read = set()          # partitions whose reads block on `release`
        self.custom = None
        self.delete_failures = 0        # deletes to fail
        self.release = threading.Event()
        self.copy_started = threading.Event()

    def copy_log_segment_data(self, metadata, segment_data):
        self.copy_calls += 1
        if metadata.topic_id_partition.partition in self.hang_copy:
            self.copy_started.set()
            self.release.wait()
        custom = super().copy_log_segment_data(metadata, segment_data)
        if self.copy_fail_after_write:
            self.copy_fail_after_write -= 1
            raise OSError("injected failure after the files were written")
        return self.custom if self.custom is not None else custom

    def delete_log_segment_data(self, metadata):
        if self.delete_failures:
            self.delete_failures -= 1
            raise OSError("injected delete failure")
        return super().delete_log_segment_data(metadata)

    def read_range(self, metadata, start, end_exclusive):
        if metadata.topic_id_partition.partition in self.hang_read:
            self.release.wait()
        return super().read_range(metadata, start, end_exclusive)

    def read_range_into(self, metadata, start, buffer):
        if metadata.topic_id_partition.partition in self.hang_read:
            self.release.wait()
        return super().read_range_into(metadata, start, buffer)

    def map_range(self, metadata, start, end_exclusive):
        if metadata.topic_id_partition.partition in self.hang_read:
            self.release.wait()
        return super().map_range(metadata, start, end_exclusive)


@pytest.fixture
def faulty(tmp_path):
    rsm = FaultyRSM([tmp_path / "remote"])
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1}, rsm=rsm,
              broker={"remote.fetch.max.wait.ms": 300})
    yield env, rsm
    rsm.release.set()
    env.close()


def _segments(env, partition=0):
    tip = env.rlm._partitions[(TOPIC, partition)].tip
    return list(env.rlmm.list_remote_log_segments(tip))


def test_failed_copy_is_cleaned_and_retried_with_backoff(faulty):
    env, rsm = faulty
    env.produce(8)
    unified = env.log()
    rsm.copy_fail_after_write = 2
    summary = env.rlm.run_once()
    assert summary.copied_segments == 0 and "injected failure" in summary.errors[0]
    # the partial copy: metadata gone through DELETE_STARTED -> DELETE_FINISHED, files too
    assert _segments(env) == []
    assert not list((env.remote_dir).rglob("*.log"))
    assert len(unified.segments) > 2  # nothing deleted locally
    status = env.rlm.status()[0]
    assert status["copy_failures"] == 1
    assert 400 <= status["next_copy_retry_ms"] <= 600  # 500 ms, jitter 0.2
    calls = rsm.copy_calls
    env.rlm.run_once()  # within the backoff: no attempt
    assert rsm.copy_calls == calls
    env.clock.advance(600)
    env.rlm.run_once()
    status = env.rlm.status()[0]
    assert status["copy_failures"] == 2
    assert 800 <= status["next_copy_retry_ms"] <= 1200  # doubled
    assert env.rlm.metrics.value("RemoteCopyErrorsPerSec", topic=TOPIC) == 2
    env.clock.advance(1200)
    env.rlm.run_once()
    assert env.rlm.status()[0]["copy_failures"] == 0
    assert all(m.state == FINISHED for m in _segments(env))
    assert len(unified.segments) == 1
    assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == env.acked[(TOPIC, 0)]


def test_hung_copy_blocks_only_its_partition(faulty):
    env, rsm = faulty
    rsm.hang_copy = {0}
    env.produce(8, partition=0)
    env.produce(8, partition=1)
    env.rlm.start()
    assert rsm.copy_started.wait(WAIT_S)
    _wait_for(lambda: _segments(env, 1) and env.log(TOPIC, 1).local_log_start_offset > 0,
              "partition 1 to be tiered")
    # partition 0: appends and local reads go on while its copy hangs
    first, last = env.produce(3, partition=0)
    got = env.rlm.read(TOPIC, 0, first, 10_000)
    assert not got.from_remote and first < got.next_offset <= last + 1
    status = {s["partition"]: s for s in env.rlm.status()}
    assert status[0]["copy_in_progress"]["base_offset"] == 0
    assert status[1]["copy_in_progress"] is None
    env.clock.advance(600_000)  # the next scheduling pass reports the stuck copy once
    _wait_for(lambda: env.rlm._partitions[(TOPIC, 0)].stuck_copy_warned is not None,
              "the stuck copy warning")
    # a remote read that hangs is given up after remote.fetch.max.wait.ms
    rsm.hang_read = {1}
    with pytest.raises(RemoteFetchTimeoutError, match="remote.fetch.max.wait.ms"):
        env.rlm.read(TOPIC, 1, 0, 1000)
    rsm.hang_read = set()
    rsm.release.set()
    _wait_for(lambda: env.rlm.status()[0]["copy_in_progress"] is None
              and env.log(TOPIC, 0).local_log_start_offset > 0, "partition 0 to be tiered")
    assert read_all(env.rlm, TOPIC, 0, 0, env.log(TOPIC, 0).log_end_offset) == \
        env.acked[(TOPIC, 0)]


def test_reader_queue_full_refuses_with_a_clear_error(tmp_path):
    rsm = FaultyRSM([tmp_path / "remote"])
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1}, rsm=rsm,
              broker={"remote.log.reader.threads": 1, "remote.log.reader.max.pending.tasks": 1,
                      "remote.fetch.max.wait.ms": 200})
    try:
        env.produce(8)
        env.rlm.run_once()
        rsm.hang_read = {0}
        rsm.reads_local_files = False  # a task a read, as for a store's RSM
        results = env.rlm.read_many([(TOPIC, 0, 0, 100), (TOPIC, 0, 3, 100),
                                     (TOPIC, 0, 6, 100)])
        errors = [type(r.error) for r in results]
        assert RemoteLogReaderRejectedError in errors
        assert RemoteFetchTimeoutError in errors
        rejected = next(r.error for r in results
                        if isinstance(r.error, RemoteLogReaderRejectedError))
        assert "remote.log.reader.max.pending.tasks" in str(rejected)
        rsm.release.set()
        rsm.hang_read = set()
        _wait_for(lambda: env.rlm.reader_pool.queue_size() == 0, "the reader queue to drain")
        assert env.rlm.read(TOPIC, 0, 0, 100).from_remote
    finally:
        rsm.release.set()
        env.close()


def test_slow_rsm_still_tiers_and_serves(tmp_path):
    class SlowRSM(FileSystemRemoteStorageManager):
        def copy_log_segment_data(self, metadata, segment_data):
            time.sleep(0.05)
            return super().copy_log_segment_data(metadata, segment_data)

        def read_range_into(self, metadata, start, buffer):
            time.sleep(0.02)
            return super().read_range_into(metadata, start, buffer)

        def map_range(self, metadata, start, end_exclusive):
            time.sleep(0.02)
            return super().map_range(metadata, start, end_exclusive)

    env = Env(tmp_path, topic_config={"local.retention.bytes": 1},
              rsm=SlowRSM([tmp_path / "remote"], fsync=False),
              broker={"remote.fetch.max.wait.ms": 30_000})
    try:
        env.produce(8)
        env.rlm.start()
        unified = env.log()
        _wait_for(lambda: len(unified.segments) == 1, "every segment to be tiered")
        assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == env.acked[(TOPIC, 0)]
    finally:
        env.close()


def test_custom_metadata_over_the_limit_undoes_the_copy_and_cancels(faulty):
    env, rsm = faulty
    env.produce(8)
    rsm.custom = b"m" * 129  # limit 128 (Kafka's default)
    summary = env.rlm.run_once()
    assert "CustomMetadataSizeLimitExceededError" in summary.errors[0]
    assert _segments(env) == []
    assert not list(env.remote_dir.rglob("*.log"))
    assert env.rlm.status()[0]["copy_cancelled"]
    calls = rsm.copy_calls
    env.clock.advance(100_000)
    env.rlm.run_once()
    assert rsm.copy_calls == calls  # cancelled until the leadership changes
    rsm.custom = b"m" * 128
    env.rlm.on_leadership_change({(TOPIC, 0): 1})
    env.rlm.run_once()
    segments = _segments(env)
    assert segments and all(m.custom_metadata == b"m" * 128 for m in segments)
    assert issubclass(CustomMetadataSizeLimitExceededError, ValueError)


_CRASH_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from test_rlm_helpers import Env, FakeClock
    from engine.remote.filesystem import FileSystemRemoteStorageManager
    import pathlib

    class Hang(FileSystemRemoteStorageManager):
        def copy_log_segment_data(self, metadata, segment_data):
            super().copy_log_segment_data(metadata, segment_data)
            print("copying", flush=True)
            time.sleep(3600)

    tmp = pathlib.Path(sys.argv[1])
    env = Env(tmp, rsm=Hang([tmp / "remote"], fsync=False), clock=FakeClock(10**12))
    env.produce(8)
    env.lm.flush_all()
    env.rlm.run_once()
""")


def test_orphaned_copy_of_a_killed_process_is_cleaned(tmp_path):
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", _CRASH_SCRIPT, str(tmp_path), tests_dir],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "copying"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
    env = Env(tmp_path)  # restart on the same dirs; its clock is later than the crash
    try:
        unified = env.log()
        env.rlm.run_once()
        tip = env.rlm._partitions[(TOPIC, 0)].tip
        segments = list(env.rlmm.list_remote_log_segments(tip))
        # the orphan is gone, every segment copied once by the new process
        assert all(m.state == FINISHED for m in segments)
        assert [m.start_offset for m in segments] == \
            [s.base_offset for s in unified.segments[:-1]]
        assert len(list(env.remote_dir.rglob("*.log"))) == len(segments)
        assert env.rlm.metrics.value("RemoteDeleteRequestsPerSec", topic=TOPIC) == 1
    finally:
        env.close()


def test_failed_remote_delete_is_retried_by_the_next_run(faulty):
    env, rsm = faulty
    env.produce(8)
    env.rlm.run_once()
    copied = _segments(env)
    unified = env.log()
    unified.maybe_increment_log_start_offset(copied[1].end_offset + 1)  # DeleteRecords
    rsm.delete_failures = 1
    summary = env.rlm.run_once()
    assert summary.deleted_remote_segments == 1
    assert "injected delete failure" in summary.errors[0]
    states = {m.start_offset: m.state for m in _segments(env)}
    assert states[copied[0].start_offset] == RemoteLogSegmentState.DELETE_SEGMENT_STARTED
    assert env.rlm.metrics.value("RemoteDeleteErrorsPerSec", topic=TOPIC) == 1
    assert not env.rlm.is_idle()
    assert summary.retry_in_ms > 0  # the retry waits out the backoff
    summary = env.rlm.run_once()
    assert summary.deleted_remote_segments == 0 and "injected delete failure" in summary.errors[0]
    env.clock.advance(summary.retry_in_ms)
    summary = env.rlm.run_once()
    assert summary.errors == [] and summary.deleted_remote_segments == 1
    assert [m.start_offset for m in _segments(env)] == \
        [m.start_offset for m in copied[2:]]
    assert env.rlm.is_idle()



def test_failing_deletes_back_off_log_once_per_run_and_record_nothing_new(faulty, caplog):
    """A tier that refuses every delete (a read-only tier): each segment is recorded
    DELETE_SEGMENT_STARTED once, retries add nothing to the metadata log, wait for the
    growing backoff, and log one line per failed run whatever the number of segments."""
    env, rsm = faulty
    env.produce(16)
    env.rlm.run_once()
    copied = _segments(env)
    assert len(copied) > 3
    env.log().maybe_increment_log_start_offset(copied[2].end_offset + 1)  # 3 segments due
    metadata_log = next((env.log_dirs[0] / "__remote_log_metadata").glob(f"{TOPIC}-0-*/*.log"))
    rsm.delete_failures = 10**6
    caplog.set_level("WARNING", logger="engine")
    waits, sizes = [], []
    for _ in range(4):
        caplog.clear()
        summary = env.rlm.run_once()
        assert summary.deleted_remote_segments == 0
        assert len([r for r in caplog.records if "Expiration task" in r.getMessage()]) == 1
        assert not [r for r in caplog.records if "Deleting remote segment" in r.getMessage()]
        waits.append(summary.retry_in_ms)
        sizes.append(metadata_log.stat().st_size)
        caplog.clear()
        early = env.rlm.run_once()  # within the backoff: not retried, the error still shown
        assert not caplog.records and "injected delete failure" in early.errors[0]
        env.clock.advance(summary.retry_in_ms)
    assert len(set(sizes)) == 1, sizes  # the first run's DELETE_SEGMENT_STARTED only
    assert [m.state for m in _segments(env)][:3] == \
        [RemoteLogSegmentState.DELETE_SEGMENT_STARTED] * 3
    assert waits[-1] > waits[0]  # exponential backoff
    assert env.rlm.metrics.value("RemoteDeleteErrorsPerSec", topic=TOPIC) == 4 * 3
    row = env.rlm.status()[0]
    assert row["expiration_failures"] == 4 and row["next_expiration_retry_ms"] == 0
    assert "injected delete failure" in row["last_expiration_error"]
    rsm.delete_failures = 0
    summary = env.rlm.run_once()
    assert summary.deleted_remote_segments == 3 and summary.errors == []

def test_close_returns_while_a_copy_hangs_in_the_rsm(faulty):
    env, rsm = faulty
    rsm.hang_copy = {0}
    env.produce(8)
    env.rlm.start()
    assert rsm.copy_started.wait(WAIT_S)
    closer = threading.Thread(target=env.rlm.close)
    closer.start()
    closer.join(WAIT_S)
    assert not closer.is_alive()  # the stuck copier thread is a daemon, left behind
    with pytest.raises(RemoteLogReaderRejectedError, match="closed"):
        env.rlm.reader_pool.submit(lambda: None)


def test_failed_copy_finished_update_undoes_the_copy(tmp_path):
    """The RSM copy succeeded but recording COPY_SEGMENT_FINISHED failed: the copy is
    deleted again (no remote file is left behind) and the retry copies the segment anew."""
    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    update = env.rlmm.update_remote_log_segment_metadata
    failures = [1]

    def flaky_update(u):
        if u.state == FINISHED and failures[0]:
            failures[0] -= 1
            raise RemoteStorageError("metadata store hiccup")
        return update(u)

    env.rlmm.update_remote_log_segment_metadata = flaky_update
    unified = env.log()
    env.produce(6)
    first = env.rlm.run_once()
    assert first.copied_segments == 0 and first.errors
    for _ in range(3):
        env.clock.advance(600_000)
        env.rlm.run_once()
    st = env.rlm._partitions[(TOPIC, 0)]
    segments = list(env.rlmm.list_remote_log_segments(st.tip))
    live = [m for m in segments if m.state == FINISHED]
    assert [(m.start_offset, m.end_offset) for m in live] == [(0, 8)]
    assert all(m.state in (FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
               for m in segments)
    # the filesystem tier keeps one directory per copied segment
    assert len(list((tmp_path / "remote").rglob("*.log"))) == 1
    assert env.rlm.is_idle()
    assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == env.acked[(TOPIC, 0)]
    env.close()


def test_failed_partition_deletion_stops_tiering_until_resumed(tmp_path):
    """A delete_partition whose RSM delete fails leaves the partition DELETE_PARTITION_STARTED:
    the copy task must not tier new segments into it (the RLMM refuses adds then), and
    calling delete_partition again finishes the deletion."""
    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    env.log()
    env.produce(12)
    env.rlm.run_once()
    tip = env.rlm._partitions[(TOPIC, 0)].tip
    delete = env.rsm.delete_log_segment_data
    calls = [0]

    def flaky_delete(md):
        calls[0] += 1
        if calls[0] == 2:
            raise RemoteStorageError("bucket unavailable")
        return delete(md)

    env.rsm.delete_log_segment_data = flaky_delete
    with pytest.raises(RemoteStorageError):
        env.rlm.delete_partition(TOPIC, 0)
    assert env.lm.get_log(TOPIC, 0) is not None
    env.produce(6)
    summary = env.rlm.run_once()
    assert summary.copied_segments == 0 and not summary.errors, summary
    assert env.rlm.status() == []
    states = {m.state for m in env.rlmm.list_remote_log_segments(tip)}
    assert RemoteLogSegmentState.COPY_SEGMENT_STARTED not in states
    assert env.rlmm.partition_delete_state(tip).name == "DELETE_PARTITION_STARTED"
    # the RLMM itself refuses a segment added to a partition being deleted
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 100, 110, 0, 0,
                                  env.clock(), 10, {0: 100})
    with pytest.raises(IllegalStateTransitionError, match="DELETE_PARTITION_STARTED"):
        env.rlmm.add_remote_log_segment_metadata(md)
    # a restarted RLM learns the deletion from the RLMM and does not tier either
    env.rlm.close()
    env.rlm = RemoteLogManager(env.config, env.lm, env.rsm, env.rlmm, clock=env.clock)
    assert env.rlm.run_once().copied_segments == 0 and env.rlm.status() == []
    assert env.rlm.delete_partition(TOPIC, 0) > 0
    assert env.rlmm.partition_delete_state(tip).name == "DELETE_PARTITION_FINISHED"
    assert not list((tmp_path / "remote").rglob("*.log"))
    assert env.lm.get_log(TOPIC, 0) is None
    env.close()


def test_leadership_change_during_a_copy_never_uploads_a_segment_twice(tmp_path):
    """A new leader epoch arrives while the old state's copy is in the RSM: the new state's
    copy run waits for it and then resumes after it, so no offset is copied twice."""
    copying = threading.Semaphore(0)
    gate = threading.Event()

    class GatedRSM(FileSystemRemoteStorageManager):
        def copy_log_segment_data(self, md, data):
            copying.release()
            assert gate.wait(WAIT_S)
            return super().copy_log_segment_data(md, data)

    env = Env(tmp_path, rsm=GatedRSM([tmp_path / "remote"], fsync=False))
    unified = env.log()
    env.produce(12)
    runs = [threading.Thread(target=env.rlm.run_once, daemon=True)]
    runs[0].start()
    assert copying.acquire(timeout=WAIT_S)
    env.rlm.on_leadership_change({(TOPIC, 0): 1})
    runs.append(threading.Thread(target=env.rlm.run_once, daemon=True))
    runs[1].start()
    # before the old copy ends, the new state must not start one of its own
    second = copying.acquire(timeout=1.0)
    gate.set()
    for run in runs:
        run.join(WAIT_S)
    assert not second, "the new leader state copied while the old copy was in the RSM"
    env.rlm.run_once()
    st = env.rlm._partitions[(TOPIC, 0)]
    segments = sorted((m.start_offset, m.end_offset)
                      for m in env.rlmm.list_remote_log_segments(st.tip) if m.state == FINISHED)
    for (_, end), (start, _) in itertools.pairwise(segments):
        assert start == end + 1, segments
    assert segments[0][0] == 0 and len(segments) == 3
    assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == env.acked[(TOPIC, 0)]
    env.close()


def test_partition_deleted_during_a_stuck_copy_leaves_no_files(tmp_path, monkeypatch):
    """delete_partition stops waiting for a copy stuck in the RSM and deletes the partition;
    when the copy returns its FINISHED update is refused and its files are removed."""
    copying = threading.Event()
    gate = threading.Event()

    class GatedRSM(FileSystemRemoteStorageManager):
        def copy_log_segment_data(self, md, data):
            copying.set()
            assert gate.wait(WAIT_S)
            return super().copy_log_segment_data(md, data)

    env = Env(tmp_path, rsm=GatedRSM([tmp_path / "remote"], fsync=False))
    env.log()
    env.produce(12)
    run = threading.Thread(target=env.rlm.run_once, daemon=True)
    run.start()
    assert copying.wait(WAIT_S)
    tip = env.rlm._partitions[(TOPIC, 0)].tip
    monkeypatch.setattr(rlm_tasks, "_RUN_ONCE_LOCK_WAIT_S", 0.05)
    env.rlm.delete_partition(TOPIC, 0, delete_local=False)
    gate.set()
    run.join(WAIT_S)
    assert not run.is_alive()
    assert env.rlmm.partition_delete_state(tip).name == "DELETE_PARTITION_FINISHED"
    assert not [p for p in (tmp_path / "remote").rglob("*") if p.is_file()]
    env.close()


def test_damaged_metadata_takes_one_partition_offline_and_the_others_go_on(tmp_path):
    """A bit flip in the middle of partition 0's metadata log: partition 0 is offline
    (RLMM and status report it with the file and position, the gauge counts it, its calls
    raise CorruptRemoteLogMetadataError naming it); partition 1 is copied, expired, read
    and listed as usual."""
    from engine.errors import CorruptRemoteLogMetadataError

    env = Env(tmp_path)
    for p in (0, 1):
        env.produce(8, partition=p)
    env.rlm.run_once()
    tip0 = env.rlm._partitions[(TOPIC, 0)].tip
    env.close()
    damaged = next((env.log_dirs[0] / "__remote_log_metadata").glob(f"{TOPIC}-0-*/*.log"))
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(data)

    env = Env(tmp_path, topic_config={"retention.bytes": 2000})
    try:
        for p in (0, 1):
            env.produce(8, partition=p)
        summary = env.rlm.run_once()
        assert summary.copied_segments > 0 and summary.deleted_remote_segments > 0
        assert len(summary.errors) == 1 and summary.errors[0].startswith(f"{TOPIC}-0: offline")
        assert str(damaged) in summary.errors[0]
        assert env.rlm.is_idle()  # the offline partition has no work it can do
        assert list(env.rlmm.offline_partitions()) == [tip0]
        assert env.rlm.metrics.value("RemoteLogOfflinePartitionsCount") == 1
        rows = {r["partition"]: r for r in env.rlm.status()}
        assert rows[0]["offline"] and rows[0]["remote_segments"] is None
        assert str(damaged) in rows[0]["offline_error"]
        assert "position" in rows[0]["offline_error"]
        assert not rows[1]["offline"] and rows[1]["remote_segments"] > 0
        for call in (lambda: env.rlm.read(TOPIC, 0, 0, 10_000),
                     lambda: env.rlm.list_offsets(TOPIC, 0, "earliest"),
                     lambda: env.rlmm.list_remote_log_segments(tip0)):
            for _ in range(2):  # every call, not only the first
                with pytest.raises(CorruptRemoteLogMetadataError) as info:
                    call()
                assert info.value.file == str(damaged) and info.value.position is not None
                assert info.value.partition == tip0 and f"{TOPIC}-0" in str(info.value)
        start = env.rlm.list_offsets(TOPIC, 1, "earliest")[0]
        assert start > 0  # expiration of partition 1 moved its log start
        result = env.rlm.read(TOPIC, 1, start, 100_000)
        assert result.error is None and records_of(result.records)[0][0] == start
        assert damaged.read_bytes() == bytes(data)
    finally:
        env.close()


def test_failing_delete_on_disable_backs_off(faulty, caplog):
    """Tiering turned off with remote.log.delete.on.disable on a tier that refuses deletes:
    the partition deletion is retried after a growing backoff (not at every pass), logged
    once per attempt, and finishes once the tier accepts deletes."""
    env, rsm = faulty
    env.produce(8)
    env.rlm.run_once()
    assert _segments(env)
    tip = env.rlm._partitions[(TOPIC, 0)].tip
    env.lm.update_topic_config(TOPIC, {**env.topic_config, "remote.storage.enable": "false",
                                       "remote.log.delete.on.disable": "true"})
    rsm.delete_failures = 10**6
    caplog.set_level("WARNING", logger="engine")
    waits = []
    for _ in range(3):
        caplog.clear()
        summary = env.rlm.run_once()
        assert "delete on disable" in summary.errors[0] and summary.retry_in_ms > 0
        assert len([r for r in caplog.records if "tiering disabled" in r.getMessage()]) == 1
        caplog.clear()
        early = env.rlm.run_once()  # within the backoff: not retried
        assert not caplog.records and "delete on disable" in early.errors[0]
        assert not env.rlm.is_idle()
        waits.append(summary.retry_in_ms)
        env.clock.advance(summary.retry_in_ms)
    assert waits[-1] > waits[0]
    rsm.delete_failures = 0
    assert env.rlm.run_once().errors == []
    assert env.rlmm.partition_delete_state(tip).name == "DELETE_PARTITION_FINISHED"
    assert env.rlm.is_idle()


def test_unreadable_metadata_of_one_partition_leaves_it_out_until_readable(tmp_path):
    """Partition 0's metadata log cannot be read (here: a directory in its place): the
    pass tiers partition 1 and leaves partition 0 out (its deletion state is unknown);
    once readable, partition 0 is tiered again."""
    env = Env(tmp_path)
    for p in (0, 1):
        env.produce(8, partition=p)
    env.rlm.run_once()
    env.close()
    log_file = next((env.log_dirs[0] / "__remote_log_metadata").glob(f"{TOPIC}-0-*/*.log"))
    moved = log_file.with_name("moved")
    log_file.rename(moved)
    log_file.mkdir()

    env = Env(tmp_path)
    try:
        for p in (0, 1):
            env.produce(8, partition=p)
        summary = env.rlm.run_once()
        assert summary.copied_segments > 0 and len(summary.errors) == 1
        assert summary.errors[0].startswith(f"{TOPIC}-0: left out")
        assert "IsADirectoryError" in summary.errors[0]
        assert [r["partition"] for r in env.rlm.status()] == [1]
        log_file.rmdir()
        moved.rename(log_file)
        summary = env.rlm.run_once()
        assert summary.copied_segments > 0 and summary.errors == []
        assert [r["partition"] for r in env.rlm.status()] == [0, 1]
        assert env.rlm.is_idle()
    finally:
        env.close()
