"""Kafka's own remote-log metadata: the records of the `__remote_log_metadata` topic that
Kafka's TopicBasedRemoteLogMetadataManager writes, read from the topic's partition
directories (`<log.dir>/__remote_log_metadata-<N>/`) with no broker.

Each record of the topic has a null key and a value framed as Kafka's
AbstractApiMessageSerde frames it: uvarint frame version (1), uvarint api key, uvarint
message version, then the message in Kafka's flexible encoding (engine.message_codec). The
four messages (Kafka's `storage/src/main/resources/message/*.json`, every version):

| key | message                                 | event                                    |
|-----|-----------------------------------------|------------------------------------------|
| 0   | RemoteLogSegmentMetadataRecord          | RemoteLogSegmentMetadata (an add)        |
| 1   | RemoteLogSegmentMetadataUpdateRecord    | RemoteLogSegmentMetadataUpdate           |
| 2   | RemotePartitionDeleteMetadataRecord     | RemotePartitionDeleteMetadata            |
| 3   | RemoteLogSegmentMetadataSnapshotRecord  | RemoteLogSegmentMetadataSnapshot         |

The events feed the same RemoteLogMetadataCache the embedded RLMM feeds, in the order of
each metadata partition (every event of a user partition goes to one metadata partition), so
a reader sees what a broker's RLMM would. As there, an event the cache refuses (an update of
an unknown segment, an illegal transition) is logged and skipped. A snapshot record names no
partition (Kafka wrote them only into per-partition snapshot files, and its topic consumer
refuses them): `apply_snapshot` applies one to a given partition's cache, as Kafka loaded
those files; met in the topic, one is an error.

A partition directory's segments are read in base-offset order with the engine's record
reader (every batch's CRC checked); control batches are skipped; with the log dir's
`replication-offset-checkpoint`, records at or above the high watermark (not committed, so
never seen by Kafka's consumer) are left out. Bytes at a file's end that are not a whole
batch are damage, except at the end of the active segment above the high watermark (a write
in progress: logged, and the records before it read). A record that does not decode (truncated,
lying lengths, bytes left over, an unknown frame version, api key or message version, a
field value the metadata types refuse) is CorruptRemoteLogMetadataError naming the file, the
batch's position and the record's offset.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.common import TopicPartition, Uuid
from engine.errors import (
    CorruptRemoteLogMetadataError,
    IllegalStateTransitionError,
    KafkaEngineError,
    RemoteResourceNotFoundError,
)
from engine.log.checkpoint import REPLICATION_OFFSET_CHECKPOINT_FILENAME, OffsetCheckpointFile
from engine.message_codec import decode_message, encode_message, parse_schema
from engine.records import FileRecords
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from engine.remote.metadata_cache import RemoteLogMetadataCache

__all__ = [
    "FRAME_VERSION",
    "METADATA_TOPIC",
    "MESSAGES",
    "RemoteLogMetadataState",
    "RemoteLogMetadataTopic",
    "RemoteLogSegmentMetadataSnapshot",
    "apply_event",
    "apply_snapshot",
    "decode_record_value",
    "encode_record_value",
    "is_metadata_partition_dir",
]

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"
#: AbstractApiMessageSerde's frame version (0 was KRaft's preview and is refused, as Kafka does)
FRAME_VERSION = 1

_TOPIC_ID_PARTITION = """
  Name string 0+
  Id uuid 0+
  Partition int32 0+
"""
_SEGMENT_ID = """
RemoteLogSegmentId {} 0+
  TopicIdPartition {} 0+
""" + _TOPIC_ID_PARTITION.replace("\n  ", "\n    ") + """  Id uuid 0+
"""
_SEGMENT_BODY = """
StartOffset int64 0+
EndOffset int64 0+
BrokerId int32 0+
MaxTimestampMs int64 0+
EventTimestampMs int64 0+
SegmentLeaderEpochs [] 0+
  LeaderEpoch int32 0+
  Offset int64 0+
