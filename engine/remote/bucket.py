"""A tiered topic from a bucket alone: the segments of the object-store tier (the Aiven
plugin's layout) listed from the objects under a prefix, with no broker and no broker's RLMM.

Naming a bucket: `s3://bucket/prefix` (also `gs://`, `az://`), with the store's settings
under the plugin's names without `rsm.config.` (`storage.s3.endpoint.url`,
`storage.aws.access.key.id`, encryption key pairs, ...) or taken from a broker file's
`rsm.config.*` keys. The URL's path is the plugin's `key.prefix`; a prefix that does not end
with `/` gets one (a URL names a folder).

Listing (`Bucket.listing`): every key under the prefix, paged by the store (one page in
memory at a time); each key that parses as a segment object (`keys.parse_object_key`) adds
to a small per-segment record, others are counted. A segment counts once its
`.rsm-manifest` exists (the manifest is written last). The listing is cached until `refresh`
(for one run, that is its whole life).

Resolution (`Bucket.partition`), as Kafka's RLMM would with its metadata, here from what
each segment's objects record:
- each counted segment is described from its manifest and indexes: its size from the chunk
  index, its end offset and max timestamp from the tail of the `.log` after the last
  offset-index entry (and the time index; the tail is read once, by `read_range_once`: in
  plain mode an exact ranged GET, not whole chunks), its leader epochs from its leader-epoch index
  (the broker's checkpoint, cumulative up to the segment's end);
- the latest leader's view wins: the segment of the highest last epoch (then the highest end
  offset) gives the lineage (its leader-epoch index lists every epoch and where it began);
  a segment whose epochs or end disagree with it is a divergent copy of an old leader and
  is skipped;
- of segments with the same start offset (a retried upload under another segment id), the
  one reaching furthest is kept (then the smaller id, so runs agree), the others skipped;
- a segment whose offsets a kept one covers whole is skipped; where kept ones overlap, the
  later one owns the shared offsets;
- a manifest without its `.log` or `.indexes` (a half-deleted or half-written segment) and a
  segment whose objects cannot be read are skipped.
Every skipped segment is a `Finding` naming its object key, partition and offsets; offsets
missing between kept segments are `gaps`. Readers follow Spark's `failOnDataLoss`:
`PartitionView.check_range` raises RemoteDataLossError naming the partition and the missing
offsets, or (when loss is accepted) logs a warning and reads what exists.

With remote-log metadata at hand (`metadata`: engine.remote.metadata_files, Kafka's
`__remote_log_metadata` partitions or the embedded RLMM's files) nothing is guessed: the
segments are those the metadata lists COPY_SEGMENT_FINISHED, still returned by its lookups
(not displaced by a later upload) and ending at or above the log start offset (reading starts
there), described by the metadata itself; then the same lineage and chain rules. A bucket
segment the metadata does not list, or lists in another state, is a `Finding`; a listed
segment whose objects are not all in the bucket is a `missing-segment` (its offsets are lost).

The result is RemoteLogSegmentMetadata (COPY_SEGMENT_FINISHED) that the shared remote-segment
reading (`segment_access`) and the scan planning take as they take the RLMM's.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from engine.common import Uuid
from engine.config import ConfigError
from engine.errors import KafkaEngineError, RemoteDataLossError, RemoteEncryptionKeyError
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile, epoch_entries_in_range
from engine.log.offset_index import OffsetIndex
from engine.log.time_index import TimeIndex
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.metadata_files import RemoteLogMetadataFiles
from engine.remote.objectstore.keys import INDEXES, LOG, MANIFEST
from engine.remote.remote_log import increasing_prefix
from engine.remote.segment_access import RemoteSegmentReader, index_bytes
from engine.remote.storage import IndexType

__all__ = [
    "Bucket",
    "BucketListing",
    "Described",
    "Finding",
    "PartitionView",
    "RemoteDataLossError",
    "SegmentLink",
    "SegmentObjects",
    "bucket_configs",
    "parse_bucket_url",
]

log = logging.getLogger(__name__)

_SCHEMES = {"s3": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
            "gs": "io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage",
            "az": "io.aiven.kafka.tieredstorage.storage.azure.AzureBlobStorage"}
_BUCKET_KEYS = {"s3": "storage.s3.bucket.name", "gs": "storage.gcs.bucket.name",
                "az": "storage.azure.container.name"}
#: segments described at once, over all partitions being resolved (each is a manifest GET,
#: an indexes GET and a tail read, one after another)
DESCRIBE_THREADS = 8
#: partitions resolved at once by `Bucket.resolve` (their segments share the describe pool)
RESOLVE_THREADS = 4
KEPT_UNPARSED = 1000  # keys that do not parse are counted; this many kept, to be named
#: skipped segments that are a normal sight (logged at INFO, the others at WARNING)
_EXPECTED = frozenset({"duplicate-segment", "covered-segment", "displaced-segment",
                       "below-log-start-offset", "not-finished"})
#: skipped segments whose offsets no other segment may hold: data loss when none does
_LOST_KINDS = frozenset({"unreadable-segment", "incomplete-segment", "missing-segment"})
#: bytes read at once while walking a segment's tail for its end offset: the whole tail
#: after the last offset-index entry when it is at most _TAIL_READ_MAX (one exact read; a
#: segment without index entries, or with a damaged index, is walked in such windows)
_TAIL_WINDOW = 64 * 1024
_TAIL_READ_MAX = 1024 * 1024


# ---- naming a bucket ---------------------------------------------------------------------

def parse_bucket_url(url: str) -> tuple[str, str, str]:
    """(scheme, bucket, key prefix) of `s3://bucket/prefix`. ConfigError naming `bucket`."""
    parts = urlsplit(str(url).strip())
    if parts.scheme not in _SCHEMES or not parts.netloc or parts.query or parts.fragment:
        raise ConfigError("bucket", url, "expected s3://<bucket>/<prefix> (or gs://, az://)")
    prefix = parts.path.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return parts.scheme, parts.netloc, prefix


def bucket_configs(url: str, settings: Mapping[str, str] | None = None,
                   broker_props: Mapping[str, str] | None = None) -> dict[str, str]:
    """The object-store tier's configuration (names without `rsm.config.`) for reading the
    bucket `url`: a broker file's `rsm.config.*` keys (its RSM prefix), then `settings` on
    top, then the URL's bucket and prefix."""
    scheme, bucket, prefix = parse_bucket_url(url)
    out: dict[str, str] = {}
    if broker_props:
        rsm_prefix = broker_props.get("remote.log.storage.manager.impl.prefix") or "rsm.config."
        out.update({k[len(rsm_prefix):]: v for k, v in broker_props.items()
                    if k.startswith(rsm_prefix)})
    out.update(settings or {})
    for key in ("storage.s3.bucket.name", "storage.gcs.bucket.name",
                "storage.azure.container.name"):
        out.pop(key, None)
    out["storage.backend.class"] = _SCHEMES[scheme]
    out[_BUCKET_KEYS[scheme]] = bucket
    out["key.prefix"] = prefix
    return out


