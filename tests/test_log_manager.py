"""LogManager over several log dirs: placement, loading after clean and unclean shutdowns,
per-dir checkpoints, offline dirs, topic names; `produce-demo` and `dump-log` on partition
directories in a subprocess."""

import errno
import os
import subprocess
import sys
import threading

import pytest

from engine.errors import InvalidTopicError, KafkaEngineError, KafkaStorageError
from engine.log import LogManager, UnifiedLog
from engine.log.log_manager import CLEAN_SHUTDOWN_FILE, parse_partition_dir_name
from engine.log.segment import LogSegment
from engine.records import CompressionType, RecordBatchBuilder, build_end_txn_marker
from engine.records.sample import sample_batches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_700_000_000_000


def _batches(n, *, batch_size=10, seed=1):
    return list(sample_batches(n, CompressionType.NONE, batch_size=batch_size, seed=seed,
                               min_value=50, max_value=300))


def _fill(manager, topic, partition, n=100, **kw):
    for batch in _batches(n, **kw):
        manager.append_as_leader(topic, partition, batch, 0)


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / name) for name in ("d0", "d1", "d2")]


@pytest.fixture
def count_recoveries(monkeypatch):
    """How many segments were scanned by recovery (LogSegment.recover calls)."""
    calls = []
    original = LogSegment.recover

    def recover(self, *args, **kwargs):
        calls.append(self.base_offset)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", recover)
    return calls


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


def _read_all(manager, topic, partition):
    from engine.records import MemoryRecords
    offset, out = 0, []
    while True:
        view, nxt = manager.read(topic, partition, offset, 1 << 20)
        if nxt == offset:
            return out
        out += [(r.offset, r.value) for b in MemoryRecords(bytes(view)).batches()
                for r in b.records()]
        offset = nxt


# -- placement ------------------------------------------------------------------------------

def test_new_partitions_go_to_the_dir_with_fewest_partitions(dirs):
    # d1 and d2 already hold one partition each: d0 fills up first, then ties go in order.
    for d, name in ((dirs[1], "old-0"), (dirs[2], "old-1")):
        UnifiedLog.open(os.path.join(d, name)).close()
    with LogManager(dirs) as manager:
        assert manager.partitions() == [("old", 0), ("old", 1)]
        placed = [manager.log_dir_of("t", p) for p in range(6)
                  if manager.get_or_create_log("t", p) is not None]
        assert [os.path.basename(p) for p in placed] == ["d0", "d0", "d1", "d2", "d0", "d1"]
        assert sorted(manager.partition_counts().values()) == [2, 3, 3]
        # Existing partitions are returned, not created again.
        log = manager.get_or_create_log("t", 0)
        assert log is manager.get_log("t", 0)
        assert sorted(os.listdir(dirs[0])) == ["t-0", "t-1", "t-4"]


def test_dirs_load_in_parallel_threads(dirs, monkeypatch):
    names = []
    original = LogManager._load_dir

    def load(self, d):
        names.append(threading.current_thread().name)
        return original(self, d)

    monkeypatch.setattr(LogManager, "_load_dir", load)
    LogManager(dirs).shutdown()
    assert len(names) == 3 and all(n.startswith("log-dir-loader") for n in names)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "sp ace", "caf\u00e9",
                                  "a:b", "tab\t"])
def test_invalid_topic_names_are_refused(dirs, name):
    with LogManager(dirs) as manager:
        with pytest.raises(InvalidTopicError) as info:
            manager.get_or_create_log(name, 0)
        assert isinstance(info.value, (KafkaEngineError, ValueError))
        assert manager.partitions() == []
    for d in dirs:
        assert [n for n in os.listdir(d) if not n.startswith((".", "recovery", "log-start"))] == []


def test_legal_topic_names_and_dir_name_parsing(dirs):
    with LogManager(dirs) as manager:
        for topic in ("a" * 249, "with-dash-7", "_under.score", "X.Y-z_9"):
            manager.get_or_create_log(topic, 3)
    with LogManager(dirs) as manager:
        assert ("with-dash-7", 3) in manager.partitions() and len(manager.partitions()) == 4
    assert parse_partition_dir_name("with-dash-7-12") == ("with-dash-7", 12)
    for bad in ("nodash", "t-", "t-01", "t-x", "-1", "t-0.abc-delete", "t-99999999999"):
        assert parse_partition_dir_name(bad) is None
    with LogManager(dirs) as manager, pytest.raises(ValueError):
        manager.get_or_create_log("t", -1)


# -- reload ---------------------------------------------------------------------------------

