"""The object-store I/O layer (engine/remote/objectstore: store, reads, chunk_cache) against a
real S3 server (SeaweedFS, tests/s3_server.py), with faults injected by a loopback proxy."""

import asyncio
import concurrent.futures
import errno
import os
import platform
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from fault_proxy import Fault
from objectstore_support import ListChunkRanges, plain_segment, wait_for, zlib_chunks
from prometheus_client import CollectorRegistry

from engine.errors import (
    RemoteFetchTimeoutError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from engine.remote.objectstore import (
    ChunkCache,
    ChunkCacheConfig,
    ChunkKey,
    LoadingCache,
    ObjectStore,
    ObjectStoreMetrics,
    RangeReader,
    SegmentObject,
    StoreConfig,
    TokenBucket,
)
from engine.remote.objectstore import chunk_cache as chunk_cache_module
from engine.remote.objectstore.store import STORE_CONFIG_KEYS

MiB = 1024 * 1024
PART = 5 * MiB


def make_store(server, endpoint=None, **overrides):
    configs = {**server.config(endpoint=endpoint),
               "storage.s3.multipart.upload.part.size": str(PART),
               "storage.s3.api.call.attempt.timeout": "10000",
               "storage.s3.api.call.timeout": "20000"}
    configs.update({k: str(v) for k, v in overrides.items()})
    return ObjectStore(StoreConfig.from_configs(configs))


@pytest.fixture
def store(s3_server):
    with make_store(s3_server) as s:
        yield s


@pytest.fixture
def proxied(s3_server, fault_proxy):
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        yield s


def unique(name):
    return f"io-tests/{name}-{os.getpid()}-{time.monotonic_ns()}"


# -- store: uploads ------------------------------------------------------------------------
def test_multipart_upload_of_a_file_is_byte_exact(tmp_path, proxied, fault_proxy):
    data = os.urandom(3 * PART + 12345)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    key = unique("seg") + ".log"
    assert proxied.upload(key, path) == len(data)
    assert proxied.get(key) == data
    puts = fault_proxy.requests("PUT", key)
    assert len(puts) == 4 and all("partNumber=" in r.path for r in puts)
    assert len(fault_proxy.requests("POST", key)) == 2  # create + complete
    assert proxied.metrics.value("object_upload_bytes", object_type="log") == len(data)


def test_small_source_is_one_put(proxied, fault_proxy):
    key = unique("small") + ".rsm-manifest"
    proxied.put_bytes(key, b'{"version":"1"}')
    assert [r.method for r in fault_proxy.requests(path_contains=key)] == ["PUT"]
    assert proxied.get(key) == b'{"version":"1"}'


def test_upload_from_a_block_iterator(store):
    blocks = [os.urandom(n) for n in (1, 3 * MiB, 4 * MiB + 7, 0, 2 * MiB, 123)]
    key = unique("iter")
    assert store.upload(key, iter(blocks)) == sum(map(len, blocks))
    assert store.get(key) == b"".join(blocks)


def test_a_retried_upload_overwrites(store):
    key = unique("again")
    store.upload(key, os.urandom(PART + 1))
    store.upload(key, b"second")
    assert store.get(key) == b"second"


def test_a_failing_source_aborts_the_upload_and_leaves_no_object(proxied, fault_proxy):
    key = unique("broken")

    def blocks():
        yield os.urandom(PART)
        yield os.urandom(PART)
        raise OSError(errno.EIO, "disk gone")

    with pytest.raises(RemoteStorageError) as info:
        proxied.upload(key, blocks())
    assert info.value.errno == errno.EIO and key in str(info.value)
    aborts = [r for r in fault_proxy.requests("DELETE", key) if "uploadId=" in r.path]
    assert len(aborts) == 1  # the multipart upload was aborted, its parts dropped
    assert proxied.metrics.value("abort_multipart_upload_requests") == 1
    with pytest.raises(RemoteResourceNotFoundError):
        proxied.head(key)


def test_token_bucket_paces_to_the_rate_and_goes_into_debt():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    bucket = TokenBucket(100, burst=100, clock=lambda: now[0], sleep=sleep)
    assert bucket.acquire(100) == 0  # the burst
    assert bucket.acquire(250) == pytest.approx(2.5)  # a block larger than the burst passes
    now[0] += 1.0
    assert bucket.acquire(50) == 0  # refilled 100 in the second
    assert sum(slept) == pytest.approx(2.5)


def test_upload_rate_limit_is_shared_by_uploads(s3_server, tmp_path):
    path = tmp_path / "seg.log"
    path.write_bytes(os.urandom(PART + 1))
    with make_store(s3_server, **{"upload.rate.limit.bytes.per.second": 4 * MiB}) as s:
        bucket = s._rate
        assert bucket is not None and bucket.rate == 4 * MiB
        taken = []
        real = bucket.acquire
        bucket.acquire = lambda n: taken.append(n) or real(n)
        s.upload(unique("rate-a"), os.urandom(PART + 1))
        key = unique("rate-b")
        s.upload(key, path)  # a file is read block by block through the same bucket
        assert s.get(key) == path.read_bytes()
        # every byte of both uploads went through the one bucket (its pacing is checked
        # with a fake clock in test_token_bucket_paces_to_the_rate_and_goes_into_debt)
        assert sum(taken) == 2 * (PART + 1)


# -- store: reads, deletes, listing, errors ------------------------------------------------
def test_delete_is_idempotent_and_list_is_paged(store):
    prefix = unique("list") + "/"
    keys = [f"{prefix}{i:03d}" for i in range(7)]
    for k in keys:
        store.put_bytes(k, k.encode())
    listing = store.list(prefix, page_size=3)
    assert [o.key for o in listing] == keys
    assert store.metrics.value("list_objects_requests") == 4  # 3 + 3 + 1, then the end
    store.delete(keys + [prefix + "missing"])
    store.delete(keys)
    assert list(store.list(prefix)) == []


def test_missing_object_is_resource_not_found_naming_the_key(store):
    key = unique("nothing")
    with pytest.raises(RemoteResourceNotFoundError) as info:
        store.get_range(key, 0, 10)
    assert f"s3://{store.config.bucket}/{key}" in str(info.value)


def test_bad_credentials_error_never_shows_the_secret(s3_server):
    secret = "wrong-secret-value-xyz"
    with make_store(s3_server, **{"storage.aws.secret.access.key": secret}) as s, \
            pytest.raises(RemoteStorageError) as info:
        s.get(unique("x"))
    assert secret not in str(info.value) and secret not in repr(s.config)


def test_unreachable_store_fails_bounded_with_errno(s3_server):
    from s3_server import free_ports

    dead = f"http://127.0.0.1:{free_ports(1)[0]}"
    s = make_store(s3_server, endpoint=dead, **{"storage.api.call.max.retries": 1})
    with s, pytest.raises(RemoteStorageError) as info:
        s.get_range("k", 0, 1)
    assert info.value.errno == errno.ECONNREFUSED
    assert s.metrics.value("io_errors") == 1


def test_config_errors_name_the_key():
    from engine.config import ConfigError

    with pytest.raises(ConfigError, match="storage.s3.bucket.name"):
        StoreConfig.from_configs({"storage.s3.region": "eu-west-1"})
    with pytest.raises(ConfigError, match="storage.s3.multipart.upload.part.size"):
        StoreConfig.from_configs({"storage.s3.bucket.name": "b", "storage.s3.region": "r",
                                  "storage.s3.multipart.upload.part.size": "1024"})
    with pytest.raises(ConfigError, match="storage.aws.access.key.id") as info:
        StoreConfig.from_configs({"storage.s3.bucket.name": "b", "storage.s3.region": "r",
                                  "storage.aws.secret.access.key": "hush"})
    assert "hush" not in str(info.value)
    cfg = StoreConfig.from_configs({
        "storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
        "storage.s3.bucket.name": "b", "storage.s3.region": "r"})
    assert cfg.backend == "s3" and cfg.part_size == 25 * MiB
    assert "storage.s3.endpoint.url" in STORE_CONFIG_KEYS


def test_slowdown_answers_are_retried(proxied, fault_proxy):
    key = unique("slow")
    fault_proxy.add(Fault("status", method="PUT", status=503, times=2))
    proxied.put_bytes(key, b"payload")
    fault_proxy.add(Fault("status", method="GET", status=503, times=2))
    fault_proxy.add(Fault("status", method="GET", status=500, times=1))
    assert bytes(proxied.get_range(key, 1, 4)) == b"ayl"
    assert [r.fault for r in fault_proxy.requests("GET", key)] == \
        ["status", "status", "status", None]


def test_dropped_connections_are_retried(proxied, fault_proxy):
    key = unique("drop")
    proxied.put_bytes(key, b"0123456789")
    fault_proxy.add(Fault("drop", method="GET", times=2))
    assert bytes(proxied.get_range(key, 2, 5)) == b"234"
    assert [r.fault for r in fault_proxy.requests("GET", key)] == ["drop", "drop", None]


def test_persistent_server_errors_give_up_after_the_bounded_retries(s3_server, fault_proxy):
    key = unique("down")
    with make_store(s3_server, endpoint=fault_proxy.endpoint,
                    **{"storage.api.call.max.retries": 2}) as s:
        s.put_bytes(key, b"x" * 100)
        fault_proxy.add(Fault("status", method="GET", status=500, times=None))
        with pytest.raises(RemoteStorageError, match="server") as info:
            s.get_range(key, 0, 10)
        assert key in str(info.value)
        assert len(fault_proxy.requests("GET", key)) == 3  # the first try + 2 retries
        assert s.metrics.value("server_errors") == 1


# -- reads -----------------------------------------------------------------------------------
CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def plain_object(s3_server):
    data = os.urandom(16 * CHUNK + 999)
    key = unique("plain") + ".log"
    with make_store(s3_server) as s:
        s.upload(key, data)
    return key, data


@pytest.fixture(scope="module")
def zlib_object(s3_server):
    data = os.urandom(8 * CHUNK) + bytes(8 * CHUNK) + b"tail"
    raw, index, detransform = zlib_chunks(data, CHUNK)
    key = unique("zlib") + ".log"
    with make_store(s3_server) as s:
        s.upload(key, raw)
    return SegmentObject(key, index, "zlib-1", detransform), data


def test_ranged_reads_at_chunk_edges_are_byte_exact(proxied, plain_object, zlib_object):
    key, data = plain_object
    plain = plain_segment(key, len(data), CHUNK)
    zseg, zdata = zlib_object
    reader = RangeReader(proxied, None, fetch_max_wait_ms=20_000)
    for seg, expect in ((plain, data), (zseg, zdata)):
        n = len(expect)
        for a, b in [(0, 1), (0, CHUNK), (CHUNK - 1, CHUNK + 1), (CHUNK, 2 * CHUNK),
                     (3 * CHUNK - 5, 7 * CHUNK + 5), (n - 1, n), (n - 3, n + 100), (0, n),
                     (5, 5), (n, n + 10)]:
            assert bytes(reader.read(seg, a, b)) == expect[a:min(b, n)], (seg.key, a, b)
        buf = bytearray(CHUNK + 10)
        assert reader.read_into(seg, n - 20, buf) == 20
        assert bytes(buf[:20]) == expect[-20:]
        # chunk by chunk into the buffer: across several chunks, and from inside one
        for a, size in ((CHUNK - 3, 3 * CHUNK + 7), (2 * CHUNK + 1, CHUNK + 10), (0, n)):
            buf = bytearray(size)
            got = reader.read_into(seg, a, buf)
            assert got == min(size, n - a) and bytes(buf[:got]) == expect[a:a + got]
        assert reader.read_into(seg, n, bytearray(4)) == 0


def test_adjacent_chunks_coalesce_into_one_get(s3_server, fault_proxy, plain_object):
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK)
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        one = RangeReader(s, None, max_in_flight=1, fetch_max_wait_ms=20_000)
        assert bytes(one.read(seg, 10, 8 * CHUNK - 10)) == data[10:8 * CHUNK - 10]
        gets = fault_proxy.requests("GET", key)
        assert [r.range for r in gets] == [f"bytes=0-{8 * CHUNK - 1}"]

        fault_proxy.clear()
        four = RangeReader(s, None, max_in_flight=4, fetch_max_wait_ms=20_000)
        assert bytes(four.read(seg, 0, 8 * CHUNK)) == data[:8 * CHUNK]
        ranges = sorted(int(r.range[6:].split("-")[0]) for r in fault_proxy.requests("GET"))
        assert ranges == [0, 2 * CHUNK, 4 * CHUNK, 6 * CHUNK]  # 4 GETs of 2 chunks each

        fault_proxy.clear()
        capped = RangeReader(s, None, max_in_flight=1, max_request_bytes=3 * CHUNK,
                             fetch_max_wait_ms=20_000)
        assert bytes(capped.read(seg, 0, 8 * CHUNK)) == data[:8 * CHUNK]
        assert len(fault_proxy.requests("GET")) == 3  # 3 + 3 + 2 chunks