SegmentSizeInBytes int32 0+
CustomMetadata bytes 0+ null=0+
RemoteLogSegmentState int8 0+
TxnIndexEmpty bool 0+ tag=0
BrokerLeaderEpoch int32 1+ tag=1
"""

#: api key -> (name, highest version, schema); every version is flexible
MESSAGES: dict[int, tuple[str, int, str]] = {
    0: ("RemoteLogSegmentMetadataRecord", 1, _SEGMENT_ID + _SEGMENT_BODY),
    1: ("RemoteLogSegmentMetadataUpdateRecord", 1, _SEGMENT_ID + """
BrokerId int32 0+
EventTimestampMs int64 0+
CustomMetadata bytes 0+ null=0+
RemoteLogSegmentState int8 0+
BrokerLeaderEpoch int32 1+ tag=0 default=-1
EndOffset int64 1+ tag=1 default=-1
"""),
    2: ("RemotePartitionDeleteMetadataRecord", 1, """
TopicIdPartition {} 0+
""" + _TOPIC_ID_PARTITION + """BrokerId int32 0+
EventTimestampMs int64 0+
RemotePartitionDeleteState int8 0+
BrokerLeaderEpoch int32 1+ tag=0
EndOffset int64 1+ tag=1
"""),
    3: ("RemoteLogSegmentMetadataSnapshotRecord", 1, "SegmentId uuid 0+\n" + _SEGMENT_BODY),
}
_SCHEMAS = {key: parse_schema(name, text) for key, (name, _, text) in MESSAGES.items()}
_PARTITION_DIR = re.compile(re.escape(METADATA_TOPIC) + r"-(\d+)\Z")
_LOG_FILE = re.compile(r"(\d{20})\.log\Z")


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """A segment's whole metadata in any state but DELETE_SEGMENT_FINISHED, without its
    partition (Kafka's RemoteLogSegmentMetadataSnapshot)."""

    segment_id: Uuid
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: dict[int, int]
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    txn_idx_empty: bool = False

    def metadata(self, tip: TopicIdPartition) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, self.segment_id), self.start_offset, self.end_offset,
            self.max_timestamp_ms, self.broker_id, self.event_timestamp_ms,
            self.segment_size_in_bytes, self.segment_leader_epochs, self.custom_metadata,
            self.state, self.txn_idx_empty)


# ---- values ------------------------------------------------------------------------------

def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tip_fields(tip: TopicIdPartition) -> dict:
    return {"name": tip.topic, "id": bytes(tip.topic_id), "partition": tip.partition}


def _segment_fields(md) -> dict:
    return {"start_offset": md.start_offset, "end_offset": md.end_offset,
            "broker_id": md.broker_id, "max_timestamp_ms": md.max_timestamp_ms,
            "event_timestamp_ms": md.event_timestamp_ms,
            "segment_leader_epochs": [{"leader_epoch": e, "offset": o}
                                      for e, o in sorted(md.segment_leader_epochs.items())],
            "segment_size_in_bytes": md.segment_size_in_bytes,
            "custom_metadata": md.custom_metadata, "remote_log_segment_state": int(md.state),
            "txn_index_empty": md.txn_idx_empty}


def _message_of(event) -> tuple[int, dict]:
    if isinstance(event, RemoteLogSegmentMetadata):
        sid = event.remote_log_segment_id
        return 0, {"remote_log_segment_id": {"topic_id_partition": _tip_fields(
            sid.topic_id_partition), "id": bytes(sid.id)}, **_segment_fields(event)}
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        sid = event.remote_log_segment_id
        return 1, {"remote_log_segment_id": {"topic_id_partition": _tip_fields(
            sid.topic_id_partition), "id": bytes(sid.id)},
            "broker_id": event.broker_id, "event_timestamp_ms": event.event_timestamp_ms,
            "custom_metadata": event.custom_metadata,
            "remote_log_segment_state": int(event.state)}
    if isinstance(event, RemotePartitionDeleteMetadata):
        return 2, {"topic_id_partition": _tip_fields(event.topic_id_partition),
                   "broker_id": event.broker_id, "event_timestamp_ms": event.event_timestamp_ms,
                   "remote_partition_delete_state": int(event.state)}
    if isinstance(event, RemoteLogSegmentMetadataSnapshot):
        return 3, {"segment_id": bytes(event.segment_id), **_segment_fields(event)}
    raise TypeError(f"not a remote log metadata event: {type(event).__name__}")


