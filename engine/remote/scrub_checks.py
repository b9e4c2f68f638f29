"""What every scrub checks of one remote segment, whichever way the segment was listed (a
bucket's objects alone, or the RLMM) and whichever tier stores it: the report, the
findings of one segment, the reads counted and paced, the object-store manifest, the
`.log` scanned whole and the indexes against it.

Findings of one segment (each names the object key, the partition and the offsets):
- `size-mismatch`: an object is not of the size its manifest (or checksum record) gives;
- `bad-manifest`: the manifest does not parse, its chunk sizes do not fit its transforms,
  or the segment metadata it carries (or its size) disagrees with the key, the log or the
  RLMM;
- `corrupt-chunk`: a chunk does not detransform (GCM tag, zstd frame, size);
- `unreadable-object`: an object cannot be read whole (a filesystem-tier file whose CRC or
  size is not the recorded one, an I/O error);
- `corrupt-batch`: a batch CRC fails, framing is impossible, or offsets do not continue;
- `index-mismatch`: an offset-index entry that does not point at a batch start holding an
  offset at or below the entry's, a time-index entry outside the segment or later than the
  records before it, batches whose leader epoch disagrees with the leader-epoch index, a
  leader-epoch index, producer snapshot or transaction index that does not parse.

Every read of a scrub goes through one `PacedStorage`: bytes counted, and paced by an
optional shared byte rate.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from engine.errors import (
    CorruptRecordError,
    CorruptRemoteObjectError,
    KafkaEngineError,
    RemoteStorageError,
)
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile, epoch_for_offset
from engine.log.offset_index import OffsetIndex
from engine.log.producer_state import decode_snapshot
from engine.log.time_index import TimeIndex
from engine.log.transaction_index import ABORTED_TXN_DTYPE, ABORTED_TXN_SIZE
from engine.remote.bucket import Finding
from engine.remote.index_check import (
    IndexMismatch,
    end_txn_markers,
    offset_index_mismatch,
    scan_segment,
    time_index_mismatch,
    transaction_index_mismatch,
)
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.objectstore.keys import INDEXES, LOG
from engine.remote.objectstore.manifest import MAX_MANIFEST_BYTES, SegmentManifest
from engine.remote.objectstore.store import TokenBucket
from engine.remote.segment_access import (
    index_bytes,
)
from engine.remote.storage import IndexType, RemoteStorageManager

__all__ = ["PacedStorage", "ScrubReport", "SegmentFindings", "check_manifest",
           "check_segment_data", "progress_ticker"]



@dataclass
class ScrubReport:
    """What a scrub saw and found. `orphans_deleted` lists the objects deleted (only with
    `--delete-orphans` and no dry run); `dry_run` is None for a scrub that looks for no
    orphans (a bucket alone)."""

    target: str
    partitions: int = 0
    segments: int = 0
    bytes_read: int = 0
    findings: list[Finding] = field(default_factory=list)
    dry_run: bool | None = None
    orphans_deleted: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def orphans(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "orphan"]

    def to_json(self) -> dict:
        out = {"target": self.target, "partitions": self.partitions,
               "segments": self.segments, "bytes_read": self.bytes_read,
               "clean": self.clean, "findings": [f.to_json() for f in self.findings]}
        if self.dry_run is not None:
            out.update(dry_run=self.dry_run, orphans_deleted=list(self.orphans_deleted))
        return out

    def summary(self) -> str:
        lines = [f"scrubbed {self.target}: {self.partitions} partitions, {self.segments} "
                 f"segments, {self.bytes_read} bytes read: "
                 + ("clean" if self.clean else f"{len(self.findings)} findings")]
        lines += [f"  {f}" for f in self.findings]
        orphans = len(self.orphans())
        if self.orphans_deleted:
            lines.append(f"deleted {len(self.orphans_deleted)} of the {orphans} orphaned "
                         "objects")
        elif orphans and self.dry_run:
            lines.append(f"dry run: the {orphans} orphaned objects are left as they are "
                         "(--delete-orphans --no-dry-run deletes them)")
        return "\n".join(lines)


class PacedStorage(RemoteStorageManager):
    """An RSM whose reads are counted (`bytes_read`) and paced by `rate` (a TokenBucket
    shared by every thread of the scrub, or None). Methods that are not reads go to the
    wrapped RSM, as do attributes of the tier (`store`, `keys`, `segment_size`)."""

    def __init__(self, rsm: RemoteStorageManager, rate: TokenBucket | None = None):
        self.rsm = rsm
        self.rate = rate
        self.bytes_read = 0
        self._lock = threading.Lock()

    @property
    def zero_copy_ranges(self) -> bool:
        return self.rsm.zero_copy_ranges

    def __getattr__(self, name):
        return getattr(self.rsm, name)

    def take(self, n: int) -> None:
        """Counts `n` bytes read (and waits for them when paced)."""
        with self._lock:
            self.bytes_read += n
        if self.rate is not None and n:
            self.rate.acquire(n)

    def copy_log_segment_data(self, metadata, segment_data):
        return self.rsm.copy_log_segment_data(metadata, segment_data)

    def delete_log_segment_data(self, metadata) -> None:
        self.rsm.delete_log_segment_data(metadata)

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        end = metadata.segment_size_in_bytes if end_position is None else end_position + 1
        self.take(max(0, end - start_position))
        return self.rsm.fetch_log_segment(metadata, start_position, end_position)

    def read_range(self, metadata, start, end_exclusive):
        self.take(max(0, end_exclusive - start))
        return self.rsm.read_range(metadata, start, end_exclusive)

    def map_range(self, metadata, start, end_exclusive):
        self.take(max(0, end_exclusive - start))
        return self.rsm.map_range(metadata, start, end_exclusive)

    def read_range_once(self, metadata, start, end_exclusive):
        # the wrapped tier's own: an exact read of a tail, never every chunk of a window
        self.take(max(0, end_exclusive - start))
        return self.rsm.read_range_once(metadata, start, end_exclusive)

    def fetch_index_bytes(self, metadata, index_type):
        data = self.rsm.fetch_index_bytes(metadata, index_type)
        self.take(len(data))
        return data

    def fetch_index(self, metadata, index_type):
        return io.BytesIO(self.fetch_index_bytes(metadata, index_type))

    def verifies_batch_crcs(self, metadata) -> bool:
        return self.rsm.verifies_batch_crcs(metadata)

    def get_object(self, store, key: str, max_bytes: int | None = None) -> bytes:
        """A whole object of the store (a manifest), counted and paced."""
        data = store.get(key, max_bytes=max_bytes)
        self.take(len(data))
        return data


class SegmentFindings(list):
    """The findings of one segment: `add` fills in the partition and, unless given, the
    segment's offsets."""

    def __init__(self, partition: str, first: int | None, last: int | None):
        super().__init__()
        self.partition, self.first, self.last = partition, first, last

    def add(self, kind: str, key: str | None, detail: str, first: int | None = -1,
            last: int | None = -1) -> None:
        self.append(Finding(kind, key, self.partition, self.first if first == -1 else first,
                            self.last if last == -1 else last, detail))