def test_reload_after_clean_shutdown_skips_recovery(dirs, count_recoveries):
    manager = LogManager(dirs, topic_defaults={"segment.bytes": 4000})
    for p in range(4):
        manager.get_or_create_log("t", p)
        _fill(manager, "t", p, 200, seed=p)
    before = {p: _read_all(manager, "t", p) for p in range(4)}
    ends = {p: manager.get_log("t", p).log_end_offset for p in range(4)}
    assert all(len(manager.get_log("t", p).segments) > 2 for p in range(4))
    manager.shutdown()
    for d in dirs:
        assert _bytes(os.path.join(d, CLEAN_SHUTDOWN_FILE)) == b'{"version":0,"brokerEpoch":-1}'
    count_recoveries.clear()

    manager = LogManager(dirs, topic_defaults={"segment.bytes": 4000})
    assert count_recoveries == []  # no segment scanned
    assert all(manager.had_clean_shutdown[d] for d in manager.log_dirs)
    assert all(not v for v in manager.recovered_partitions.values())
    for d in dirs:  # deleted once loading started: a crash from now on is unclean
        assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    for p in range(4):
        assert manager.get_log("t", p).log_end_offset == ends[p]
        assert manager.get_log("t", p).recovery_point == ends[p]
        assert _read_all(manager, "t", p) == before[p]
    manager.shutdown()


def test_reload_after_unclean_shutdown_recovers_from_the_checkpoints(dirs, count_recoveries,
                                                                     caplog):
    manager = LogManager(dirs, topic_defaults={"segment.bytes": 4000})
    manager.get_or_create_log("t", 0)
    manager.get_or_create_log("t", 1)
    _fill(manager, "t", 0, 300)
    _fill(manager, "t", 1, 300, seed=2)
    manager.flush_all()  # recovery points at the log ends, checkpointed
    flushed = {p: manager.get_log("t", p).log_end_offset for p in (0, 1)}
    _fill(manager, "t", 0, 30, seed=3)  # not flushed nor checkpointed
    log0 = manager.get_log("t", 0)
    segments0 = len(log0.segments)
    active = log0.active_segment.log_file
    expected0 = _read_all(manager, "t", 0)
    # "kill -9": the files stay as they are, no checkpoints, no clean-shutdown marker.
    for p in (0, 1):
        manager.get_log("t", p)._close_segments()
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x01\x00torn")  # a torn tail
    for d in dirs:
        assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    count_recoveries.clear()

    with caplog.at_level("WARNING"):
        manager = LogManager(dirs, topic_defaults={"segment.bytes": 4000})
    assert not any(manager.had_clean_shutdown.values())
    assert sorted(tp for v in manager.recovered_partitions.values() for tp in v) == \
        [("t", 0), ("t", 1)]
    # Only the segments from the one holding each recovery point on were scanned.
    log0, log1 = manager.get_log("t", 0), manager.get_log("t", 1)
    assert 1 <= len(count_recoveries) < segments0 + len(log1.segments)
    assert log1.log_end_offset == flushed[1]
    assert _read_all(manager, "t", 0) == expected0  # nothing acknowledged was lost
    assert os.path.getsize(active) == log0.active_segment.size_in_bytes
    assert "truncated" in caplog.text
    manager.shutdown()


def test_recovery_scans_only_from_the_checkpointed_recovery_point(tmp_path, count_recoveries):
    d = [str(tmp_path / "a")]
    manager = LogManager(d, topic_defaults={"segment.bytes": 3000})
    manager.get_or_create_log("t", 0)
    _fill(manager, "t", 0, 300)
    manager.flush_all()
    log = manager.get_log("t", 0)
    n = len(log.segments)
    assert n >= 4
    log._close_segments()  # crash
    count_recoveries.clear()
    manager = LogManager(d, topic_defaults={"segment.bytes": 3000})
    # The recovery point is the log end: only the active segment (which holds it) is
    # scanned, not the n - 1 before it.
    assert count_recoveries == [manager.get_log("t", 0).active_segment.base_offset]
    manager.shutdown()
    os.remove(tmp_path / "a" / "recovery-point-offset-checkpoint")
    os.remove(tmp_path / "a" / CLEAN_SHUTDOWN_FILE)
    count_recoveries.clear()
    LogManager(d, topic_defaults={"segment.bytes": 3000}).shutdown()
    assert len(count_recoveries) == n  # no checkpoint: everything from offset 0


# -- checkpoints ----------------------------------------------------------------------------