def encode_record_value(event, version: int | None = None, **extra) -> bytes:
    """A record value as Kafka's RemoteLogMetadataSerde writes it for `event` (the highest
    version unless `version` is given); `extra` sets fields the engine's events do not carry
    (`broker_leader_epoch`, `end_offset` of an update)."""
    api_key, message = _message_of(event)
    name, highest, _ = MESSAGES[api_key]
    version = highest if version is None else version
    if not 0 <= version <= highest:
        raise ValueError(f"{name} has versions 0-{highest}, not {version}")
    message.update(extra)
    return (_uvarint(FRAME_VERSION) + _uvarint(api_key) + _uvarint(version)
            + encode_message(_SCHEMAS[api_key], version, message, flexible=True))


def _read_uvarint(buf, pos: int, what: str) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        if pos >= len(buf):
            raise CorruptRemoteLogMetadataError(f"truncated {what}", position=pos)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if value > 0x7FFF:  # Kafka reads these as shorts
                raise CorruptRemoteLogMetadataError(f"{what} {value} is too large",
                                                    position=pos)
            return value, pos
        shift += 7
    raise CorruptRemoteLogMetadataError(f"{what}: varint longer than 5 bytes", position=pos)


def decode_record_value(buf):
    """The event a record value holds. CorruptRemoteLogMetadataError (position within the
    value) for anything malformed or unknown."""
    buf = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
    frame, pos = _read_uvarint(buf, 0, "frame version")
    if frame != FRAME_VERSION:
        raise CorruptRemoteLogMetadataError(
            f"unknown frame version {frame} (only {FRAME_VERSION} is known)", position=0)
    start = pos
    api_key, pos = _read_uvarint(buf, pos, "api key")
    version, pos = _read_uvarint(buf, pos, "message version")
    known = MESSAGES.get(api_key)
    if known is None or version > known[1]:
        what = f"api key {api_key}" if known is None else f"{known[0]} version {version}"
        raise CorruptRemoteLogMetadataError(f"unknown remote log metadata record: {what}",
                                            position=start)
    m = decode_message(buf, _SCHEMAS[api_key], version, flexible=True,
                       what=f"{known[0]} v{version}", error=CorruptRemoteLogMetadataError,
                       pos=pos)
    try:
        return _event(api_key, m)
    except ValueError as exc:  # a value the metadata types refuse (a state id, offsets)
        raise CorruptRemoteLogMetadataError(f"{known[0]} v{version}: {exc}",
                                            position=pos) from None


def _tip(m: dict) -> TopicIdPartition:
    return TopicIdPartition(Uuid.from_bytes(m["id"]), m["name"], m["partition"])


def _segment_args(m: dict) -> tuple:
    return (m["start_offset"], m["end_offset"], m["max_timestamp_ms"], m["broker_id"],
            m["event_timestamp_ms"], m["segment_size_in_bytes"],
            {e["leader_epoch"]: e["offset"] for e in m["segment_leader_epochs"]},
            m["custom_metadata"], RemoteLogSegmentState(m["remote_log_segment_state"]),
            m["txn_index_empty"])


