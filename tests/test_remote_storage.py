"""FileSystemRemoteStorageManager: layout, round trips, ranged reads, checksums, crash safety."""

import errno
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rsm_crash_writer import load_segment_data, make_segment, segment_metadata

from engine.checksums import crc32c
from engine.common import Uuid
from engine.config import ConfigError
from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote import IndexType, LogSegmentData
from engine.remote.filesystem import (
    FILE_SUFFIXES,
    ROOT_DIR_NAME,
    FileSystemRemoteStorageManager,
    SegmentChecksums,
)
from engine.remote.metadata import TopicIdPartition

TOPIC_ID = Uuid.from_string("LWgrMmVrT0a__7a4SasuPA")
TIP = TopicIdPartition(TOPIC_ID, "orders", 3)
WRITER = Path(__file__).with_name("rsm_crash_writer.py")


@pytest.fixture(scope="module")
def segment(tmp_path_factory):
    """A closed segment at offset 100 with aborted transactions."""
    data, last, size = make_segment(tmp_path_factory.mktemp("local"), 100, batches=30,
                                    aborted=3, seed=7)
    return data, last, size


def copied(rsm, segment, tip=TIP, segment_id=None):
    data, last, size = segment
    md = segment_metadata(tip, 100, last, size, segment_id)
    custom = rsm.copy_log_segment_data(md, data)
    return segment_metadata(tip, 100, last, size, md.remote_log_segment_id.id, custom)