def test_checkpoint_files_text(dirs):
    manager = LogManager(dirs)
    for p in range(4):  # t-0, t-3 in d0; t-1 in d1; t-2 in d2
        manager.get_or_create_log("t", p)
    _fill(manager, "t", 0, 30)
    _fill(manager, "t", 3, 20)
    _fill(manager, "t", 1, 10)
    manager.flush_all()

    def path(i, name):
        return os.path.join(dirs[i], name)

    assert _bytes(path(0, "recovery-point-offset-checkpoint")) == \
        b"0\n2\nt 0 30\nt 3 20\n"
    assert _bytes(path(1, "recovery-point-offset-checkpoint")) == b"0\n1\nt 1 10\n"
    assert _bytes(path(2, "recovery-point-offset-checkpoint")) == b"0\n1\nt 2 0\n"
    manager.get_log("t", 0).delete_records(17)
    manager.checkpoint_log_start_offsets()
    assert _bytes(path(0, "log-start-offset-checkpoint")) == b"0\n1\nt 0 17\n"
    assert _bytes(path(1, "log-start-offset-checkpoint")) == b"0\n0\n"
    manager.shutdown()
    assert _bytes(path(0, "log-start-offset-checkpoint")) == b"0\n1\nt 0 17\n"
    with LogManager(dirs) as manager:  # the log start offset survives a restart
        assert manager.get_log("t", 0).log_start_offset == 17
        assert manager.get_log("t", 3).log_start_offset == 0


def test_unreadable_checkpoint_means_recovering_everything(tmp_path, count_recoveries):
    d = str(tmp_path / "a")
    with LogManager([d]) as manager:
        manager.get_or_create_log("t", 0)
        _fill(manager, "t", 0, 50)
    os.remove(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    with open(os.path.join(d, "recovery-point-offset-checkpoint"), "w") as f:
        f.write("0\n5\nt 0 50\n")  # count mismatch
    count_recoveries.clear()
    with LogManager([d]) as manager:
        assert count_recoveries == [0]
        assert manager.get_log("t", 0).log_end_offset == 50


# -- offline dirs ---------------------------------------------------------------------------

def test_a_failed_dir_goes_offline_and_the_others_keep_working(dirs):
    manager = LogManager(dirs)
    for p in range(6):
        manager.get_or_create_log("t", p)
        _fill(manager, "t", p, 20, seed=p)
    held = manager.get_log("t", 1)  # in d1
    manager._handle_dir_failure(dirs[1], OSError(errno.EIO, "Input/output error"))
    assert [str(d) for d in manager.offline_dirs] == [dirs[1]]
    assert sorted(manager.offline_partitions) == [("t", 1), ("t", 4)]
    for op in (lambda: manager.read("t", 1, 0, 1000),
               lambda: manager.append_as_leader("t", 4, _batches(1)[0], 0),
               lambda: manager.get_log("t", 1),
               lambda: manager.get_or_create_log("t", 4),
               lambda: held.read(0, 1000),  # a reference held from before
               lambda: held.append_as_leader(_batches(1)[0], 0)):
        with pytest.raises(KafkaStorageError) as info:
            op()
        assert dirs[1] in str(info.value) and info.value.log_dir == dirs[1]
        assert isinstance(info.value, OSError)
    for p in (0, 2, 3, 5):
        manager.append_as_leader("t", p, _batches(5, batch_size=5)[0], 0)
        assert len(_read_all(manager, "t", p)) == 25
    # New partitions avoid the offline dir.
    for p in range(6, 10):
        manager.get_or_create_log("t", p)
        assert manager.log_dir_of("t", p) != dirs[1]
    manager.flush_all()
    manager.shutdown()
    assert not os.path.exists(os.path.join(dirs[1], CLEAN_SHUTDOWN_FILE))
    for d in (dirs[0], dirs[2]):
        assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))


def test_an_io_error_during_an_append_takes_the_dir_offline(dirs, monkeypatch):
    manager = LogManager(dirs)
    for p in range(3):
        manager.get_or_create_log("t", p)
    segment = manager.get_log("t", 2).active_segment

    def failing_append(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment, "append", failing_append)
    with pytest.raises(KafkaStorageError) as info:
        manager.append_as_leader("t", 2, _batches(10)[0], 0)
    assert info.value.log_dir == dirs[2]
    assert [str(d) for d in manager.offline_dirs] == [dirs[2]]
    _fill(manager, "t", 0, 10)
    assert len(_read_all(manager, "t", 0)) == 10
    # Typed non-I/O errors do not take a dir offline.
    with pytest.raises(KafkaEngineError):
        manager.append_as_leader("t", 1, b"\x00" * 70, 0)
    assert len(manager.offline_dirs) == 1
    manager.shutdown()


