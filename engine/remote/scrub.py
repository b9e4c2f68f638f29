"""Scrubbing a bucket of the object-store tier: every remote segment checked from its
objects alone (`engine.remote.bucket`), each problem a Finding that names the object key
(so the segment id), the partition and the offsets. (`engine.remote.scrub_tier` scrubs the
broker's tier through its RLMM.)

Per partition:
- the resolution's findings: segments outside the latest leader's epoch lineage, retried
  uploads (duplicates), segments another covers whole, manifests without their `.log` or
  `.indexes` (half deleted or half written), segments that cannot be read; offsets missing
  between kept segments (`gap`) and offsets two kept segments both hold (`overlap`);
- objects with no manifest (`no-manifest`: an interrupted upload or delete left them).
Under the prefix: keys that are not segment objects of the layout (`unparsed-key`).
Per segment with a manifest, the checks of `engine.remote.scrub_checks`: sizes against the
manifest, the manifest itself, every chunk transform and batch CRC, the indexes against
the log.

Segments are checked on `threads` threads; every read (the resolution's too) is counted
and paced by an optional shared byte rate (`max_bytes_per_second`).
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable

from engine.remote.bucket import (
    Bucket,
    BucketListing,
    Described,
    Finding,
    PartitionView,
    SegmentObjects,
)
from engine.remote.metadata import TopicIdPartition
from engine.remote.objectstore.keys import INDEXES, LOG, MANIFEST
from engine.remote.objectstore.store import TokenBucket
from engine.remote.scrub_checks import (
    PacedStorage,
    ScrubReport,
    SegmentFindings,
    check_manifest,
    check_segment_data,
    progress_ticker,
)

__all__ = ["ScrubReport", "scrub_bucket"]


def scrub_bucket(bucket: Bucket, *, topic: str | None = None, threads: int = 4,
                 max_bytes_per_second: int | None = None,
                 progress: Callable[[str], None] | None = None) -> ScrubReport:
    """Checks every segment under the bucket's prefix (of `topic` only, when given)."""
    report = ScrubReport(bucket.rsm.store.url(bucket.prefix))
    paced = PacedStorage(bucket.rsm,
                         TokenBucket(max_bytes_per_second) if max_bytes_per_second else None)
    listing = bucket.listing()
    tips = [tip for tip in listing.partitions if topic is None or tip.topic == topic]
    total = sum(len(listing.partitions[t]) for t in tips)
    tick = progress_ticker(progress, total, paced)

    # the resolution reads manifests, indexes and log tails through the bucket's RSM: paced
    # as the checks are, for this scrub only
    rsm, bucket.rsm = bucket.rsm, paced
    try:
        for tip in tips:
            report.partitions += 1
            view = bucket.partition(tip)
            findings = _partition_findings(bucket, tip, view, listing.partitions[tip])
            with concurrent.futures.ThreadPoolExecutor(max(1, threads),
                                                       thread_name_prefix="scrub") as pool:
                checks = list(pool.map(
                    lambda d, tip=tip: _check_segment(bucket, paced, tip, d, tick),
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
                    tick()
    finally:
        bucket.rsm = rsm
    report.findings += _unparsed_findings(bucket, listing, topic)
    report.bytes_read = paced.bytes_read
    if progress is not None:
        progress(f"scrub: done, {report.segments} segments, {len(report.findings)} findings")
    return report


def _unparsed_findings(bucket: Bucket, listing: BucketListing, topic: str | None
                       ) -> list[Finding]:
    """Keys under the prefix (under the topic's directories, with `topic`) that are not
    segment objects of the layout: never read, each named (up to KEPT_UNPARSED, then a
    count)."""
    # <topic>-<22-character topic id>/: "a-" alone would take topic "a-b"'s keys for "a"'s
    mine = re.compile(re.escape(bucket.prefix) + (
        "" if topic is None else re.escape(topic) + r"-[A-Za-z0-9_-]{22}/"))
    named = [key for key in listing.unparsed if mine.match(key)]
    out = [Finding("unparsed-key", key, "", None, None,
                   "not a segment object of the plugin's layout: not read") for key in named]
    if topic is None and listing.unparsed_count > len(named):
        out.append(Finding("unparsed-key", None, "", None, None,
                           f"{listing.unparsed_count - len(named)} more keys under "
                           f"{bucket.prefix} that are not segment objects (not named)"))
    return out


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


def _check_segment(bucket: Bucket, paced: PacedStorage, tip: TopicIdPartition, d: Described,
                   tick) -> tuple[str, list[Finding]]:
    seg = d.objects
    keys = {s: bucket.key(tip, seg, s) for s in (LOG, INDEXES, MANIFEST)}
    found = SegmentFindings(f"{tip.topic}-{tip.partition}", seg.start_offset,
                            d.metadata.end_offset if d.metadata is not None else None)
    sizes = {LOG: (keys[LOG], seg.log_size), INDEXES: (keys[INDEXES], seg.indexes_size)}
    if check_manifest(paced, bucket.store, keys[MANIFEST], sizes, d.metadata, found) \
            and d.metadata is not None:
        check_segment_data(paced, d.metadata, found, keys[LOG], lambda _: keys[INDEXES])
    tick()
    return keys[MANIFEST], list(found)