def test_concurrent_readers_of_one_chunk_share_one_request(proxied, fault_proxy,
                                                           plain_object):
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK)
    reader = RangeReader(proxied, ChunkCache(memory_bytes=0), fetch_max_wait_ms=20_000)
    # the GET is held long enough for every thread to arrive while it is in flight (with no
    # cache, a thread arriving after it would fetch again)
    fault_proxy.add(Fault("delay", method="GET", delay_s=2.0, times=None))
    n = 8
    barrier = threading.Barrier(n)

    def read(_):
        barrier.wait(timeout=10)
        return bytes(reader.read(seg, 5 * CHUNK + 1, 5 * CHUNK + 100))

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        results = list(pool.map(read, range(n)))
    assert results == [data[5 * CHUNK + 1:5 * CHUNK + 100]] * n
    assert len(fault_proxy.requests("GET", key)) == 1


def test_a_slow_store_fails_within_the_deadline_and_caches_nothing(proxied, fault_proxy,
                                                                   plain_object):
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK)
    cache = ChunkCache(memory_bytes=16 * MiB)
    reader = RangeReader(proxied, cache, fetch_max_wait_ms=300)
    fault_proxy.add(Fault("delay", method="GET", delay_s=30, times=None))
    t0 = time.monotonic()
    with pytest.raises(RemoteFetchTimeoutError) as info:
        reader.read(seg, 0, 3 * CHUNK)
    assert time.monotonic() - t0 < 5
    assert key in str(info.value) and "remote.fetch.max.wait.ms" in str(info.value)
    assert not any(cache.contains(seg.chunk_key(i)) for i in range(3))
    assert reader._inflight == {}


