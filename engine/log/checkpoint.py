"""Kafka's text checkpoint files, `partition.metadata` and its Uuid.

Checkpoint format (Kafka's `CheckpointFile`), UTF-8 text, `\\n` line ends:

    <version>\\n
    <count>\\n
    <entry line>\\n     count times; fields separated by single spaces (readers split on any
                        run of whitespace)

Writes go to `<name>.tmp`, are fsynced, renamed over the file atomically, and the directory
is fsynced. Reads accept `\\n`, `\\r\\n` or `\\r` line ends (Java's readLine); an empty file
reads as no entries (Kafka creates empty checkpoint files when it opens them); a version
mismatch, a count mismatch or a malformed line raises CorruptCheckpointError.

| file                                   | where         | version | entry line                  |
|----------------------------------------|---------------|---------|-----------------------------|
| leader-epoch-checkpoint                | partition dir | 0       | `<epoch> <start offset>`    |
| recovery-point-offset-checkpoint,      | each log dir  | 0       | `<topic> <partition> <off>` |
| log-start-offset-checkpoint,           |               |         |                             |
| replication-offset-checkpoint,         |               |         |                             |
| cleaner-offset-checkpoint              |               |         |                             |

`partition.metadata` (partition dir) is `version: 0\\ntopic_id: <Uuid>` with no trailing
newline; readers split each line on `:` plus whitespace.

`Uuid`, `TopicPartition` and the atomic writes live in `engine.common` (layer 2, shared with
the remote tier): import them from there.

Thread-safety: each file object serializes its reads and writes on a lock; the functions are
pure.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Generic, NamedTuple, Protocol, TypeVar

from engine.common import TopicPartition, Uuid, write_file_atomically
from engine.errors import CorruptCheckpointError

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILENAME",
    "LEADER_EPOCH_CHECKPOINT_FILENAME",
    "LOG_START_OFFSET_CHECKPOINT_FILENAME",
    "PARTITION_METADATA_FILENAME",
    "RECOVERY_POINT_OFFSET_CHECKPOINT_FILENAME",
    "REPLICATION_OFFSET_CHECKPOINT_FILENAME",
    "CheckpointFile",
    "EntryFormatter",
    "EpochEntry",
    "LeaderEpochCheckpointFile",
    "OffsetCheckpointFile",
    "PartitionMetadata",
    "PartitionMetadataFile",
    "epoch_entries_in_range",
    "epoch_for_offset",
    "leader_epoch_checkpoint_text",
]

LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
PARTITION_METADATA_FILENAME = "partition.metadata"
RECOVERY_POINT_OFFSET_CHECKPOINT_FILENAME = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILENAME = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILENAME = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILENAME = "cleaner-offset-checkpoint"

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")             # Integer/Long.parseLong, ASCII digits
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")    # Java's \s
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|\Z)")      # BufferedReader.readLine


# ---- parsing helpers ----------------------------------------------------------------------

def _java_split(line: str) -> list[str]:
    """Java's String.split("\\\\s+"): a leading separator gives an empty first field and
    trailing empty fields are dropped."""
    parts = _JAVA_WHITESPACE.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _parse_int(text: str, bounds: tuple[int, int]) -> int | None:
    """Java's Integer/Long.parseInt: optional sign, decimal digits, in range; else None."""
    if not _JAVA_INT.match(text):
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def _read_lines(path: Path) -> list[tuple[int, str]]:
    """(byte position, text) of every line, split as Java's BufferedReader.readLine does."""
    return _split_lines(path.read_bytes(), path)


def _split_lines(data: bytes, path) -> list[tuple[int, str]]:
    """`_read_lines` over bytes already read; errors name `path`."""
    lines = []
    for match in _LINE.finditer(data):
        if match.start() == len(data):
            break
        try:
            lines.append((match.start(), match.group(1).decode("utf-8")))
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(f"checkpoint line is not UTF-8: {exc.reason}",
                                         file=path, position=match.start() + exc.start) from None
    return lines


# ---- generic checkpoint file -------------------------------------------------------------

T = TypeVar("T")


class EntryFormatter(Protocol[T]):
    """Turns entries into checkpoint lines and back (Kafka's EntryFormatter)."""

    def to_line(self, entry: T) -> str: ...

    def from_line(self, line: str) -> T | None:
        """The entry, or None if the line is malformed."""


