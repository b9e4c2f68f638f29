"""Committed group offsets and group metadata, kept durably in the first log dir
(`consumer-offsets.log`), the role Kafka's `__consumer_offsets` topic plays.

File layout: a sequence of frames, each

    length  uint32  bytes of payload (never 0)
    crc     uint32  CRC-32C of payload
    payload JSON    {"group", "topic", "partition", "offset", "leader_epoch", "metadata",
                     "commit_ms"}: a committed offset;
                    {"group", "delete": true}: the group's offsets dropped;
                    {"group", "delete": [[topic, partition], ...]}: some of them;
                    {"group", "group_metadata": {...} | null}: the group's membership
                     (Kafka's GroupMetadataValue), or its removal

Every append is written and fsynced before the commit is answered, so an acknowledged commit
survives a crash. At open the frames are replayed. Only a torn tail is dropped: a crash
mid-append leaves a cut or garbled last frame, or zeros where a filesystem preallocated; in
every such case no valid frame follows the bad one, and the file is truncated before it. A
bad frame with a valid frame anywhere behind it is damage in the middle of the file: that is
a CorruptOffsetsStoreError naming the file and position (`python -m engine offsets-recover`
keeps everything before it, and a copy of the damaged file).

When superseded frames outnumber the live ones the file is rewritten (temp file, fsync,
rename, directory fsync) with one frame per live entry, at open and while commits go on, so
it stays bounded; a crash at any point of a rewrite leaves the old or the new file, whole.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.checksums import crc32c
from engine.common import fsync_dir
from engine.errors import CorruptOffsetsStoreError

__all__ = ["OFFSETS_STORE_FILE", "CommittedOffset", "CorruptOffsetsStoreError", "OffsetsStore",
           "recover_offsets_store"]

OFFSETS_STORE_FILE = "consumer-offsets.log"
_FRAME = struct.Struct(">II")
_COMPACT_MIN_FRAMES = 1000
_RECOVER_HINT = "`python -m engine offsets-recover` keeps every frame before it"


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


def _frame(payload: dict) -> bytes:
    data = json.dumps(payload, separators=(",", ":")).encode()
    return _FRAME.pack(len(data), crc32c(data)) + data


def _frame_end(data: bytes, pos: int) -> int | None:
    """The end of the frame at `pos` when its length and CRC hold, else None."""
    if len(data) - pos < _FRAME.size:
        return None
    length, crc = _FRAME.unpack_from(data, pos)
    end = pos + _FRAME.size + length
    if length == 0 or end > len(data):
        return None
    return end if crc32c(data[pos + _FRAME.size:end]) == crc else None


def _next_valid_frame(data: bytes, after: int) -> int | None:
    """The position of the first valid frame past `after` (payloads are JSON objects, so
    only positions whose payload starts with `{` are checked)."""
    if not data[after:].strip(b"\0"):
        return None  # zeros to the end: a preallocated tail
    pos = data.find(b"{", after + _FRAME.size + 1)
    while pos != -1:
        if _frame_end(data, pos - _FRAME.size) is not None:
            return pos - _FRAME.size
        pos = data.find(b"{", pos + 1)
    return None


def _scan(path: Path, data: bytes):
    """Yields (position, entry) of every frame; stops at a torn tail. Damage before the
    tail raises CorruptOffsetsStoreError."""
    pos = 0
    while pos < len(data):
        end = _frame_end(data, pos)
        if end is None:
            valid = _next_valid_frame(data, pos)
            if valid is not None:
                raise CorruptOffsetsStoreError(
                    f"damaged frame at position {pos} of {path} (bad length or CRC-32C) "
                    f"with a valid frame at position {valid} after it; {_RECOVER_HINT}",
                    file=str(path), position=pos)
            return
        try:
            entry = json.loads(data[pos + _FRAME.size:end])
            if not isinstance(entry, dict) or not isinstance(entry.get("group"), str):
                raise ValueError("no group")
        except ValueError as exc:
            raise _not_an_entry(path, pos, exc) from exc
        yield pos, entry
        pos = end


def _not_an_entry(path: Path, pos: int, exc: Exception) -> CorruptOffsetsStoreError:
    return CorruptOffsetsStoreError(
        f"frame at position {pos} of {path} passes its CRC-32C but is not an offsets entry "
        f"({type(exc).__name__}: {exc}); {_RECOVER_HINT}", file=str(path), position=pos)


class OffsetsStore:
    """group -> (topic, partition) -> CommittedOffset, and group -> metadata, durable.
    Thread-safe (one lock)."""

    def __init__(self, log_dir) -> None:
        self.path = Path(log_dir) / OFFSETS_STORE_FILE
        self._lock = threading.Lock()
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.metadata: dict[str, dict] = {}
        self._frames = 0
        self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)
        self._load()
        self._file = open(self.path, "ab")  # noqa: SIM115 - held open for appends

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        good = 0
        for pos, entry in _scan(self.path, data):
            try:
                self._apply(entry)
            except (KeyError, TypeError) as exc:
                raise _not_an_entry(self.path, pos, exc) from exc
            self._frames += 1
            good = pos + _FRAME.size + _FRAME.unpack_from(data, pos)[0]
        if good < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())
        if self._should_compact():
            self._rewrite()

    def _apply(self, entry: dict) -> None:
        group = entry["group"]
        if entry.get("delete") is True:
            self.offsets.pop(group, None)
        elif "delete" in entry:
            kept = self.offsets.get(group, {})
            for t, p in entry["delete"]:
                kept.pop((t, p), None)
            if not kept:
                self.offsets.pop(group, None)
        elif "group_metadata" in entry:
            if entry["group_metadata"] is None:
                self.metadata.pop(group, None)
            else:
                self.metadata[group] = entry["group_metadata"]
        else:
            self.offsets.setdefault(group, {})[(entry["topic"], entry["partition"])] = \
                CommittedOffset(entry["offset"], entry["leader_epoch"], entry["metadata"],
                                entry["commit_ms"])

    def _should_compact(self) -> bool:
        live = sum(map(len, self.offsets.values())) + len(self.metadata)
        return self._frames > max(_COMPACT_MIN_FRAMES, 2 * live)

    def _rewrite(self) -> None:
        frames = [_frame({"group": g, "group_metadata": m})
                  for g, m in sorted(self.metadata.items())]
        frames += [_frame({"group": g, "topic": t, "partition": p, "offset": c.offset,
                           "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                           "commit_ms": c.commit_ms})
                   for g, parts in sorted(self.offsets.items())
                   for (t, p), c in sorted(parts.items())]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            for frame in frames:
                f.write(frame)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)  # the old file or the new one, each whole
        fsync_dir(self.path.parent)
        self._frames = len(frames)

    def _append(self, entries: list[dict]) -> None:
        self._file.write(b"".join(_frame(e) for e in entries))
        self._file.flush()
        os.fsync(self._file.fileno())
        for e in entries:
            self._apply(e)
        self._frames += len(entries)
        if self._should_compact():
            self._file.close()
            self._rewrite()
            self._file = open(self.path, "ab")  # noqa: SIM115 - held open for appends

    def commit(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """Writes and fsyncs the offsets, then makes them visible."""
        with self._lock:
            self._append([{"group": group, "topic": t, "partition": p, "offset": c.offset,
                           "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                           "commit_ms": c.commit_ms} for (t, p), c in offsets.items()])

    def delete_group(self, group: str) -> None:
        """Drops the group's offsets."""
        with self._lock:
            if group in self.offsets:
                self._append([{"group": group, "delete": True}])

    def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        """Drops some of the group's offsets."""
        with self._lock:
            self._append([{"group": group, "delete": [[t, p] for t, p in partitions]}])

    def store_group_metadata(self, group: str, metadata: dict | None) -> None:
        """Writes and fsyncs the group's membership (None: the group has none)."""
        with self._lock:
            if metadata is not None or group in self.metadata:
                self._append([{"group": group, "group_metadata": metadata}])

    def group_metadata(self) -> dict[str, dict]:
        with self._lock:
            return dict(self.metadata)

    def get(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        with self._lock:
            return dict(self.offsets.get(group, {}))

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self.offsets)

    def close(self) -> None:
        with self._lock:
            self._file.close()


def recover_offsets_store(log_dir) -> str:
    """Keeps every frame before the first damaged one: the damaged file is copied aside
    (`consumer-offsets.log.damaged-<ms>`), then replaced by its good frames. Returns what was
    done, one line."""
    path = Path(log_dir) / OFFSETS_STORE_FILE
    if not path.exists():
        return f"{path}: no such file, nothing to recover"
    data = path.read_bytes()
    good, frames = 0, 0
    try:
        for pos, _entry in _scan(path, data):
            good, frames = pos + _FRAME.size + _FRAME.unpack_from(data, pos)[0], frames + 1
    except CorruptOffsetsStoreError as exc:
        copy = path.with_name(f"{path.name}.damaged-{int(time.time() * 1000)}")
        shutil.copy2(path, copy)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data[:good])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
        return (f"{path}: kept {frames} frames ({good} bytes) before the damage at position "
                f"{exc.position}; the damaged file is kept as {copy}")
    return f"{path}: no damage found ({frames} frames), nothing to recover"
