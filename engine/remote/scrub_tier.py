"""Scrubbing the broker's tier through its RemoteLogMetadataManager: every segment the RLMM
lists COPY_SEGMENT_FINISHED checked against the objects the tier holds (object store or
filesystem, `engine.remote.scrub_objects`), each problem a Finding naming the object key
(or file), the partition and the offsets.

Only the states matter as Kafka's RLM reads them: a COPY_SEGMENT_FINISHED segment must have
every object, and each is checked (`engine.remote.scrub_checks`); a segment in
COPY_SEGMENT_STARTED (a copy under way or failed) or DELETE_SEGMENT_STARTED (a delete under
way) may have some of its objects or none, and is not read; the objects of a
DELETE_SEGMENT_FINISHED segment, or of a segment the RLMM never listed, are orphans.

Per partition:
- `unreadable-rlmm`: the RLMM cannot give the partition's segments (damaged metadata): its
  objects are neither checked nor judged orphans;
- `missing-object`: an object of a finished segment is not in the tier;
- `orphan`: an object of no segment the RLMM lists; with `delete_orphans` and no dry run,
  deleted (only those reported, and only if the RLMM, read again just before, still lists
  no segment of theirs);
- `unknown-partition`: objects of a partition the RLMM has no record of at all (not even a
  deletion): one finding naming the partition's folder; never deleted, since another
  broker's RLMM may hold it (a tier shared by brokers) or the configuration may not be the
  one that wrote the tier;
- `outside-lineage`: a finished segment outside the latest leader's epoch lineage (the
  segment with the highest last epoch, then the highest end offset, gives it with its
  leader-epoch index; `bucket.outside_lineage`);
- `gap` / `overlap`: offsets no finished segment of the lineage holds, or two hold.

The objects are listed before the RLMM is read: a copy writes COPY_SEGMENT_STARTED before its
first object, so an object listed belongs to a segment the RLMM read after it knows (a
broker tiering meanwhile does not make orphans); an object of a finished segment that the
listing missed is looked for again before it is called missing.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.errors import KafkaEngineError
from engine.remote.bucket import Finding, outside_lineage
from engine.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.metadata_manager import RemoteLogMetadataManager
from engine.remote.objectstore.store import TokenBucket
from engine.remote.scrub_checks import (
    PacedStorage,
    ScrubReport,
    SegmentFindings,
    check_segment_data,
    progress_ticker,
)
from engine.remote.scrub_objects import Stored, TierObjects, objects_of
from engine.remote.storage import RemoteStorageManager

__all__ = ["scrub_tier"]

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass
class _Partition:
    tip: TopicIdPartition
    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    checkpoints: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.tip.topic}-{self.tip.partition}"


def scrub_tier(rsm: RemoteStorageManager,
               open_rlmm: Callable[[], RemoteLogMetadataManager], *,
               topic: str | None = None, threads: int = 4,
               max_bytes_per_second: int | None = None,
               progress: Callable[[str], None] | None = None,
               delete_orphans: bool = False, dry_run: bool = True) -> ScrubReport:
    """Checks every segment of the tier `rsm` that the RLMM (`open_rlmm()`, opened once to
    scrub and once more to delete orphans) lists (of `topic` only, when given).
    ConfigError when `rsm` is not one of the engine's tiers."""
    objects = objects_of(rsm)
    report = ScrubReport(objects.where, dry_run=dry_run)
    paced = PacedStorage(rsm,
                         TokenBucket(max_bytes_per_second) if max_bytes_per_second else None)
    stored = objects.listing()  # before the RLMM: see the module docstring
    with open_rlmm() as rlmm:
        known = set(rlmm.list_partitions())
        parts = [_plan(rlmm, objects, stored, tip, tip in known)
                 for tip in _tips(known, stored, topic)]
    todo = [(p, md) for p in parts for md in p.segments if md.state == _FINISHED]
    if progress is not None:
        progress(f"scrub: {stored.count()} objects listed in {objects.where}; "
                 f"{len(todo)} finished segments in {len(parts)} partitions to check")
    tick = progress_ticker(progress, len(todo), paced)

    def check(item):
        part, md = item
        found, checkpoint = _check_segment(objects, paced, stored, part, md)
        tick()
        return found, checkpoint

    with concurrent.futures.ThreadPoolExecutor(max(1, threads),
                                               thread_name_prefix="scrub") as pool:
        for (part, md), (found, checkpoint) in zip(todo, pool.map(check, todo)):
            part.findings += found
            if checkpoint is not None:
                part.checkpoints[md.remote_log_segment_id.id] = checkpoint
    for part in parts:
        part.findings += _lineage_findings(objects, part)
        report.partitions += 1
        report.segments += len(part.segments)
        report.findings += sorted(part.findings, key=lambda f: (
            f.first_offset if f.first_offset is not None else -1, f.kind, f.key or ""))
    report.bytes_read = paced.bytes_read
    if delete_orphans and not dry_run and report.orphans():
        report.orphans_deleted = _delete_orphans(objects, open_rlmm, report.orphans())
    if progress is not None:
        progress(f"scrub: done, {report.segments} segments, {len(report.findings)} findings")
    return report


def _tips(known: set[TopicIdPartition], stored: Stored, topic: str | None
          ) -> list[TopicIdPartition]:
    tips = set(stored.partitions) | known
    return sorted((t for t in tips if topic is None or t.topic == topic),
                  key=lambda t: (t.topic, t.partition, str(t.topic_id)))


