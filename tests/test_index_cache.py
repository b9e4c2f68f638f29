"""RemoteIndexCache: Kafka's lookups, files, eviction, restart reuse, loads and failures."""

import gc
import os
import threading
from collections import Counter

import pytest
from rsm_crash_writer import BASE_TS, make_segment, segment_metadata

from engine.common import Uuid
from engine.errors import RemoteStorageError
from engine.log.offset_index import OffsetIndex
from engine.log.time_index import TimeIndex
from engine.log.transaction_index import TransactionIndex
from engine.remote import IndexType
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.index_cache import RemoteIndexCache
from engine.remote.metadata import TopicIdPartition

TIP = TopicIdPartition(Uuid.from_string("LWgrMmVrT0a__7a4SasuPA"), "orders", 0)


class CountingRSM(FileSystemRemoteStorageManager):
    """Counts index fetches (fetch_index_bytes, what the cache calls); can fail the next N,
    or block them on an event."""

    def __init__(self, dirs):
        super().__init__(dirs, fsync=False)
        self.fetches = Counter()
        self.fail_next = 0
        self.gate = None
        self.lock = threading.Lock()

    def fetch_index_bytes(self, metadata, index_type):
        with self.lock:
            self.fetches[index_type] += 1
            fail, self.fail_next = self.fail_next > 0, max(0, self.fail_next - 1)
        if self.gate is not None:
            self.gate.wait(10)
        if fail:
            raise RemoteStorageError("injected fetch failure")
        return super().fetch_index_bytes(metadata, index_type)


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """Three closed segments (base offsets 0, 300, 600), the middle one without aborts."""
    root = tmp_path_factory.mktemp("local")
    segs = []
    for i, base in enumerate((0, 300, 600)):
        data, last, size = make_segment(root / f"s{i}", base, batches=30, aborted=0 if i == 1
                                        else 2, seed=i, index_interval_bytes=512)
        segs.append((data, base, last, size))
    return segs


@pytest.fixture
def remote(tmp_path, local):
    rsm = CountingRSM([tmp_path / "remote"])
    mds = []
    for data, base, last, size in local:
        md = segment_metadata(TIP, base, last, size)
        custom = rsm.copy_log_segment_data(md, data)
        mds.append(segment_metadata(TIP, base, last, size, md.remote_log_segment_id.id, custom))
    rsm.fetches.clear()
    return rsm, mds


def entry_bytes(data):
    txn = data.transaction_index
    return (data.offset_index.stat().st_size + data.time_index.stat().st_size
            + (txn.stat().st_size if txn else 0))


def test_lookups_follow_kafka_over_the_downloaded_indexes(tmp_path, local, remote):
    rsm, mds = remote
    cache = RemoteIndexCache(rsm, tmp_path / "cache", 1 << 30)
    for (data, base, last, _), md in zip(local, mds):
        offsets = OffsetIndex(data.offset_index, base, writable=False)
        times = TimeIndex(data.time_index, base, writable=False)
        assert offsets.entries > 3 and times.entries > 3
        for offset in (base, base + 1, (base + last) // 2, last, last + 50):
            assert cache.lookup_offset(md, offset) == offsets.lookup(offset).position
        for ts in (0, BASE_TS, BASE_TS + 1234, BASE_TS + 10**9):
            for start in (base, base + 150):
                want = offsets.lookup(max(start, times.lookup(ts).offset)).position
                assert cache.lookup_timestamp(md, ts, start) == want
        entry = cache.get_index_entry(md)
        want_txns = (TransactionIndex(base, data.transaction_index).all_aborted_txns()
                     if data.transaction_index else [])
        assert entry.txn_index.all_aborted_txns() == want_txns
        assert entry.size_bytes == entry_bytes(data)
    uuid = mds[1].remote_log_segment_id.id
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if f"300_{uuid}" in p.name) \
        == [f"300_{uuid}.checksums", f"300_{uuid}.index", f"300_{uuid}.timeindex",
            f"300_{uuid}.txnindex"]
    assert (tmp_path / "cache" / f"300_{uuid}.txnindex").stat().st_size == 0
    assert rsm.fetches[IndexType.OFFSET] == 3 and cache.hits > 0 and cache.misses == 3
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_txn_index_empty_flag_skips_the_download(tmp_path, remote):
    from dataclasses import replace
    rsm, mds = remote
    cache = RemoteIndexCache(rsm, tmp_path / "cache")
    entry = cache.get_index_entry(replace(mds[1], txn_idx_empty=True))
    assert rsm.fetches[IndexType.TRANSACTION] == 0 and entry.txn_index.is_empty()


