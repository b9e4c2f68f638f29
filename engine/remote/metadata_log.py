"""The embedded RemoteLogMetadataManager's files for one partition: an append-only,
checksummed metadata log plus compacted snapshots (byte layout in
docs/remote-log-metadata-format.md).

Directory `<topic>-<partition>-<topicIdBase64>/` holds

- `<seq>.snapshot`: the partition's cache state after its first `seq` events (20-digit,
  zero-padded), written atomically (temp file, fsync, rename, directory fsync);
- `<seq>.log`: the events from number `seq` on, appended and fsynced one by one.

Only the newest snapshot and the log of the same number are live; a crash while compacting
leaves older ones, which the writer deletes when it next loads the partition. Both files are
sequences of frames `length | body CRC32C | header CRC32C | body`.

Damage: an invalid frame with no valid frame after it is a torn (or damaged) tail: a loading
writer logs what it drops and truncates it, a read-only reader stops before it (the writer
may still be writing it). An invalid frame followed by a valid one, a frame of a newer
format version, or a malformed body raises CorruptRemoteLogMetadataError naming the file and
the frame's position.

Thread-safety: none; EmbeddedRemoteLogMetadataManager serializes calls per partition.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from engine.checksums import crc32c
from engine.common import Uuid, fsync_dir, write_file_atomically
from engine.errors import (
    CorruptRemoteLogMetadataError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from engine.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from engine.remote.metadata_cache import EpochStateSnapshot, RemoteLogMetadataCache

__all__ = [
    "FORMAT_VERSION",
    "PartitionMetadataLog",
    "decode_frames",
    "encode_event",
    "encode_frame",
    "parse_partition_dir_name",
    "partition_dir_name",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
# entry types (body byte 1)
SEGMENT = 0            # RemoteLogSegmentMetadata (an add in a log; any state in a snapshot)
SEGMENT_UPDATE = 1     # RemoteLogSegmentMetadataUpdate
PARTITION_DELETE = 2   # RemotePartitionDeleteMetadata
PARTITION = 3          # the partition a file belongs to: first frame of every file
EPOCH_STATE = 4        # snapshot only: one leader epoch's lookup state
SNAPSHOT_END = 5       # snapshot only: last frame, with the event count it covers

_HEADER = struct.Struct(">III")          # body length, body CRC32C, CRC32C of the 8 bytes before
HEADER_SIZE = _HEADER.size
MAX_BODY_SIZE = 64 * 1024 * 1024
_PREFIX = struct.Struct(">BB")          # version, type
_SEGMENT = struct.Struct(">16sqqqiqibb")
_UPDATE = struct.Struct(">16sqibb")
_DELETE = struct.Struct(">bqi")
_PARTITION = struct.Struct(">16sih")
_EPOCH = struct.Struct(">ibqi")
_EPOCH_REF = struct.Struct(">q16s")
_END = struct.Struct(">qiib")
_I32 = struct.Struct(">i")
_EPOCH_ENTRY = struct.Struct(">iq")
_TXN_IDX_EMPTY = 0x01
_HAS_CUSTOM = 0x02
_HAS_HIGHEST = 0x01

_FILE_NAME = re.compile(r"(\d{20})\.(log|snapshot)\Z")
_DIR_NAME = re.compile(r"(.+)-(\d+)-([A-Za-z0-9_-]{22})\Z")


class _Malformed(Exception):
    """A checksummed body that does not decode; becomes CorruptRemoteLogMetadataError."""


# ---- names --------------------------------------------------------------------------------

def partition_dir_name(tip: TopicIdPartition) -> str:
    return f"{tip.topic}-{tip.partition}-{tip.topic_id}"


def parse_partition_dir_name(name: str) -> TopicIdPartition | None:
    """The partition a directory name stands for, or None if it is not one."""
    match = _DIR_NAME.match(name)
    if match is None:
        return None
    try:
        return TopicIdPartition(Uuid.from_string(match[3]), match[1], int(match[2]))
    except ValueError:
        return None


def _file_name(seq: int, kind: str) -> str:
    return f"{seq:020d}.{kind}"


# ---- encoding -----------------------------------------------------------------------------

def encode_frame(body: bytes) -> bytes:
    head = struct.pack(">II", len(body), crc32c(body))
    return head + struct.pack(">I", crc32c(head)) + body


def _custom(flags: int, custom: bytes | None) -> tuple[int, bytes]:
    if custom is None:
        return flags, b""
    return flags | _HAS_CUSTOM, _I32.pack(len(custom)) + custom


def _segment_body(md: RemoteLogSegmentMetadata) -> bytes:
    flags, custom = _custom(_TXN_IDX_EMPTY if md.txn_idx_empty else 0, md.custom_metadata)
    epochs = md.leader_epochs
    return b"".join([
        _PREFIX.pack(FORMAT_VERSION, SEGMENT),
        _SEGMENT.pack(bytes(md.remote_log_segment_id.id), md.start_offset, md.end_offset,
                      md.max_timestamp_ms, md.broker_id, md.event_timestamp_ms,
                      md.segment_size_in_bytes, int(md.state), flags),
        custom, _I32.pack(len(epochs)),
        b"".join(_EPOCH_ENTRY.pack(e, o) for e, o in epochs)])


def encode_event(event) -> bytes:
    """The body of one event: RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate or
    RemotePartitionDeleteMetadata."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return _segment_body(event)
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        flags, custom = _custom(0, event.custom_metadata)
        return (_PREFIX.pack(FORMAT_VERSION, SEGMENT_UPDATE)
                + _UPDATE.pack(bytes(event.remote_log_segment_id.id), event.event_timestamp_ms,
                               event.broker_id, int(event.state), flags) + custom)
    if isinstance(event, RemotePartitionDeleteMetadata):
        return (_PREFIX.pack(FORMAT_VERSION, PARTITION_DELETE)
                + _DELETE.pack(int(event.state), event.event_timestamp_ms, event.broker_id))
    raise TypeError(f"not a remote log metadata event: {type(event).__name__}")


