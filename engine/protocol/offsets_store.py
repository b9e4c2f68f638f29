"""Committed group offsets, kept durably in the first log dir (`consumer-offsets.log`), the
role Kafka's `__consumer_offsets` topic plays.

File layout: a sequence of frames, each

    length  uint32  bytes of payload
    crc     uint32  CRC-32C of payload
    payload JSON    {"group", "topic", "partition", "offset", "leader_epoch", "metadata",
                     "commit_ms"}; or {"group", "delete": true} dropping the group's offsets

Every append is written and fsynced before the commit is answered, so an acknowledged commit
survives a crash. At open the frames are replayed: a torn tail (a frame cut short, or a bad
last frame, as a crash mid-append leaves) is truncated away; a bad frame with more frames
behind it is damage, reported as CorruptOffsetsStoreError naming the file and position.
When superseded frames outnumber the live ones the file is rewritten (temp file, fsync,
rename) with one frame per live offset.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from engine.checksums import crc32c
from engine.errors import CorruptOffsetsStoreError
from engine.log.checkpoint import write_file_atomically

__all__ = ["OFFSETS_STORE_FILE", "CommittedOffset", "CorruptOffsetsStoreError", "OffsetsStore"]

OFFSETS_STORE_FILE = "consumer-offsets.log"
_FRAME = struct.Struct(">II")
#: a payload larger than this is not a frame this store wrote
_MAX_PAYLOAD = 1 << 20
_COMPACT_MIN_FRAMES = 1000


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


def _frame(payload: dict) -> bytes:
    data = json.dumps(payload, separators=(",", ":")).encode()
    return _FRAME.pack(len(data), crc32c(data)) + data


class OffsetsStore:
    """group -> (topic, partition) -> CommittedOffset, durable. Thread-safe (one lock)."""

    def __init__(self, log_dir) -> None:
        self.path = Path(log_dir) / OFFSETS_STORE_FILE
        self._lock = threading.Lock()
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self._frames = 0
        self._load()
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open for appends

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        pos, good = 0, 0
        while pos < len(data):
            if len(data) - pos < _FRAME.size:
                break  # torn tail
            length, crc = _FRAME.unpack_from(data, pos)
            end = pos + _FRAME.size + length
            if length > _MAX_PAYLOAD or end > len(data):
                break  # torn tail (a cut frame or a garbled length at the end)
            payload = data[pos + _FRAME.size:end]
            if crc32c(payload) != crc:
                if end < len(data):
                    raise CorruptOffsetsStoreError(
                        f"frame at position {pos} of {self.path} fails its CRC-32C "
                        f"(stored {crc:#010x}) with {len(data) - end} bytes after it",
                        file=str(self.path), position=pos)
                break
            self._apply(json.loads(payload))
            self._frames += 1
            pos = good = end
        if good < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())
        live = sum(map(len, self.offsets.values()))
        if self._frames > max(_COMPACT_MIN_FRAMES, 2 * live):
            self._rewrite()

    def _apply(self, entry: dict) -> None:
        group = entry["group"]
        if entry.get("delete"):
            self.offsets.pop(group, None)
            return
        self.offsets.setdefault(group, {})[(entry["topic"], entry["partition"])] = \
            CommittedOffset(entry["offset"], entry["leader_epoch"], entry["metadata"],
                            entry["commit_ms"])

    def _rewrite(self) -> None:
        frames = [_frame({"group": g, "topic": t, "partition": p, "offset": c.offset,
                          "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                          "commit_ms": c.commit_ms})
                  for g, parts in sorted(self.offsets.items())
                  for (t, p), c in sorted(parts.items())]
        write_file_atomically(self.path, b"".join(frames))
        self._frames = len(frames)

    def _append(self, entries: list[dict]) -> None:
        self._file.write(b"".join(_frame(e) for e in entries))
        self._file.flush()
        os.fsync(self._file.fileno())
        for e in entries:
            self._apply(e)
        self._frames += len(entries)

    def commit(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """Writes and fsyncs the offsets, then makes them visible."""
        with self._lock:
            self._append([{"group": group, "topic": t, "partition": p, "offset": c.offset,
                           "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                           "commit_ms": c.commit_ms} for (t, p), c in offsets.items()])

    def delete_group(self, group: str) -> None:
        with self._lock:
            if group in self.offsets:
                self._append([{"group": group, "delete": True}])

    def get(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        with self._lock:
            return dict(self.offsets.get(group, {}))

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self.offsets)

    def close(self) -> None:
        with self._lock:
            self._file.close()