def test_eviction_by_size_least_recently_used_first(tmp_path, local, remote):
    rsm, mds = remote
    sizes = [entry_bytes(d) for d, *_ in local]
    cache = RemoteIndexCache(rsm, tmp_path / "cache", sizes[0] + sizes[1] + sizes[2] - 1)
    cache.get_index_entry(mds[0])
    cache.get_index_entry(mds[1])
    cache.get_index_entry(mds[0])  # now mds[1] is the least recently used
    cache.get_index_entry(mds[2])
    ids = [m.remote_log_segment_id.id for m in mds]
    assert ids[1] not in cache and ids[0] in cache and ids[2] in cache
    assert cache.size_bytes == sizes[0] + sizes[2] and cache.evictions == 1
    gc.collect()
    assert not [p for p in (tmp_path / "cache").iterdir() if str(ids[1]) in p.name]
    cache.resize(1)  # smaller than any entry: everything goes
    assert len(cache) == 0 and cache.size_bytes == 0
    assert cache.get_index_entry(mds[0]).lookup_offset(0) == 0  # returned, not kept
    assert len(cache) == 0
    gc.collect()
    assert not list((tmp_path / "cache").iterdir())
    with pytest.raises(ValueError):
        cache.resize(0)


def test_entries_are_reused_after_restart(tmp_path, remote):
    rsm, mds = remote
    with RemoteIndexCache(rsm, tmp_path / "cache") as cache:
        positions = [cache.lookup_offset(md, md.end_offset) for md in mds]
    assert rsm.fetches[IndexType.OFFSET] == 3
    rsm.fetches.clear()
    cache = RemoteIndexCache(rsm, tmp_path / "cache")
    assert len(cache) == 3
    assert [cache.lookup_offset(md, md.end_offset) for md in mds] == positions
    assert sum(rsm.fetches.values()) == 0
    small = RemoteIndexCache(rsm, tmp_path / "cache", cache.size_bytes - 1)  # bound on start
    assert len(small) == 2


def test_startup_removes_leftovers_partial_and_corrupt_sets(tmp_path, remote):
    rsm, mds = remote
    cache_dir = tmp_path / "cache"
    with RemoteIndexCache(rsm, cache_dir) as cache:
        for md in mds:
            cache.get_index_entry(md)
    ids = [str(m.remote_log_segment_id.id) for m in mds]
    (cache_dir / f"300_{ids[1]}.timeindex").unlink()  # partial set
    (cache_dir / f"600_{ids[2]}.index").write_bytes(b"\x00" * 12)  # not whole 8-byte entries
    leftovers = [f"5_{ids[0]}.index.tmp", f"0_{ids[0]}.index.3.deleted", "x.txnindex.deleted"]
    for name in leftovers:
        (cache_dir / name).write_bytes(b"junk")
    (cache_dir / "unrelated.txt").write_bytes(b"kept")
    cache = RemoteIndexCache(rsm, cache_dir)
    assert list(cache._entries) == [mds[0].remote_log_segment_id.id]
    names = sorted(p.name for p in cache_dir.iterdir())
    assert names == sorted([f"0_{ids[0]}.checksums", f"0_{ids[0]}.index",
                            f"0_{ids[0]}.timeindex", f"0_{ids[0]}.txnindex", "unrelated.txt"])
    rsm.fetches.clear()
    cache.get_index_entry(mds[2])  # downloaded again
    assert rsm.fetches[IndexType.OFFSET] == 1


def test_failed_load_is_not_cached(tmp_path, remote):
    rsm, mds = remote
    cache = RemoteIndexCache(rsm, tmp_path / "cache")
    rsm.fail_next = 1
    with pytest.raises(RemoteStorageError, match="injected"):
        cache.get_index_entry(mds[0])
    assert len(cache) == 0 and cache.load_failures == 1
    assert not list((tmp_path / "cache").iterdir())
    rsm.fail_next = 0
    rsm.fetches.clear()
    assert cache.lookup_offset(mds[0], 0) == 0
    assert rsm.fetches[IndexType.OFFSET] == 1 and len(cache) == 1


def test_concurrent_lookups_of_one_segment_load_it_once(tmp_path, remote):
    rsm, mds = remote
    cache = RemoteIndexCache(rsm, tmp_path / "cache")
    rsm.gate = threading.Event()
    results, errors = [], []

    def reader():
        try:
            results.append(cache.get_index_entry(mds[0]))
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    while cache.misses == 0 or rsm.fetches[IndexType.OFFSET] == 0:
        threading.Event().wait(0.001)
    rsm.gate.set()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8 and len({id(e) for e in results}) == 1
    assert rsm.fetches[IndexType.OFFSET] == 1 and cache.misses == 1

    # waiters of a load that fails get its error; nothing is cached
    rsm.gate, rsm.fail_next = threading.Event(), 1
    results.clear()
    threads = [threading.Thread(target=reader) for _ in range(4)]
    cache.remove(mds[0].remote_log_segment_id.id)
    for t in threads:
        t.start()
    while cache.misses < 2:
        threading.Event().wait(0.001)
    threading.Event().wait(0.05)  # let the others reach the wait
    rsm.gate.set()
    for t in threads:
        t.join()
    assert len(errors) + len(results) == 4 and errors
    assert all(isinstance(e, RemoteStorageError) for e in errors)