def test_a_dir_failing_at_load_is_offline_and_the_others_load(dirs):
    with LogManager(dirs) as manager:
        for p in range(3):
            manager.get_or_create_log("t", p)
            _fill(manager, "t", p, 10)
    # d1 cannot be read: replace the directory by a file (mkdir/iterdir raise OSError).
    for name in os.listdir(dirs[1]):
        path = os.path.join(dirs[1], name)
        if os.path.isdir(path):
            for f in os.listdir(path):
                os.remove(os.path.join(path, f))
            os.rmdir(path)
        else:
            os.remove(path)
    os.rmdir(dirs[1])
    with open(dirs[1], "w") as f:
        f.write("not a directory")
    manager = LogManager(dirs)
    assert [str(d) for d in manager.offline_dirs] == [dirs[1]]
    assert manager.partitions() == [("t", 0), ("t", 2)]
    assert len(_read_all(manager, "t", 2)) == 10
    manager.get_or_create_log("t", 1)  # placed again, on an online dir
    assert manager.log_dir_of("t", 1) == manager.log_dirs[0]
    manager.shutdown()


def test_an_io_error_loading_one_partition_takes_only_its_dir_offline(dirs, monkeypatch):
    with LogManager(dirs) as manager:
        for p in range(3):
            manager.get_or_create_log("t", p)
    original = UnifiedLog.open.__func__

    def open_(cls, directory, **kw):
        if str(directory).endswith("t-0"):
            raise OSError(errno.EIO, "Input/output error", str(directory))
        return original(cls, directory, **kw)

    monkeypatch.setattr(UnifiedLog, "open", classmethod(open_))
    manager = LogManager(dirs)
    assert [str(d) for d in manager.offline_dirs] == [dirs[0]]
    assert manager.partitions() == [("t", 1), ("t", 2)]
    with pytest.raises(KafkaStorageError):
        manager.read("t", 0, 0, 10)
    manager.shutdown()


def test_no_online_dir_left(tmp_path):
    manager = LogManager([str(tmp_path / "a")])
    manager._handle_dir_failure(str(tmp_path / "a"), OSError(errno.EIO, "boom"))
    with pytest.raises(KafkaStorageError):
        manager.get_or_create_log("t", 0)
    manager.shutdown()


def test_transactions_through_the_manager(tmp_path):
    with LogManager([str(tmp_path / "a")]) as manager:
        manager.get_or_create_log("t", 0, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
        b = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0,
                               is_transactional=True)
        b.append(b"v", key=b"k", timestamp=T0)
        manager.append_as_leader("t", 0, b.build(), 3)
        marker = build_end_txn_marker(False, base_offset=0, producer_id=7, producer_epoch=0,
                                      timestamp=T0 + 1)
        assert manager.append_as_leader("t", 0, marker, 3) == (1, 1)
        with pytest.raises(ValueError):
            manager.get_or_create_log("t", 0, topic_id="AAAAAAAAAAAAAAAAAAAAAg")


# -- CLI ------------------------------------------------------------------------------------

def _engine(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_produce_demo_then_dump_log_verify_every_partition_dir(tmp_path):
    d1, d2 = str(tmp_path / "disk1"), str(tmp_path / "disk2")
    proc = _engine("produce-demo", "--log-dirs", f"{d1},{d2}", "--topic", "orders",
                   "--partitions", "4", "--records", "4000", "--codec", "zstd",
                   "--segment-bytes", "60000", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4
    assert [line.split()[1] for line in lines] == [f"dir={d1}", f"dir={d2}", f"dir={d1}",
                                                   f"dir={d2}"]
    assert all("records=1000" in line and "aborted=0" not in line for line in lines)
    for d in (d1, d2):
        assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    partition_dirs = sorted(os.path.join(d, n) for d in (d1, d2) for n in os.listdir(d)
                            if n.startswith("orders-"))
    assert len(partition_dirs) == 4
    for pdir in partition_dirs:
        names = os.listdir(pdir)
        logs = [n for n in names if n.endswith(".log")]
        assert len(logs) >= 2
        # A snapshot at each rolled segment's base and at the log end (clean shutdown), and
        # the aborted transactions in the .txnindex of the segments holding their markers.
        snapshots = {n[:20] for n in names if n.endswith(".snapshot")}
        assert {n[:20] for n in logs} - {"0" * 20} <= snapshots and len(snapshots) == len(logs)
        aborts = sum(os.path.getsize(os.path.join(pdir, n)) // 34 for n in names
                     if n.endswith(".txnindex"))
        assert aborts >= 1
        check = _engine("dump-log", "--verify", pdir)
        assert check.returncode == 0, check.stderr
        assert "verify: OK" in check.stderr
    out = _engine("dump-log", "--print-data-log", partition_dirs[0]).stdout
    assert "endTxnMarker: ABORT" in out and "isTransactional: true" in out
    assert "compresscodec: zstd" in out
    assert out.index("00000000000000000000.log") < out.index("00000000000000000000.index") \
        < out.index("leader-epoch-checkpoint")

    # Same seed, same bytes.
    again = _engine("produce-demo", "--log-dirs", str(tmp_path / "x"), "--topic", "orders",
                    "--partitions", "1", "--records", "300", "--codec", "lz4", "--seed", "5")
    assert again.returncode == 0, again.stderr

    # A bit flipped in the middle of a segment is reported, naming the file.
    pdir = partition_dirs[0]
    first_log = min(n for n in os.listdir(pdir) if n.endswith(".log"))
    path = os.path.join(pdir, first_log)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x40]))
    bad = _engine("dump-log", "--verify", pdir)
    assert bad.returncode == 1
    assert first_log in bad.stderr