def _event(api_key: int, m: dict):
    if api_key == 2:
        return RemotePartitionDeleteMetadata(
            _tip(m["topic_id_partition"]),
            RemotePartitionDeleteState(m["remote_partition_delete_state"]),
            m["event_timestamp_ms"], m["broker_id"])
    if api_key == 3:
        return RemoteLogSegmentMetadataSnapshot(Uuid.from_bytes(m["segment_id"]),
                                                *_segment_args(m))
    sid = m["remote_log_segment_id"]
    segment_id = RemoteLogSegmentId(_tip(sid["topic_id_partition"]), Uuid.from_bytes(sid["id"]))
    if api_key == 0:
        return RemoteLogSegmentMetadata(segment_id, *_segment_args(m))
    return RemoteLogSegmentMetadataUpdate(
        segment_id, m["event_timestamp_ms"], m["custom_metadata"],
        RemoteLogSegmentState(m["remote_log_segment_state"]), m["broker_id"])


# ---- applying events ---------------------------------------------------------------------

def apply_event(cache: RemoteLogMetadataCache, event) -> None:
    """Applies one event of the cache's partition, as the embedded RLMM does. Raises what
    the cache raises for a refused event."""
    if isinstance(event, RemoteLogSegmentMetadata):
        # Kafka's record carries a state, but its cache (as this one) adds STARTED ones only
        cache.add_copy_in_progress_segment(event)
    elif isinstance(event, RemoteLogSegmentMetadataUpdate):
        cache.update_remote_log_segment_metadata(event)
    elif isinstance(event, RemotePartitionDeleteMetadata):
        cache.put_partition_delete_metadata(event)
    elif isinstance(event, RemoteLogSegmentMetadataSnapshot):
        apply_snapshot(cache, event)
    else:
        raise TypeError(f"not a remote log metadata event: {type(event).__name__}")


def apply_snapshot(cache: RemoteLogMetadataCache,
                   snapshot: RemoteLogSegmentMetadataSnapshot) -> None:
    """A snapshotted segment into the cache of its partition, as Kafka's snapshot loading
    did: added, then moved straight to its state (no FINISHED on the way to
    DELETE_SEGMENT_STARTED, so it does not count towards its epochs' highest offsets)."""
    if snapshot.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
        raise IllegalStateTransitionError(
            f"a snapshot holds no DELETE_SEGMENT_FINISHED segment ({snapshot.segment_id})")
    md = snapshot.metadata(cache.topic_id_partition)
    started = RemoteLogSegmentMetadata(
        md.remote_log_segment_id, md.start_offset, md.end_offset, md.max_timestamp_ms,
        md.broker_id, md.event_timestamp_ms, md.segment_size_in_bytes,
        md.segment_leader_epochs, md.custom_metadata, RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        md.txn_idx_empty)
    cache.add_copy_in_progress_segment(started)
    if md.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        cache.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, md.event_timestamp_ms, md.custom_metadata, md.state,
            md.broker_id))


# ---- partition directories ---------------------------------------------------------------

def is_metadata_partition_dir(path) -> bool:
    return _PARTITION_DIR.match(Path(path).name) is not None


@dataclass
class RemoteLogMetadataState:
    """What a set of `__remote_log_metadata` partitions says: a cache per user partition,
    and what was left out (`skipped`: refused events, as text)."""

    caches: dict[TopicIdPartition, RemoteLogMetadataCache] = field(default_factory=dict)
    records: int = 0
    skipped: list[str] = field(default_factory=list)

    def cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self.caches.get(tip)
        if cache is None:
            cache = self.caches[tip] = RemoteLogMetadataCache(tip)
        return cache


def _high_watermark(partition_dir: Path) -> int | None:
    checkpoint = partition_dir.parent / REPLICATION_OFFSET_CHECKPOINT_FILENAME
    if not checkpoint.is_file():
        return None
    number = int(_PARTITION_DIR.match(partition_dir.name)[1])
    offsets = OffsetCheckpointFile(checkpoint, create=False).read()
    return offsets.get(TopicPartition(METADATA_TOPIC, number))