def test_layout_matches_local_tiered_storage_names(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    pdir = tmp_path / ROOT_DIR_NAME / "orders-3-LWgrMmVrT0a__7a4SasuPA"
    uuid = md.remote_log_segment_id.id
    assert sorted(p.name for p in pdir.iterdir()) == sorted(
        f"00000000000000000100-{uuid}{s}" for s in FILE_SUFFIXES)
    assert rsm.segment_path(md, ".log") == pdir / f"00000000000000000100-{uuid}.log"
    assert not list(pdir.glob("*.tmp"))


def test_every_file_round_trips_and_custom_metadata_is_compact(tmp_path, segment):
    data = segment[0]
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    assert len(md.custom_metadata) <= 56
    sums = SegmentChecksums.decode(md.custom_metadata)
    expected = {
        IndexType.OFFSET: data.offset_index.read_bytes(),
        IndexType.TIMESTAMP: data.time_index.read_bytes(),
        IndexType.TRANSACTION: data.transaction_index.read_bytes(),
        IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot.read_bytes(),
        IndexType.LEADER_EPOCH: data.leader_epoch_index,
    }
    for index_type, content in expected.items():
        with rsm.fetch_index(md, index_type) as stream:
            assert stream.read() == content, index_type
    log = data.log_segment.read_bytes()
    with rsm.fetch_log_segment(md, 0) as stream:
        assert stream.read() == log
    assert sums.files[".log"] == (crc32c(log), len(log))
    assert rsm.read_range(md, 0, len(log)) == log


def test_checksums_encoding_round_trips_and_rejects_foreign_bytes():
    sums = SegmentChecksums({".log": (0xFFFFFFFF, 2**31 - 1), ".index": (1, 0),
                             ".leader_epoch_checkpoint": (5, 300)})
    assert SegmentChecksums.decode(sums.encode()) == sums
    for bad in (b"", b"\x02\x01", b"\x01\x01\x00", b"\x01\x40" + bytes(5),
                sums.encode() + b"x", sums.encode()[:-1]):
        with pytest.raises(ValueError):
            SegmentChecksums.decode(bad)


def test_ranged_reads_every_edge(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    log = segment[0].log_segment.read_bytes()
    size = len(log)
    for start, end in [(0, 0), (0, size - 1), (size - 1, size - 1), (17, 4096), (size // 2, None)]:
        with rsm.fetch_log_segment(md, start, end) as stream:
            want = log[start:] if end is None else log[start:end + 1]
            assert stream.read() == want, (start, end)
    with rsm.fetch_log_segment(md, size) as stream:  # start == size, to the end: empty
        assert stream.read() == b""
    with rsm.fetch_log_segment(md, 10, 5000) as stream:  # chunked reads stop at the end
        parts = iter(lambda: stream.read(777), b"")
        assert b"".join(parts) == log[10:5001]
    with rsm.fetch_log_segment(md, 3, 10) as stream:
        buf = bytearray(100)
        assert stream.readinto(buf) == 8 and bytes(buf[:8]) == log[3:11]
    for start, end in [(-1, 5), (5, 4), (0, size), (size, size), (size + 1, None)]:
        with pytest.raises(ValueError, match="outside"):
            rsm.fetch_log_segment(md, start, end)
    assert rsm.read_range(md, 5, 5) == b""
    assert rsm.read_range(md, size - 3, size) == log[-3:]
    for start, end in [(-1, 2), (4, 3), (0, size + 1)]:
        with pytest.raises(ValueError, match="outside"):
            rsm.read_range(md, start, end)
    buf = bytearray(1000)
    assert rsm.read_range_into(md, 50, buf) == 1000 and bytes(buf) == log[50:1050]
    with pytest.raises(ValueError):
        rsm.read_range_into(md, size - 10, buf)


def test_missing_transaction_index_raises_not_found(tmp_path):
    data, last, size = make_segment(tmp_path / "local", 0, batches=5, aborted=0)
    assert data.transaction_index is None
    rsm = FileSystemRemoteStorageManager([tmp_path / "remote"])
    md = segment_metadata(TIP, 0, last, size)
    custom = rsm.copy_log_segment_data(md, data)
    assert ".txnindex" not in SegmentChecksums.decode(custom).files
    for meta in (md, segment_metadata(TIP, 0, last, size, md.remote_log_segment_id.id, custom)):
        with pytest.raises(RemoteResourceNotFoundError, match="txnindex"):
            rsm.fetch_index(meta, IndexType.TRANSACTION)


def test_missing_snapshot_is_stored_empty(tmp_path, segment):
    data = segment[0]
    no_snapshot = LogSegmentData(data.log_segment, data.offset_index, data.time_index,
                                 data.transaction_index, None, data.leader_epoch_index)
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, (no_snapshot, *segment[1:]))
    assert rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT).read() == b""


def test_unknown_segment_and_missing_source_errors_name_paths(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path / "a", tmp_path / "b"])
    md = segment_metadata(TIP, 100, segment[1], segment[2])
    with pytest.raises(RemoteResourceNotFoundError, match=r"00000000000000000100-.*\.log"):
        rsm.read_range(md, 0, 1)
    with pytest.raises(RemoteResourceNotFoundError, match=r"\.index"):
        rsm.fetch_index(md, IndexType.OFFSET)
    data = segment[0]
    gone = LogSegmentData(tmp_path / "nope.log", data.offset_index, data.time_index, None,
                          data.producer_snapshot, b"")
    with pytest.raises(RemoteStorageError, match="nope.log"):
        rsm.copy_log_segment_data(md, gone)
    assert not list((tmp_path / "a").rglob("*0100-*")) + list((tmp_path / "b").rglob("*0100-*"))


def test_copy_is_idempotent_over_partial_content(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = segment_metadata(TIP, 100, segment[1], segment[2])
    pdir = rsm.partition_dir(TIP)
    pdir.mkdir(parents=True)
    # what a crashed attempt leaves: a torn .log.tmp, a short .index, a stale .txnindex
    name = rsm.segment_file_name(md, "")
    (pdir / f"{name}.log.tmp").write_bytes(b"garbage" * 100)
    (pdir / f"{name}.index").write_bytes(b"\x01" * 3)
    (pdir / f"{name}.txnindex").write_bytes(b"\x02" * 999)
    custom = rsm.copy_log_segment_data(md, segment[0])
    assert custom == rsm.copy_log_segment_data(md, segment[0])  # and again: same result
    md = segment_metadata(TIP, 100, segment[1], segment[2], md.remote_log_segment_id.id, custom)
    assert rsm.fetch_index(md, IndexType.OFFSET).read() == segment[0].offset_index.read_bytes()
    assert rsm.read_range(md, 0, segment[2]) == segment[0].log_segment.read_bytes()
    assert not list(pdir.glob("*.tmp"))


@pytest.mark.parametrize("suffix, index_type", [
    (".log", None), (".index", IndexType.OFFSET), (".timeindex", IndexType.TIMESTAMP),
    (".txnindex", IndexType.TRANSACTION), (".snapshot", IndexType.PRODUCER_SNAPSHOT),
    (".leader_epoch_checkpoint", IndexType.LEADER_EPOCH)])
def test_corruption_is_detected_naming_the_file(tmp_path, segment, suffix, index_type):
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    path = rsm.segment_path(md, suffix)
    content = bytearray(path.read_bytes())
    if not content:  # the empty producer snapshot: any byte is corruption
        content = bytearray(b"\x00")
    else:
        content[len(content) // 2] ^= 0x40
    path.write_bytes(bytes(content))
    pattern = f"{path.name}" if content else path.name
    if index_type is None:
        with pytest.raises(RemoteStorageError, match=pattern):
            rsm.read_range(md, 0, 10)
        with pytest.raises(RemoteStorageError, match="CRC32C mismatch"):
            rsm.fetch_log_segment(md, 0)
    else:
        with pytest.raises(RemoteStorageError, match=pattern):
            rsm.fetch_index(md, index_type)


def test_log_crc_is_checked_once_per_segment_and_size_always(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    assert rsm.read_range(md, 0, 4) == segment[0].log_segment.read_bytes()[:4]
    path = rsm.segment_path(md, ".log")
    st = path.stat()
    with open(path, "r+b") as f:  # same size, inode and mtime: the cached verdict stands ...
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    rsm.read_range(md, 0, 4)
    with pytest.raises(RemoteStorageError, match="CRC32C mismatch"):  # ... a new process checks
        FileSystemRemoteStorageManager([tmp_path]).read_range(md, 0, 4)
    with open(path, "ab") as f:  # a size change is caught whenever the file is opened
        f.write(b"x")
    size_only = FileSystemRemoteStorageManager([tmp_path], log_read_verification="size")
    with pytest.raises(RemoteStorageError, match="bytes, its checksum record says"):
        size_only.read_range(md, 0, 4)
    with pytest.raises(RemoteStorageError, match="bytes, its checksum record says"):
        rsm.fetch_log_segment(md, 0)  # streams open the file afresh
    with pytest.raises(ValueError, match="outside"):  # the open file keeps the recorded size
        rsm.read_range(md, 0, md.segment_size_in_bytes + 1)


def test_open_log_cache_never_closes_a_file_under_a_reader(tmp_path, segment):
    from engine.remote.filesystem import read as filesystem

    rsm = FileSystemRemoteStorageManager([tmp_path], fsync=False)
    rsm._open_logs = filesystem._OpenLogCache(2)
    mds = [copied(rsm, segment) for _ in range(4)]
    log = segment[0].log_segment.read_bytes()
    held = rsm._acquire_log(mds[0])
    for md in mds[1:]:  # evicts mds[0]'s file from the cache while it is held
        assert rsm.read_range(md, 0, 100) == log[:100]
    assert os.pread(held.fd, 100, 0) == log[:100]
    rsm._open_logs.release(held)
    with pytest.raises(OSError):  # closed once released
        os.fstat(held.fd)
    rsm.delete_log_segment_data(mds[3])  # a deleted segment's open file is dropped
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.read_range(mds[3], 0, 1)
    open_fds = len(os.listdir("/proc/self/fd"))
    rsm.close()
    assert len(os.listdir("/proc/self/fd")) == open_fds - 1  # mds[2], the one still cached


def test_open_log_cache_closes_the_loser_of_an_open_race(tmp_path, segment):
    from engine.remote.filesystem import read as filesystem

    rsm = FileSystemRemoteStorageManager([tmp_path], fsync=False)
    md = copied(rsm, segment)
    path = rsm.segment_path(md, ".log")
    cache = filesystem._OpenLogCache(2)
    first, second = (filesystem._OpenLog(os.open(path, os.O_RDONLY), path, 1)
                     for _ in range(2))
    assert cache.insert("k", first) is first
    assert cache.insert("k", second) is first  # another thread cached it meanwhile
    with pytest.raises(OSError):
        os.fstat(second.fd)
    cache.release(first)  # both callers' reads end: the cache's hold keeps it open
    cache.release(first)
    assert first.refs == 1 and os.fstat(first.fd)
    cache.clear()
    with pytest.raises(OSError):
        os.fstat(first.fd)


def test_map_range_views_every_edge_without_copying(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path], fsync=False)
    md = copied(rsm, segment)
    log = segment[0].log_segment.read_bytes()
    size = len(log)
    for start, end in [(0, size), (0, 1), (size - 3, size), (17, 4096), (5, 5), (size, size)]:
        view = rsm.map_range(md, start, end)
        assert view.readonly and view.nbytes == end - start
        assert bytes(view) == log[start:end], (start, end)
    for start, end in [(-1, 2), (4, 3), (0, size + 1), (size + 1, size + 1)]:
        with pytest.raises(ValueError, match=f"outside {rsm.segment_path(md, '.log')}"):
            rsm.map_range(md, start, end)
    a, b = rsm.map_range(md, 0, 10), rsm.map_range(md, 100, 200)
    assert a.obj is b.obj  # one mapping of the segment serves every view
    with pytest.raises(TypeError):
        a[0] = 1


def test_map_range_checks_like_read_range(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path], fsync=False)
    md = copied(rsm, segment)
    path = rsm.segment_path(md, ".log")
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 0x40
    path.write_bytes(bytes(content))
    with pytest.raises(RemoteStorageError, match=f"CRC32C mismatch in remote file {path}"):
        rsm.map_range(md, 0, 10)
    path.write_bytes(bytes(content[:-1]))
    with pytest.raises(RemoteStorageError, match=f"{path} has .* bytes, its checksum record"):
        FileSystemRemoteStorageManager([tmp_path], log_read_verification="size").map_range(
            md, 0, 10)
    other = segment_metadata(TIP, 100, segment[1], segment[2])
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        rsm.map_range(other, 0, 1)
    assert caught.value.file == str(rsm.segment_path(other, ".log"))
    rsm.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        rsm.map_range(md, 0, 1)


def test_map_range_serves_from_the_mapping_its_crc_check_made(tmp_path, segment,
                                                             monkeypatch):
    """A segment's first read in a process checks the whole `.log` through a mapping;
    map_range then serves that mapping: one mapping a segment, its pages mapped once."""
    import mmap

    md = copied(FileSystemRemoteStorageManager([tmp_path], fsync=False), segment)
    rsm = FileSystemRemoteStorageManager([tmp_path])  # a new process: nothing checked yet
    made = []
    real = mmap.mmap
    monkeypatch.setattr(mmap, "mmap", lambda *a, **k: made.append(a) or real(*a, **k))
    log = segment[0].log_segment.read_bytes()
    assert bytes(rsm.map_range(md, 0, 100)) == log[:100]
    assert bytes(rsm.map_range(md, 100, len(log))) == log[100:]
    assert len(made) == 1
    assert rsm.read_range(md, 0, 10) == log[:10]
    rsm.close()


def test_map_range_views_survive_eviction_deletion_and_close(tmp_path, segment):
    from engine.remote.filesystem import read as filesystem

    rsm = FileSystemRemoteStorageManager([tmp_path], fsync=False)
    rsm._open_logs = filesystem._OpenLogCache(2)
    mds = [copied(rsm, segment) for _ in range(4)]
    log = segment[0].log_segment.read_bytes()
    views = [rsm.map_range(md, 10, len(log)) for md in mds]  # mds[0], mds[1] evicted
    rsm.delete_log_segment_data(mds[3])  # dropped from the cache and unlinked
    assert not rsm.segment_path(mds[3], ".log").exists()
    rsm.close()
    for view in views:
        assert bytes(view) == log[10:]
    held = views[0][:5]
    del views
    import gc
    gc.collect()
    assert bytes(held) == log[10:15]  # a slice keeps the mapping alive too
    path = str(rsm.segment_path(mds[0], ".log").resolve())
    # counted by target, not in total: threads of other tests in this process open files too
    assert _open_fds_of(path) == 1
    del held
    gc.collect()
    assert _open_fds_of(path) == 0  # the last view unmapped its file


def _open_fds_of(path: str) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:  # closed meanwhile
            pass
    return n


def test_map_range_concurrent_with_eviction(tmp_path, segment):
    from engine.remote.filesystem import read as filesystem

    rsm = FileSystemRemoteStorageManager([tmp_path], fsync=False)
    rsm._open_logs = filesystem._OpenLogCache(2)
    mds = [copied(rsm, segment) for _ in range(5)]
    log = segment[0].log_segment.read_bytes()
    errors = []

    def worker(seed):
        rng = random.Random(seed)
        try:
            for _ in range(300):
                md = rng.choice(mds)
                a = rng.randrange(len(log))
                b = rng.randrange(a, len(log) + 1)
                view = rsm.map_range(md, a, b)
                assert bytes(view) == log[a:b]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_delete_is_idempotent_and_removes_empty_partition_dir(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    other = copied(rsm, segment)
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.read_range(md, 0, 1)
    assert rsm.read_range(other, 0, 1)
    rsm.delete_log_segment_data(other)
    assert not rsm.partition_dir(TIP).exists()
    rsm.delete_log_segment_data(other)


def test_partitions_spread_over_dirs_and_survive_a_dir_list_change(tmp_path, segment):
    dirs = [tmp_path / f"d{i}" for i in range(4)]
    rsm = FileSystemRemoteStorageManager(dirs)
    tips = [TopicIdPartition(TOPIC_ID, "orders", p) for p in range(40)]
    placed = {rsm.partition_dir(t).parents[1] for t in tips}
    assert placed == set(dirs)  # every dir gets some of 40 partitions
    again = FileSystemRemoteStorageManager(list(reversed(dirs)))
    assert all(again.partition_dir(t) == rsm.partition_dir(t) for t in tips)  # order-free
    mds = {t: copied(rsm, segment, t) for t in tips[:8]}
    grown = FileSystemRemoteStorageManager(dirs + [tmp_path / "d4"])
    moved = [t for t in tips if grown.partition_dir(t) != rsm.partition_dir(t)]
    assert 0 < len(moved) < 20  # rendezvous hashing moves about a fifth
    assert all(grown.partition_dir(t).parents[1] == tmp_path / "d4" for t in moved)
    log = segment[0].log_segment.read_bytes()
    for md in mds.values():  # found wherever they were written
        assert grown.read_range(md, 0, len(log)) == log
        grown.delete_log_segment_data(md)
    assert not [p for d in dirs for p in d.rglob("*.log")]


def test_configure_validates(tmp_path):
    rsm = FileSystemRemoteStorageManager()
    with pytest.raises(RemoteStorageError, match="not configured"):
        rsm.partition_dir(TIP)
    cases = [({}, "dirs"), ({"dirs": "relative/x"}, "dirs"),
             ({"dirs": f"{tmp_path}/a,{tmp_path}/a/"}, "dirs"),
             ({"dirs": f"{tmp_path}/a,,{tmp_path}/b"}, "dirs"),
             ({"dirs": f"{tmp_path}/a", "broker.id": "x"}, "broker.id"),
             ({"dirs": f"{tmp_path}/a", "fsync": "maybe"}, "fsync"),
             ({"dirs": f"{tmp_path}/a", "log.read.verification": "some"},
              "log.read.verification")]
    for configs, key in cases:
        with pytest.raises(ConfigError) as info:
            rsm.configure(configs)
        assert info.value.key == key, configs
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ConfigError, match="cannot create"):
        rsm.configure({"dirs": f"{tmp_path}/file/x"})
    rsm.configure({"dirs": f" {tmp_path}/a , {tmp_path}/b", "broker.id": "2"})
    assert rsm.dirs == [tmp_path / "a", tmp_path / "b"] and rsm.broker_id == 2
    assert (tmp_path / "b" / ROOT_DIR_NAME).is_dir()
    with pytest.raises(ValueError, match="cannot name a directory"):
        rsm.partition_dir(TopicIdPartition(TOPIC_ID, "../x", 0))


def test_concurrent_copies_reads_and_deletes(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path / "a", tmp_path / "b"], fsync=False)
    log = segment[0].log_segment.read_bytes()
    errors = []

    def worker(seed):
        rng = random.Random(seed)
        try:
            for i in range(6):
                tip = TopicIdPartition(TOPIC_ID, "orders", rng.randrange(3))
                md = copied(rsm, segment, tip)
                for _ in range(5):
                    a = rng.randrange(len(log))
                    b = rng.randrange(a, len(log) + 1)
                    assert rsm.read_range(md, a, b) == log[a:b]
                assert rsm.fetch_index(md, IndexType.TRANSACTION).read() == \
                    segment[0].transaction_index.read_bytes()
                if i % 2:
                    rsm.delete_log_segment_data(md)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(list(tmp_path.rglob("*.log"))) == 6 * 3


def test_pickled_manager_reads_in_another_process(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path / "a", tmp_path / "b"], fsync=False,
                                         log_read_verification="size", broker_id=4)
    md = copied(rsm, segment)
    code = ("import pickle, sys; rsm, md = pickle.loads(sys.stdin.buffer.read()); "
            "sys.stdout.buffer.write(rsm.read_range(md, 0, md.segment_size_in_bytes)); "
            "assert (rsm._fsync, rsm._verification, rsm.broker_id) == (False, 'size', 4)")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((rsm, md)),
                         capture_output=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1])))
    assert out.stdout == segment[0].log_segment.read_bytes()