def test_slowdown_on_reads_is_retried_then_succeeds(proxied, fault_proxy, zlib_object):
    seg, data = zlib_object
    reader = RangeReader(proxied, None, fetch_max_wait_ms=20_000)
    fault_proxy.add(Fault("status", method="GET", status=503, times=3))
    assert bytes(reader.read(seg, CHUNK - 7, 4 * CHUNK)) == data[CHUNK - 7:4 * CHUNK]
    assert proxied.metrics.value("throttling_errors") in (None, 0.0)  # retried inside


def test_a_body_cut_short_is_an_error_and_nothing_is_cached(s3_server, fault_proxy,
                                                            plain_object):
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK)
    cache = ChunkCache(memory_bytes=16 * MiB)
    with make_store(s3_server, endpoint=fault_proxy.endpoint,
                    **{"storage.api.call.max.retries": 0}) as s:
        reader = RangeReader(s, cache, max_in_flight=1, fetch_max_wait_ms=20_000)
        fault_proxy.add(Fault("cut", method="GET", cut_after=1000, times=None))
        with pytest.raises(RemoteStorageError) as info:
            reader.read(seg, 0, 2 * CHUNK)
        assert key in str(info.value)
        assert not cache.contains(seg.chunk_key(0)) and not cache.contains(seg.chunk_key(1))
        fault_proxy.clear()
        assert bytes(reader.read(seg, 0, 2 * CHUNK)) == data[:2 * CHUNK]
        assert cache.contains(seg.chunk_key(0))


def test_a_body_cut_once_is_fetched_again_within_the_retries(proxied, fault_proxy,
                                                              zlib_object):
    seg, data = zlib_object
    cache = ChunkCache(memory_bytes=16 * MiB)
    reader = RangeReader(proxied, cache, max_in_flight=1, fetch_max_wait_ms=20_000)
    fault_proxy.add(Fault("cut", method="GET", cut_after=100, times=1))
    assert bytes(reader.read(seg, 0, 3 * CHUNK)) == data[:3 * CHUNK]
    assert [r.fault for r in fault_proxy.requests("GET", seg.key)] == ["cut", None]


def test_a_damaged_chunk_is_an_error_naming_object_and_chunk(store, zlib_object):
    seg, _ = zlib_object

    def bad(i, raw):
        if i == 2:
            raise zlib.error("invalid stored block lengths")
        return seg.detransform(i, raw)

    reader = RangeReader(store, ChunkCache(memory_bytes=MiB), fetch_max_wait_ms=20_000)
    broken = SegmentObject(seg.key, seg.index, "broken", bad)
    with pytest.raises(RemoteStorageError, match="chunk 2 cannot be decoded") as info:
        reader.read(broken, 0, 4 * CHUNK)
    assert seg.key in str(info.value)
    short = SegmentObject(seg.key, seg.index, "short", lambda i, raw: b"x")
    with pytest.raises(RemoteStorageError, match="chunk 0 decodes to 1 bytes"):
        reader.read(short, 0, 10)
    assert not reader.cache.contains(short.chunk_key(0))


