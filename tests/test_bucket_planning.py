"""Planning a bucket (engine.remote.bucket) reads only what it needs, against a real S3 server:
per segment its manifest, its indexes and the tail of its `.log` after the last offset-index
entry; in plain mode the tail is one exact ranged GET, with transforms the chunks covering it.
Counted through the store's fetch metrics; the chunk cache holds whole chunks only after."""

import dataclasses
import uuid

import pytest
from bucket_support import HandBucket
from rsm_crash_writer import make_segment, segment_metadata

from engine.common import Uuid
from engine.log.offset_index import OffsetIndex
from engine.remote.bucket import Bucket
from engine.remote.metadata import TopicIdPartition
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

TIP = TopicIdPartition(Uuid.random(), "plan", 0)
SEGMENTS = 4
RECORDS = 10
BATCHES = 7  # one leader epoch: make_segment starts a new one every 7 batches
CHUNK = 4096


def write_bucket(s3_server, tmp_path, prefix: str, compression: bool) -> list[tuple]:
    """SEGMENTS consecutive segments uploaded by the engine's tier; per segment (segment id,
    .log size, byte where its tail after the last offset-index entry begins)."""
    configs = {**s3_server.config(), "key.prefix": prefix, "chunk.size": str(CHUNK),
               "compression.enabled": str(compression).lower()}
    out = []
    with ObjectStorageRemoteStorageManager() as rsm:
        rsm.configure(configs)
        for n in range(SEGMENTS):
            base = n * BATCHES * RECORDS
            data, last, size = make_segment(tmp_path / str(n), base, batches=BATCHES,
                                            records=RECORDS, seed=n)
            data = dataclasses.replace(data, leader_epoch_index=b"0\n1\n0 0\n")
            md = segment_metadata(TIP, base, last, size)
            rsm.copy_log_segment_data(md, data)
            entries = OffsetIndex.from_buffer(data.offset_index.read_bytes(),
                                              base).entries_array()
            tail = int(entries["position"][-1]) if len(entries) else 0
            out.append((md.remote_log_segment_id.id, size, tail))
    return out


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "zstd"])
def test_planning_reads_the_tails_not_whole_chunks(s3_server, tmp_path, compression):
    prefix = f"plan-{uuid.uuid4().hex[:8]}/"
    written = write_bucket(s3_server, tmp_path, prefix, compression)
    assert all(size - tail < CHUNK < size for _, size, tail in written)
    settings = {k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"}
    settings.update({"fetch.chunk.cache.class": "memory",
                     "fetch.chunk.cache.size": str(64 << 20),
                     "fetch.chunk.cache.prefetch.max.size": str(1 << 20)})
    with Bucket(f"s3://{s3_server.buckets[0]}/{prefix}", settings) as bucket:
        metrics = bucket.store.metrics
        listing = bucket.listing()
        tip = bucket.partitions()[(TIP.topic, TIP.partition)]
        small = sum(s.manifest_size + s.indexes_size for s in listing.partitions[tip])
        before = metrics.value("object_fetch_bytes") or 0
        gets_before = metrics.value("object_fetch") or 0
        view = bucket.partition(tip)
        fetched = metrics.value("object_fetch_bytes") - before - small
        gets = metrics.value("object_fetch") - gets_before

        assert [link.segment.remote_log_segment_id.id for link in view.chain] == [
            sid for sid, _, _ in written]
        assert view.chain[-1].end == SEGMENTS * BATCHES * RECORDS  # exclusive
        assert gets == 3 * SEGMENTS  # a manifest, the indexes and one tail GET each
        assert bucket.rsm.read_ahead_pending_bytes == 0  # tails are not read forward
        tails = sum(size - tail for _, size, tail in written)
        cache = bucket.rsm.chunk_cache
        covering = sum(size - (tail // CHUNK) * CHUNK for _, size, tail in written)
        if not compression:
            assert fetched == tails  # exactly the tails
            assert cache.memory_bytes == 0  # and no partial chunk cached
        else:
            # the chunks covering each tail, whole: the last one of each segment here
            assert all(tail // CHUNK == (size - 1) // CHUNK for _, size, tail in written)
            assert 0 < fetched < 2 * covering
            assert cache.memory_bytes == covering
        # what planning left behind serves reads of the whole segments byte-exact
        for n, (link, (_, size, _)) in enumerate(zip(view.chain, written)):
            md = link.segment
            got = bytes(bucket.rsm.read_range(md, 0, size))
            assert got == (tmp_path / str(n) / f"{md.start_offset:020d}.log").read_bytes()


def test_partitions_resolved_together_match_one_by_one(s3_server):
    hand = HandBucket(s3_server, partitions=3)
    try:
        for p in range(3):
            for start in range(0, 30 * (p + 1), 15):
                hand.segment(start, start + 14, [(0, 0)], partition=p)
        with hand.open() as together, hand.open() as alone:
            tips = list(together.partitions().values())
            together.resolve(tips)
            gets = together.store.metrics.value("object_fetch")
            for tip in tips:
                want = alone.partition(tip)
                got = together.partition(tip)
                assert [(link.start_offset, link.end) for link in got.chain] == [
                    (link.start_offset, link.end) for link in want.chain]
                assert got.chain[-1].end == 30 * (tip.partition + 1)
                assert not got.skipped and not got.gaps
            # resolved by `resolve`, not left for `partition` to do
            assert together.store.metrics.value("object_fetch") == gets > 0
    finally:
        hand.close()
