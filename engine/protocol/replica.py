"""A read-only replica of a bucket that a Kafka cluster wrote with the object-store tier (the
Aiven plugin's layout), as Redpanda's remote read replicas are: every partition answered from
the bucket alone, with no broker, no log dirs and no RLMM (engine.remote.bucket lists the
objects and resolves each partition's segments by leader-epoch lineage).

A partition's offsets, as Kafka's for a log whose local part is empty:
- log start offset: the start of the first kept segment; log end offset and high watermark:
  the end of the last one + 1; the local log start offset is the log end offset;
- last stable offset: the high watermark, or the first offset of a transaction still open at
  the end of the last segment (from its producer snapshot: whether it commits is not in the
  bucket yet), where a read_committed consumer stops;
- the leader epoch: the last epoch of the lineage.

`refresh` lists the bucket again and resolves every partition; the partitions' states are
swapped in one assignment, so a read sees one listing whole. A segment described once is
not described again (its objects never change once its manifest exists). A partition whose
refresh fails keeps its previous state (the failure is logged).

Reads (`read`): the kept segment holding the offset, the position from its remote offset
index (searched where the RSM keeps it: its in-memory indexes cache, bounded by
`fetch.indexes.cache.size`; no index file is written), batch headers walked from there, whole
batches up to `max_bytes` read through the RSM (its chunk cache and read-ahead, which goes on
into the next kept segment; `serving_settings` gives a replica both by default), checked as
a consumer with `check.crcs` checks them, cut where the next kept segment takes over
(overlapping uploads) and at the last stable offset for read_committed, whose aborted
transactions come from the remote transaction indexes. Kafka's answers for what the bucket
does not hold: an offset outside [log start, log end], in a gap between kept segments, or in
a segment deleted since the listing is OffsetOutOfRangeError, never other records.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import logging
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine.config import ConfigError
from engine.errors import (
    CorruptIndexError,
    CorruptRecordError,
    KafkaEngineError,
    OffsetOutOfRangeError,
    RemoteResourceNotFoundError,
    UnknownTopicOrPartitionError,
)
from engine.log.checkpoint import EpochEntry
from engine.log.offset_index import OffsetIndex
from engine.log.producer_state import decode_snapshot
from engine.log.time_index import TimeIndex
from engine.log.transaction_index import ABORTED_TXN_VERSION, AbortedTxn
from engine.records import MemoryRecords
from engine.remote.bucket import Bucket, Described, PartitionView, SegmentLink, SegmentObjects
from engine.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from engine.remote.segment_access import (
    WALK_WINDOW,
    NextPositions,
    RemoteSegmentReader,
    aborted_txn_rows,
    check_batches,
    describe_segment,
    find_offset_for_timestamp,
    index_bytes,
)
from engine.remote.storage import IndexType

__all__ = ["BucketReplica", "ReplicaPartition", "ReplicaRead", "open_replica",
           "serving_settings"]

log = logging.getLogger(__name__)

#: bytes past the walk window that the first header probe may need
_HEADER_PROBE = 64
#: ListOffsets specs (ListOffsetsRequest)
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
_NOT_FOUND = (-1, -1, -1)
#: the chunk cache and read-ahead of a replica whose settings name no chunk cache
CHUNK_CACHE_BYTES = 1 << 30
READ_AHEAD_BYTES = 4 << 20
#: the RSM's in-memory cache of segment indexes (where the replica's lookups are made) when
#: the settings do not size it
INDEXES_CACHE_BYTES = 128 << 20
#: partitions of one Fetch read at once
READ_THREADS = 8


@dataclass(frozen=True)
class ReplicaPartition:
    """One partition as of the last refresh (immutable: a refresh makes a new one)."""

    tip: TopicIdPartition
    chain: tuple[SegmentLink, ...]
    gaps: tuple[tuple[int, int], ...]
    epochs: tuple[EpochEntry, ...]
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    #: the chain's start offsets and the epochs', for bisection
    starts: tuple[int, ...] = ()
    epoch_starts: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.tip.topic}-{self.tip.partition}"

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def leader_epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else 0

    def epoch_for(self, offset: int) -> int:
        """The lineage's epoch holding `offset`, -1 when it is older than the lineage."""
        i = bisect.bisect_right(self.epoch_starts, offset) - 1
        return self.epochs[i].epoch if i >= 0 else -1

    def link_index(self, offset: int) -> int | None:
        """The index in `chain` of the kept segment that serves `offset`, None in a gap."""
        i = bisect.bisect_right(self.starts, offset) - 1
        return i if i >= 0 and offset < self.chain[i].end else None