# -- chunk cache -----------------------------------------------------------------------------
def test_disk_cache_survives_a_restart(tmp_path, s3_server, fault_proxy, zlib_object):
    seg, data = zlib_object
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=MiB, disk_paths=dirs, disk_bytes=64 * MiB)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000)
        assert bytes(reader.read(seg, 0, len(data))) == data
        assert cache.flush(30)
        cache.close()
        used = [d for d in dirs if any(p.suffix == ".chunk" for p in
                                       Path(d).rglob("*"))]
        assert len(used) == 2  # entries spread over both disks
        fault_proxy.clear()

        reopened = ChunkCache(memory_bytes=MiB, disk_paths=dirs, disk_bytes=64 * MiB)
        assert reopened.disk_bytes > len(data)
        again = RangeReader(s, reopened, fetch_max_wait_ms=20_000)
        assert bytes(again.read(seg, 0, len(data))) == data
        assert fault_proxy.requests("GET") == []


def test_a_damaged_disk_entry_is_dropped_and_refetched(tmp_path, s3_server, fault_proxy,
                                                       zlib_object):
    seg, data = zlib_object
    dirs = [str(tmp_path / "c")]
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=0, disk_paths=dirs)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000)
        reader.read(seg, 0, 3 * CHUNK)
        assert cache.flush(30)
        cache.close()
        digest = seg.chunk_key(1).digest()
        entry = next(Path(dirs[0]).rglob(f"{digest}.chunk"))
        raw = bytearray(entry.read_bytes())
        raw[-100] ^= 0x40
        entry.write_bytes(raw)
        fault_proxy.clear()

        reopened = ChunkCache(memory_bytes=0, disk_paths=dirs)
        assert reopened.get(seg.chunk_key(1)) is None  # damaged: never served
        assert not entry.exists()
        again = RangeReader(s, reopened, fetch_max_wait_ms=20_000)
        assert bytes(again.read(seg, 0, 3 * CHUNK)) == data[:3 * CHUNK]
        gets = fault_proxy.requests("GET")
        assert len(gets) == 1  # chunk 1 alone; 0 and 2 came from disk
        assert reopened.metrics.value("cache_misses", cache="chunk-cache") == 2


def test_disk_entries_are_synced_before_they_count_as_checked(tmp_path, monkeypatch):
    """An entry this process wrote is served without its whole-entry check, so it is on
    disk (fsynced) before it is renamed into place: a write-back failing later would
    otherwise go unseen."""
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    cache = ChunkCache(memory_bytes=0, disk_paths=[str(tmp_path / "c")])
    key = ChunkKey("obj.log", "id-1", 0)
    cache.put(key, b"x" * 1000)
    assert cache.flush(30)
    assert bytes(cache.get(key)) == b"x" * 1000
    cache.close()
    assert len(synced) == 1


@pytest.mark.parametrize("order", ["first write before the refetch's put",
                                   "first write after the refetch's put"])
def test_a_chunk_fetched_again_supersedes_an_earlier_fetch_on_disk(tmp_path, order):
    """A read misses a chunk whose earlier fetch is still queued for the disk (it left
    memory meanwhile) and fetches it again: whichever order the writes land in, the disk
    never serves the earlier fetch's bytes, which may be other bytes (a GET that answered
    wrong) under the read generation the refetch began."""
    class Store:
        def __init__(self, data):
            self.data, self.metrics = data, ObjectStoreMetrics()

        def url(self, key):
            return f"mem://{key}"

        def run(self, coro):
            return asyncio.new_event_loop().run_until_complete(coro)

        async def get_range_async(self, key, start, end):
            answer = self.data[start:end]
            if self.during_get is not None:
                self.during_get()
            return answer

    good = bytes(range(256)) * 16  # 4096 bytes: chunks of 1000
    bad = bytearray(good)
    bad[1500] ^= 1  # the first GET of chunk 1 answers wrong
    store = Store(bytes(bad))
    store.during_get = None
    seg = plain_segment("k.log", len(good), 1000)
    # two directories, two writer threads: the refetch's write may land before the first
    cache = ChunkCache(memory_bytes=1000, disk_paths=[str(tmp_path / "c1"),
                                                      str(tmp_path / "c2")])
    reader = RangeReader(store, cache, fetch_max_wait_ms=20_000)
    release, writes = threading.Event(), []
    real_write = cache._write_entry

    def slow_first_write(digest, key, data, put):  # the first write waits for release
        writes.append(key.index)
        if len(writes) == 1:
            release.wait(10)
        real_write(digest, key, data, put)

    cache._write_entry = slow_first_write
    try:
        assert bytes(reader.read(seg, 1000, 2000)) == bytes(bad[1000:2000])
        reader.read(seg, 0, 1000)  # one chunk in memory: chunk 1 leaves it, its write queued
        assert not cache.contains(seg.chunk_key(1))
        store.data = good  # fetched again, right this time

        def first_write_lands():  # while the GET is in flight, before its put
            store.during_get = None
            release.set()
            wait_for(lambda: cache.contains(seg.chunk_key(1)), "the first write to land")

        if order == "first write before the refetch's put":
            store.during_get = first_write_lands
        assert bytes(reader.read(seg, 1000, 2000)) == good[1000:2000]
        if order != "first write before the refetch's put":
            wait_for(lambda: cache.contains(seg.chunk_key(1)) and len(writes) >= 3,
                     "the refetch's write to land first")
        release.set()
        assert cache.flush(10)
        reader.read(seg, 2000, 3000)  # chunk 1 leaves memory again: next from the disk
        assert bytes(reader.read(seg, 1000, 2000)) == good[1000:2000]
    finally:
        release.set()
        cache.close()


