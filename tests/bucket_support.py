"""Buckets assembled by hand to the Aiven plugin's documented layout (no engine tier code
writes them): record batches built with the record builder, Kafka's index files and the
leader-epoch checkpoint written here byte by byte, the manifest as JSON, each object put
with the store client. Used to plant retried uploads, divergent leaders, half-deleted
segments, gaps and damaged objects."""

from __future__ import annotations

import json
import struct
import uuid
from dataclasses import dataclass

from engine.common import Uuid
from engine.records import RecordBatchBuilder
from engine.remote.objectstore.store import ObjectStore, StoreConfig

TS0 = 1_700_000_000_000
RECORDS_PER_BATCH = 3
CHUNK = 1024


def value_of(offset: int, leader: str = "") -> bytes:
    return f"{leader}value-{offset}".encode()


def key_of(offset: int) -> bytes:
    return f"key-{offset % 7}".encode()


@dataclass
class HandSegment:
    topic: str
    topic_id: Uuid
    partition: int
    start: int
    end: int
    segment_id: Uuid
    log: bytes
    indexes: bytes
    manifest: bytes
    prefix: str

    def key(self, suffix: str) -> str:
        return (f"{self.prefix}{self.topic}-{self.topic_id}/{self.partition}/"
                f"{self.start:020d}-{self.segment_id}.{suffix}")

    @property
    def partition_name(self) -> str:
        return f"{self.topic}-{self.partition}"


class HandBucket:
    """One fresh prefix in the test server's bucket."""

    def __init__(self, s3_server, topic: str = "hand", partitions: int = 1):
        self.server = s3_server
        self.prefix = f"hand-{uuid.uuid4().hex[:10]}/"
        self.store = ObjectStore(StoreConfig.from_configs(s3_server.config()))
        self.topic = topic
        self.topic_id = Uuid.random()
        self.url = f"s3://{s3_server.buckets[0]}/{self.prefix}"
        settings = dict(s3_server.config())
        settings.pop("storage.s3.bucket.name")
        self.settings = settings

    def close(self):
        self.store.close()

    def segment(self, start: int, end: int, epochs, *, partition: int = 0, leader: str = "",
                objects=("log", "indexes", "rsm-manifest"), segment_id: Uuid | None = None,
                put: bool = True) -> HandSegment:
        """Offsets [start, end] in batches of RECORDS_PER_BATCH; `epochs` is the cumulative
        leader-epoch checkpoint [(epoch, start offset)] the broker would ship (every batch
        carries the epoch its offsets fall in); values carry `leader` so divergent copies
        differ."""
        log, offset_entries, time_entries = bytearray(), [], []
        offset = start
        while offset <= end:
            last = min(end, offset + RECORDS_PER_BATCH - 1)
            epoch = max(e for e, o in epochs if o <= offset)
            b = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=epoch)
            for o in range(offset, last + 1):
                b.append(value_of(o, leader), key=key_of(o), timestamp=TS0 + o,
                         headers=[("h", b"%d" % o)])
            position = len(log)
            log += b.build()
            if offset != start:
                offset_entries.append(struct.pack(">ii", last - start, position))
            time_entries.append(struct.pack(">qi", TS0 + last, last - start))
            offset = last + 1
        checkpoint = "".join(f"{e} {o}\n" for e, o in epochs if o <= end)
        checkpoint = f"0\n{checkpoint.count(chr(10))}\n{checkpoint}".encode()
        parts = [("offset", b"".join(offset_entries)), ("timestamp", b"".join(time_entries)),
                 ("producerSnapshot", b""), ("leaderEpoch", checkpoint)]
        indexes, positions, pos = b"", {}, 0
        for name, data in parts:
            positions[name] = {"position": pos, "size": len(data)}
            indexes += data
            pos += len(data)
        positions["transaction"] = None
        n = max(1, -(-len(log) // CHUNK))
        manifest = json.dumps({
            "version": "1",
            "chunkIndex": {"type": "fixed", "originalChunkSize": CHUNK,
                           "originalFileSize": len(log), "transformedChunkSize": CHUNK,
                           "finalTransformedChunkSize": len(log) - (n - 1) * CHUNK},
            "segmentIndexes": positions, "compression": False}).encode()
        seg = HandSegment(self.topic, self.topic_id, partition, start, end,
                          segment_id or Uuid.random(), bytes(log), indexes, manifest,
                          self.prefix)
        if put:
            self.put(seg, objects)
        return seg

    def put(self, seg: HandSegment, objects=("log", "indexes", "rsm-manifest")):
        data = {"log": seg.log, "indexes": seg.indexes, "rsm-manifest": seg.manifest}
        for suffix in objects:
            self.store.put_bytes(seg.key(suffix), data[suffix])

    def put_raw(self, key: str, data: bytes):
        self.store.put_bytes(key, data)

    def open(self):
        from engine.remote.bucket import Bucket

        return Bucket(self.url, self.settings)


def expected_rows(ranges, leader_by_offset=None, partition: int = 0, topic: str = "hand"):
    """(key, value, topic, partition, offset, timestamp ms, timestampType, headers) of the
    records written for offsets in `ranges` ([(first, last)])."""
    rows = []
    for a, b in ranges:
        for o in range(a, b + 1):
            leader = (leader_by_offset or {}).get(o, "")
            rows.append((key_of(o), value_of(o, leader), topic, partition, o, TS0 + o, 0,
                         (("h", b"%d" % o),)))
    return rows