# ---- the object-store tier's manifest -----------------------------------------------------

def check_manifest(paced: PacedStorage, store, manifest_key: str,
                   objects: Mapping[str, tuple[str, int | None]],
                   md: RemoteLogSegmentMetadata | None, found: SegmentFindings) -> bool:
    """The manifest parsed and checked against its transforms, the sizes of `objects`
    (suffix -> (key, size listed; None: absent, not checked here)), the segment metadata it
    carries and `md`. False when the segment's data cannot be checked after this."""
    try:
        raw = paced.get_object(store, manifest_key, max_bytes=MAX_MANIFEST_BYTES)
        manifest = SegmentManifest.parse(raw, manifest_key)
        manifest.check_transformed_sizes(manifest_key)
    except KafkaEngineError as exc:
        found.add("bad-manifest", manifest_key, str(exc))
        return False
    ok = True
    expected = {LOG: manifest.chunk_index.transformed_file_size,
                INDEXES: manifest.segment_indexes.total_size}
    for suffix, (key, actual) in objects.items():
        if actual is not None and actual != expected[suffix]:
            found.add("size-mismatch", key,
                      f"the object is {actual} bytes, its manifest says {expected[suffix]}")
            ok = False
    if md is None:
        return False
    original = manifest.chunk_index.original_file_size
    if original != md.segment_size_in_bytes:
        found.add("bad-manifest", manifest_key,
                  f"its chunk index holds {original} bytes of log, the segment's metadata "
                  f"says {md.segment_size_in_bytes}")
        return False
    info = json.loads(raw).get("remoteLogSegmentMetadata")
    wrong = _info_disagrees(info, md) if isinstance(info, dict) else None
    if wrong:
        found.add("bad-manifest", manifest_key, f"its remoteLogSegmentMetadata says {wrong}")
    return ok


def _info_disagrees(info: dict, md: RemoteLogSegmentMetadata) -> str | None:
    rsid = md.remote_log_segment_id
    checks = (("startOffset", md.start_offset), ("endOffset", md.end_offset))
    for name, want in checks:
        if name in info and info[name] != want:
            return f"{name} {info[name]}, the key and the log say {want}"
    seg_id = info.get("remoteLogSegmentId", {})
    if isinstance(seg_id, dict) and "id" in seg_id and seg_id["id"] != str(rsid.id):
        return f"segment id {seg_id['id']}, the key says {rsid.id}"
    return None


# ---- the segment's data -------------------------------------------------------------------