@pytest.mark.parametrize("crash", ["empty", "header only", "short", "zeroed block"])
def test_an_entry_torn_by_a_crash_is_a_miss_and_deleted(tmp_path, crash):
    """An unsynced entry after a crash may be renamed yet short, or hold blocks of zeros
    where its data never reached the disk: the whole-entry check makes it a miss (the
    reader refetches it), never served, and deletes the file."""
    dirs = [str(tmp_path / "c")]
    key = ChunkKey("obj.log", "id-1", 0)
    data = os.urandom(3 * 4096 + 100)
    writer = ChunkCache(memory_bytes=0, disk_paths=dirs)
    writer.put(key, data)
    assert writer.flush(30)
    writer.close()
    entry = next(Path(dirs[0]).rglob(f"{key.digest()}.chunk"))
    raw = entry.read_bytes()
    torn = {"empty": b"", "header only": raw[:21], "short": raw[:len(raw) - 4096],
            "zeroed block": raw[:4096] + bytes(4096) + raw[8192:]}[crash]
    entry.write_bytes(torn)
    reopened = ChunkCache(memory_bytes=0, disk_paths=dirs)
    assert reopened.get(key) is None
    assert not entry.exists() and reopened.disk_bytes == 0
    assert reopened.metrics.value("cache_misses", cache="chunk-cache") == 1
    reopened.close()


def test_closing_a_cache_lets_go_of_its_chunks_at_once():
    """A closed cache holds no chunk: their memory is free for the next reads (a new store
    after a reconfiguration) without waiting for the old cache to be collected; a view
    handed out before stays valid."""
    cache = ChunkCache(memory_bytes=MiB)
    key, data = ChunkKey("obj.log", "id-1", 0), os.urandom(1000)
    alone = sys.getrefcount(data)
    cache.put(key, data)
    held = cache.get(key)
    assert sys.getrefcount(data) > alone + 1  # the cache's reference and `held`
    cache.close()
    assert sys.getrefcount(data) == alone + 1 and cache.memory_bytes == 0
    assert held == data


def test_disk_hits_are_mapped_views_checked_once_per_entry_file(tmp_path, monkeypatch):
    """A disk hit is a read-only view (of the mapped entry for one of 1 MiB or more), its
    CRC checked once; an entry file replaced under the cache (another inode) is checked
    again when its mapping is not kept open, and damage dropped."""
    monkeypatch.setattr(chunk_cache_module, "_OPEN_MAPPINGS", 0)
    dirs = [str(tmp_path / "c")]
    big, small = ChunkKey("obj.log", "id-1", 0), ChunkKey("obj.log", "id-1", 1)
    data = os.urandom(2 * MiB)
    writer = ChunkCache(memory_bytes=0, disk_paths=dirs)
    writer.put(big, data)
    writer.put(small, b"s" * 100)
    assert writer.flush(30)
    writer.close()
    cache = ChunkCache(memory_bytes=0, disk_paths=dirs)
    for key, want in ((big, data), (small, b"s" * 100)):
        got = cache.get(key)
        assert isinstance(got, memoryview) and got.readonly and bytes(got) == want
    first = cache.get(big)
    entry = next(Path(dirs[0]).rglob(f"{big.digest()}.chunk"))
    raw = bytearray(entry.read_bytes())
    raw[-1] ^= 0x01
    replaced = entry.with_suffix(".new")
    replaced.write_bytes(raw)
    os.replace(replaced, entry)  # as a rewrite would: a new file under the name
    assert cache.get(big) is None and not entry.exists()
    assert bytes(first) == data  # a view handed out earlier stays valid
    cache.close()


def test_checked_entries_stay_mapped_and_serve_without_io(tmp_path, monkeypatch):
    """After its first check a mapped entry stays open: later hits (and `get_if_open`, which
    never opens a file) are views of the same mapping, with no file system call; a file
    replaced under it is not read, the checked bytes are served. Dropping the entry closes
    that path: the next lookup opens and checks the file, and drops damage."""
    dirs = [str(tmp_path / "c")]
    monkeypatch.setattr(chunk_cache_module, "_OPEN_MAPPINGS", 1)
    key, other = ChunkKey("obj.log", "id-1", 0), ChunkKey("obj.log", "id-1", 1)
    data = os.urandom(2 * MiB)
    writer = ChunkCache(memory_bytes=0, disk_paths=dirs)
    writer.put(key, data)
    writer.put(other, data)
    assert writer.flush(30)
    writer.close()
    cache = ChunkCache(memory_bytes=0, disk_paths=dirs)
    assert cache.get_if_open(key) is None  # never opened in this process
    first = cache.get(key)
    entry = next(Path(dirs[0]).rglob(f"{key.digest()}.chunk"))
    raw = bytearray(entry.read_bytes())
    raw[-1] ^= 0x01
    replaced = entry.with_suffix(".new")
    replaced.write_bytes(raw)
    os.replace(replaced, entry)

    def no_io(*args, **kwargs):
        raise AssertionError("a kept mapping was opened again")

    with monkeypatch.context() as m:
        m.setattr(chunk_cache_module, "open", no_io, raising=False)
        for got in (cache.get(key), cache.get_if_open(key)):
            assert got.obj is first.obj and bytes(got) == data
    assert bytes(cache.get(other)) == data  # mapped now, the first mapping let go
    assert cache.get_if_open(key) is None
    assert cache.get(key) is None and not entry.exists()  # checked again: damage dropped
    assert bytes(first) == data
    cache.close()


def test_cache_is_bounded_by_bytes_and_keys_never_alias(tmp_path):
    cache = ChunkCache(memory_bytes=3000, disk_paths=[str(tmp_path / "a"),
                                                      str(tmp_path / "b")], disk_bytes=5000)
    for i in range(10):
        cache.put(ChunkKey("obj.log", "id-1", i), bytes([i]) * 1000)
    assert cache.flush(30)
    assert cache.memory_bytes <= 3000 and cache.disk_bytes <= 5000
    assert cache.metrics.value("cache_eviction", cache="chunk-cache") >= 5
    assert cache.get(ChunkKey("obj.log", "id-2", 9)) is None  # another upload's identity
    assert cache.get(ChunkKey("obj.log", "id-1", 9)) == bytes([9]) * 1000
    cache.close()