def _partition_body(tip: TopicIdPartition) -> bytes:
    topic = tip.topic.encode("utf-8")
    return (_PREFIX.pack(FORMAT_VERSION, PARTITION)
            + _PARTITION.pack(bytes(tip.topic_id), tip.partition, len(topic)) + topic)


def encode_snapshot(cache: RemoteLogMetadataCache, seq: int) -> bytes:
    """A snapshot file: PARTITION, the delete state, every segment, every epoch state,
    SNAPSHOT_END."""
    frames = [_partition_body(cache.topic_id_partition)]
    if cache.partition_delete_metadata is not None:
        frames.append(encode_event(cache.partition_delete_metadata))
    segments = list(cache.segments_in_order())
    frames.extend(_segment_body(md) for md in segments)
    epochs = cache.epoch_states()
    for state in epochs:
        has = state.highest_offset is not None
        frames.append(b"".join([
            _PREFIX.pack(FORMAT_VERSION, EPOCH_STATE),
            _EPOCH.pack(state.epoch, _HAS_HIGHEST if has else 0,
                        state.highest_offset if has else -1, len(state.referenced)),
            b"".join(_EPOCH_REF.pack(start, bytes(i.id)) for start, i in state.referenced),
            _I32.pack(len(state.unreferenced)),
            b"".join(bytes(i.id) for i in state.unreferenced)]))
    frames.append(_PREFIX.pack(FORMAT_VERSION, SNAPSHOT_END)
                  + _END.pack(seq, len(segments), len(epochs),
                              cache.partition_delete_metadata is not None))
    return b"".join(encode_frame(body) for body in frames)


# ---- decoding -----------------------------------------------------------------------------