class CheckpointFile(Generic[T]):
    """A versioned list of entries in Kafka's checkpoint text format.

    Args:
        file: path of the checkpoint.
        version: the version this reader and writer handle.
        formatter: an EntryFormatter for the entry lines.
        create: create an empty file if none exists, as Kafka's constructor does.
    """

    def __init__(self, file, version: int, formatter: EntryFormatter[T], *, create: bool = True):
        self._file = Path(file)
        self._version = int(version)
        self._formatter = formatter
        self._lock = threading.Lock()
        if create:
            try:
                with open(self._file, "xb"):
                    pass
            except FileExistsError:
                pass

    @property
    def file(self) -> Path:
        return self._file

    @property
    def version(self) -> int:
        return self._version

    def encode(self, entries: Iterable[T]) -> bytes:
        """The file's bytes for `entries`."""
        return _encode_lines(entries, self._version, self._formatter)

    def write(self, entries: Iterable[T], *, sync: bool = True) -> None:
        """Replaces the file atomically (see write_file_atomically)."""
        data = self.encode(entries)
        with self._lock:
            write_file_atomically(self._file, data, sync=sync)

    def write_if_dir_exists(self, entries: Iterable[T], *, sync: bool = True) -> bool:
        """Writes unless the directory is gone (e.g. a deleted partition); returns whether
        it wrote."""
        try:
            self.write(entries, sync=sync)
            return True
        except FileNotFoundError:
            if self._file.parent.exists():
                raise
            return False

    def read(self) -> list[T]:
        """The entries, in file order.

        Raises:
            CorruptCheckpointError: version other than `version`, malformed version, count or
                entry line, or a count that differs from the entry lines. Names the file and
                the byte position of the offending line.
            FileNotFoundError: the file does not exist.
        """
        with self._lock:
            lines = _read_lines(self._file)
        return _decode_lines(lines, self._version, self._formatter, self._file)

    def __repr__(self):
        return f"{type(self).__name__}({str(self._file)!r}, version={self._version})"


def _encode_lines(entries: Iterable[T], version: int, formatter: EntryFormatter[T]) -> bytes:
    """The checkpoint text of `entries`: the one encoder of every checkpoint kind."""
    entries = list(entries)
    lines = [str(version), str(len(entries))] + [formatter.to_line(entry) for entry in entries]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def _decode_lines(lines: list[tuple[int, str]], version: int, formatter: EntryFormatter[T],
                  file) -> list[T]:
    """The entries of a checkpoint's lines (see CheckpointFile.read); errors name `file`."""
    if not lines:
        return []
    found = _header_int(lines[0], file)
    if found != version:
        raise CorruptCheckpointError(
            f"unrecognised checkpoint version {found}, expected {version}",
            file=file, position=lines[0][0])
    if len(lines) < 2:
        return []
    expected = _header_int(lines[1], file)
    entries = []
    for position, line in lines[2:]:
        entry = formatter.from_line(line)
        if entry is None:
            raise _malformed(position, line, file)
        entries.append(entry)
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"expected {expected} entries in checkpoint but found {len(entries)}",
            file=file, position=lines[1][0])
    return entries


def _header_int(line: tuple[int, str], file) -> int:
    value = _parse_int(line[1], _INT32)
    if value is None:
        raise _malformed(*line, file)
    return value


def _malformed(position: int, line: str, file) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"malformed line in checkpoint: {line!r}", file=file,
                                  position=position)


# ---- leader-epoch checkpoint --------------------------------------------------------------

class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


class _EpochEntryFormatter:
    def to_line(self, entry: EpochEntry) -> str:
        return f"{int(entry[0])} {int(entry[1])}"

    def from_line(self, line: str) -> EpochEntry | None:
        parts = _java_split(line)
        if len(parts) != 2:
            return None
        epoch, start = _parse_int(parts[0], _INT32), _parse_int(parts[1], _INT64)
        if epoch is None or start is None:
            return None
        return EpochEntry(epoch, start)