# ---- listing -----------------------------------------------------------------------------

@dataclass(slots=True)
class SegmentObjects:
    """The objects of one segment the listing saw (their sizes; None: absent)."""

    start_offset: int
    segment_id: Uuid
    log_size: int | None = None
    indexes_size: int | None = None
    manifest_size: int | None = None

    def main_path(self, tip: TopicIdPartition) -> str:
        return (f"{tip.topic}-{tip.topic_id}/{tip.partition}/"
                f"{self.start_offset:020d}-{self.segment_id}")


@dataclass
class BucketListing:
    """Segments by partition (in offset order), and keys under the prefix that are not
    segment objects."""

    partitions: dict[TopicIdPartition, list[SegmentObjects]]
    unparsed_count: int = 0
    unparsed: list[str] = field(default_factory=list)

    def not_parsed(self, key: str) -> None:
        self.unparsed_count += 1
        if len(self.unparsed) < KEPT_UNPARSED:
            self.unparsed.append(key)

    def topics(self) -> dict[str, list[TopicIdPartition]]:
        out: dict[str, list[TopicIdPartition]] = {}
        for tip in self.partitions:
            out.setdefault(tip.topic, []).append(tip)
        return {t: sorted(v, key=lambda x: (x.partition, str(x.topic_id)))
                for t, v in sorted(out.items())}