class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: memoryview):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise _Malformed(f"body ends at byte {len(self.data)}, needs {self.pos + n}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, st: struct.Struct) -> tuple:
        return st.unpack(self.take(st.size))

    def custom(self, flags: int) -> bytes | None:
        return bytes(self.take(self.unpack(_I32)[0])) if flags & _HAS_CUSTOM else None

    def count(self, per_item: int) -> int:
        n = self.unpack(_I32)[0]
        if n < 0 or n * per_item > len(self.data) - self.pos:
            raise _Malformed(f"count {n} does not fit the body")
        return n

    def done(self) -> None:
        if self.pos != len(self.data):
            raise _Malformed(f"{len(self.data) - self.pos} unexpected bytes after the fields")


def _decode_body(body: memoryview, tip: TopicIdPartition | None):
    """(type, value) of a checksummed body. Raises _Malformed."""
    value: object
    r = _Reader(body)
    version, kind = r.unpack(_PREFIX)
    if version != FORMAT_VERSION:
        raise _Malformed(f"format version {version} is not supported (this engine writes "
                         f"{FORMAT_VERSION})")
    if kind == PARTITION:
        topic_id, partition, n = r.unpack(_PARTITION)
        topic = bytes(r.take(n)).decode("utf-8", errors="strict")
        value = TopicIdPartition(Uuid.from_bytes(topic_id), topic, partition)
    elif tip is None:
        raise _Malformed(f"entry type {kind} before the PARTITION entry")
    elif kind == SEGMENT:
        (sid, start, end, max_ts, broker, event_ts, size, state, flags) = r.unpack(_SEGMENT)
        custom = r.custom(flags)
        epochs = dict(r.unpack(_EPOCH_ENTRY) for _ in range(r.count(_EPOCH_ENTRY.size)))
        value = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, Uuid.from_bytes(sid)), start, end, max_ts, broker, event_ts,
            size, epochs, custom, RemoteLogSegmentState(state), bool(flags & _TXN_IDX_EMPTY))
    elif kind == SEGMENT_UPDATE:
        sid, event_ts, broker, state, flags = r.unpack(_UPDATE)
        value = RemoteLogSegmentMetadataUpdate(
            RemoteLogSegmentId(tip, Uuid.from_bytes(sid)), event_ts, r.custom(flags),
            RemoteLogSegmentState(state), broker)
    elif kind == PARTITION_DELETE:
        state, event_ts, broker = r.unpack(_DELETE)
        value = RemotePartitionDeleteMetadata(tip, RemotePartitionDeleteState(state), event_ts,
                                              broker)
    elif kind == EPOCH_STATE:
        epoch, flags, highest, n = r.unpack(_EPOCH)
        if n < 0 or n * _EPOCH_REF.size > len(body) - r.pos:
            raise _Malformed(f"count {n} does not fit the body")
        refs = []
        for _ in range(n):
            start, sid = r.unpack(_EPOCH_REF)
            refs.append((start, RemoteLogSegmentId(tip, Uuid.from_bytes(sid))))
        unref = tuple(RemoteLogSegmentId(tip, Uuid.from_bytes(r.take(16)))
                      for _ in range(r.count(16)))
        value = EpochStateSnapshot(epoch, highest if flags & _HAS_HIGHEST else None,
                                   tuple(refs), unref)
    elif kind == SNAPSHOT_END:
        value = r.unpack(_END)
    else:
        raise _Malformed(f"unknown entry type {kind}")
    r.done()
    return kind, value


def _decode(body: memoryview, tip, file: Path, position: int):
    try:
        return _decode_body(body, tip)
    except (_Malformed, ValueError) as exc:  # ValueError: a field the types refuse
        raise CorruptRemoteLogMetadataError(f"malformed remote log metadata entry: {exc}",
                                            file=str(file), position=position) from None


def _frame_end(data: memoryview, pos: int) -> int | None:
    """The end of a valid frame at `pos`, or None (invalid or incomplete)."""
    if len(data) - pos < HEADER_SIZE:
        return None
    length, body_crc, head_crc = _HEADER.unpack_from(data, pos)
    if head_crc != crc32c(data[pos:pos + 8]) or not 2 <= length <= MAX_BODY_SIZE:
        return None
    end = pos + HEADER_SIZE + length
    if end > len(data) or crc32c(data[pos + HEADER_SIZE:end]) != body_crc:
        return None
    return end


