"""A broker's tier assembled segment by segment, on the filesystem tier or the object-store
tier (a real S3 server): each segment's files built here (record batches with the record
builder, Kafka's offset and time index entries and the leader-epoch checkpoint byte by
byte), copied through the tier's RSM and recorded in the embedded RLMM with the states the
test asks for, then the broker file that `scrub --config` reads. Used to plant missing and
orphaned objects, divergent leaders, gaps, overlaps and damaged metadata."""

from __future__ import annotations

import struct
import time
import uuid
from pathlib import Path

from engine.common import Uuid
from engine.config import BrokerConfig
from engine.records import RecordBatchBuilder
from engine.remote.embedded_rlmm import METADATA_DIR_NAME, EmbeddedRemoteLogMetadataManager
from engine.remote.factory import create_remote_storage_manager
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.storage import LogSegmentData

TS0 = 1_700_000_000_000
RECORDS_PER_BATCH = 3
S = RemoteLogSegmentState
#: per tier: the suffix of a segment's .log, and of an object it must have besides
LOG = {"fs": ".log", "s3": "log"}
OTHER = {"fs": ".timeindex", "s3": "rsm-manifest"}


class HandTier:
    """One partition `hand-0` in a fresh tier of `kind` ("fs" or "s3")."""

    def __init__(self, base: Path, kind: str, s3_server=None, topic: str = "hand"):
        self.base, self.kind = Path(base), kind
        self.log_dir = self.base / "logs"
        self.files = self.base / "files"
        for d in (self.log_dir, self.files):
            d.mkdir(parents=True, exist_ok=True)
        props = {"log.dirs": str(self.log_dir), "remote.log.storage.system.enable": "true"}
        if kind == "fs":
            props.update({"rsm.config.dirs": f"{self.base / 'tier-a'},{self.base / 'tier-b'}",
                          "rsm.config.fsync": "false"})
        else:
            props.update({"remote.log.storage.manager.class.name":
                          "io.aiven.kafka.tieredstorage.RemoteStorageManager",
                          "rsm.config.key.prefix": f"tier-{uuid.uuid4().hex[:10]}/",
                          "rsm.config.chunk.size": "1024"})
            props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
        self.props = props
        self.config = self.base / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.rsm = create_remote_storage_manager(BrokerConfig(dict(props)))
        self.metadata_dir = self.log_dir / METADATA_DIR_NAME
        self.rlmm = EmbeddedRemoteLogMetadataManager(self.metadata_dir)
        self.tip = TopicIdPartition(Uuid.random(), topic, 0)

    def close(self) -> None:
        self.rlmm.close()
        self.rsm.close()

    def segment(self, start: int, end: int, epochs, *, leader: str = "",
                state: RemoteLogSegmentState = S.COPY_SEGMENT_FINISHED,
                record: bool = True, mangle=None) -> RemoteLogSegmentMetadata:
        """Offsets [start, end] in batches of RECORDS_PER_BATCH; `epochs` is the cumulative
        leader-epoch checkpoint [(epoch, start offset)] (each batch carries the epoch of its
        offsets); values carry `leader` so divergent copies differ. `mangle` maps a file
        suffix (".index", ".timeindex", ".leader_epoch_checkpoint") to a function changing
        its bytes before the copy (so the tier's checksums are of the changed bytes). Copied
        through the RSM, and (with `record`) added to the RLMM and moved on to `state`."""
        data = self._files(start, end, epochs, leader, mangle or {})
        own = {}
        for i, (e, o) in enumerate(epochs):
            nxt = epochs[i + 1][1] if i + 1 < len(epochs) else end + 1
            if o <= end and nxt > start:
                own[e] = max(o, start)
        md = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(self.tip, Uuid.random()), start, end, TS0 + end, 0,
            int(time.time() * 1000), data.log_segment.stat().st_size, own)
        if record:
            self.rlmm.add_remote_log_segment_metadata(md)
        custom = self.rsm.copy_log_segment_data(md, data)
        md = RemoteLogSegmentMetadata(
            md.remote_log_segment_id, start, end, md.max_timestamp_ms, 0,
            md.event_timestamp_ms, md.segment_size_in_bytes, own, custom_metadata=custom,
            state=S.COPY_SEGMENT_FINISHED)
        for target in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED,
                       S.DELETE_SEGMENT_FINISHED):
            if record and target <= state:
                self.move(md, target, custom)
        return md

    def move(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState,
             custom: bytes | None = None) -> None:
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, int(time.time() * 1000), custom, state, 0))

    def _files(self, start, end, epochs, leader, mangle) -> LogSegmentData:
        log, offset_entries, time_entries = bytearray(), [], []
        offset = start
        while offset <= end:
            last = min(end, offset + RECORDS_PER_BATCH - 1)
            epoch = max(e for e, o in epochs if o <= offset)
            b = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=epoch)
            for o in range(offset, last + 1):
                b.append(f"{leader}value-{o}".encode(), key=b"k", timestamp=TS0 + o)
            position = len(log)
            log += b.build()
            if offset != start:
                offset_entries.append(struct.pack(">ii", last - start, position))
            time_entries.append(struct.pack(">qi", TS0 + last, last - start))
            offset = last + 1
        lines = "".join(f"{e} {o}\n" for e, o in epochs if o <= end)
        checkpoint = f"0\n{lines.count(chr(10))}\n{lines}".encode()
        checkpoint = mangle.get(".leader_epoch_checkpoint", bytes)(checkpoint)
        name = f"{start:020d}-{uuid.uuid4().hex[:8]}"
        paths = {}
        for suffix, content in ((".log", bytes(log)), (".index", b"".join(offset_entries)),
                                (".timeindex", b"".join(time_entries))):
            paths[suffix] = self.files / (name + suffix)
            paths[suffix].write_bytes(mangle.get(suffix, bytes)(content))
        return LogSegmentData(paths[".log"], paths[".index"], paths[".timeindex"], None, None,
                              checkpoint)

    # -- the stored objects -------------------------------------------------------------

    def key(self, md: RemoteLogSegmentMetadata, suffix: str) -> str:
        """The object key (object store) or the path (filesystem) of one of its objects."""
        if self.kind == "fs":
            return str(self.rsm.segment_path(md, suffix))
        return self.rsm.keys.key(md, suffix)

    def keys(self, md: RemoteLogSegmentMetadata) -> list[str]:
        suffixes = ((".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint")
                    if self.kind == "fs" else ("log", "indexes", "rsm-manifest"))
        return sorted(self.key(md, s) for s in suffixes)

    def exists(self, key: str) -> bool:
        if self.kind == "fs":
            return Path(key).exists()
        from engine.errors import RemoteResourceNotFoundError

        try:
            self.rsm.store.head(key)
            return True
        except RemoteResourceNotFoundError:
            return False

    def remove(self, md: RemoteLogSegmentMetadata, suffix: str) -> str:
        key = self.key(md, suffix)
        if self.kind == "fs":
            Path(key).unlink()
        else:
            self.rsm.store.delete(key)
        return key

    def truncate(self, md: RemoteLogSegmentMetadata, suffix: str, cut: int) -> str:
        key = self.key(md, suffix)
        if self.kind == "fs":
            data = Path(key).read_bytes()
            Path(key).write_bytes(data[:-cut])
        else:
            data = self.rsm.store.get(key)
            self.rsm.store.put_bytes(key, data[:-cut])
        return key

    def metadata_log(self) -> Path:
        """The partition's metadata log file of the embedded RLMM."""
        (d,) = [p for p in self.metadata_dir.iterdir() if p.is_dir()]
        (log,) = sorted(d.glob("*.log"))
        return log