# <topic>-<22-char topic id>/<partition>, and <20 digits>-<22-char segment id>.<suffix>:
# keys.parse_object_key's layout, split so that each partition's directory is parsed once
_DIR_RE = re.compile(r"(?P<topic>[^/]+)-(?P<topic_id>[A-Za-z0-9_-]{22})/"
                     r"(?P<partition>0|[1-9][0-9]{0,9})")
_NAME_RE = re.compile(r"(?P<offset>[0-9]{20})-(?P<segment_id>[A-Za-z0-9_-]{22})\."
                      r"(?P<suffix>log|indexes|rsm-manifest)")


def group_listing(keys: Iterable, prefix: str) -> BucketListing:
    """A BucketListing of `keys` (ObjectInfo-like: `.key`, `.size`), consumed lazily: memory
    grows with the segments (a few hundred bytes each), never with the listing's pages."""
    partitions: dict[TopicIdPartition, dict[str, SegmentObjects]] = {}
    dirs: dict[str, TopicIdPartition | None] = {}
    listing = BucketListing({})
    n = len(prefix)
    for info in keys:
        key = info.key
        directory, _, name = key[n:].rpartition("/")
        if not key.startswith(prefix):
            tip = None
        elif directory in dirs:
            tip = dirs[directory]
        else:
            tip = dirs[directory] = _partition_dir(directory)
        m = _NAME_RE.fullmatch(name) if tip is not None else None
        if tip is None or m is None or int(m["offset"]) > 2**63 - 1:
            listing.not_parsed(key)
            continue
        segs = partitions.setdefault(tip, {})
        stem = name[:43]  # offset-segment id
        seg = segs.get(stem)
        if seg is None:
            segment_id = _canonical_uuid(m["segment_id"])
            if segment_id is None:
                listing.not_parsed(key)
                continue
            seg = segs[stem] = SegmentObjects(int(m["offset"]), segment_id)
        suffix = m["suffix"]
        if suffix == LOG:
            seg.log_size = info.size
        elif suffix == INDEXES:
            seg.indexes_size = info.size
        else:
            seg.manifest_size = info.size
    listing.partitions = {
        tip: sorted(segs.values(), key=lambda s: (s.start_offset, str(s.segment_id)))
        for tip, segs in sorted(partitions.items(),
                                key=lambda kv: (kv[0].topic, kv[0].partition,
                                                str(kv[0].topic_id)))}
    return listing


def _partition_dir(directory: str) -> TopicIdPartition | None:
    m = _DIR_RE.fullmatch(directory)
    if m is None or int(m["partition"]) > 2**31 - 1:
        return None
    topic_id = _canonical_uuid(m["topic_id"])
    if topic_id is None:
        return None
    return TopicIdPartition(topic_id, m["topic"], int(m["partition"]))


def _canonical_uuid(text: str) -> Uuid | None:
    """The id a key names, when canonical: another spelling of it (base64 bits past the
    128th set) would make the reader build, and read, another key than the one listed."""
    try:
        parsed = Uuid.from_string(text)
    except ValueError:
        return None
    return parsed if str(parsed) == text else None


# ---- resolution --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Finding:
    """Something about a segment (or the offsets between segments) a reader or the scrubber
    reports: `kind`, the object key, the partition, the offsets [first, last] and why."""

    kind: str
    key: str | None
    partition: str
    first_offset: int | None
    last_offset: int | None
    detail: str

    def __str__(self):
        if self.first_offset is None:
            offsets = ""
        elif self.last_offset is None:
            offsets = f" from offset {self.first_offset}"
        else:
            offsets = f" offsets {self.first_offset}-{self.last_offset}"
        where = f" {self.key}" if self.key else ""
        return f"{self.partition}{offsets}: {self.kind}{where}: {self.detail}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "key": self.key, "partition": self.partition,
                "first_offset": self.first_offset, "last_offset": self.last_offset,
                "detail": self.detail}


@dataclass(frozen=True, slots=True)
class SegmentLink:
    """A kept segment and the offsets it is read for: [start_offset, end) (the planning's
    ChainLink shape)."""

    segment: RemoteLogSegmentMetadata
    end: int
    #: a log start offset inside the segment: the offsets below it are not read
    first: int = -1

    @property
    def start_offset(self) -> int:
        return max(self.segment.start_offset, self.first)