def _segment_files(partition_dir: Path) -> list[Path]:
    names = sorted((int(m[1]), name) for name in os.listdir(partition_dir)
                   if (m := _LOG_FILE.match(name)))
    return [partition_dir / name for _, name in names]


def _values(path: Path, high_watermark: int | None, last: bool
            ) -> Iterator[tuple[int, int, object]]:
    """(batch position, offset, value) of every data record of one segment file (`last`:
    the partition's active segment, whose tail may be a write in progress)."""
    with FileRecords(path) as records:
        try:
            batches = list(records.batches())
        except KafkaEngineError as exc:
            raise CorruptRemoteLogMetadataError(f"the segment cannot be scanned: {exc.reason}",
                                                file=str(path), position=exc.position) from None
        next_offset = int(_LOG_FILE.match(path.name)[1])
        for batch in batches:
            next_offset = batch.next_offset
            if batch.is_control:
                continue
            position = batch.position
            try:
                batch.ensure_valid()
                for record in batch.records():
                    if high_watermark is not None and record.offset >= high_watermark:
                        return
                    yield position, record.offset, record.value
            except KafkaEngineError as exc:
                raise CorruptRemoteLogMetadataError(
                    f"the batch at offset {batch.base_offset} cannot be read: {exc.reason}",
                    file=str(path), position=position, offset=batch.base_offset) from None
        if records.partial_bytes:
            # a batch cut short, or a length that lies: past the committed records only a
            # write in progress in the active segment can explain it; elsewhere it is damage
            committed = high_watermark is not None and next_offset < high_watermark
            if not last or committed:
                raise CorruptRemoteLogMetadataError(
                    f"{records.partial_bytes} bytes at the end are not a whole batch"
                    + (f" (below the high watermark {high_watermark})" if committed else ""),
                    file=str(path), position=records.valid_bytes, offset=next_offset)
            log.warning("%s: %d bytes at the end are not a whole batch (a write in progress); "
                        "read up to offset %d", path, records.partial_bytes, next_offset)


class RemoteLogMetadataTopic:
    """Reads `__remote_log_metadata-<N>` partition directories into a
    RemoteLogMetadataState (see the module docstring)."""

    def __init__(self, partition_dirs):
        self.partition_dirs = [Path(p) for p in partition_dirs]

    def load(self) -> RemoteLogMetadataState:
        out = RemoteLogMetadataState()
        for directory in self.partition_dirs:
            high_watermark = _high_watermark(directory)
            files = _segment_files(directory)
            for path in files:
                for position, offset, value in _values(path, high_watermark,
                                                       path == files[-1]):
                    self._apply(out, path, position, offset, value)
        return out

    @staticmethod
    def _apply(out: RemoteLogMetadataState, path: Path, position: int, offset: int,
               value) -> None:
        where = dict(file=str(path), position=position, offset=offset)
        if value is None:
            raise CorruptRemoteLogMetadataError("a record with a null value", **where)
        try:
            event = decode_record_value(value)
        except CorruptRemoteLogMetadataError as exc:
            raise CorruptRemoteLogMetadataError(
                f"record at offset {offset}: {exc.reason} (at byte {exc.position} of its "
                "value)", **where) from None
        if isinstance(event, RemoteLogSegmentMetadataSnapshot):
            raise CorruptRemoteLogMetadataError(
                f"record at offset {offset}: a RemoteLogSegmentMetadataSnapshotRecord names "
                "no partition; Kafka's topic-based RLMM never writes one to its topic",
                **where)
        out.records += 1
        cache = out.cache(event.topic_id_partition)
        try:
            apply_event(cache, event)
        except (IllegalStateTransitionError, RemoteResourceNotFoundError) as exc:
            # as Kafka's consumer (and the embedded RLMM's replay): logged and skipped
            text = f"{path} offset {offset}: {exc}"
            out.skipped.append(text)
            log.warning("Skipping the remote log metadata record at %s", text)