class LeaderEpochCheckpointFile(CheckpointFile[EpochEntry]):
    """`leader-epoch-checkpoint` (version 0, `<epoch> <start offset>` lines)."""

    VERSION = 0

    def __init__(self, file, *, create: bool = True):
        super().__init__(file, self.VERSION, _EpochEntryFormatter(), create=create)

    @classmethod
    def encode_entries(cls, entries: Iterable[EpochEntry]) -> bytes:
        """The checkpoint text of `entries`, without a file (e.g. for the remote tier)."""
        return _encode_lines(entries, cls.VERSION, _EpochEntryFormatter())

    @classmethod
    def decode_entries(cls, data, source) -> list[EpochEntry]:
        """The entries of checkpoint text that is not a file here (e.g. a remote segment's
        leader-epoch index), checked as `read` checks a file; errors name `source`.

        Raises:
            CorruptCheckpointError: see `CheckpointFile.read`.
        """
        lines = _split_lines(bytes(data), source)
        return _decode_lines(lines, cls.VERSION, _EpochEntryFormatter(), source)


def _epoch_cache(entries: Iterable[EpochEntry]) -> list[EpochEntry]:
    # Kafka keeps the entries in a TreeMap keyed by epoch: ordered by epoch, later puts win.
    by_epoch = {}
    for entry in entries:
        by_epoch[int(entry[0])] = EpochEntry(int(entry[0]), int(entry[1]))
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def epoch_for_offset(entries: Iterable[EpochEntry], offset: int) -> int | None:
    """The leader epoch of `offset` (Kafka's LeaderEpochFileCache.epochForOffset).

    Walking the entries in epoch order: an entry starting exactly at `offset` gives its
    epoch; otherwise the last entry starting before `offset` does; None if `offset` is before
    the first entry (or there are none).
    """
    previous = None
    for epoch, start in _epoch_cache(entries):
        if start == offset:
            return epoch
        if start > offset:
            return previous
        previous = epoch
    return previous


def epoch_entries_in_range(entries: Iterable[EpochEntry], start_offset: int,
                           end_offset: int) -> list[EpochEntry]:
    """The epoch entries covering [start_offset, end_offset) (Kafka's epochEntriesInRange),
    e.g. the leader-epoch checkpoint shipped with a tiered segment.

    On a copy: if start_offset >= 0, entries starting at or before it are dropped and the
    last of them comes back with its start raised to start_offset; then, if end_offset >= 0,
    entries starting at or after end_offset are dropped from the end.
    """
    epochs = _epoch_cache(entries)
    if start_offset >= 0:
        dropped = 0
        while dropped < len(epochs) and epochs[dropped].start_offset <= start_offset:
            dropped += 1
        if dropped:
            covering = EpochEntry(epochs[dropped - 1].epoch, start_offset)
            epochs = _epoch_cache([covering, *epochs[dropped:]])
    if end_offset >= 0:
        while epochs and epochs[-1].start_offset >= end_offset:
            epochs.pop()
    return epochs


def leader_epoch_checkpoint_text(entries: Iterable[EpochEntry], up_to_offset: int) -> bytes:
    """`leader-epoch-checkpoint` bytes of the entries starting before `up_to_offset`: what a
    tiered segment carries (Kafka's copy of the cache truncated from the end at the next
    segment's base offset)."""
    kept = [entry for entry in entries if int(entry[1]) < up_to_offset]
    return LeaderEpochCheckpointFile.encode_entries(kept)


# ---- offset checkpoints -------------------------------------------------------------------

class _OffsetFormatter:
    def to_line(self, item: tuple[tuple[str, int], int]) -> str:
        (topic, partition), offset = item
        if not topic or _JAVA_WHITESPACE.search(topic):
            raise ValueError(f"topic {topic!r} cannot be written to an offset checkpoint")
        return f"{topic} {int(partition)} {int(offset)}"

    def from_line(self, line: str):
        parts = _java_split(line)
        if len(parts) != 3:
            return None
        partition, offset = _parse_int(parts[1], _INT32), _parse_int(parts[2], _INT64)
        if partition is None or offset is None:
            return None
        return TopicPartition(parts[0], partition), offset