def test_chunk_cache_config_reads_the_plugin_names(tmp_path):
    cfg = ChunkCacheConfig.from_configs({
        "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache",
        "fetch.chunk.cache.size": str(64 * MiB),
        "fetch.chunk.cache.path": f"{tmp_path}/x, {tmp_path}/y",
        "fetch.chunk.cache.prefetch.max.size": str(8 * MiB)})
    assert cfg.kind == "disk" and cfg.paths == (f"{tmp_path}/x", f"{tmp_path}/y")
    cache = cfg.build()
    assert cache is not None and cache.disk_bytes == 0
    cache.close()
    from engine.config import ConfigError

    with pytest.raises(ConfigError, match="fetch.chunk.cache.path"):
        ChunkCacheConfig.from_configs({
            "fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "100"})


def test_loading_cache_shares_loads_and_never_caches_failures():
    cache = LoadingCache("segment-manifest-cache", 2)
    calls = []
    gate = threading.Event()

    def load():
        calls.append(1)
        gate.wait(10)
        return "manifest"

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(cache.get, "k", load, 10) for _ in range(4)]
        deadline = time.monotonic() + 10
        while len(calls) == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        gate.set()
        assert [f.result(10) for f in futs] == ["manifest"] * 4
    assert len(calls) == 1

    def fail():
        raise RemoteStorageError("boom")

    with pytest.raises(RemoteStorageError):
        cache.get("bad", fail)
    assert cache.get("bad", lambda: "ok") == "ok"  # the failure was not cached
    cache.get("third", lambda: 3)
    assert len(cache) == 2  # bounded


# -- read-ahead ------------------------------------------------------------------------------
def _settle(reader: RangeReader) -> None:
    deadline = time.monotonic() + 20
    while reader.prefetch_pending_bytes and time.monotonic() < deadline:
        time.sleep(0.01)


def test_read_ahead_crosses_into_the_next_segment(s3_server, fault_proxy, plain_object):
    key, data = plain_object
    first = plain_segment(key, len(data), CHUNK, identity="seg-a")
    second = plain_segment(key, len(data), CHUNK, identity="seg-b")  # the next segment
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000,
                             prefetch_max_bytes=3 * CHUNK)
        n = first.index.chunk_count
        reader.read(first, first.index.original_range(n - 2)[0], len(data),
                    next_segments=(second,), sequential=True)
        wanted = [second.chunk_key(i) for i in range(3)]
        deadline = time.monotonic() + 20
        while not all(cache.contains(k) for k in wanted) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(cache.contains(k) for k in wanted)
        assert not cache.contains(second.chunk_key(3))  # bounded by prefetch.max.size
        fault_proxy.clear()
        assert bytes(reader.read(second, 0, 3 * CHUNK)) == data[:3 * CHUNK]
        # only the next read-ahead (chunks 3..) may have gone to the store
        assert all(int(r.range[6:].split("-")[0]) >= 3 * CHUNK
                   for r in fault_proxy.requests("GET", key))
        reader.close()


def test_read_ahead_window_spans_several_small_segments(s3_server, fault_proxy,
                                                       plain_object):
    """Segments smaller than the read-ahead window: the window continues through the next
    segments named, one after another, and stops at its size."""
    key, data = plain_object
    small = [plain_segment(key, 2 * CHUNK, CHUNK, identity=f"seg-{n}") for n in range(4)]
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000,
                             prefetch_max_bytes=5 * CHUNK)
        assert bytes(reader.read(small[0], CHUNK, 2 * CHUNK, next_segments=small[1:],
                                 sequential=True)) == data[CHUNK:2 * CHUNK]
        wanted = [seg.chunk_key(i) for seg in small[1:3] for i in range(2)]
        wanted.append(small[3].chunk_key(0))
        _settle(reader)
        assert all(cache.contains(k) for k in wanted)
        assert not cache.contains(small[3].chunk_key(1))  # past the window
        fault_proxy.clear()
        for seg in small[1:3]:
            assert bytes(reader.read(seg, 0, 2 * CHUNK)) == data[:2 * CHUNK]
        assert fault_proxy.requests("GET", key) == []  # all of it came from read-ahead
        reader.close()


def test_read_ahead_is_in_flight_with_the_read_it_follows(s3_server, fault_proxy,
                                                          plain_object):
    """A sequential read's read-ahead is queued before its own GET, so a cold reader has
    both in flight at once rather than one after the other."""
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK, identity="overlap")
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, max_in_flight=1, fetch_max_wait_ms=20_000,
                             prefetch_max_bytes=2 * CHUNK)
        fault_proxy.add(Fault("delay", method="GET", delay_s=1.0, times=None))
        assert bytes(reader.read(seg, 0, 100)) == data[:100]
        # the proxy logs a GET when it arrives: the read-ahead's arrived during the read's
        starts = sorted(int(r.range[6:].split("-")[0]) for r in fault_proxy.requests("GET", key))
        assert starts[0] == 0 and CHUNK in starts[1:], starts
        _settle(reader)
        assert cache.contains(seg.chunk_key(1)) and cache.contains(seg.chunk_key(2))
        assert bytes(reader.read(seg, 100, 3 * CHUNK)) == data[100:3 * CHUNK]
        reader.close()


def test_read_ahead_asked_while_behind_waits_and_is_never_dropped(
        s3_server, fault_proxy, plain_object):
    """A reader running ahead of a slow store: read-ahead asked for while more than twice
    the window is queued waits, and is queued once the queue drains (the latest ask)."""
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK, identity="behind")
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000, prefetch_max_bytes=CHUNK)
        fault_proxy.add(Fault("delay", method="GET", delay_s=0.5, times=None))
        for i in range(4):  # a reader served from memory, moving one chunk at a time
            reader.note_read(seg, i * CHUNK, (i + 1) * CHUNK, sequential=True)
        assert reader.prefetch_pending_bytes == 2 * CHUNK  # chunks 1 and 2; 3, 4 wait
        _settle(reader)
        assert cache.contains(seg.chunk_key(4))  # the last ask, queued once 1-2 were done
        assert not cache.contains(seg.chunk_key(5))
        reader.close()