@dataclass
class PartitionView:
    """One partition as the bucket holds it: the kept segments in offset order (`chain`),
    what was skipped and why, and the offsets missing between kept segments."""

    tip: TopicIdPartition
    chain: list[SegmentLink]
    skipped: list[Finding]
    gaps: list[tuple[int, int]]
    epochs: list[EpochEntry]
    #: every segment with a manifest, as described (metadata, or why it cannot be read)
    described: list = field(default_factory=list, repr=False)

    @property
    def name(self) -> str:
        return f"{self.tip.topic}-{self.tip.partition}"

    @property
    def segments(self) -> list[RemoteLogSegmentMetadata]:
        return [link.segment for link in self.chain]

    def bounds(self) -> tuple[int, int] | None:
        """[earliest, latest) offsets held, None when nothing is."""
        if not self.chain:
            return None
        return self.chain[0].start_offset, self.chain[-1].end

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The gaps inside offsets [start, end), as (first, last) inclusive."""
        return [(max(a, start), min(b, end - 1)) for a, b in self.gaps
                if a < end and b >= start]

    @property
    def lost_tail(self) -> Finding | None:
        """A segment that cannot be read (or is half deleted) starting at or after the end of
        the kept ones: its offsets, and any after them, are lost at the partition's end."""
        bounds = self.bounds()
        tail = [f for f in self.skipped
                if f.kind in _LOST_KINDS and (bounds is None or f.first_offset >= bounds[1])]
        return min(tail, key=lambda f: f.first_offset) if tail else None

    @property
    def lost_head(self) -> Finding | None:
        """A segment that cannot be read (or that the metadata lists but the bucket lacks)
        below the first kept one: offsets lost at the partition's start (a half-deleted
        segment there is retention at work)."""
        bounds = self.bounds()
        head = [f for f in self.skipped if f.kind in _LOST_KINDS - {"incomplete-segment"}
                and bounds is not None and f.first_offset < bounds[0]]
        return min(head, key=lambda f: f.first_offset) if head else None

    def check_range(self, start: int, end: int, fail_on_data_loss: bool = True) -> None:
        """Raises RemoteDataLossError (with `fail_on_data_loss`; else logs a warning) when
        offsets [start, end) cross a gap, or start or end at a kept segment beyond which
        one cannot be read (lost_head, lost_tail)."""
        lost: list[tuple[int, int | None]] = list(self.missing(start, end))
        head = self.lost_head
        if head is not None and start <= self.chain[0].start_offset:
            lost.insert(0, (head.first_offset, self.chain[0].start_offset - 1))
        text = ", ".join(f"{a}-{b}" + "".join(
            f" ({f.key}: {f.detail})" for f in self.skipped
            if f.kind in _LOST_KINDS and f.first_offset is not None
            and a <= f.first_offset <= b) for a, b in lost)
        bounds = self.bounds()
        tail = self.lost_tail
        if tail is not None and (bounds is None or end >= bounds[1]):
            lost.append((tail.first_offset, None))
            text += (", " if text else "") + (f"from {tail.first_offset} on ({tail.key}: "
                                              f"{tail.detail})")
        if not lost:
            return
        message = (f"{self.name}: offsets {text} are in no readable segment of the bucket (a "
                   "segment deleted, damaged or never uploaded)")
        if fail_on_data_loss:
            raise RemoteDataLossError(
                message + "; set failOnDataLoss=false to read the records that exist",
                partition=self.name, missing=lost, offset=lost[0][0])
        log.warning("%s; reading the records that exist (failOnDataLoss=false)", message)


@dataclass(frozen=True, slots=True)
class Described:
    """A segment's objects and its metadata as read from them, or why they cannot be."""

    objects: SegmentObjects
    metadata: RemoteLogSegmentMetadata | None
    checkpoint: tuple[EpochEntry, ...] = ()
    error: str | None = None


