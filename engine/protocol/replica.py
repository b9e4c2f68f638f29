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

A BucketReplica is the PartitionReader (engine.protocol.partition_reader) `serve --bucket`
answers with: Metadata lists the bucket's topics (their ids from the object keys) and
partitions; ListOffsets and Fetch answer from the bucket's segments and indexes. It has no
topic configs (DescribeConfigs is not served) and no local segments (ListOffsets v0 gives
the one offset the later versions give).

`refresh` lists the bucket again and resolves every partition; the partitions' states are
swapped in one assignment, so a read sees one listing whole. A segment described once is
not described again (its objects never change once its manifest exists). A partition whose
refresh fails keeps its previous state (the failure is logged).

Reads and ListOffsets are answered by each partition's remote log (engine.remote.remote_log,
the read model every reader shares) over the kept chain, its indexes searched in the
process's parsed-index cache over the RSM (which keeps the raw ones bounded by
`fetch.indexes.cache.size`; no index file is written) and its records read through the RSM
(its chunk cache and read-ahead, which goes on into the next kept segments;
`serving_settings` gives a replica both by default), cut where the next kept segment takes
over and at the last stable offset for read_committed. Kafka's answers for what the bucket
does not hold: an offset outside [log start, log end], in a gap between kept segments, or in
a segment deleted since the listing is OffsetOutOfRangeError, never other records.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from engine.common import Uuid
from engine.config import ConfigError
from engine.errors import (
    KafkaEngineError,
    OffsetOutOfRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    UnknownTopicOrPartitionError,
)
from engine.log.checkpoint import EpochEntry
from engine.log.transaction_index import AbortedTxn
from engine.protocol import errors as E
from engine.protocol.partition_reader import FetchPartitionData, cluster_id_of
from engine.remote.bucket import Bucket, Described, PartitionView, SegmentLink, SegmentObjects
from engine.remote.metadata import TopicIdPartition
from engine.remote.remote_log import ChainSegments, RemoteLog, StoreIndexes
from engine.remote.segment_access import NextPositions, describe_segment

__all__ = ["BucketReplica", "ReplicaPartition", "ReplicaRead", "open_replica",
           "serving_settings"]

log = logging.getLogger(__name__)

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
    """One partition as of the last refresh (immutable: a refresh makes a new one), and its
    remote log, which answers every read of it."""

    tip: TopicIdPartition
    chain: tuple[SegmentLink, ...]
    epochs: tuple[EpochEntry, ...]
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    log: RemoteLog = field(compare=False, repr=False)
    #: the epochs' start offsets, for bisection
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
        self.cluster_id = cluster_id_of([url])
        self._partitions: dict[tuple[str, int], ReplicaPartition] = {}
        self._refresh_lock = threading.Lock()
        self._next_positions = NextPositions()
        self._indexes = StoreIndexes(self.rsm)
        self._pool = concurrent.futures.ThreadPoolExecutor(READ_THREADS,
                                                           thread_name_prefix="bucket-read")
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
        segments = ChainSegments(f"{view.tip.topic}-{view.tip.partition}", chain,
                                 f"the bucket {self.url}", view.gaps)
        remote_log = RemoteLog(self.rsm, segments, self._indexes, self._next_positions)
        start, end = segments.bounds() or (0, 0)
        lso = remote_log.last_stable_offset(chain) if chain else end
        return ReplicaPartition(view.tip, chain, tuple(view.epochs), start, end, lso,
                                remote_log, tuple(e.start_offset for e in view.epochs))

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, partition in self._partitions:
            out.setdefault(topic, []).append(partition)
        return {t: sorted(ps) for t, ps in sorted(out.items())}

    def topic_id(self, topic: str) -> Uuid:
        """The topic's id in the object keys (`_listed_partitions` serves each topic under
        one)."""
        partitions = self.topics().get(topic)
        if not partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic}: the bucket {self.url} holds no such topic", topic=topic)
        return self.partition(topic, partitions[0]).tip.topic_id

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.partition(topic, partition).leader_epoch

    def log_offsets(self, topic: str, partition: int) -> ReplicaPartition | None:
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
        segments = part.log.segments
        start, end = part.log_start_offset, part.log_end_offset
        if not start <= offset <= end:
            raise segments.out_of_range(offset)
        limit = part.last_stable_offset if read_committed else end
        if offset >= limit:
            return ReplicaRead(part, b"", offset, [])
        try:
            result = part.log.read(offset, max_bytes, upto=limit)
            aborted = (part.log.aborted_transactions(result.link, offset,
                                                     result.next_offset)[0]
                       if read_committed else [])
        except RemoteResourceNotFoundError as exc:
            md = segments.link_for(offset).segment
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} of partition {part.name}: {describe_segment(md)} is "
                f"gone from the bucket {self.url} since it was listed ({exc})", offset=offset,
                log_start_offset=start, log_end_offset=end) from exc
        return ReplicaRead(part, result.records, result.next_offset, aborted)

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

    def fetch(self, requests, read_committed: bool) -> list[FetchPartitionData]:
        """`read_many`, as ReadBroker takes it: a remote read past its wait is no error
        and no records (null aborted transactions), with the partition's offsets now."""
        out = []
        for request, result in zip(requests, self.read_many(requests, read_committed)):
            if isinstance(result, Exception) and E.is_expired_remote_read(result):
                out.append(FetchPartitionData(offsets=self.log_offsets(*request[:2])))
            elif isinstance(result, Exception):
                out.append(FetchPartitionData(result))
            else:
                out.append(FetchPartitionData(None, result.records, result.partition,
                                              result.aborted_transactions))
        return out

    # -- ListOffsets ------------------------------------------------------------------

    def list_offset(self, topic: str, partition: int, spec: int,
                    read_committed: bool) -> tuple[int, int, int]:
        """(timestamp, offset, leader epoch) of one ListOffsets partition; (-1, -1, -1)
        when no record answers a timestamp. ValueError for a spec Kafka does not have."""
        part = self.partition(topic, partition)
        return part.log.list_offset(spec, part.chain, part.last_stable_offset,
                                    read_committed, part.leader_epoch, part.epoch_for)

    def legacy_offsets(self, topic: str, partition: int, timestamp: int, max_num: int,
                       from_consumer: bool) -> list[int]:
        """ListOffsets v0: a bucket has no local segments to list, so the one offset the
        later versions give, if any and `max_num` allows. None passes the high watermark
        (the log end offset), so a consumer's answer is the same."""
        _, offset, _ = self.list_offset(topic, partition, timestamp, False)
        return [offset] if offset >= 0 and max_num > 0 else []


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
    (naming the bucket) when the store's settings are bad or the store refuses the listing;
    a store that does not answer (unreachable, timing out, failing) is a failing tier, its
    RemoteStorageError raised as it is."""
    replica = BucketReplica(url, serving_settings(settings, broker_props, state_dir),
                            broker_props)
    try:
        replica.refresh()
    except ConfigError:
        replica.close()
        raise
    except RemoteStorageError as exc:
        replica.close()
        if exc.kind in RemoteStorageError.UNAVAILABLE_KINDS:
            raise
        raise ConfigError("bucket", url, f"cannot be listed: {exc}") from exc
    except (KafkaEngineError, OSError) as exc:
        replica.close()
        raise ConfigError("bucket", url, f"cannot be listed: {exc}") from exc
    return replica