def test_dump_log_directory_skips_unknown_files(tmp_path):
    with LogManager([str(tmp_path / "a")]) as manager:
        manager.get_or_create_log("t", 0)
        _fill(manager, "t", 0, 30)
    pdir = str(tmp_path / "a" / "t-0")
    with open(os.path.join(pdir, "notes.txt"), "w") as f:
        f.write("hello")
    proc = _engine("dump-log", "--verify", pdir)
    assert proc.returncode == 0, proc.stderr
    assert "skipping" in proc.stderr and "notes.txt" in proc.stderr


# -- log start offset checkpoints -----------------------------------------------------------

_DELETE_RECORDS_THEN_CRASH = """
import os, signal, sys
from engine.log import LogManager
from engine.records import CompressionType
from engine.records.sample import sample_batches
manager = LogManager([sys.argv[1]], topic_defaults={"segment.bytes": 4000})
for p in (0, 1):
    manager.get_or_create_log("t", p)
    for batch in sample_batches(60, CompressionType.NONE, batch_size=10, seed=1,
                                min_value=50, max_value=300):
        manager.append_as_leader("t", p, batch, 0)
manager.flush_all()
manager.delete_records("t", 0, 37)  # through the manager
manager.get_log("t", 1).delete_records(23)  # straight on the log
os.kill(os.getpid(), signal.SIGKILL)  # no shutdown: no checkpoint written at the end
"""


def test_delete_records_survives_a_crash(tmp_path):
    d = tmp_path / "d0"
    done = subprocess.run([sys.executable, "-c", _DELETE_RECORDS_THEN_CRASH, str(d)],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    manager = LogManager([d], topic_defaults={"segment.bytes": 4000})
    log0, log1 = manager.get_log("t", 0), manager.get_log("t", 1)
    assert log0.log_start_offset == 37 and log1.log_start_offset == 23
    bases = [s.base_offset for s in log0.segments]
    assert bases[0] < 37 and 37 not in bases  # mid segment: only the checkpoint knows it
    with pytest.raises(KafkaEngineError):
        manager.read("t", 0, 36, 1000)
    manager.shutdown()


def test_log_start_offsets_checkpointed_every_interval(tmp_path):
    from engine.log.checkpoint import OffsetCheckpointFile
    now = [T0]
    manager = LogManager([tmp_path / "d0"], clock=lambda: now[0],
                         broker_config={"log.flush.start.offset.checkpoint.interval.ms": "1000"},
                         topic_defaults={"cleanup.policy": "compact"})
    unified = manager.get_or_create_log("t", 0)
    _fill(manager, "t", 0, 20)
    checkpoint = tmp_path / "d0" / "log-start-offset-checkpoint"
    # A start moved by another path than DeleteRecords (here the remote tier's rule).
    unified.maybe_increment_log_start_offset(15, "remote segment deleted")
    assert not manager.maybe_checkpoint_log_start_offsets()  # the interval has not passed
    assert not checkpoint.exists()
    now[0] += 1000
    assert manager.maybe_checkpoint_log_start_offsets()
    assert OffsetCheckpointFile(checkpoint).read() == {("t", 0): 15}
    assert not manager.maybe_checkpoint_log_start_offsets()
    now[0] += 999
    assert not manager.maybe_checkpoint_log_start_offsets()
    manager.shutdown()