def test_closed_manager_refuses_work(tmp_path, segment):
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    rsm.close()
    rsm.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        rsm.read_range(md, 0, 1)


@pytest.mark.slow
def test_sigkill_during_copies_then_retry_stores_exact_files(tmp_path):
    """A child copies a segment under fixed ids in a loop and is killed with SIGKILL at
    seeded random moments; each time a retry of every id must succeed and store exactly the
    source files, and no .tmp file may survive it."""
    source = tmp_path / "local"
    data, last, size = make_segment(source, 0, batches=60, records=20, value_size=1000,
                                    aborted=2, seed=1)
    remote = tmp_path / "remote"
    ids = [Uuid.random() for _ in range(3)]
    rng = random.Random(405)
    rsm = FileSystemRemoteStorageManager([remote])
    expected = {".log": data.log_segment.read_bytes(), ".index": data.offset_index.read_bytes(),
                ".timeindex": data.time_index.read_bytes(),
                ".txnindex": data.transaction_index.read_bytes(),
                ".snapshot": data.producer_snapshot.read_bytes(),
                ".leader_epoch_checkpoint": data.leader_epoch_index}
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    kills = torn = 0
    for round_ in range(16):
        child = subprocess.Popen(
            [sys.executable, str(WRITER), str(remote), str(source), str(TOPIC_ID), str(last),
             str(size), *map(str, ids)], stdout=subprocess.PIPE, env=env)
        try:
            assert child.stdout.readline() == b"ready\n"
            for _ in range(rng.randrange(0, 4)):  # let some copies complete first
                assert child.stdout.readline().startswith(b"copied")
            threading.Event().wait(rng.random() * 0.05)
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
            kills += 1
        finally:
            child.kill()
            child.stdout.close()
        if list(remote.rglob("*.tmp")) or not all(
                rsm.segment_path(segment_metadata(TopicIdPartition(TOPIC_ID, "crash", 0), 0,
                                                  last, size, u), ".log").exists() for u in ids):
            torn += 1  # this kill interrupted a copy
        reloaded = load_segment_data(source, 0)
        for uuid in ids:
            md = segment_metadata(TopicIdPartition(TOPIC_ID, "crash", 0), 0, last, size, uuid)
            custom = rsm.copy_log_segment_data(md, reloaded)
            for suffix, content in expected.items():
                assert rsm.segment_path(md, suffix).read_bytes() == content, (round_, suffix)
            md = segment_metadata(md.topic_id_partition, 0, last, size, uuid, custom)
            assert rsm.read_range(md, 0, size) == expected[".log"]
        assert not list(remote.rglob("*.tmp"))
    assert kills >= 15 and torn >= 3, (kills, torn)