def test_read_ahead_queues_each_chunk_once(s3_server, fault_proxy, plain_object):
    """Two asks for the same window while its task still waits for a thread: the chunks
    are queued once (a second task would hold a thread waiting on the first's GETs)."""
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK, identity="once")
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, max_in_flight=1, fetch_max_wait_ms=20_000,
                             prefetch_max_bytes=2 * CHUNK)
        release = threading.Event()
        busy = [reader._prefetch_pool.submit(release.wait, 20) for _ in range(2)]  # every thread
        reader.note_read(seg, 0, CHUNK, sequential=True)
        reader.note_read(seg, 0, CHUNK, sequential=True)
        assert reader.prefetch_pending_bytes == 2 * CHUNK
        release.set()
        assert all(f.result(20) for f in busy)
        _settle(reader)
        assert cache.contains(seg.chunk_key(1)) and cache.contains(seg.chunk_key(2))
        assert len(fault_proxy.requests("GET", key)) == 1  # chunks 1-2, one coalesced GET
        reader.close()


def test_read_ahead_scans_its_window_once_per_chunk_reached(s3_server, fault_proxy,
                                                            plain_object):
    """Reads ending in the chunk the last window was scanned from ask nothing more (a
    reader of ranges smaller than a chunk pays for one scan a chunk); a read-ahead that
    failed is asked for again once the reader reaches the next chunk."""
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK, identity="scan-once")
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000,
                             prefetch_max_bytes=2 * CHUNK)
        fault_proxy.add(Fault("status", method="GET", status=500, times=None))
        reader.note_read(seg, 0, 100, sequential=True)  # read-ahead of chunks 1-2 fails
        _settle(reader)
        assert not cache.contains(seg.chunk_key(1)) and not cache.contains(seg.chunk_key(2))
        fault_proxy.clear()
        reader.note_read(seg, 100, 200, sequential=True)  # same chunk: no second scan
        assert reader.prefetch_pending_bytes == 0
        assert fault_proxy.requests("GET", key) == []
        reader.note_read(seg, CHUNK + 10, CHUNK + 20, sequential=True)  # the next chunk
        _settle(reader)
        assert cache.contains(seg.chunk_key(2)) and cache.contains(seg.chunk_key(3))
        assert not cache.contains(seg.chunk_key(1))  # behind the reader
        reader.close()


def test_read_ahead_from_starts_where_the_reader_got_to(s3_server, fault_proxy,
                                                         plain_object):
    """`read_ahead_from` for a read that the reader has since passed: the window starts at
    its furthest read, so it reaches into the next segment."""
    key, data = plain_object
    first = plain_segment(key, 4 * CHUNK, CHUNK, identity="from-a")
    second = plain_segment(key, 4 * CHUNK, CHUNK, identity="from-b")
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000,
                             prefetch_max_bytes=2 * CHUNK)
        got = reader.read(first, 3 * CHUNK, 4 * CHUNK, sequential=False)  # reader got here
        assert bytes(got) == data[3 * CHUNK:4 * CHUNK]
        reader.read_ahead_from(first, CHUNK, (second,))  # asked for from an earlier read
        _settle(reader)
        assert cache.contains(second.chunk_key(0)) and cache.contains(second.chunk_key(1))
        assert not cache.contains(first.chunk_key(1))  # behind the reader
        reader.close()


def test_read_ahead_follows_sequential_reads_only(s3_server, fault_proxy, plain_object):
    key, data = plain_object
    seg = plain_segment(key, len(data), CHUNK, identity="seq")
    with make_store(s3_server, endpoint=fault_proxy.endpoint) as s:
        cache = ChunkCache(memory_bytes=16 * MiB)
        reader = RangeReader(s, cache, fetch_max_wait_ms=20_000, prefetch_max_bytes=2 * CHUNK)
        reader.read(seg, 5 * CHUNK + 10, 5 * CHUNK + 20)  # a random probe: no read-ahead
        assert reader.prefetch_pending_bytes == 0  # (queued synchronously, if at all)
        reader.read(seg, 9 * CHUNK + 10, 9 * CHUNK + 20)  # another one
        assert reader.prefetch_pending_bytes == 0
        assert len(fault_proxy.requests("GET", key)) == 2
        reader.read(seg, 9 * CHUNK + 20, 9 * CHUNK + 900)  # continues the last: read-ahead
        _settle(reader)
        assert cache.contains(seg.chunk_key(10)) and cache.contains(seg.chunk_key(11))
        assert not cache.contains(seg.chunk_key(12))  # bounded by prefetch.max.size
        assert not cache.contains(seg.chunk_key(6))
        reader.close()


def test_metrics_join_a_given_registry():
    registry = CollectorRegistry()
    metrics = ObjectStoreMetrics(registry)
    metrics.uploaded("log", 10)
    metrics.cache_event("chunk-cache", "cache_hits")
    assert registry.get_sample_value("object_upload_total", {"object_type": "log"}) == 1
    assert registry.get_sample_value("object_upload_bytes_total", {"object_type": "log"}) == 10
    assert registry.get_sample_value("cache_hits_total", {"cache": "chunk-cache"}) == 1


def test_list_chunk_ranges_helper_agrees_with_itself():
    idx = ListChunkRanges([10, 10, 5])
    assert list(idx.chunks_for(0, 25)) == [0, 1, 2]
    assert list(idx.chunks_for(9, 11)) == [0, 1]
    assert list(idx.chunks_for(10, 20)) == [1]
    assert list(idx.chunks_for(24, 100)) == [2]