class Bucket:
    """A bucket of the object-store tier read with no broker (see the module docstring).
    Thread-safe; `close` releases the store and caches."""

    def __init__(self, url: str, settings: Mapping[str, str] | None = None,
                 broker_props: Mapping[str, str] | None = None,
                 metadata: RemoteLogMetadataFiles | None = None):
        from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

        self.url = url
        self.metadata = metadata
        self.configs = bucket_configs(url, settings, broker_props)
        self.prefix = self.configs["key.prefix"]
        self.rsm = ObjectStorageRemoteStorageManager()
        self.rsm.configure(self.configs)
        self._lock = threading.Lock()
        self._listing: BucketListing | None = None
        self._views: dict[TopicIdPartition, PartitionView] = {}
        self._describe_pool: concurrent.futures.ThreadPoolExecutor | None = None

    def close(self) -> None:
        with self._lock:
            pool, self._describe_pool = self._describe_pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self.rsm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Bucket({self.rsm.store.url(self.prefix)})"

    @property
    def store(self):
        return self.rsm.store

    def key(self, tip: TopicIdPartition, seg: SegmentObjects, suffix: str) -> str:
        return f"{self.prefix}{seg.main_path(tip)}.{suffix}"

    # -- listing ----------------------------------------------------------------------

    def list_keys(self) -> Iterator:
        return self.store.list(self.prefix)

    def listing(self) -> BucketListing:
        """Every segment under the prefix (listed once per Bucket)."""
        with self._lock:
            if self._listing is None:
                self._listing = group_listing(self.list_keys(), self.prefix)
            return self._listing

    def refresh(self) -> None:
        """Forgets the listing and the resolved partitions: the next call lists the bucket
        again (a long-lived reader picking up the segments uploaded since)."""
        with self._lock:
            self._listing = None
            self._views.clear()

    def partitions(self, topic: str | None = None) -> dict[tuple[str, int], TopicIdPartition]:
        """(topic, partition) -> TopicIdPartition of the partitions the bucket holds. A topic
        with two topic ids (deleted and created again) is an error naming both: without the
        RLMM the bucket cannot tell which is live."""
        out: dict[tuple[str, int], TopicIdPartition] = {}
        for tip in self.listing().partitions:
            if topic is not None and tip.topic != topic:
                continue
            key = (tip.topic, tip.partition)
            if key in out and out[key].topic_id != tip.topic_id and self.metadata is not None:
                known = [t for t in (out[key], tip) if _live(self.metadata.cache(t))]
                if len(known) == 1:  # the metadata names the live one
                    out[key] = known[0]
                    continue
            if key in out and out[key].topic_id != tip.topic_id:
                raise ConfigError("bucket", self.url,
                                  f"topic {tip.topic!r} partition {tip.partition} has objects "
                                  f"under two topic ids ({out[key].topic_id} and "
                                  f"{tip.topic_id}): a topic deleted and created again; "
                                  "remove the old one's objects or read through the RLMM")
            out[key] = tip
        return dict(sorted(out.items()))

    # -- resolution -------------------------------------------------------------------

    def partition(self, tip: TopicIdPartition) -> PartitionView:
        """The partition's kept segments, skipped segments and gaps (cached)."""
        with self._lock:
            view = self._views.get(tip)
        if view is None:
            segments = self.listing().partitions.get(tip, [])
            view = (self._resolve(tip, segments) if self.metadata is None
                    else self._resolve_with_metadata(tip, segments))
            with self._lock:
                self._views.setdefault(tip, view)
        return view

    def resolve(self, tips: Iterable[TopicIdPartition]) -> None:
        """Resolves the partitions not resolved yet, RESOLVE_THREADS at once (their segments
        described on one pool of DESCRIBE_THREADS): a planner reading several partitions
        calls it first, and `partition` then answers from what it resolved."""
        with self._lock:
            todo = [t for t in dict.fromkeys(tips) if t not in self._views]
        if len(todo) <= 1:
            for tip in todo:
                self.partition(tip)
            return
        with concurrent.futures.ThreadPoolExecutor(
                min(RESOLVE_THREADS, len(todo)), thread_name_prefix="bucket-resolve") as pool:
            for _ in pool.map(self.partition, todo):
                pass

    def describe_all(self, tip: TopicIdPartition, segments: list[SegmentObjects]
                     ) -> list[Described]:
        """Every segment with a manifest, described (on the Bucket's pool of
        DESCRIBE_THREADS, shared by the partitions being resolved)."""
        counted = [s for s in segments if s.manifest_size is not None]
        if len(counted) <= 1:
            return [self.describe(tip, s) for s in counted]
        with self._lock:
            if self._describe_pool is None:
                self._describe_pool = concurrent.futures.ThreadPoolExecutor(
                    DESCRIBE_THREADS, thread_name_prefix="bucket-describe")
            pool = self._describe_pool
        return list(pool.map(lambda s: self.describe(tip, s), counted))

    def describe(self, tip: TopicIdPartition, seg: SegmentObjects) -> Described:
        """The segment's metadata from its objects, or the reason it cannot be read."""
        missing = [s for s, size in ((LOG, seg.log_size), (INDEXES, seg.indexes_size))
                   if size is None]
        if missing:
            return Described(seg, None, error=f"its manifest is there but not its "
                                               f".{' or .'.join(missing)} (a segment half "
                                               "deleted or half written)")
        try:
            return self._describe(tip, seg)
        except (KafkaEngineError, ValueError, OSError) as exc:
            if isinstance(exc, RemoteEncryptionKeyError) and exc.unknown_key:
                raise  # the reader's key ring lacks the pair: its fault, not the segment's
            return Described(seg, None, error=f"cannot be read: {exc}")

    def _describe(self, tip: TopicIdPartition, seg: SegmentObjects) -> Described:
        segment_id = RemoteLogSegmentId(tip, seg.segment_id)
        start = seg.start_offset

        def metadata(end, size, epochs, max_ts=-1):
            return RemoteLogSegmentMetadata(
                segment_id, start, end, max_ts, -1, 0, size, epochs,
                state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)

        probe = metadata(start, 0, {0: start})
        size = self.rsm.segment_size(probe)
        if size == 0:
            raise ValueError("the segment is empty (0 bytes in its manifest)")
        probe = metadata(start, size, {0: start})
        key = self.key(tip, seg, INDEXES)
        checkpoint = LeaderEpochCheckpointFile.decode_entries(
            index_bytes(self.rsm, probe, IndexType.LEADER_EPOCH), f"{key} (leader-epoch index)")
        offsets = increasing_prefix(OffsetIndex.from_buffer(
            index_bytes(self.rsm, probe, IndexType.OFFSET), start).entries_array())
        times = TimeIndex.from_buffer(index_bytes(self.rsm, probe, IndexType.TIMESTAMP),
                                      start).entries_array()
        position = int(offsets["position"][-1]) if len(offsets) else 0
        reader = RemoteSegmentReader(self.rsm, probe, once=True)
        last_offset, max_ts, last_epoch = -1, -1, -1
        while position < size:
            # the tail after the last index entry is usually one read of a few KB
            window = max(_TAIL_WINDOW, min(size - position, _TAIL_READ_MAX))
            headers, position = reader.scan_window(position, window)
            last_offset = int(headers["last_offset"][-1])
            max_ts = max(max_ts, int(headers["max_timestamp"].max()))
            last_epoch = int(headers["partition_leader_epoch"][-1])
        if last_offset < start:
            raise ValueError(f"its last batch ends at offset {last_offset}, before its start "
                             f"offset {start}")
        if len(times):
            max_ts = max(max_ts, int(times["timestamp"].max()))
        epochs = epoch_entries_in_range(checkpoint, start, last_offset + 1)
        own = {e.epoch: e.start_offset for e in epochs} or {max(last_epoch, 0): start}
        return Described(seg, metadata(last_offset, size, own, max_ts), tuple(checkpoint))

    def _resolve(self, tip: TopicIdPartition, segments: list[SegmentObjects]
                 ) -> PartitionView:
        name = f"{tip.topic}-{tip.partition}"
        skipped: list[Finding] = []
        good: list[Described] = []
        described = self.describe_all(tip, segments)
        for d in described:
            if d.metadata is None:
                skipped.append(Finding("unreadable-segment" if "cannot be read" in d.error
                                       else "incomplete-segment",
                                       self.key(tip, d.objects, MANIFEST), name,
                                       d.objects.start_offset, None, d.error))
            else:
                good.append(d)
        return self._kept_chain(tip, good, skipped, described)

    def _kept_chain(self, tip: TopicIdPartition, good: list[Described], skipped: list[Finding],
                   described: list, log_start_offset: int | None = None) -> PartitionView:
        """The view of described segments `good`: those of the latest leader's lineage (the
        tipmost segment's leader-epoch checkpoint), one per start offset, in a chain; what
        else is left out joins `skipped`.
        `log_start_offset` is where the first kept segment's offsets begin."""
        if not good:
            for f in skipped:
                log.warning("bucket %s: %s", self.url, f)
            return PartitionView(tip, [], skipped, [], [], described)
        lineage = _lineage(max(good, key=_tip_rank))
        kept = []
        for d in good:
            why = _outside(d.metadata, lineage)
            if why is None:
                kept.append(d)
            else:
                skipped.append(self._finding("outside-lineage", tip, d, why))
        by_start: dict[int, Described] = {}
        for d in sorted(kept, key=lambda d: (-d.metadata.end_offset, str(d.objects.segment_id))):
            first = by_start.setdefault(d.metadata.start_offset, d)
            if first is not d:
                skipped.append(self._finding(
                    "duplicate-segment", tip, d,
                    f"another upload of the segment at offset {d.metadata.start_offset} "
                    f"({first.objects.segment_id}) is kept"))
        chain: list[SegmentLink] = []
        gaps: list[tuple[int, int]] = []
        for start in sorted(by_start):
            d = by_start[start]
            md = d.metadata
            if chain:
                prev = chain[-1]
                if md.end_offset + 1 <= prev.end:
                    skipped.append(self._finding(
                        "covered-segment", tip, d,
                        f"segment {prev.segment.remote_log_segment_id.id} holds its offsets"))
                    continue
                if md.start_offset > prev.end:
                    gaps.append((prev.end, md.start_offset - 1))
                elif md.start_offset < prev.end:
                    chain[-1] = SegmentLink(prev.segment, md.start_offset, prev.first)
            chain.append(SegmentLink(md, md.end_offset + 1,
                                     -1 if chain or log_start_offset is None
                                     else log_start_offset))
        for f in skipped:
            log.log(logging.INFO if f.kind in _EXPECTED else logging.WARNING,
                    "bucket %s: %s", self.url, f)
        return PartitionView(tip, chain, skipped, gaps, list(lineage[0]), described)

    def _resolve_with_metadata(self, tip: TopicIdPartition, segments: list[SegmentObjects]
                               ) -> PartitionView:
        """As `_resolve`, but the segments are those the metadata lists COPY_SEGMENT_FINISHED
        (and still referenced, as Kafka's lookups see them) at or above the log start
        offset, described by the metadata; bucket segments it does not list are skipped."""
        name = f"{tip.topic}-{tip.partition}"
        cache = self.metadata.cache(tip)
        lso = self.metadata.log_start_offset(tip)
        objects = {s.segment_id: s for s in segments}
        skipped: list[Finding] = []
        good: list[Described] = []
        listed = [] if cache is None else cache.list_all_remote_log_segments()
        for md in listed:
            seg = objects.pop(md.remote_log_segment_id.id, None)
            why = _unread_why(cache, md, lso)
            if seg is None or None in (seg.manifest_size, seg.log_size, seg.indexes_size):
                if why is None:  # listed FINISHED and needed: its offsets are lost
                    skipped.append(Finding(
                        "missing-segment", None if seg is None else self.key(tip, seg, MANIFEST),
                        name, md.start_offset, md.end_offset,
                        f"segment {md.remote_log_segment_id.id} is COPY_SEGMENT_FINISHED in "
                        "the metadata but its objects are not all in the bucket"))
            elif why is not None:
                skipped.append(self._finding(why[0], tip, Described(seg, md), why[1]))
            else:
                good.append(Described(seg, md))
        for seg in objects.values():
            if seg.manifest_size is not None:
                skipped.append(Finding(
                    "not-in-metadata", self.key(tip, seg, MANIFEST), name, seg.start_offset,
                    None, f"the remote log metadata ({self.metadata}) does not list segment "
                          f"{seg.segment_id}"))
        if good:
            i = good.index(max(good, key=_tip_rank))
            good[i] = self._with_checkpoint(tip, good[i])
        return self._kept_chain(tip, good, skipped, good, lso)

    def _with_checkpoint(self, tip: TopicIdPartition, d: Described) -> Described:
        """`d` with its segment's leader-epoch index read."""
        key = self.key(tip, d.objects, INDEXES)
        checkpoint = LeaderEpochCheckpointFile.decode_entries(
            index_bytes(self.rsm, d.metadata, IndexType.LEADER_EPOCH),
            f"{key} (leader-epoch index)")
        return Described(d.objects, d.metadata, tuple(checkpoint), d.error)

    def _finding(self, kind, tip, d: Described, detail: str) -> Finding:
        md = d.metadata
        return Finding(kind, self.key(tip, d.objects, MANIFEST), f"{tip.topic}-{tip.partition}",
                       md.start_offset, md.end_offset, detail)

    # -- indexes ----------------------------------------------------------------------