def test_entry_evicted_while_in_use_keeps_working(tmp_path, local, remote):
    rsm, mds = remote
    cache = RemoteIndexCache(rsm, tmp_path / "cache")
    held = cache.get_index_entry(mds[0])
    position = held.lookup_offset(mds[0].end_offset)
    txns = held.txn_index.all_aborted_txns()
    assert txns
    assert cache.remove(mds[0].remote_log_segment_id.id)
    assert not cache.remove(mds[0].remote_log_segment_id.id)
    assert held.evicted
    names = [p.name for p in (tmp_path / "cache").iterdir()]
    assert len(names) == 3 and all(n.endswith(".deleted") for n in names)
    # the holder still reads: mappings and the txn file outlive the eviction
    assert held.lookup_offset(mds[0].end_offset) == position
    assert held.lookup_timestamp(BASE_TS + 100, 0) >= 0
    assert held.txn_index.all_aborted_txns() == txns
    fresh = cache.get_index_entry(mds[0])  # a new lookup downloads again
    assert fresh is not held and rsm.fetches[IndexType.OFFSET] == 2
    cache.remove_all()
    assert fresh.lookup_offset(mds[0].end_offset) == position
    del held, fresh
    gc.collect()
    assert not list((tmp_path / "cache").iterdir())


def test_close_keeps_files_and_refuses_lookups(tmp_path, remote):
    rsm, mds = remote
    cache = RemoteIndexCache(rsm, tmp_path / "cache")
    cache.get_index_entry(mds[0])
    cache.close()
    cache.close()
    assert len(list((tmp_path / "cache").iterdir())) == 4  # three indexes and their .checksums
    with pytest.raises(RemoteStorageError, match="closed"):
        cache.lookup_offset(mds[0], 0)
    with pytest.raises(ValueError):
        RemoteIndexCache(rsm, tmp_path / "other", 0)


def test_lookups_stay_correct_while_another_thread_evicts(tmp_path, local, remote):
    rsm, mds = remote
    cache = RemoteIndexCache(rsm, tmp_path / "cache", entry_bytes(local[0][0]) * 2)
    want = {}
    for (data, base, last, _), md in zip(local, mds):
        offsets = OffsetIndex(data.offset_index, base, writable=False)
        want[md.remote_log_segment_id.id] = [(o, offsets.lookup(o).position)
                                             for o in range(base, last + 1, 37)]
    stop = threading.Event()
    errors = []

    def reader(k):
        try:
            while not stop.is_set():
                for md in mds[k:] + mds[:k]:
                    entry = cache.get_index_entry(md)
                    for offset, position in want[md.remote_log_segment_id.id]:
                        assert entry.lookup_offset(offset) == position
                    entry.txn_index.all_aborted_txns()
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            errors.append(exc)
            stop.set()

    def evictor():
        for i in range(60):
            if stop.is_set():
                break
            if i % 3:
                cache.remove(mds[i % 3].remote_log_segment_id.id)
            else:  # everything out, then room again
                cache.resize(1 if i % 2 else 1 << 30)
            threading.Event().wait(0.001)
        stop.set()

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    threads.append(threading.Thread(target=evictor))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert cache.loads > 3  # entries really were evicted and loaded again
    cache.remove_all()
    gc.collect()
    assert not list((tmp_path / "cache").iterdir())


def test_downloads_are_not_fsynced_and_a_set_torn_by_a_crash_is_dropped(tmp_path, remote,
                                                                       monkeypatch):
    """A download syncs nothing (the first remote read of a segment waits for it); what an
    unsynced write can leave after a power loss (names in place, contents lost) is dropped
    at the next start by the .checksums check and downloaded again."""
    rsm, mds = remote
    cache_dir = tmp_path / "cache"
    real_fsync, synced = os.fsync, []

    def counting_fsync(fd):
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    with RemoteIndexCache(rsm, cache_dir) as cache:
        positions = [cache.lookup_offset(md, md.end_offset) for md in mds]
    assert synced == []
    monkeypatch.undo()
    ids = [str(m.remote_log_segment_id.id) for m in mds]
    index = cache_dir / f"300_{ids[1]}.index"
    index.write_bytes(bytes(index.stat().st_size))  # same size, the data never reached disk
    rsm.fetches.clear()
    cache = RemoteIndexCache(rsm, cache_dir)
    assert mds[1].remote_log_segment_id.id not in cache._entries and len(cache) == 2
    assert [cache.lookup_offset(md, md.end_offset) for md in mds] == positions
    assert rsm.fetches[IndexType.OFFSET] == 1
    cache.close()