def decode_frames(data, file: Path, start: int = 0):
    """(frames, tail): frames = [(position, body memoryview)] of the valid frames from
    `start`; tail = position of an invalid or incomplete last frame, or None when the data
    ends exactly after a frame. `data` holds the file from byte `start` on (positions are
    file positions). Raises CorruptRemoteLogMetadataError for an invalid frame followed by
    a valid one."""
    data = memoryview(data)
    frames: list[tuple[int, memoryview]] = []
    pos = 0
    while pos < len(data):
        end = _frame_end(data, pos)
        if end is None:
            for later in range(pos + 1, len(data) - HEADER_SIZE + 1):
                if _frame_end(data, later) is not None:
                    raise CorruptRemoteLogMetadataError(
                        f"invalid remote log metadata frame ({_why_invalid(data, pos)}) "
                        f"followed by a valid one at position {start + later}",
                        file=str(file), position=start + pos)
            return frames, start + pos
        frames.append((start + pos, data[pos + HEADER_SIZE:end]))
        pos = end
    return frames, None


def _why_invalid(data: memoryview, pos: int) -> str:
    if len(data) - pos < HEADER_SIZE:
        return "incomplete header"
    length, _, head_crc = _HEADER.unpack_from(data, pos)
    if head_crc != crc32c(data[pos:pos + 8]):
        return "header checksum mismatch"
    if not 2 <= length <= MAX_BODY_SIZE:
        return f"body length {length} out of range"
    if pos + HEADER_SIZE + length > len(data):
        return f"incomplete body of {length} bytes"
    return "body checksum mismatch"


# ---- one partition's files ----------------------------------------------------------------

@dataclass
class LoadResult:
    cache: RemoteLogMetadataCache
    dropped_bytes: int = 0        # torn tail removed (writer) or left pending (reader)