def test_cached_slices_never_pin_their_whole_fetch_buffer():
    cache = ChunkCache(memory_bytes=100_000)
    fetched = bytes(range(256)) * 64  # one GET's buffer holding 4 chunks
    view = memoryview(fetched)
    cache.put(ChunkKey("o.log", "id", 0), view[:4096])
    cache.put(ChunkKey("o.log", "id", 1), view)  # the whole buffer: kept as it is
    first = cache.get(ChunkKey("o.log", "id", 0))
    assert isinstance(first, bytes) and first == fetched[:4096]
    assert cache.get(ChunkKey("o.log", "id", 1)).obj is fetched


def test_each_reading_thread_has_its_own_loop_closed_with_the_thread(store):
    from engine.remote.objectstore import loops as store_module

    loops = []

    def body():
        async def probe():
            return asyncio.get_running_loop()
        loops.append(store.run(probe()))
        loops.append(store.run(probe()))

    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert loops[0] is loops[1] and not loops[0].is_running()
    del t
    import gc

    gc.collect()
    assert loops[0].is_closed()
    assert store_module.thread_loop() is not loops[0]


def test_entries_expire_after_retention_without_access(tmp_path):
    now = [100.0]
    cache = ChunkCache(memory_bytes=MiB, disk_paths=[str(tmp_path / "c")], retention_ms=1000,
                       clock=lambda: now[0])
    key = ChunkKey("o.log", "id", 0)
    cache.put(key, b"chunk")
    assert cache.flush(30)
    now[0] += 0.9
    assert cache.get(key) == b"chunk"  # an access renews it
    now[0] += 0.9
    assert cache.get(key) == b"chunk"
    cache._put_memory("other", b"x" * MiB, now[0])  # pushes the entry out of memory
    now[0] += 0.5
    assert cache.get(key) == b"chunk"  # from disk: the memory hits renewed it there too
    now[0] += 1.1
    assert cache.get(key) is None
    assert cache.disk_bytes == 0 and not list((tmp_path / "c").rglob("*.chunk"))
    cache.close()
    loading = LoadingCache("segment-indexes-cache", 10, 1000, clock=lambda: now[0])
    assert loading.get("k", lambda: 1) == 1
    now[0] += 1.1
    assert loading.get("k", lambda: 2) == 2


def test_non_blocking_lookups_touch_memory_only(tmp_path):
    now = [0.0]
    cache = ChunkCache(memory_bytes=MiB, disk_paths=[str(tmp_path / "c")], retention_ms=1000,
                       clock=lambda: now[0])
    key = ChunkKey("o.log", "id", 3)
    assert cache.get_in_memory(key) is None
    cache.put(key, b"chunk")
    assert cache.flush(30)
    assert cache.get_in_memory(key) == b"chunk"
    cache._put_memory("other", b"x" * MiB, now[0])  # pushes the entry out of memory
    assert cache.get_in_memory(key) is None  # on disk only: not read from there
    assert cache.get(key) == b"chunk"  # a blocking lookup reads the disk
    cache.close()
    loading = LoadingCache("segment-manifest-cache", 10, 1000, clock=lambda: now[0])
    assert loading.peek("m") is None
    loading.get("m", lambda: "manifest")
    assert loading.peek("m") == "manifest"
    now[0] += 1.1
    assert loading.peek("m") is None


def test_gcs_and_azure_are_configured_through_the_same_client():
    # configured only: the tests have no GCS or Azure server, so no bytes move here
    from s3_server import free_ports

    dead = f"http://127.0.0.1:{free_ports(1)[0]}"
    for configs, kind, url in [
        ({"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage",
          "storage.gcs.bucket.name": "b", "storage.gcs.endpoint.url": dead}, "GCSStore",
         "gs://b/k"),
        ({"storage.backend.class":
          "io.aiven.kafka.tieredstorage.storage.azure.AzureBlobStorage",
          "storage.azure.container.name": "c", "storage.azure.account.name": "acct",
          "storage.azure.account.key": "c2VjcmV0LWtleQ==", "storage.azure.endpoint.url": dead},
         "AzureStore", "az://c/k")]:
        cfg = StoreConfig.from_configs({**configs, "storage.api.call.max.retries": "0"})
        with ObjectStore(cfg) as s:
            assert type(s._store).__name__ == kind and s.url("k") == url
            with pytest.raises(RemoteStorageError) as info:
                s.get_range("k", 0, 1)
            assert url in str(info.value) and "c2VjcmV0LWtleQ==" not in str(info.value)


def test_a_missing_source_file_is_an_error_naming_it(store, tmp_path):
    missing = tmp_path / "gone.log"
    with pytest.raises(RemoteStorageError) as info:
        store.upload(unique("nofile"), missing)
    assert info.value.errno == errno.ENOENT and str(missing) in str(info.value)


# -- the allocator -----------------------------------------------------------------------
_MAPPED_BY_A_24_MIB_MALLOC = """
import ctypes, json, sys
from engine.remote.objectstore import ObjectStore, StoreConfig
store = ObjectStore(StoreConfig.from_configs(json.loads(sys.argv[1])))

class MallInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo.restype = MallInfo
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
before = libc.mallinfo().hblks
p = libc.malloc(24 << 20)
print(libc.mallinfo().hblks - before)
libc.free(p)
store.close()
"""


def _mapped_by_a_big_malloc(s3_server, **env) -> int:
    """How many new mappings one 24 MiB malloc made, in a new process that built a store
    (the allocator settings are the process's)."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _MAPPED_BY_A_24_MIB_MALLOC, json.dumps(s3_server.config())],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env},
        capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux") or
                    platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_a_store_makes_get_buffers_come_from_the_heap_unless_the_operator_set_malloc(
        s3_server):
    """Once a store is built, an allocation the size of a few chunks comes from the malloc
    heap (a freed one is reused by the next GET) rather than from a mapping of its own,
    which the kernel faults in page by page; the operator's own MALLOC_* setting wins
    (here glibc's default thresholds, fixed)."""
    assert _mapped_by_a_big_malloc(s3_server) == 0
    assert _mapped_by_a_big_malloc(s3_server, MALLOC_MMAP_THRESHOLD_="131072") == 1
