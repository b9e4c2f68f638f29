"""Scrubbing a bucket of the object-store tier: every remote segment checked from its
objects alone (`engine.remote.bucket`), each problem a Finding that names the object key
(so the segment id), the partition and the offsets.

Per partition:
- the resolution's findings: segments outside the latest leader's epoch lineage, retried
  uploads (duplicates), segments another covers whole, manifests without their `.log` or
  `.indexes` (half deleted or half written), segments that cannot be read; offsets missing
  between kept segments (`gap`) and offsets two kept segments both hold (`overlap`);
- objects with no manifest (`no-manifest`: an interrupted upload or delete left them).
Per segment with a manifest:
- `size-mismatch`: the `.log` / `.indexes` objects are not of the sizes the manifest's
  chunk index and index positions give (a truncated or replaced object);
- `bad-manifest`: the manifest does not parse, its chunk sizes do not fit its transforms, or
  its informational remoteLogSegmentMetadata disagrees with the key or the log;
- `corrupt-chunk`: a chunk does not detransform (GCM tag, zstd frame, size);
- `corrupt-batch`: a batch CRC fails, framing is impossible, or offsets do not continue;
- `index-mismatch`: an offset-index entry that does not point at a batch start holding an
  offset at or below the entry's, a time-index entry outside the segment or later than
  the records before it, batches whose leader epoch disagrees with the leader-epoch index,
  a producer snapshot or transaction index that does not parse.

The `.log` is read whole through the RSM in windows (`WINDOW` bytes; every chunk is
detransformed and checked there), segments on `threads` threads, reads paced by an optional
shared byte rate (`max_bytes_per_second`).
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.errors import CorruptRecordError, CorruptRemoteObjectError, KafkaEngineError
from engine.log.checkpoint import epoch_for_offset
from engine.log.offset_index import OffsetIndex
from engine.log.producer_state import decode_snapshot
from engine.log.time_index import TimeIndex
from engine.records import MemoryRecords
from engine.remote.bucket import Bucket, Described, Finding, PartitionView, SegmentObjects
from engine.remote.metadata import TopicIdPartition
from engine.remote.objectstore.keys import INDEXES, LOG, MANIFEST
from engine.remote.objectstore.manifest import MAX_MANIFEST_BYTES, SegmentManifest
from engine.remote.objectstore.store import TokenBucket
from engine.remote.segment_access import (
    aborted_txn_rows,
    check_batches,
    describe_segment,
    index_bytes,
)
from engine.remote.storage import IndexType

__all__ = ["ScrubReport", "scrub_bucket"]

#: `.log` bytes read (and scanned) at once
WINDOW = 8 << 20
_LOG_OVERHEAD = 12


@dataclass
class ScrubReport:
    url: str
    partitions: int = 0
    segments: int = 0
    bytes_read: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return {"bucket": self.url, "partitions": self.partitions, "segments": self.segments,
                "bytes_read": self.bytes_read, "clean": self.clean,
                "findings": [f.to_json() for f in self.findings]}

    def summary(self) -> str:
        lines = [f"scrubbed {self.url}: {self.partitions} partitions, {self.segments} "
                 f"segments, {self.bytes_read} bytes read: "
                 + ("clean" if self.clean else f"{len(self.findings)} findings")]
        lines += [f"  {f}" for f in self.findings]
        return "\n".join(lines)


def scrub_bucket(bucket: Bucket, *, topic: str | None = None, threads: int = 4,
                 max_bytes_per_second: int | None = None,
                 progress: Callable[[str], None] | None = None) -> ScrubReport:
    """Checks every segment under the bucket's prefix (of `topic` only, when given)."""
    report = ScrubReport(bucket.rsm.store.url(bucket.prefix))
    listing = bucket.listing()
    tips = [tip for tip in listing.partitions if topic is None or tip.topic == topic]
    rate = TokenBucket(max_bytes_per_second) if max_bytes_per_second else None
    total = sum(len(listing.partitions[t]) for t in tips)
    lock = threading.Lock()
    done = [0, time.monotonic()]

    def tick(nbytes: int) -> None:
        with lock:
            done[0] += 1
            report.bytes_read += nbytes
            now = time.monotonic()
            if progress is not None and (now - done[1] >= 0.5 or done[0] == total):
                done[1] = now
                progress(f"scrub: {done[0]}/{total} segments, {report.bytes_read} bytes")

    for tip in tips:
        report.partitions += 1
        view = bucket.partition(tip)
        findings = _partition_findings(bucket, tip, view, listing.partitions[tip])
        with concurrent.futures.ThreadPoolExecutor(max(1, threads),
                                                   thread_name_prefix="scrub") as pool:
            checks = list(pool.map(lambda d, tip=tip: _check_segment(bucket, tip, d, rate, tick),
                                   view.described))
        damaged = set()
        for key, found in checks:
            findings += found
            if found:
                damaged.add(key)
        # a damaged object is its own finding; "cannot be read" would only repeat it
        findings = [f for f in findings
                    if not (f.kind == "unreadable-segment" and f.key in damaged)]
        report.segments += len(listing.partitions[tip])
        report.findings += sorted(findings, key=lambda f: (
            f.first_offset if f.first_offset is not None else -1, f.kind, f.key or ""))
        for seg in listing.partitions[tip]:
            if seg.manifest_size is None:
                tick(0)
    if progress is not None:
        progress(f"scrub: done, {report.segments} segments, {len(report.findings)} findings")
    return report