@pytest.mark.parametrize("code", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP])
def test_copy_falls_back_where_the_kernel_copy_is_unsupported(tmp_path, segment, monkeypatch,
                                                              code):
    calls = []

    def unsupported(*args):
        calls.append(args)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    rsm = FileSystemRemoteStorageManager([tmp_path])
    md = copied(rsm, segment)
    assert calls  # the kernel copy was tried, then the write loop did the work
    data = segment[0]
    assert rsm.read_range(md, 0, segment[2]) == data.log_segment.read_bytes()
    assert rsm.fetch_index(md, IndexType.OFFSET).read() == data.offset_index.read_bytes()


def test_other_kernel_copy_errors_fail_the_copy_and_leave_nothing(tmp_path, segment,
                                                                   monkeypatch):
    def failing(*args):
        raise OSError(errno.EIO, "injected I/O error")

    monkeypatch.setattr(os, "copy_file_range", failing)
    rsm = FileSystemRemoteStorageManager([tmp_path])
    with pytest.raises(RemoteStorageError, match=r"injected I/O error|\.tmp"):
        copied(rsm, segment)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_enospc_in_the_fallback_copy_is_a_remote_storage_error(tmp_path, segment,
                                                               monkeypatch):
    """A full tier where the kernel copy is unsupported (across filesystems): the write
    loop's ENOSPC is a RemoteStorageError naming the errno, the file and the partition,
    not a BufferError from closing the source mapping. (test_cli_availability.py fills a
    real tmpfs where mounting is allowed; this injects only the failing write.)"""
    def unsupported(*args):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    monkeypatch.setattr(os, "write", full)
    monkeypatch.setattr(os, "pwrite", full)
    rsm = FileSystemRemoteStorageManager([tmp_path])
    with pytest.raises(RemoteStorageError) as info:
        copied(rsm, segment)
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert "ENOSPC" in message and "orders-3" in message and ".tmp" in info.value.file
    monkeypatch.undo()
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.parametrize("verification", ["full", "size"])
def test_full_verification_checks_each_batch_crc_of_a_segment_stored_damaged(tmp_path,
                                                                            verification):
    """A `.log` stored from damaged bytes matches its stored file CRC; with `full` its batch
    CRCs are checked too before any range is served, which is what lets the tier declare
    verifies_batch_crcs (readers then skip their own CRC pass)."""
    from engine._native import records as _records
    from engine.remote.storage import RemoteStorageManager

    data, last, size = make_segment(tmp_path / "local", 0, batches=8, aborted=0)
    headers, _ = _records.scan(data.log_segment.read_bytes(), False)
    row = headers[3]
    at = int(row["position"] + row["size"]) - 2
    with open(data.log_segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))
    rsm = FileSystemRemoteStorageManager([tmp_path / "remote"],
                                         log_read_verification=verification)
    md = segment_metadata(TIP, 0, last, size)
    md = segment_metadata(TIP, 0, last, size, md.remote_log_segment_id.id,
                          rsm.copy_log_segment_data(md, data))
    assert rsm.verifies_batch_crcs(md) is (verification == "full")
    assert not RemoteStorageManager.verifies_batch_crcs(rsm, md)  # the contract's default
    if verification == "size":
        assert rsm.read_range(md, 0, 10) == data.log_segment.read_bytes()[:10]
        return
    for read in (lambda: rsm.read_range(md, 0, 10), lambda: rsm.map_range(md, 0, 10),
                 lambda: rsm.fetch_log_segment(md, 0)):
        with pytest.raises(RemoteStorageError, match="CRC mismatch in the record batch") as e:
            read()
        assert e.value.position == int(row["position"])
        assert e.value.offset == int(row["base_offset"])
        assert str(rsm.segment_path(md, ".log")) in str(e.value)
    # an untouched neighbour of the same tier is served
    good, last2, size2 = make_segment(tmp_path / "local2", 0, batches=3, aborted=0)
    md2 = segment_metadata(TIP, 0, last2, size2)
    md2 = segment_metadata(TIP, 0, last2, size2, md2.remote_log_segment_id.id,
                           rsm.copy_log_segment_data(md2, good))
    assert rsm.read_range(md2, 0, size2) == good.log_segment.read_bytes()