def _unread_why(cache, md: RemoteLogSegmentMetadata, lso: int | None
                ) -> tuple[str, str] | None:
    """Why a segment the metadata lists is not read ((finding kind, detail)), None when it
    is: COPY_SEGMENT_FINISHED, ending at or above the log start offset, and still the one
    Kafka's lookups return for one of its epochs (not displaced by a later upload)."""
    if md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
        return "not-finished", f"its state in the metadata is {md.state.name}"
    if lso is not None and md.end_offset < lso:
        return "below-log-start-offset", f"it ends below the log start offset {lso}"
    if not any(cache.remote_log_segment_metadata(epoch, start) == md
               for epoch, start in md.leader_epochs):
        return ("displaced-segment", "a later upload of its offsets replaced it in the "
                                     "metadata")
    return None


def _live(cache) -> bool:
    """The metadata knows the partition and it is not being deleted."""
    return cache is not None and cache.partition_delete_state is None


def _tip_rank(d: Described):
    return d.metadata.last_epoch, d.metadata.end_offset, _neg_id(d)


def _neg_id(d: Described) -> str:
    # ties between equally ranked tips: the smaller segment id (so runs agree)
    return "".join(chr(0x10FFFF - ord(c)) for c in str(d.objects.segment_id))


def _lineage(tip: Described) -> tuple[list[EpochEntry], dict[int, tuple[int, int]]]:
    """The latest leader's epochs: its segment's checkpoint entries up to its end, and per
    epoch [first offset, end) (the last epoch ends after the segment)."""
    md = tip.metadata
    entries = epoch_entries_in_range(tip.checkpoint, -1, md.end_offset + 1) or [
        EpochEntry(e, o) for e, o in md.leader_epochs]
    spans = {}
    for i, e in enumerate(entries):
        end = entries[i + 1].start_offset if i + 1 < len(entries) else md.end_offset + 1
        spans[e.epoch] = (e.start_offset, end)
    return entries, spans