@dataclass
class ReplicaRead:
    """One partition's answer to a read: whole batches (a view of the bytes read), the
    offset after them, and for read_committed the aborted transactions they overlap."""

    partition: ReplicaPartition
    records: memoryview | bytes
    next_offset: int
    aborted_transactions: list[AbortedTxn]


class _DescribedOnce(Bucket):
    """A Bucket that keeps what it described across refreshes: a segment's objects do not
    change once its manifest exists. Failures are described again (they may pass)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._described: dict[tuple, Described] = {}

    @staticmethod
    def _key(tip: TopicIdPartition, seg: SegmentObjects) -> tuple:
        return (tip, seg.start_offset, seg.segment_id, seg.log_size, seg.indexes_size,
                seg.manifest_size)

    def describe(self, tip: TopicIdPartition, seg: SegmentObjects) -> Described:
        key = self._key(tip, seg)
        found = self._described.get(key)
        if found is None:
            found = super().describe(tip, seg)
            if found.metadata is not None:
                self._described[key] = found
        return found

    def forget_unlisted(self) -> None:
        """Drops what was described of segments the current listing no longer has."""
        listed = {self._key(tip, seg) for tip, segs in self.listing().partitions.items()
                  for seg in segs}
        self._described = {k: v for k, v in self._described.items() if k in listed}


class BucketReplica:
    """The partitions of one bucket and reads of them (see the module docstring).
    Thread-safe: reads run on any thread, concurrently with a refresh."""

    def __init__(self, url: str, settings=None, broker_props=None) -> None:
        self.bucket = _DescribedOnce(url, settings, broker_props)
        self.rsm = self.bucket.rsm
        self.url = url
        self._partitions: dict[tuple[str, int], ReplicaPartition] = {}
        self._refresh_lock = threading.Lock()
        self._next_positions = NextPositions()
        self._pool = concurrent.futures.ThreadPoolExecutor(READ_THREADS,
                                                           thread_name_prefix="bucket-read")
        #: last segment id -> last stable offset from its producer snapshot
        self._lso: dict = {}
        #: what `_report` warned about already
        self._reported: set[str] = set()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.bucket.close()

    # -- partitions ---------------------------------------------------------------------

    def refresh(self) -> int:
        """Lists the bucket again; returns how many partitions it holds (stray objects
        skipped: `_listed_partitions`)."""
        with self._refresh_lock:
            self.bucket.refresh()
            tips = self._listed_partitions()
            old = self._partitions
            fresh: dict[tuple[str, int], ReplicaPartition] = {}
            for key, tip in tips.items():
                try:
                    fresh[key] = self._state(self.bucket.partition(tip))
                except (KafkaEngineError, ValueError, OSError) as exc:
                    log.warning("bucket %s: %s-%s not refreshed: %s", self.url, *key, exc)
                    if key in old:
                        fresh[key] = old[key]
            self._partitions = fresh
            self.bucket.forget_unlisted()
            lasts = {p.chain[-1].segment.remote_log_segment_id for p in fresh.values()
                     if p.chain}
            self._lso = {k: v for k, v in self._lso.items() if k in lasts}
            return len(fresh)

    def _listed_partitions(self) -> dict[tuple[str, int], TopicIdPartition]:
        """The bucket's partitions, what does not belong skipped and reported once: keys
        that are no segment's object, and a partition with objects under two topic ids
        (served under the id the topic's other partitions have, else not served), so one
        stray object never stops the others being served."""
        listing = self.bucket.listing()
        for name in listing.unparsed:
            self._report(name, "key %s is not a segment object: skipped", name)
        try:
            return self.bucket.partitions()
        except ConfigError:
            pass
        by_key: dict[tuple[str, int], list[TopicIdPartition]] = {}
        for tip in listing.partitions:
            by_key.setdefault((tip.topic, tip.partition), []).append(tip)
        clean = {(k[0], tips[0].topic_id) for k, tips in by_key.items() if len(tips) == 1}
        out = {}
        for key, tips in sorted(by_key.items()):
            live = [t for t in tips if (key[0], t.topic_id) in clean]
            if len(tips) == 1 or len(live) == 1:
                out[key] = live[0] if live else tips[0]
            ids = sorted(str(t.topic_id) for t in tips)
            if len(tips) > 1:
                self._report(f"{key}{ids}", "%s-%s has objects under topic ids %s: %s",
                             *key, ", ".join(ids),
                             f"serving {live[0].topic_id} (the topic's other partitions' id)"
                             if len(live) == 1 else "not served")
        return out

    def _report(self, what: str, message: str, *args) -> None:
        """A warning about the bucket's content, once per process for each `what`."""
        if what not in self._reported:
            self._reported.add(what)
            log.warning("bucket %s: " + message, self.url, *args)

    def _state(self, view: PartitionView) -> ReplicaPartition:
        chain = tuple(view.chain)
        bounds = view.bounds()
        start, end = bounds if bounds is not None else (0, 0)
        lso = self._last_stable_offset(chain[-1].segment, start, end) if chain else end
        return ReplicaPartition(view.tip, chain, tuple(view.gaps), tuple(view.epochs), start,
                                end, lso, tuple(link.start_offset for link in chain),
                                tuple(e.start_offset for e in view.epochs))

    def _last_stable_offset(self, last: RemoteLogSegmentMetadata, start: int, end: int) -> int:
        """`end`, or the first offset of a transaction the producer snapshot of the last
        segment says is still open (an empty snapshot: none is)."""
        key = last.remote_log_segment_id
        if key not in self._lso:
            data = index_bytes(self.rsm, last, IndexType.PRODUCER_SNAPSHOT)
            entries = decode_snapshot(data, file=f"producer snapshot of "
                                                 f"{describe_segment(last)}") if data else []
            firsts = [e.current_txn_first_offset for e in entries
                      if e.current_txn_first_offset >= 0]
            self._lso[key] = min([end, *firsts])
        return max(start, self._lso[key])

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, partition in self._partitions:
            out.setdefault(topic, []).append(partition)
        return {t: sorted(ps) for t, ps in sorted(out.items())}

    def get_log(self, topic: str, partition: int) -> ReplicaPartition | None:
        return self._partitions.get((topic, partition))

    def partition(self, topic: str, partition: int) -> ReplicaPartition:
        part = self._partitions.get((topic, partition))
        if part is None:
            raise UnknownTopicOrPartitionError(
                f"{topic}-{partition}: the bucket {self.url} holds no such partition")
        return part

    # -- Fetch ------------------------------------------------------------------------

    def read(self, topic: str, partition: int, offset: int, max_bytes: int,
             read_committed: bool) -> ReplicaRead:
        """Whole batches from `offset` (the first one whole even past `max_bytes`)."""
        part = self.partition(topic, partition)
        start, end = part.log_start_offset, part.log_end_offset
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} of partition {part.name} is out of range: valid "
                f"offsets are [{start}, {end}] (the bucket {self.url})", offset=offset,
                log_start_offset=start, log_end_offset=end)
        limit = part.last_stable_offset if read_committed else end
        if offset >= limit:
            return ReplicaRead(part, b"", offset, [])
        i = part.link_index(offset)
        if i is None:
            gap = next(((a, b) for a, b in part.gaps if a <= offset <= b), (offset, offset))
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} of partition {part.name} is in no segment of the "
                f"bucket {self.url}: offsets {gap[0]}-{gap[1]} are missing (a segment deleted, "
                "damaged or never uploaded)", offset=offset, log_start_offset=start,
                log_end_offset=end)
        md = part.chain[i].segment
        try:
            if self.rsm.reads_ahead:  # a consumer reads on, into the next kept segment
                after = part.chain[i + 1].segment if i + 1 < len(part.chain) else None
                self.rsm.read_forward(md, after)
            data, next_offset = self._read_segment(md, offset, max_bytes,
                                                   min(part.chain[i].end, limit))
            aborted = (self._aborted(part, i, offset, next_offset) if read_committed
                       else [])
        except RemoteResourceNotFoundError as exc:
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} of partition {part.name}: {describe_segment(md)} is "
                f"gone from the bucket {self.url} since it was listed ({exc})", offset=offset,
                log_start_offset=start, log_end_offset=end) from exc
        return ReplicaRead(part, data, next_offset, aborted)

    def read_many(self, requests, read_committed: bool) -> list:
        """`read` of each (topic, partition, offset, max_bytes), several at once on
        READ_THREADS threads (remote GETs of different partitions overlap): a ReplicaRead,
        or the exception of a partition that failed."""
        def one(request):
            try:
                return self.read(*request, read_committed)
            except Exception as exc:  # noqa: BLE001 - one partition fails alone
                return exc

        if len(requests) <= 1:
            return [one(r) for r in requests]
        return list(self._pool.map(one, requests))

    def _read_segment(self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                      upto: int) -> tuple[memoryview, int]:
        """(whole batches starting below `upto`, next offset) from `md`, which holds
        `offset` (< upto)."""
        reader = RemoteSegmentReader(self.rsm, md)
        start = self._start_position(md, offset)
        found = reader.find_batch(start, offset, min(max_bytes, WALK_WINDOW) + _HEADER_PROBE)
        if found is None:  # the objects say the segment holds `offset`: its bytes end early
            raise CorruptRecordError(
                f"{describe_segment(md)}: no batch ends at or after offset {offset} before "
                f"the .log ends at byte {reader.size}", position=reader.size, offset=offset)
        position, first_size, _ = found
        view = reader.read_exact(position, position + max(max_bytes, first_size))
        crc = not self.rsm.verifies_batch_crcs(md)
        headers, _ = _records.scan(view, crc)
        check_batches(headers, partial(describe_segment, md), first_offset=offset, crc=crc,
                      min_offset=md.start_offset, max_offset=md.end_offset, position=position)
        n = int(np.count_nonzero(headers["base_offset"] < upto))
        if not n:  # find_batch framed it whole: the bytes changed under the read
            raise CorruptRecordError(f"{describe_segment(md)}: no whole batch at byte "
                                     f"{position} on the second read", position=position,
                                     offset=offset)
        cut = int(headers["position"][n - 1]) + int(headers["size"][n - 1])
        next_offset = int(headers["last_offset"][n - 1]) + 1
        self._next_positions.ended(md, next_offset, position + cut)
        return view[:cut], next_offset

    def _start_position(self, md: RemoteLogSegmentMetadata, offset: int) -> int:
        """Where to walk from for `offset`: without the offset index for a consumer reading
        on (NextPositions: a segment id names one upload, so a position never outlives the
        bytes it was read from; the walk from it checks the offsets again), else the
        index's position."""
        known = self._next_positions.start(md, offset)
        return self._position(md, offset) if known is None else known

    def _aborted(self, part: ReplicaPartition, i: int, fetch_offset: int,
                 upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound): from the kept
        segment `i` on, until one search is complete (Kafka's remote read)."""
        out: list[AbortedTxn] = []
        for link in part.chain[i:]:
            rows = aborted_txn_rows(self.rsm, link.segment)
            # Kafka's collectAbortedTxns: entries in order, the search complete after the
            # first one whose last stable offset reaches the upper bound
            stops = np.flatnonzero(rows["last_stable_offset"] >= upper_bound)
            scanned = rows[: int(stops[0]) + 1] if len(stops) else rows
            version = (scanned["version"].astype(np.int32) >> 8).astype(np.int8)
            if len(scanned) and int(version.max()) > ABORTED_TXN_VERSION:
                raise CorruptIndexError(
                    f"{describe_segment(link.segment)}: its transaction index has an entry "
                    f"of version {int(version.max())}; the current version is "
                    f"{ABORTED_TXN_VERSION}")
            hits = scanned[(scanned["last_offset"] >= fetch_offset)
                           & (scanned["first_offset"] < upper_bound)]
            out.extend(AbortedTxn(int(r["producer_id"]), int(r["first_offset"]),
                                  int(r["last_offset"]), int(r["last_stable_offset"]))
                       for r in hits)
            if len(stops):
                break
        return out

    # -- indexes (the RSM's index cache: in memory, bounded by fetch.indexes.cache.size) --

    def _position(self, md: RemoteLogSegmentMetadata, offset: int) -> int:
        """The offset index's position for `offset` (Kafka's lookup: the entry at or below
        it, byte 0 below the first)."""
        data = index_bytes(self.rsm, md, IndexType.OFFSET)
        return OffsetIndex.from_buffer(data, md.start_offset).lookup(offset).position

    def _timestamp_position(self, md: RemoteLogSegmentMetadata, timestamp: int,
                            starting_offset: int) -> int:
        """Kafka's lookupTimestamp: the offset index's position for the larger of
        `starting_offset` and the time index's offset for `timestamp`."""
        data = index_bytes(self.rsm, md, IndexType.TIMESTAMP)
        found = TimeIndex.from_buffer(data, md.start_offset).lookup(timestamp).offset
        return self._position(md, max(starting_offset, found))

    # -- ListOffsets ------------------------------------------------------------------

    def list_offset(self, topic: str, partition: int, spec: int,
                    read_committed: bool) -> tuple[int, int, int]:
        """(timestamp, offset, leader epoch) of one ListOffsets partition; (-1, -1, -1)
        when no record answers a timestamp. ValueError for a spec Kafka does not have."""
        part = self.partition(topic, partition)
        start, end = part.log_start_offset, part.log_end_offset
        if spec == LATEST:
            return -1, part.last_stable_offset if read_committed else end, part.leader_epoch
        if spec == EARLIEST:
            return -1, start, part.epoch_for(start)
        if spec == EARLIEST_LOCAL:  # no local log: it starts where the log ends
            return -1, end, part.leader_epoch
        if spec == LATEST_TIERED:
            return (-1, end - 1, part.epoch_for(end - 1)) if end > start else _NOT_FOUND
        if spec == MAX_TIMESTAMP:
            top = max((link.segment.max_timestamp_ms for link in part.chain), default=-1)
            if top < 0:
                return _NOT_FOUND
            links = [link for link in part.chain if link.segment.max_timestamp_ms == top]
            found = self._offset_for_timestamp(links, top)
            return (top, found, part.epoch_for(found)) if found is not None else _NOT_FOUND
        if spec < 0:
            raise ValueError(f"offset spec {spec} is not supported")
        found = self._offset_for_timestamp(part.chain, spec)
        if found is None:
            return _NOT_FOUND
        return self._timestamp_at(part, found), found, part.epoch_for(found)

    def _offset_for_timestamp(self, links, timestamp: int) -> int | None:
        """The first offset of `links` whose record timestamp is at or after `timestamp`,
        positioned by each segment's remote time and offset indexes."""
        for link in links:
            md = link.segment
            if md.max_timestamp_ms < timestamp:
                continue
            position = self._timestamp_position(md, timestamp, link.start_offset)
            found = find_offset_for_timestamp(RemoteSegmentReader(self.rsm, md), position,
                                              timestamp, link.start_offset, link.end)
            if found is not None:
                return found[0]
        return None

    def _timestamp_at(self, part: ReplicaPartition, offset: int) -> int:
        result = self.read(part.tip.topic, part.tip.partition, offset, 1, False)
        for batch in MemoryRecords(bytes(result.records)).batches():
            for record in batch:
                if record.offset >= offset:
                    return record.timestamp
        return -1


def serving_settings(settings, broker_props, state_dir) -> dict[str, str]:
    """`settings`, with a chunk cache when neither they nor the broker file's `rsm.config.*`
    keys name one: the plugin's DiskChunkCache under `<state_dir>/chunk-cache`
    (CHUNK_CACHE_BYTES) with read-ahead (READ_AHEAD_BYTES), so that a consumer reading on
    finds the next chunks fetched and a re-read costs no GET; and an indexes cache of
    INDEXES_CACHE_BYTES unless they size it."""
    out = dict(settings or {})
    prefix = (broker_props or {}).get("remote.log.storage.manager.impl.prefix") or "rsm.config."
    named = set(out) | {k[len(prefix):] for k in broker_props or {} if k.startswith(prefix)}
    if "fetch.chunk.cache.class" not in named:
        out.update({"fetch.chunk.cache.class": "disk",
                    "fetch.chunk.cache.path": str(Path(state_dir) / "chunk-cache"),
                    "fetch.chunk.cache.size": str(CHUNK_CACHE_BYTES),
                    "fetch.chunk.cache.prefetch.max.size": str(READ_AHEAD_BYTES)})
    if "fetch.indexes.cache.size" not in named:
        out["fetch.indexes.cache.size"] = str(INDEXES_CACHE_BYTES)
    return out


def open_replica(url: str, settings, broker_props, state_dir) -> BucketReplica:
    """A BucketReplica (with `serving_settings`) with its first listing done: ConfigError
    (naming the bucket) when the store's settings are bad or the bucket cannot be listed."""
    replica = BucketReplica(url, serving_settings(settings, broker_props, state_dir),
                            broker_props)
    try:
        replica.refresh()
    except ConfigError:
        replica.close()
        raise
    except (KafkaEngineError, OSError) as exc:
        replica.close()
        raise ConfigError("bucket", url, f"cannot be listed: {exc}") from exc
    return replica
