"""Layout, naming and placement of the filesystem tier, and its checksum record.

Stored names are those of Kafka's LocalTieredStorage; a partition's directory is placed by
rendezvous hashing over the configured dirs (see `engine.remote.filesystem`). The KIP-917
custom metadata (`SegmentChecksums`) names which files were stored with their CRC-32C and
size; the copy writes it and every read checks against it. Also the parsing of the tier's
settings (`dirs`, `fsync`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.checksums import crc32c
from engine.config import ConfigError
from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.filesystem.files import _storage_error
from engine.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from engine.remote.storage import IndexType

__all__ = ["FILE_SUFFIXES", "ROOT_DIR_NAME", "FileSystemLayout", "SegmentChecksums"]

ROOT_DIR_NAME = "kafka-tiered-storage"
LOG, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT, LEADER_EPOCH = (
    ".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint")
#: The stored files in custom-metadata bit order.
FILE_SUFFIXES = (LOG, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT, LEADER_EPOCH)
_INDEX_SUFFIX = {
    IndexType.OFFSET: OFFSET_INDEX,
    IndexType.TIMESTAMP: TIME_INDEX,
    IndexType.TRANSACTION: TXN_INDEX,
    IndexType.PRODUCER_SNAPSHOT: SNAPSHOT,
    IndexType.LEADER_EPOCH: LEADER_EPOCH,
}
_TMP = ".tmp"
_VERIFICATION_MODES = ("full", "size")


# ---- custom metadata ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SegmentChecksums:
    """CRC-32C and size of each stored file, by suffix (see the module docstring)."""

    VERSION = 1
    files: Mapping[str, tuple[int, int]]

    def encode(self) -> bytes:
        mask, body = 0, bytearray()
        for bit, suffix in enumerate(FILE_SUFFIXES):
            if suffix in self.files:
                crc, size = self.files[suffix]
                mask |= 1 << bit
                body += crc.to_bytes(4, "big")
                while True:
                    low, size = size & 0x7F, size >> 7
                    body.append(low | (0x80 if size else 0))
                    if not size:
                        break
        return bytes((self.VERSION, mask)) + bytes(body)

    @classmethod
    def decode(cls, data: bytes) -> SegmentChecksums:
        """Raises ValueError for bytes this format did not write."""
        if len(data) < 2 or data[0] != cls.VERSION or data[1] >> len(FILE_SUFFIXES):
            raise ValueError(f"not filesystem-tier checksums (version {cls.VERSION}): "
                             f"{bytes(data[:8]).hex()}")
        files, pos = {}, 2
        for bit, suffix in enumerate(FILE_SUFFIXES):
            if not data[1] >> bit & 1:
                continue
            if pos + 5 > len(data):
                raise ValueError(f"checksums truncated at byte {pos} of {len(data)}")
            crc, pos = int.from_bytes(data[pos:pos + 4], "big"), pos + 4
            size = shift = 0
            while True:
                if pos >= len(data) or shift > 56:
                    raise ValueError(f"bad size varint for {suffix} at byte {pos}")
                byte = data[pos]
                pos += 1
                size |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            files[suffix] = (crc, size)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes after the checksums")
        return cls(files)

    @classmethod
    def of(cls, metadata: RemoteLogSegmentMetadata) -> SegmentChecksums | None:
        """The checksums carried by `metadata`, None if it has no custom metadata.
        RemoteStorageError if it has some this format cannot read."""
        if metadata.custom_metadata is None:
            return None
        try:
            return _decode_checksums(metadata.custom_metadata)
        except ValueError as exc:
            raise RemoteStorageError(f"custom metadata of {metadata.remote_log_segment_id} "
                                     f"was not written by the filesystem tier: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _decode_checksums(data: bytes) -> SegmentChecksums:
    return SegmentChecksums.decode(data)


# ---- configuration -----------------------------------------------------------------------

def _parse_dirs(value) -> list[Path]:
    if value is None:
        raise ConfigError("dirs", None, "required: comma-separated absolute directories")
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    dirs: list[Path] = []
    seen: dict[str, str] = {}  # realpath -> the name given first
    for raw in items:
        text = str(raw).strip()
        if not text:
            raise ConfigError("dirs", value, "empty directory name in the list")
        if not os.path.isabs(text):
            raise ConfigError("dirs", value, f"{text!r} is not an absolute path")
        norm = os.path.normpath(text)
        real = os.path.realpath(norm)
        if real in seen:
            raise ConfigError("dirs", value, f"{text!r} is the same directory as {seen[real]!r}")
        seen[real] = text
        dirs.append(Path(norm))
    return dirs


def _parse_bool(key: str, value, default: bool) -> bool:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(key, value, "expected true or false")
    return text == "true"


# ---- naming and placement ----------------------------------------------------------------

class FileSystemLayout:
    """Names and placement of stored files; mixed into `FileSystemRemoteStorageManager`,
    whose constructor sets the roots."""

    _roots: list[Path]
    _closed: bool

    @staticmethod
    def partition_dir_name(tip: TopicIdPartition) -> str:
        """`<topic>-<partition>-<topicIdBase64>`; ValueError for a topic that is not a
        single path component."""
        topic = tip.topic
        if not topic or topic in (".", "..") or "/" in topic or "\0" in topic or "\\" in topic:
            raise ValueError(f"topic {topic!r} cannot name a directory")
        return f"{topic}-{tip.partition}-{tip.topic_id}"

    @staticmethod
    def segment_file_name(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """`<20-digit start offset>-<segmentUuidBase64><suffix>`."""
        return f"{metadata.start_offset:020d}-{metadata.remote_log_segment_id.id}{suffix}"

    def _ranked_roots(self, tip: TopicIdPartition) -> list[Path]:
        """The roots in rendezvous order for this partition (first: where copies go)."""
        if not self._roots:
            raise RemoteStorageError("FileSystemRemoteStorageManager is not configured: "
                                     "no dirs")
        key = f"\0{tip.topic_id}-{tip.partition}".encode()
        return sorted(self._roots, key=lambda r: (-crc32c(str(r.parent).encode() + key),
                                                  str(r)))

    def partition_dir(self, tip: TopicIdPartition) -> Path:
        """Where this partition's new segments are written."""
        return self._ranked_roots(tip)[0] / self.partition_dir_name(tip)

    def segment_path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> Path:
        """Path of one stored file in the partition's current dir (reads also probe the
        other dirs; see the module docstring)."""
        return (self.partition_dir(metadata.topic_id_partition)
                / self.segment_file_name(metadata, suffix))

    def _candidates(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> list[Path]:
        tip = metadata.topic_id_partition
        name = self.segment_file_name(metadata, suffix)
        pdir = self.partition_dir_name(tip)
        return [root / pdir / name for root in self._ranked_roots(tip)]

    def _open_stored(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> tuple[int, Path]:
        """(fd, path) of a stored file, probing the dirs in rank order."""
        self._check_open()
        candidates = self._candidates(metadata, suffix)
        for path in candidates:
            try:
                return os.open(path, os.O_RDONLY | os.O_CLOEXEC), path
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _storage_error(exc, f"cannot open {path}") from None
        where = (f" (nor in the {len(candidates) - 1} other dirs)"
                 if len(candidates) > 1 else "")
        raise RemoteResourceNotFoundError(
            f"remote file {candidates[0]} of {metadata.remote_log_segment_id} not found{where}",
            file=str(candidates[0]))

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError("FileSystemRemoteStorageManager is closed")