def _plan(rlmm: RemoteLogMetadataManager, objects: TierObjects, stored: Stored,
          tip: TopicIdPartition, known: bool) -> _Partition:
    """The partition's segments from the RLMM (`known`: it has a record of the partition)
    and its orphans; or why the RLMM cannot say."""
    part = _Partition(tip)
    listed = stored.partitions.get(tip, {})
    try:
        part.segments = list(rlmm.list_remote_log_segments(tip)) if known else []
    except (KafkaEngineError, OSError) as exc:
        count = sum(len(objs) for objs in listed.values())
        part.findings.append(Finding(
            "unreadable-rlmm", getattr(exc, "file", None), part.name, None, None,
            f"the RLMM cannot list the partition's segments: {exc}; its {count} stored "
            "objects are neither checked nor judged orphans"))
        return part
    if not known:
        keys = sorted(key for objs in listed.values() for key in objs)
        part.findings.append(Finding(
            "unknown-partition", keys[0].rpartition("/")[0] + "/", part.name,
            min(start for start, _ in listed), None,
            f"the RLMM has no record of the partition: its {len(keys)} objects belong to no "
            "segment it lists, and are not deleted (the partition may be another broker's "
            "sharing the tier)"))
        return part
    for key, stem in _orphans(objects, listed, part.segments):
        part.findings.append(Finding(
            "orphan", key, part.name, stem[0], None,
            "no segment the RLMM lists has this object (a deleted segment's leftover, or a "
            "copy never recorded)"))
    return part


def _orphans(objects: TierObjects, listed: dict, segments: list[RemoteLogSegmentMetadata]
             ) -> list[tuple[str, tuple]]:
    stems = {(md.start_offset, md.remote_log_segment_id.id) for md in segments}
    keys = {key for md in segments for key, _ in objects.expected(md).values()}
    return [(key, stem) for stem, objs in sorted(listed.items(), key=lambda kv: str(kv[0]))
            if stem not in stems for key in sorted(objs) if key not in keys]


def _check_segment(objects: TierObjects, paced: PacedStorage, stored: Stored,
                   part: _Partition, md: RemoteLogSegmentMetadata):
    found = SegmentFindings(part.name, md.start_offset, md.end_offset)
    listed = stored.partitions.get(part.tip, {}).get(
        (md.start_offset, md.remote_log_segment_id.id), {})
    present = {}
    for suffix, (key, required) in objects.expected(md).items():
        key, size = objects.find(md, suffix, key, listed)
        if size is None and required:
            found.add("missing-object", key, f"the RLMM lists the segment "
                                             f"{md.remote_log_segment_id.id} "
                                             f"COPY_SEGMENT_FINISHED, but its {suffix.lstrip('.')} "
                                             "is not in the tier")
        present[suffix] = (key, size)
    if found or not objects.check(paced, md, present, found):
        return list(found), None
    checkpoint = check_segment_data(paced, md, found, present[objects.log_suffix][0],
                                    lambda index_type: objects.index_key(md, index_type))
    return list(found), checkpoint


def _lineage_findings(objects: TierObjects, part: _Partition) -> list[Finding]:
    finished = [md for md in part.segments if md.state == _FINISHED]
    if not finished:
        return []
    latest = max(finished, key=lambda md: (md.last_epoch, md.end_offset,
                                           str(md.remote_log_segment_id.id)))
    checkpoint = part.checkpoints.get(latest.remote_log_segment_id.id, ())
    out, kept = [], []
    for md in finished:
        why = outside_lineage(md, latest, checkpoint)
        if why is None:
            kept.append(md)
        else:
            out.append(Finding("outside-lineage", objects.main_key(md), part.name,
                               md.start_offset, md.end_offset, why))
    kept.sort(key=lambda md: (md.start_offset, md.end_offset))
    reach: RemoteLogSegmentMetadata | None = None  # the kept segment reaching furthest
    for md in kept:
        if reach is not None and md.start_offset > reach.end_offset + 1:
            out.append(Finding("gap", None, part.name, reach.end_offset + 1,
                               md.start_offset - 1, "no finished segment of the lineage "
                                                    "holds these offsets"))
        elif reach is not None and md.start_offset <= reach.end_offset:
            out.append(Finding("overlap", objects.main_key(reach), part.name, md.start_offset,
                               min(md.end_offset, reach.end_offset),
                               f"segment {md.remote_log_segment_id.id} "
                               f"({objects.main_key(md)}) holds these offsets too"))
        if reach is None or md.end_offset > reach.end_offset:
            reach = md
    return out


def _delete_orphans(objects: TierObjects, open_rlmm, orphans: list[Finding]) -> list[str]:
    """Deletes the orphans' objects whose partition the RLMM, read again, still lists no
    segment of; returns their keys."""
    stored = objects.listing()
    deleted: list[str] = []
    reported = {f.key for f in orphans}
    with open_rlmm() as rlmm:
        known = set(rlmm.list_partitions())
        for tip in sorted(stored.partitions, key=lambda t: (t.topic, t.partition)):
            if tip not in known:
                continue  # not an orphan: see _plan
            try:
                segments = list(rlmm.list_remote_log_segments(tip))
            except (KafkaEngineError, OSError):
                continue  # unreadable now: nothing of the partition is an orphan for sure
            keys = [key for key, _ in _orphans(objects, stored.partitions[tip], segments)
                    if key in reported]
            if keys:
                objects.delete(keys)
                deleted += keys
    return deleted