class OffsetCheckpointFile:
    """A per-log-dir offset checkpoint (`recovery-point-offset-checkpoint`,
    `log-start-offset-checkpoint`, `replication-offset-checkpoint`,
    `cleaner-offset-checkpoint`): version 0, `<topic> <partition> <offset>` lines."""

    VERSION = 0

    def __init__(self, file, *, create: bool = True):
        self._checkpoint = CheckpointFile(file, self.VERSION, _OffsetFormatter(), create=create)

    @property
    def file(self) -> Path:
        return self._checkpoint.file

    def encode(self, offsets: Mapping[tuple[str, int], int]) -> bytes:
        """The file's bytes; lines follow the mapping's order."""
        return self._checkpoint.encode(offsets.items())

    def write(self, offsets: Mapping[tuple[str, int], int], *, sync: bool = True) -> None:
        """Replaces the file atomically. ValueError for topics with whitespace or empty."""
        self._checkpoint.write(offsets.items(), sync=sync)

    def read(self) -> dict[TopicPartition, int]:
        """{TopicPartition: offset} in file order (a repeated partition keeps its last line).
        CorruptCheckpointError as in CheckpointFile.read."""
        return dict(self._checkpoint.read())

    def __repr__(self):
        return f"OffsetCheckpointFile({str(self.file)!r})"


# ---- partition.metadata ------------------------------------------------------------------

class PartitionMetadata(NamedTuple):
    """Contents of `partition.metadata`."""

    version: int
    topic_id: Uuid


class PartitionMetadataFile:
    """`partition.metadata`: `version: 0\\ntopic_id: <Uuid>`, no trailing newline."""

    VERSION = 0
    _SEPARATOR = re.compile(r":[ \t\n\x0b\f\r]+")

    def __init__(self, file):
        self._file = Path(file)
        self._lock = threading.Lock()

    @property
    def file(self) -> Path:
        return self._file

    @classmethod
    def encode(cls, topic_id: Uuid) -> bytes:
        """The file's bytes for `topic_id`."""
        return f"version: {cls.VERSION}\ntopic_id: {topic_id}".encode()

    def write(self, topic_id: Uuid, *, sync: bool = True) -> None:
        """Replaces the file atomically (see write_file_atomically)."""
        if not isinstance(topic_id, Uuid):
            raise TypeError(f"topic_id must be a Uuid, got {type(topic_id).__name__}")
        with self._lock:
            write_file_atomically(self._file, self.encode(topic_id), sync=sync)

    def record_topic_id(self, topic_id: Uuid | str) -> None:
        """Writes `topic_id` (a Uuid or its string) unless the file already holds it (Kafka's
        UnifiedLog.initializeTopicId).

        Raises:
            ValueError: the file holds another topic id.
        """
        if not isinstance(topic_id, Uuid):
            topic_id = Uuid.from_string(str(topic_id))
        if self.exists():
            existing = self.read().topic_id
            if existing != topic_id:
                raise ValueError(f"topic id {topic_id} differs from {existing} recorded in "
                                 f"{self._file}")
            return
        self.write(topic_id)

    def read(self) -> PartitionMetadata:
        """Parses the file.

        Raises:
            CorruptCheckpointError: a missing or malformed line, a version other than 0, or
                the zero topic id. Names the file and the line's byte position.
            FileNotFoundError: no file.
        """
        with self._lock:
            lines = _read_lines(self._file)
        version_line = lines[0] if lines else (0, "")
        parts = self._SEPARATOR.split(version_line[1])
        version = _parse_int(parts[1], _INT32) if len(parts) == 2 else None
        if version is None:
            raise self._malformed(*version_line)
        if version != self.VERSION:
            raise CorruptCheckpointError(f"unrecognised partition metadata version {version}, "
                                         f"expected {self.VERSION}", file=self._file,
                                         position=version_line[0])
        topic_line = lines[1] if len(lines) > 1 else (len(self._file.read_bytes()), "")
        parts = self._SEPARATOR.split(topic_line[1])
        try:
            topic_id = Uuid.from_string(parts[1]) if len(parts) == 2 else None
        except ValueError:
            topic_id = None
        if topic_id is None:
            raise self._malformed(*topic_line)
        if topic_id == Uuid.ZERO:
            raise CorruptCheckpointError("invalid (zero) topic id in partition metadata",
                                         file=self._file, position=topic_line[0])
        return PartitionMetadata(version, topic_id)

    def _malformed(self, position: int, line: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"malformed line in partition metadata: {line!r}",
                                      file=self._file, position=position)

    def exists(self) -> bool:
        return self._file.exists()

    def delete(self) -> bool:
        """Deletes the file; returns whether it existed."""
        try:
            os.unlink(self._file)
            return True
        except FileNotFoundError:
            return False

    def __repr__(self):
        return f"PartitionMetadataFile({str(self._file)!r})"