def _partition_findings(bucket: Bucket, tip: TopicIdPartition, view: PartitionView,
                        segments: list[SegmentObjects]) -> list[Finding]:
    name = view.name
    out = list(view.skipped)
    out += [Finding("gap", None, name, a, b, "no segment holds these offsets")
            for a, b in view.gaps]
    for link in view.chain:
        seg = link.segment
        if link.end <= seg.end_offset:
            out.append(Finding("overlap", bucket.key(tip, _objects(view, seg), MANIFEST), name,
                               link.end, seg.end_offset,
                               "the next segment holds these offsets too"))
    for seg in segments:
        if seg.manifest_size is None:
            present = [s for s, size in ((LOG, seg.log_size), (INDEXES, seg.indexes_size))
                       if size is not None]
            out.append(Finding("no-manifest", bucket.key(tip, seg, present[0]), name,
                               seg.start_offset, None,
                               f"the segment's .{' and .'.join(present)} without its "
                               ".rsm-manifest (an interrupted upload or delete): not read"))
    return out


def _objects(view: PartitionView, md) -> SegmentObjects:
    for d in view.described:
        if d.metadata is md:
            return d.objects
    raise AssertionError(md)


def _check_segment(bucket: Bucket, tip: TopicIdPartition, d: Described, rate, tick
                   ) -> tuple[str, list[Finding]]:
    seg = d.objects
    name = f"{tip.topic}-{tip.partition}"
    manifest_key = bucket.key(tip, seg, MANIFEST)
    findings: list[Finding] = []
    last = d.metadata.end_offset if d.metadata is not None else None

    def finding(kind, key, detail, first=seg.start_offset, last_offset=last):
        findings.append(Finding(kind, key, name, first, last_offset, detail))

    nbytes = 0
    try:
        raw = bucket.store.get(manifest_key, max_bytes=MAX_MANIFEST_BYTES)
        nbytes += len(raw)
        manifest = SegmentManifest.parse(raw, manifest_key)
        manifest.check_transformed_sizes(manifest_key)
    except KafkaEngineError as exc:
        finding("bad-manifest", manifest_key, str(exc))
        tick(nbytes)
        return manifest_key, findings
    sizes = ((LOG, seg.log_size, manifest.chunk_index.transformed_file_size),
             (INDEXES, seg.indexes_size, manifest.segment_indexes.total_size))
    for suffix, actual, expected in sizes:
        if actual is not None and actual != expected:
            finding("size-mismatch", bucket.key(tip, seg, suffix),
                    f"the object is {actual} bytes, its manifest says {expected}")
    if findings or d.metadata is None:
        tick(nbytes)
        return manifest_key, findings
    md = d.metadata
    info = _manifest_info(raw)
    if info is not None:
        wrong = _info_disagrees(info, md)
        if wrong:
            finding("bad-manifest", manifest_key,
                    f"its remoteLogSegmentMetadata says {wrong}")
    log_key = bucket.key(tip, seg, LOG)
    try:
        headers, read = _scan_log(bucket, md, rate)
        nbytes += read
    except KafkaEngineError as exc:
        kind = "corrupt-chunk" if isinstance(exc, CorruptRemoteObjectError) else "corrupt-batch"
        finding(kind, log_key, str(exc))
        tick(nbytes)
        return manifest_key, findings
    idx_key = bucket.key(tip, seg, INDEXES)
    try:
        _check_indexes(bucket, md, headers, d, finding, idx_key)
    except KafkaEngineError as exc:
        finding("index-mismatch", idx_key, str(exc))
    tick(nbytes)
    return manifest_key, findings


