"""Read-ahead across segments in the broker plugin: Kafka names one segment a fetch and never
the next, so the plugin finds the next segment in the bucket (one LIST by its start offset)
and the object store's read-ahead goes on into it. Called as the Java side calls the
engine (engine.remote.broker_plugin), against a real S3 server."""

from __future__ import annotations

import uuid

from kafka_plugin_support import describe
from objectstore_support import wait_for
from rsm_crash_writer import make_segment, segment_metadata

from engine.common import Uuid
from engine.remote import broker_plugin as bridge
from engine.remote.metadata import TopicIdPartition
from engine.remote.objectstore.chunk_cache import ChunkKey
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

TIP = TopicIdPartition(Uuid.from_string("pQ3vvmajTWKDBUTV6SQAtQ"), "ahead-topic", 0)
S3_BACKEND = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"


def _configs(s3_server, prefetch: int) -> dict:
    configs = dict(s3_server.config())
    configs.update({
        "storage.backend.class": S3_BACKEND, "chunk.size": "1000",
        "key.prefix": f"ahead-{uuid.uuid4().hex[:8]}/",
        "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache",
        "fetch.chunk.cache.size": str(64 << 20),
        "fetch.chunk.cache.prefetch.max.size": str(prefetch)})
    return configs


def _segments(tmp_path, rsm_configs, extra_at_second=False):
    """Two consecutive segments uploaded (and, when asked, a second upload under the second
    one's start offset); their metadata and `.log` bytes."""
    first, last, size = make_segment(tmp_path / "a", 0, batches=20, seed=1)
    second, last2, size2 = make_segment(tmp_path / "b", last + 1, batches=20, seed=2)
    mds = [segment_metadata(TIP, 0, last, size), segment_metadata(TIP, last + 1, last2, size2)]
    rsm = ObjectStorageRemoteStorageManager()
    rsm.configure(rsm_configs)
    try:
        rsm.copy_log_segment_data(mds[0], first)
        rsm.copy_log_segment_data(mds[1], second)
        if extra_at_second:
            rsm.copy_log_segment_data(segment_metadata(TIP, last + 1, last2, size2), second)
    finally:
        rsm.close()
    return mds, [first.log_segment.read_bytes(), second.log_segment.read_bytes()]


def _cached_chunks(plugin, md) -> int:
    """How many of `md`'s `.log` chunks the plugin's chunk cache holds."""
    rsm = plugin.rsm
    segment = rsm._segment(md)
    log = rsm._log_of(md, segment)
    return sum(rsm.chunk_cache.contains(ChunkKey(log.key, log.identity, i))
               for i in range(log.index.chunk_count))


def _read_to_the_end(handle, md, size) -> None:
    """Two fetches of the segment, as Kafka makes them (a new stream each): the first names
    the segment (and starts the lookup of the next one), the second reads its tail."""
    bridge.plugin_unmap(bridge.plugin_map(handle, describe(md), 0, 1000, True, 0)[2])
    bridge.plugin_unmap(bridge.plugin_map(handle, describe(md), size - 1000, 1000, True, 0)[2])


def test_a_fetch_near_a_segments_end_reads_ahead_into_the_next_one(s3_server, tmp_path):
    configs = _configs(s3_server, prefetch=8000)
    mds, logs = _segments(tmp_path, configs)
    handle = bridge.plugin_open([v for kv in configs.items() for v in kv])
    try:
        plugin = bridge._plugin(handle)
        bridge.plugin_unmap(bridge.plugin_map(handle, describe(mds[0]), 0, 1000, True, 0)[2])
        lookup = plugin._next_segments
        wait_for(lambda: lookup._found.get(mds[0].remote_log_segment_id.id) is not None,
                 "the lookup of the next segment")
        guessed = lookup.next_of(mds[0])
        assert guessed is not None
        assert guessed.remote_log_segment_id == mds[1].remote_log_segment_id
        assert guessed.start_offset == mds[1].start_offset
        # the tail's fetch: the read-ahead goes on into the next segment before Kafka asks
        size = len(logs[0])
        bridge.plugin_unmap(bridge.plugin_map(handle, describe(mds[0]), size - 1000, 1000,
                                              True, 0)[2])
        wait_for(lambda: _cached_chunks(plugin, mds[1]) >= 4,
                 "read-ahead into the next segment's chunks")
        # and Kafka's own metadata of that segment reads the same bytes from those chunks
        import ctypes
        got = bytearray()
        while len(got) < len(logs[1]):  # a chunk's bytes per map
            address, n, pin = bridge.plugin_map(handle, describe(mds[1]), len(got),
                                                len(logs[1]) - len(got), not got, 0)
            got += ctypes.string_at(address, n)
            bridge.plugin_unmap(pin)
        assert got == logs[1]
    finally:
        bridge.plugin_close(handle)


def test_no_next_segment_without_one_upload_under_its_start_offset(s3_server, tmp_path):
    """Two uploads under the next start offset (only the broker's metadata tells which one
    counts) and a segment at the partition's tail: no guess, no read-ahead past the end,
    and the reads stay exact."""
    configs = _configs(s3_server, prefetch=8000)
    mds, logs = _segments(tmp_path, configs, extra_at_second=True)
    handle = bridge.plugin_open([v for kv in configs.items() for v in kv])
    try:
        plugin = bridge._plugin(handle)
        lookup = plugin._next_segments
        for md, log in zip(mds, logs):
            _read_to_the_end(handle, md, len(log))
            wait_for(lambda md=md: lookup._found.get(md.remote_log_segment_id.id) is not None,
                     "the lookup of the next segment")
            assert lookup.next_of(md) is None
    finally:
        bridge.plugin_close(handle)


def test_no_lookup_without_read_ahead(s3_server, tmp_path):
    configs = _configs(s3_server, prefetch=0)
    handle = bridge.plugin_open([v for kv in configs.items() for v in kv])
    try:
        assert bridge._plugin(handle)._next_segments is None
    finally:
        bridge.plugin_close(handle)


def test_a_lookup_that_failed_unexpectedly_is_asked_again_later(monkeypatch):
    """A lookup ended by any error is no longer in flight: once RETRY_AFTER_S has passed,
    the next read of the segment looks again."""
    from engine.remote.objectstore import next_segment

    class Rsm:
        def read_forward(self, *_):
            raise AssertionError("no segment was found")

    lookup = next_segment.NextSegmentLookup(Rsm())
    calls = []

    def broken(metadata):
        calls.append(metadata)
        raise RuntimeError("a bug in the lookup")

    monkeypatch.setattr(lookup, "_find", broken)
    monkeypatch.setattr(next_segment, "RETRY_AFTER_S", 0.0)  # "none yet" stands no time
    md = segment_metadata(TIP, 0, 99, 1000)
    try:
        assert lookup.next_of(md) is None
        wait_for(lambda: lookup._found.get(md.remote_log_segment_id.id) is not None,
                 "the failed lookup to be recorded")
        assert lookup.next_of(md) is None
        wait_for(lambda: len(calls) == 2, "the lookup asked again")
    finally:
        lookup.close()
