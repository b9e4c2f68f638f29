"""The object-store tier behind a RemoteLogManager, on a real S3 server (SeaweedFS,
tests/s3_server.py) configured as a broker file for the Aiven plugin would be: its metrics
are scraped from the RLM's metrics port, and a sequential remote read crosses segment
boundaries on read-ahead."""

from __future__ import annotations

import re
import urllib.request

import pytest
from fault_proxy import Fault
from objectstore_support import wait_for
from test_tiered_scenarios import Broker, expected


def scrape(port: int) -> dict[str, float]:
    """The samples of a Prometheus text page: `name{labels}` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


@pytest.fixture
def broker(tmp_path, s3_server):
    extra = ("log.local.retention.bytes=1\n"
             "rsm.config.fetch.chunk.cache.class="
             "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
             "rsm.config.fetch.chunk.cache.size=-1\n")
    b = Broker(tmp_path, extra, s3_server=s3_server)
    yield b
    b.close()


def test_store_metrics_are_served_on_the_rlm_metrics_port(broker):
    broker.create("metered", remote_storage_enable=True)
    broker.produce("metered", batches=9, records=3)
    broker.tier()
    records, remote_reads = broker.consume("metered", offset=0)
    assert records == expected("metered", 0, 0, 27) and remote_reads
    port = broker.rlm.metrics.serve(0)
    samples = scrape(port)
    copied = len(broker.remote_segments("metered"))
    # the RLM's own metrics and the store's, in one scrape
    assert samples['RemoteCopyRequestsPerSec_total{topic="metered"}'] >= copied
    assert samples['object_upload_total{object_type="log"}'] == copied
    assert samples['object_upload_total{object_type="rsm-manifest"}'] == copied
    assert samples['object_upload_bytes_total{object_type="log"}'] > 0
    assert samples["get_object_requests_total"] >= 1
    assert samples["object_fetch_total"] >= 1 and samples["object_fetch_bytes_total"] > 0
    for kind in ("throttling", "server", "configured_timeout", "io", "other"):
        assert samples[f"{kind}_errors_total"] == 0
    assert samples['cache_misses_total{cache="chunk-cache"}'] >= 1
    assert samples['cache_load_success_total{cache="chunk-cache"}'] >= 1
    assert samples['cache_misses_total{cache="segment-manifest-cache"}'] >= 1
    # the RLM's registry itself holds them (what `RLMMetrics.value` reads)
    assert broker.rlm.metrics.registry.get_sample_value(
        "object_upload_total", {"object_type": "log"}) == copied


class _Proxied:
    """The S3 server as the broker file sees it through the fault proxy (which records
    every request)."""

    def __init__(self, s3_server, proxy):
        self.s3_server, self.proxy = s3_server, proxy

    def config(self):
        return self.s3_server.config(endpoint=self.proxy.endpoint)

    def raw_store(self):
        return self.s3_server.raw_store()


def _ranges(requests) -> list[tuple[int, int]]:
    out = []
    for r in requests:
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", r.range or "")
        assert m, f"a GET of a whole .log object: {r}"
        out.append((int(m.group(1)), int(m.group(2)) + 1))
    return out


def test_sequential_rlm_read_crosses_a_segment_boundary_without_a_get(
        tmp_path, s3_server, fault_proxy):
    extra = ("log.local.retention.bytes=1\n"
             "rsm.config.fetch.chunk.cache.class="
             "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
             "rsm.config.fetch.chunk.cache.size=-1\n"
             "rsm.config.fetch.chunk.cache.prefetch.max.size=1000\n")
    broker = Broker(tmp_path, extra, s3_server=_Proxied(s3_server, fault_proxy))
    try:
        broker.create("ahead", remote_storage_enable=True, segment_bytes=3000)
        broker.produce("ahead", batches=80, records=3)
        broker.tier()
        first, second = broker.remote_segments("ahead")[:2]
        assert first.segment_size_in_bytes > 2000 and second.segment_size_in_bytes > 2000
        broker.restart()  # nothing cached: every byte read comes from the store
        rsm = broker.rlm.rsm
        assert rsm.reads_ahead
        second_path = f"{second.start_offset:020d}-{second.remote_log_segment_id.id}"

        # a consumer reads the first segment forward in small fetches
        offset = 0
        while offset <= first.end_offset:
            result = broker.rlm.read("ahead", 0, offset, 256)
            assert result.from_remote and result.next_offset > offset
            offset = result.next_offset
        assert offset == second.start_offset
        # read-ahead went on into the second segment: its manifest, indexes and first
        # chunks (what the next fetch reads: bytes [0, 256 + 64), chunks 0-3 of 100 bytes)
        # were fetched in the background
        wait_for(lambda: fault_proxy.requests("GET", second_path + ".indexes")
                 and rsm.map_range_if_open(second, 0, 400) is not None,
                 "read-ahead into the next segment")
        before = len(fault_proxy.requests())
        result = broker.rlm.read("ahead", 0, offset, 256)
        assert result.from_remote and result.next_offset > offset
        crossing = fault_proxy.requests()[before:]
        # the read itself needed no request: whatever followed it is read-ahead past it
        assert not [r for r in crossing if second_path + ".rsm-manifest" in r.path
                    or second_path + ".indexes" in r.path]
        # read-ahead goes on from chunk 4
        assert all(a >= 400 for a, _ in _ranges(
            r for r in crossing if second_path + ".log" in r.path))
        got = [(rec.offset, rec.value) for rec in _records(result.records)]
        assert got == expected("ahead", 0, offset, result.next_offset)
    finally:
        broker.close()


def test_read_ahead_window_reaches_past_the_next_segment(tmp_path, s3_server, fault_proxy):
    """A read-ahead window larger than a segment: a consumer's fetches at the start of one
    segment put GETs of the segment after the next one in flight, not only of the next."""
    extra = ("log.local.retention.bytes=1\n"
             "rsm.config.fetch.chunk.cache.class="
             "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
             "rsm.config.fetch.chunk.cache.size=-1\n"
             "rsm.config.fetch.chunk.cache.prefetch.max.size=7000\n")
    broker = Broker(tmp_path, extra, s3_server=_Proxied(s3_server, fault_proxy))
    try:
        broker.create("wide", remote_storage_enable=True, segment_bytes=3000)
        broker.produce("wide", batches=80, records=3)
        broker.tier()
        first, second, third = broker.remote_segments("wide")[:3]
        assert first.segment_size_in_bytes + second.segment_size_in_bytes < 7000
        broker.restart()  # nothing cached
        third_path = f"{third.start_offset:020d}-{third.remote_log_segment_id.id}"
        offset = 0
        for _ in range(2):  # the second fetch finds the next segment's manifest loaded
            result = broker.rlm.read("wide", 0, offset, 256)
            assert result.from_remote and result.next_offset > offset
            offset = result.next_offset
        assert offset < first.end_offset  # still in the first segment
        wait_for(lambda: fault_proxy.requests("GET", third_path + ".log"),
                 "read-ahead GETs of the segment after the next")
        wait_for(lambda: broker.rlm.rsm.map_range_if_open(third, 0, 100) is not None,
                 "the third segment's first chunk in the cache")
    finally:
        broker.close()


def test_a_read_ahead_task_that_fails_unexpectedly_is_logged(tmp_path, s3_server, fault_proxy,
                                                             monkeypatch, caplog):
    """The background load runs on a pool, where an exception nobody waits for would be
    lost: one it does not expect is logged as an error; the reads go on."""
    from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

    def broken(self, *args):
        raise AttributeError("a bug in the background load")

    monkeypatch.setattr(ObjectStorageRemoteStorageManager, "_warm", broken)
    extra = ("log.local.retention.bytes=1\n"
             "rsm.config.fetch.chunk.cache.class="
             "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
             "rsm.config.fetch.chunk.cache.size=-1\n"
             "rsm.config.fetch.chunk.cache.prefetch.max.size=7000\n")
    broker = Broker(tmp_path, extra, s3_server=_Proxied(s3_server, fault_proxy))
    try:
        broker.create("bug", remote_storage_enable=True, segment_bytes=3000)
        broker.produce("bug", batches=80, records=3)
        broker.tier()
        broker.restart()
        offset = 0
        for _ in range(3):
            result = broker.rlm.read("bug", 0, offset, 256)
            assert result.from_remote and result.next_offset > offset
            offset = result.next_offset
        wait_for(lambda: any("read-ahead task failed" in r.message and r.levelname == "ERROR"
                             for r in caplog.records), "the failure logged")
    finally:
        broker.close()


def test_sequential_read_entering_segments_at_their_base_offsets_gets_no_indexes(
        tmp_path, s3_server, fault_proxy):
    """A fetch at a segment's base offset starts at byte 0, and one where the previous
    fetch ended at that fetch's end, both without the offset index: a consumer reading
    from the log start across segments (no read-ahead, so nothing but its own reads
    touches the store) makes no `.indexes` GET; a fetch at any other offset still looks
    its position up in the index."""
    extra = ("log.local.retention.bytes=1\n"
             "rsm.config.fetch.chunk.cache.class="
             "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
             "rsm.config.fetch.chunk.cache.size=-1\n")
    broker = Broker(tmp_path, extra, s3_server=_Proxied(s3_server, fault_proxy))
    try:
        broker.create("entered", remote_storage_enable=True, segment_bytes=3000)
        broker.produce("entered", batches=80, records=3)
        broker.tier()
        first, second, third = broker.remote_segments("entered")[:3]
        broker.restart()  # nothing cached
        rsm = broker.rlm.rsm
        assert not rsm.reads_ahead

        def index_loads():
            return broker.rlm.metrics.registry.get_sample_value(
                "cache_load_success_total", {"cache": "segment-indexes-cache"}) or 0

        offset = first.start_offset
        while offset <= second.end_offset:
            result = broker.rlm.read("entered", 0, offset, 256)
            assert result.from_remote and result.next_offset > offset
            got = [(rec.offset, rec.value) for rec in _records(result.records)]
            assert got == expected("entered", 0, offset, result.next_offset)
            offset = result.next_offset
        assert offset == third.start_offset
        for md in (first, second):
            path = f"{md.start_offset:020d}-{md.remote_log_segment_id.id}"
            assert fault_proxy.requests("GET", path + ".log")
            assert not fault_proxy.requests("GET", path + ".indexes")
        assert index_loads() == 0
        # inside the third segment, past its first batch: the offset index gives the position
        third_path = f"{third.start_offset:020d}-{third.remote_log_segment_id.id}"
        inside = third.start_offset + 4
        result = broker.rlm.read("entered", 0, inside, 256)
        got = [(rec.offset, rec.value) for rec in _records(result.records)
               if rec.offset >= inside]  # whole batches: the first starts before `inside`
        assert got and got == expected("entered", 0, inside, result.next_offset)
        assert len(fault_proxy.requests("GET", third_path + ".indexes")) == 1
        assert index_loads() == 1
    finally:
        broker.close()


def _records(view):
    from engine.records import MemoryRecords
    return [r for batch in MemoryRecords(bytes(view)).batches() for r in batch]


def test_read_ahead_into_the_next_segment_does_not_wait_for_its_indexes(
        tmp_path, s3_server, fault_proxy):
    """The next segment's chunk GETs need only its manifest: they go out while its
    `.indexes` GET is still held."""
    extra = ("log.local.retention.bytes=1\n"
             "rsm.config.fetch.chunk.cache.class="
             "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
             "rsm.config.fetch.chunk.cache.size=-1\n"
             "rsm.config.fetch.chunk.cache.prefetch.max.size=1000\n"
             "remote.fetch.max.wait.ms=30000\n")
    broker = Broker(tmp_path, extra, s3_server=_Proxied(s3_server, fault_proxy))
    try:
        broker.create("held", remote_storage_enable=True, segment_bytes=3000)
        broker.produce("held", batches=80, records=3)
        broker.tier()
        first, second = broker.remote_segments("held")[:2]
        broker.restart()
        second_path = f"{second.start_offset:020d}-{second.remote_log_segment_id.id}"
        fault_proxy.add(Fault("delay", method="GET", path_contains=second_path + ".indexes",
                              delay_s=4.0))
        # one read at the first segment's end, by a reader going forward: the only thing
        # that may load the second segment from here is the read-ahead it queues
        rsm = broker.rlm.rsm
        rsm.read_forward(first, second)
        size = first.segment_size_in_bytes
        assert len(rsm.read_range(first, size - 10, size)) == 10
        offset = second.start_offset
        wait_for(lambda: fault_proxy.requests("GET", second_path + ".indexes"),
                 "the next segment's .indexes GET")
        wait_for(lambda: fault_proxy.requests("GET", second_path + ".log"),
                 "read-ahead GETs of the next segment's chunks", timeout_s=3.0)
        assert fault_proxy.requests("GET", second_path + ".indexes")[0].fault == "delay"
        # at the segment's base offset the read starts at byte 0: it does not wait for the
        # held indexes
        result = broker.rlm.read("held", 0, offset, 256)
        got = [(rec.offset, rec.value) for rec in _records(result.records)]
        assert got == expected("held", 0, offset, result.next_offset)
    finally:
        broker.close()