class PartitionMetadataLog:
    """The metadata files of one partition. A writer (read_only=False) creates the directory
    on its first append, truncates torn tails and deletes stale files; a reader never
    writes."""

    def __init__(self, directory: Path, tip: TopicIdPartition, *, read_only: bool):
        self.directory = Path(directory)
        self.tip = tip
        self.read_only = read_only
        self.base = 0             # number of the live snapshot / log
        self.events_in_log = 0    # events in the live log
        self.position = 0         # end of the last valid frame of the live log
        self._fd: int | None = None

    @property
    def log_path(self) -> Path:
        return self.directory / _file_name(self.base, "log")

    @property
    def next_seq(self) -> int:
        return self.base + self.events_in_log

    # -- loading --

    def _listing(self) -> tuple[list[int], list[int]]:
        snapshots: list[int] = []
        logs: list[int] = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return [], []
        for name in names:
            match = _FILE_NAME.match(name)
            if match:
                (logs if match[2] == "log" else snapshots).append(int(match[1]))
            elif name.endswith(".tmp") and not self.read_only:
                os.unlink(self.directory / name)   # a snapshot that never got renamed
        return sorted(snapshots), sorted(logs)

    def load(self) -> LoadResult:
        """Reads the newest snapshot and its log into a new cache.
        CorruptRemoteLogMetadataError names this partition."""
        try:
            return self._load()
        except CorruptRemoteLogMetadataError as exc:
            exc.partition = self.tip
            raise

    def _load(self) -> LoadResult:
        self.close()
        for attempt in range(5):
            snapshots, logs = self._listing()
            self.base = snapshots[-1] if snapshots else 0
            try:
                cache = self._read_snapshot() if snapshots else RemoteLogMetadataCache(self.tip)
                self.events_in_log, self.position = 0, 0
                dropped = self._read_log(cache)
                break
            except FileNotFoundError:
                # a reader raced the writer's compaction: list again
                if not self.read_only or attempt == 4:
                    raise
        newer = [s for s in logs if s > self.base]
        if newer:
            raise CorruptRemoteLogMetadataError(
                f"log {_file_name(newer[0], 'log')} is newer than the newest snapshot "
                f"{_file_name(self.base, 'snapshot')}", file=str(self.directory), position=0)
        if not self.read_only:
            self._remove_stale(snapshots, logs)
        return LoadResult(cache, dropped)

    def _read_snapshot(self) -> RemoteLogMetadataCache:
        path = self.directory / _file_name(self.base, "snapshot")
        data = path.read_bytes()
        frames, tail = decode_frames(data, path)
        if tail is not None:  # written atomically: any damage is corruption
            raise CorruptRemoteLogMetadataError(
                f"snapshot damaged ({_why_invalid(memoryview(data), tail)})",
                file=str(path), position=tail)
        segments, epochs, delete, end = [], [], None, None
        for i, (pos, body) in enumerate(frames):
            kind, value = _decode(body, self.tip, path, pos)
            if (i == 0) != (kind == PARTITION) or end is not None:
                raise CorruptRemoteLogMetadataError(
                    f"unexpected entry type {kind} at entry {i} of a snapshot",
                    file=str(path), position=pos)
            if kind == PARTITION:
                self._check_partition(value, path, pos)
            elif kind == SEGMENT:
                segments.append(value)
            elif kind == EPOCH_STATE:
                epochs.append(value)
            elif kind == PARTITION_DELETE:
                delete = value
            elif kind == SNAPSHOT_END:
                end = (pos, value)
            else:
                raise CorruptRemoteLogMetadataError(
                    f"entry type {kind} does not belong in a snapshot", file=str(path),
                    position=pos)
        counts = (self.base, len(segments), len(epochs), delete is not None)
        if end is None or tuple(end[1][:3]) + (bool(end[1][3]),) != counts:
            raise CorruptRemoteLogMetadataError(
                f"snapshot end entry {None if end is None else end[1]} does not match its "
                f"name and contents {counts}", file=str(path),
                position=len(data) if end is None else end[0])
        try:
            return RemoteLogMetadataCache.restore(self.tip, segments, epochs, delete)
        except ValueError as exc:
            raise CorruptRemoteLogMetadataError(f"inconsistent snapshot: {exc}",
                                                file=str(path), position=0) from None

    def _read_log(self, cache: RemoteLogMetadataCache) -> int:
        """Applies the live log's events from `position` on; returns the torn-tail bytes."""
        path = self.log_path
        try:
            with open(path, "rb") as f:
                f.seek(self.position)
                data = f.read()
        except FileNotFoundError:
            if self.position:
                raise
            return 0
        start = self.position
        frames, tail = decode_frames(data, path, start)
        for pos, body in frames:
            kind, value = _decode(body, self.tip if pos else None, path, pos)
            if (pos == 0) != (kind == PARTITION) or kind not in (
                    PARTITION, SEGMENT, SEGMENT_UPDATE, PARTITION_DELETE):
                raise CorruptRemoteLogMetadataError(
                    f"unexpected entry type {kind} in a metadata log", file=str(path),
                    position=pos)
            if kind == PARTITION:
                self._check_partition(value, path, pos)
            else:
                _replay(cache, value, path, pos)
                self.events_in_log += 1
            self.position = pos + HEADER_SIZE + len(body)
        if tail is None:
            return 0
        file_end = start + len(data)
        if not self.read_only:
            log.warning("Dropping the torn tail of %s: %d bytes from position %d (%s); the "
                        "%d events before it are kept", path, file_end - tail, tail,
                        _why_invalid(memoryview(data), tail - start), self.events_in_log)
            with open(path, "r+b") as f:
                f.truncate(tail)
                os.fsync(f.fileno())
        return file_end - tail

    def _check_partition(self, tip: TopicIdPartition, path: Path, pos: int) -> None:
        if tip != self.tip:
            raise CorruptRemoteLogMetadataError(
                f"file belongs to partition {tip}, expected {self.tip}", file=str(path),
                position=pos)

    def _remove_stale(self, snapshots: list[int], logs: list[int]) -> None:
        stale = [_file_name(s, "snapshot") for s in snapshots if s < self.base]
        stale += [_file_name(s, "log") for s in logs if s < self.base]
        for name in stale:
            log.info("Deleting %s: superseded by snapshot %s", self.directory / name,
                     _file_name(self.base, "snapshot"))
            (self.directory / name).unlink(missing_ok=True)
        if stale:
            fsync_dir(self.directory)

    def refresh(self, cache: RemoteLogMetadataCache) -> RemoteLogMetadataCache:
        """Reader: the cache with the events written since the last read (a new cache when
        the writer has compacted meanwhile)."""
        snapshots, _ = self._listing()
        if (snapshots[-1] if snapshots else 0) != self.base:
            return self.load().cache
        try:
            self._read_log(cache)
        except FileNotFoundError:  # compacted between the listing and the read
            return self.load().cache
        except CorruptRemoteLogMetadataError as exc:
            exc.partition = self.tip
            raise
        return cache

    # -- writing --

    def append(self, body: bytes) -> None:
        """Appends one event and fsyncs it (the directory and log are created first when
        missing). On failure the log is cut back to its previous end."""
        fd = self._open_for_append()
        frame = encode_frame(body)
        try:
            _write_all(fd, frame)
            os.fsync(fd)
        except BaseException:
            self._cut_back(fd)
            raise
        self.position += len(frame)
        self.events_in_log += 1

    def _cut_back(self, fd: int) -> None:
        try:
            os.ftruncate(fd, self.position)
            os.fsync(fd)
        except OSError:
            log.exception("Could not cut %s back to %d after a failed append", self.log_path,
                          self.position)
        self.close()

    def _open_for_append(self) -> int:
        if self.read_only:
            raise PermissionError(f"{self.directory} is open read-only")
        if self._fd is not None:
            return self._fd
        if not self.directory.is_dir():
            _make_dirs(self.directory)
        path = self.log_path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size != self.position:   # never loaded, or cut back
                raise RemoteStorageError(
                    f"{path} is {size} bytes but {self.position} were loaded: changed by "
                    "someone else; reload the partition")
            os.lseek(fd, self.position, os.SEEK_SET)
            if self.position == 0:
                header = encode_frame(_partition_body(self.tip))
                _write_all(fd, header)
                os.fsync(fd)
                fsync_dir(self.directory)
                self.position = len(header)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return fd

    def compact(self, cache: RemoteLogMetadataCache) -> bool:
        """Writes the snapshot of `cache` (which must hold every event so far) and starts a
        new, empty log; returns False when there is nothing to compact."""
        if self.read_only:
            raise PermissionError(f"{self.directory} is open read-only")
        seq = self.next_seq
        if seq == self.base or not self.directory.is_dir():
            return False
        old_base = self.base
        write_file_atomically(self.directory / _file_name(seq, "snapshot"),
                              encode_snapshot(cache, seq))
        self.close()
        self.base, self.events_in_log, self.position = seq, 0, 0
        self._open_for_append()
        for name in (_file_name(old_base, "log"), _file_name(old_base, "snapshot")):
            (self.directory / name).unlink(missing_ok=True)
        fsync_dir(self.directory)
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _replay(cache: RemoteLogMetadataCache, event, path: Path, pos: int) -> None:
    """Applies a logged event. Only checked events are logged, so a refused one means two
    writers or a hand-edited file: like Kafka's consumer of the metadata topic, it is logged
    and skipped."""
    try:
        if isinstance(event, RemoteLogSegmentMetadata):
            cache.add_copy_in_progress_segment(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            cache.update_remote_log_segment_metadata(event)
        else:
            cache.put_partition_delete_metadata(event)
    except (IllegalStateTransitionError, RemoteResourceNotFoundError) as exc:
        log.error("Skipping the metadata event at %s position %d: %s", path, pos, exc)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _make_dirs(directory: Path) -> None:
    """Creates `directory` and missing parents, fsyncing each parent so the new entries
    survive a crash."""
    missing = []
    d = directory
    while not d.is_dir():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        fsync_dir(d.parent)