def _manifest_info(raw: bytes) -> dict | None:
    info = json.loads(raw).get("remoteLogSegmentMetadata")
    return info if isinstance(info, dict) else None


def _info_disagrees(info: dict, md) -> str | None:
    rsid = md.remote_log_segment_id
    checks = (("startOffset", md.start_offset), ("endOffset", md.end_offset))
    for name, want in checks:
        if name in info and info[name] != want:
            return f"{name} {info[name]}, the key and the log say {want}"
    seg_id = info.get("remoteLogSegmentId", {})
    if isinstance(seg_id, dict) and "id" in seg_id and seg_id["id"] != str(rsid.id):
        return f"segment id {seg_id['id']}, the key says {rsid.id}"
    return None


def _scan_log(bucket: Bucket, md, rate) -> tuple[np.ndarray, int]:
    """Every batch header of the `.log` (CRCs checked), read in windows through the RSM."""
    where = describe_segment(md)
    size = md.segment_size_in_bytes
    parts, position, read = [], 0, 0
    window = WINDOW
    while position < size:
        end = min(size, position + window)
        if rate is not None:
            rate.acquire(end - position)
        data = bucket.rsm.read_range(md, position, end)
        read += len(data)
        records = MemoryRecords(data)
        headers = records.scan(verify_crc=True)
        if not len(headers):
            if end == size:
                raise CorruptRecordError(f"{where}: {size - position} bytes at byte {position} "
                                         "are not a whole batch before the segment's end",
                                         position=position)
            window *= 2  # one batch larger than the window
            continue
        headers = headers.copy()
        check_batches(headers, where, position=position, min_offset=md.start_offset,
                      max_offset=md.end_offset)
        headers["position"] += position
        parts.append(headers)
        position += records.valid_bytes
        window = WINDOW
    headers = np.concatenate(parts)  # size > 0: at least one window of batches
    check_batches(headers, where, crc=False, min_offset=md.start_offset,
                  max_offset=md.end_offset)
    return headers, read


def _check_indexes(bucket: Bucket, md, headers: np.ndarray, d: Described, finding, key):
    rsm = bucket.rsm
    starts = headers["position"].astype(np.int64)
    offsets = OffsetIndex.from_buffer(index_bytes(rsm, md, IndexType.OFFSET),
                                      md.start_offset).entries_array()
    for entry in offsets:
        off, pos = int(entry["offset"]), int(entry["position"])
        i = int(np.searchsorted(starts, pos))
        if i >= len(starts) or starts[i] != pos or int(headers["base_offset"][i]) > off \
                or off > md.end_offset:
            finding("index-mismatch", key,
                    f"offset index entry (offset {off}, position {pos}) does not point at a "
                    "batch start holding an offset at or below it", off, off)
            break
    times = TimeIndex.from_buffer(index_bytes(rsm, md, IndexType.TIMESTAMP),
                                  md.start_offset).entries_array()
    running = np.maximum.accumulate(headers["max_timestamp"])
    for entry in times:
        ts, off = int(entry["timestamp"]), int(entry["offset"])
        i = int(np.searchsorted(headers["last_offset"], off))
        if not md.start_offset <= off <= md.end_offset or i >= len(headers) \
                or ts > int(running[i]):
            finding("index-mismatch", key,
                    f"time index entry (timestamp {ts}, offset {off}) is outside the segment "
                    "or later than every record up to that offset", off, off)
            break
    checkpoint = list(d.checkpoint)
    if checkpoint:
        epochs = headers["partition_leader_epoch"]
        for i in range(len(headers)):
            base = int(headers["base_offset"][i])
            want = epoch_for_offset(checkpoint, base)
            if want is not None and int(epochs[i]) >= 0 and int(epochs[i]) != want:
                finding("index-mismatch", key,
                        f"the batch at offset {base} has leader epoch {int(epochs[i])}, the "
                        f"leader-epoch index says {want}", base, int(headers["last_offset"][i]))
                break
    snapshot = index_bytes(rsm, md, IndexType.PRODUCER_SNAPSHOT)
    if snapshot:
        decode_snapshot(snapshot, file=f"{key} (producer snapshot)")
    aborted_txn_rows(rsm, md)