def check_segment_data(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata,
                       found: SegmentFindings, log_key: str,
                       index_key: Callable[[IndexType], str]) -> list[EpochEntry] | None:
    """The `.log` read whole (every chunk detransformed, every batch CRC), then each index
    against it (`index_key` names the object holding an index). Returns the segment's
    leader-epoch checkpoint, None when it cannot be read."""
    try:
        headers = _scan_log(rsm, md)
    except KafkaEngineError as exc:
        found.add(_read_failure(exc, "corrupt-batch"), log_key, str(exc))
        return None
    checks = ((IndexType.LEADER_EPOCH, None), (IndexType.OFFSET, _check_offset_index),
              (IndexType.TIMESTAMP, _check_time_index),
              (IndexType.PRODUCER_SNAPSHOT, _check_snapshot),
              (IndexType.TRANSACTION, partial(_check_txn_index, rsm)))
    checkpoint = None
    for index_type, check in checks:
        key = index_key(index_type)
        try:
            data = index_bytes(rsm, md, index_type)
            if check is None:
                checkpoint = LeaderEpochCheckpointFile.decode_entries(
                    data, f"{key} (leader-epoch index)")
                _check_epochs(md, headers, checkpoint, found, key)
            else:
                check(md, headers, data, found, key)
        except KafkaEngineError as exc:
            found.add(_read_failure(exc, "index-mismatch"), key, str(exc))
    return checkpoint


def _read_failure(exc: KafkaEngineError, damage: str) -> str:
    if isinstance(exc, CorruptRemoteObjectError):
        return "corrupt-chunk"
    if isinstance(exc, RemoteStorageError):
        return "unreadable-object"
    return damage


def _scan_log(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata) -> np.ndarray:
    """Every batch header of the `.log` (index_check.scan_segment) with its CRC checked,
    unless the RSM checks every batch CRC before it serves a range (the filesystem tier
    with its checksum record): the read itself fails then, a second pass finds nothing."""
    return scan_segment(rsm, md, verify_crc=not rsm.verifies_batch_crcs(md))


def _check_offset_index(md, headers: np.ndarray, data: bytes, found: SegmentFindings,
                        key: str) -> None:
    entries = OffsetIndex.from_buffer(data, md.start_offset).entries_array()
    _report(found, key, offset_index_mismatch(md, entries, headers))


def _check_time_index(md, headers: np.ndarray, data: bytes, found: SegmentFindings,
                      key: str) -> None:
    entries = TimeIndex.from_buffer(data, md.start_offset).entries_array()
    _report(found, key, time_index_mismatch(md, entries, headers))


def _report(found: SegmentFindings, key: str, mismatch: IndexMismatch | None) -> None:
    if mismatch is not None:
        found.add("index-mismatch", key, f"{mismatch.index} index {mismatch.detail}",
                  mismatch.offset, mismatch.offset)


def _check_epochs(md, headers: np.ndarray, checkpoint: list[EpochEntry],
                  found: SegmentFindings, key: str) -> None:
    if not checkpoint:
        return
    # epoch_for_offset is constant between the entries' start offsets: it is asked once
    # per stretch (at a start offset itself, or just after it) rather than per batch
    bases = headers["base_offset"].astype(np.int64)
    points = np.unique(np.array([e.start_offset for e in checkpoint], dtype=np.int64))
    j = np.searchsorted(points, bases, side="right") - 1
    exact = (j >= 0) & (points[np.maximum(j, 0)] == bases)
    want = np.full(len(bases), -1, dtype=np.int64)
    for code in np.unique(2 * (j + 1) + exact):
        k, hit = int(code) // 2 - 1, bool(code % 2)
        probe = int(points[0]) - 1 if k < 0 else int(points[k]) + (0 if hit else 1)
        epoch = epoch_for_offset(checkpoint, probe)
        want[2 * (j + 1) + exact == code] = -1 if epoch is None else epoch
    epochs = headers["partition_leader_epoch"].astype(np.int64)
    bad = np.flatnonzero((want >= 0) & (epochs >= 0) & (epochs != want))
    if len(bad):
        i = int(bad[0])
        base = int(bases[i])
        found.add("index-mismatch", key,
                  f"the batch at offset {base} has leader epoch {int(epochs[i])}, the "
                  f"leader-epoch index says {int(want[i])}", base,
                  int(headers["last_offset"][i]))


def _check_snapshot(md, headers, data: bytes, found, key: str) -> None:
    if data:
        decode_snapshot(data, file=f"{key} (producer snapshot)")


def _check_txn_index(rsm, md, headers, data: bytes, found, key: str) -> None:
    if len(data) % ABORTED_TXN_SIZE:
        raise CorruptRecordError(
            f"{key}: the transaction index has {len(data)} bytes, not a multiple of the "
            f"{ABORTED_TXN_SIZE}-byte entry", position=len(data))
    rows = np.frombuffer(data, dtype=ABORTED_TXN_DTYPE, count=len(data) // ABORTED_TXN_SIZE)
    _report(found, key, transaction_index_mismatch(md, rows, headers,
                                                   end_txn_markers(rsm, md, headers)))


def progress_ticker(progress, total: int, paced: PacedStorage) -> Callable[[], None]:
    """A callable to call once per segment checked: reports `done/total segments` and the
    bytes read to `progress` at most twice a second, and at the last one."""
    lock = threading.Lock()
    done = [0, time.monotonic()]

    def tick() -> None:
        with lock:
            done[0] += 1
            now = time.monotonic()
            if progress is not None and (now - done[1] >= 0.5 or done[0] == total):
                done[1] = now
                progress(f"scrub: {done[0]}/{total} segments, {paced.bytes_read} bytes")
    return tick