def _outside(md: RemoteLogSegmentMetadata, lineage) -> str | None:
    """Why `md` is not part of the latest leader's lineage, None when it is (Kafka's
    isRemoteSegmentWithinLeaderEpochs: every epoch of the segment in the lineage, each
    beginning where the lineage says, and the segment ending within its last epoch)."""
    entries, spans = lineage
    first = entries[0]
    if md.last_epoch < first.epoch and md.end_offset < first.start_offset:
        return None  # history older than the lineage recorded (its checkpoint was truncated)
    for i, (epoch, start) in enumerate(md.leader_epochs):
        span = spans.get(epoch)
        if span is None:
            return f"its leader epoch {epoch} is not in the latest leader's lineage"
        if i > 0 and start != span[0]:
            return (f"its epoch {epoch} begins at offset {start}, the latest leader's at "
                    f"{span[0]}")
        # the lineage's first entry may have been raised to a later log start offset
        low = span[0] if epoch != first.epoch else -1
        if not low <= start < span[1]:
            return (f"its epoch {epoch} holds offset {start}, outside that epoch's offsets "
                    f"{span[0]}-{span[1] - 1} in the latest leader's lineage")
    span = spans[md.last_epoch]
    if md.end_offset >= span[1]:
        return (f"it ends at offset {md.end_offset} in epoch {md.last_epoch}, which the "
                f"latest leader's lineage ends at {span[1] - 1} (a divergent copy of an "
                "earlier leader)")
    return None


def outside_lineage(metadata: RemoteLogSegmentMetadata, latest: RemoteLogSegmentMetadata,
                    checkpoint: Iterable[EpochEntry]) -> str | None:
    """Why `metadata` is not part of the lineage of `latest` (the latest leader's segment,
    with `checkpoint`, its leader-epoch index), None when it is: the rule the resolution
    applies, for segments listed by an RLMM."""
    tip = Described(SegmentObjects(latest.start_offset, latest.remote_log_segment_id.id),
                    latest, tuple(checkpoint))
    return _outside(metadata, _lineage(tip))
