"""Driver-side access to the remote tier: the RLMM (read-only) for segment lists, the RSM
for indexes, both built from the engine's broker properties."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from engine.config import BrokerConfig, ConfigError
from engine.errors import UnknownTopicOrPartitionError
from engine.log.offset_index import OffsetIndex
from engine.log.producer_state import decode_snapshot
from engine.log.time_index import TimeIndex
from engine.remote.metadata import RemotePartitionDeleteState, TopicIdPartition
from engine.remote.segment_access import (
    RemoteSegmentReader,
    aborted_txn_rows,
    find_offset_for_timestamp,
    index_bytes,
)
from engine.remote.storage import IndexType
from engine.scan.planning import ChainLink, lineage, position_for_offset, tier_bounds
from engine.scan.tier_options import TierOptions, parse_tier_options

__all__ = ["BucketTier", "Tier", "UnknownTopicError", "aborted_transactions", "broker_config",
           "create_rsm", "last_stable_offset", "open_tier", "tier_for_export"]


#: The name this module always had for a topic or partition the remote tier knows nothing of.
UnknownTopicError = UnknownTopicOrPartitionError


def broker_config(props: Mapping[str, str]) -> BrokerConfig:
    return BrokerConfig(dict(props))


def create_rsm(props: Mapping[str, str]):
    from engine.remote.factory import create_remote_storage_manager

    return create_remote_storage_manager(broker_config(props))


def _open_rlmm(config: BrokerConfig):
    """The engine's embedded RLMM opened read-only: a reader takes no lock and never
    writes, so a Spark driver can plan while the broker keeps tiering."""
    from engine.remote.embedded_rlmm import (
        METADATA_DIR_CONFIG,
        METADATA_DIR_NAME,
        EmbeddedRemoteLogMetadataManager,
    )

    key = "remote.log.metadata.manager.class.name"
    name = config[key]
    if name not in _EMBEDDED_RLMM_NAMES:
        raise ConfigError(key, name, "the kafka-tiered source lists segments through the "
                                     "engine's embedded metadata store only (leave it unset)")
    prefixed = config.with_prefix(config["remote.log.metadata.manager.impl.prefix"])
    if prefixed.get(METADATA_DIR_CONFIG):
        directory = Path(prefixed[METADATA_DIR_CONFIG])
    else:
        if not config.is_set("log.dirs") and not config.is_set("log.dir"):
            raise ConfigError("log.dirs", None, "required: the remote log metadata lives in "
                                                f"<first log dir>/{METADATA_DIR_NAME}")
        directory = Path(config.log_dirs[0]) / METADATA_DIR_NAME
    if not directory.is_dir():
        raise ConfigError("log.dirs", str(directory),
                          "holds no remote log metadata: nothing has been tiered with this "
                          "configuration")
    return EmbeddedRemoteLogMetadataManager.open_read_only(directory)


_EMBEDDED_RLMM_NAMES = (
    None,
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
    "engine.remote.embedded_rlmm.EmbeddedRemoteLogMetadataManager",
    "engine.remote.embedded_rlmm:EmbeddedRemoteLogMetadataManager",
)


def _increasing_prefix(entries: np.ndarray) -> np.ndarray:
    # a zero-filled preallocated tail would read as offset == base, position 0: stop there
    offsets = entries["offset"]
    bad = np.flatnonzero(np.diff(offsets) <= 0)
    return entries[: int(bad[0]) + 1] if len(bad) else entries


class Tier:
    """The remote tier as of now: opened per planning call, never pickled."""

    def __init__(self, props: Mapping[str, str]):
        self.props = dict(props)
        self.config = broker_config(self.props)
        self.rsm = create_rsm(self.props)
        try:
            self.rlmm = _open_rlmm(self.config)
        except BaseException:
            self.rsm.close()
            raise
        self._offset_entries: dict = {}

    def close(self) -> None:
        self.rlmm.close()
        self.rsm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- partitions -------------------------------------------------------------------

    def partitions(self) -> dict[tuple[str, int], TopicIdPartition]:
        """Live partitions by (topic, partition). A topic deleted and created again has
        several ids: the one whose deletion has not begun is used."""
        out: dict[tuple[str, int], TopicIdPartition] = {}
        for tip in self.rlmm.list_partitions():
            state = self.rlmm.partition_delete_state(tip)
            if state is not None and state >= RemotePartitionDeleteState.DELETE_PARTITION_MARKED:
                continue
            key = (tip.topic, tip.partition)
            if key in out and out[key].topic_id != tip.topic_id:
                raise UnknownTopicError(
                    f"topic {tip.topic!r} partition {tip.partition} has two live topic ids in "
                    f"the remote tier ({out[key].topic_id} and {tip.topic_id})")
            out[key] = tip
        return out

    def select(self, opts) -> list[tuple[str, int, TopicIdPartition]]:
        """The partitions the options name, in (topic, partition) order. Subscribed or
        assigned topics the tier does not hold raise UnknownTopicError; a pattern may match
        nothing."""
        known = self.partitions()
        topics = sorted({t for t, _ in known})
        if opts.subscribe is not None:
            missing = [t for t in opts.subscribe if t not in topics]
            if missing:
                raise UnknownTopicError(
                    f"unknown topic {', '.join(map(repr, missing))}: the remote tier "
                    f"({self._where()}) holds {topics or 'no topic'}")
        elif opts.assign is not None:
            missing = [tp for tp in opts.assign if tp not in known]
            if missing:
                raise UnknownTopicError(
                    "unknown partition " + ", ".join(f"{t}-{p}" for t, p in missing) +
                    f": the remote tier ({self._where()}) holds " +
                    (", ".join(f"{t}-{p}" for t, p in sorted(known)) or "nothing"))
        return [(t, p, tip) for (t, p), tip in sorted(known.items())
                if opts.selects_partition(t, p)]

    def _where(self) -> str:
        dirs = self.config.with_prefix(self.config["remote.log.storage.manager.impl.prefix"]
                                       ).get("dirs")
        return f"rsm.config.dirs={dirs}" if dirs else "as configured"

    def chain(self, tip: TopicIdPartition) -> list[ChainLink]:
        return lineage(self.rlmm.list_remote_log_segments(tip))

    def resolve(self, tips: Iterable[TopicIdPartition]) -> None:
        """Prepares the chains of `tips`, all wanted next (a tier that must work them out
        does them together); the RLMM has them at hand: nothing to do."""

    def chains(self, topic: str) -> dict[int, list[ChainLink]]:
        """partition -> chain of every partition of `topic` the tier holds."""
        tips = {p: tip for (t, p), tip in self.partitions().items() if t == topic}
        self.resolve(tips.values())
        return {p: self.chain(tip) for p, tip in tips.items()}

    # -- indexes ----------------------------------------------------------------------

    def offset_entries(self, segment) -> np.ndarray:
        key = segment.remote_log_segment_id
        entries = self._offset_entries.get(key)
        if entries is None:
            data = index_bytes(self.rsm, segment, IndexType.OFFSET)
            index = OffsetIndex.from_buffer(data, segment.start_offset)
            entries = self._offset_entries[key] = _increasing_prefix(index.entries_array())
        return entries

    def time_entries(self, segment) -> np.ndarray:
        data = index_bytes(self.rsm, segment, IndexType.TIMESTAMP)
        return TimeIndex.from_buffer(data, segment.start_offset).entries_array()

    def aborted_transactions(self, chain) -> list[tuple[int, int, int]]:
        return aborted_transactions(self.rsm, chain)

    def last_stable_offset(self, chain) -> int | None:
        return last_stable_offset(self.rsm, chain)

    # -- ListOffsets by timestamp ------------------------------------------------------

    def offset_for_timestamp(self, topic: str, partition: int, chain, timestamp: int
                             ) -> int | None:
        """The first offset whose record timestamp is at or after `timestamp` (Kafka's
        offsetsForTimes), searched through the remote time and offset indexes; None when no
        tiered record is that late."""
        for link in chain:
            seg = link.segment
            if seg.max_timestamp_ms < timestamp:
                continue
            times = self.time_entries(seg)
            i = int(np.searchsorted(times["timestamp"], timestamp, side="right")) - 1
            from_offset = max(link.start_offset, int(times["offset"][i]) if i >= 0 else 0)
            pos = 0 if from_offset == seg.start_offset else position_for_offset(
                self.offset_entries(seg), from_offset)
            found = find_offset_for_timestamp(RemoteSegmentReader(self.rsm, seg), pos,
                                              timestamp, link.start_offset, link.end)
            if found is not None:
                return found[0]
        return None


class BucketTier(Tier):
    """A bucket read with no broker (the `bucket` option): segments listed and resolved from
    the objects (engine.remote.bucket), or from the remote-log metadata files of
    `remoteLogMetadataPath` when given, indexes and records through the object-store RSM.
    Offsets missing between a partition's segments follow `failOnDataLoss`."""

    def __init__(self, opts: TierOptions):
        from engine.remote.bucket import Bucket
        from engine.remote.metadata_files import RemoteLogMetadataFiles

        self.props = dict(opts.broker_properties)
        self.config = broker_config(self.props)
        prefix = "rsm.config."
        metadata = (None if not opts.remote_log_metadata
                    else RemoteLogMetadataFiles(opts.remote_log_metadata))
        self.bucket = Bucket(opts.bucket, {k[len(prefix):]: v for k, v in self.props.items()
                                           if k.startswith(prefix)}, metadata=metadata)
        self.rsm = self.bucket.rsm
        self.fail_on_data_loss = opts.fail_on_data_loss
        self._offset_entries = {}

    def close(self) -> None:
        self.bucket.close()

    def partitions(self) -> dict[tuple[str, int], TopicIdPartition]:
        return self.bucket.partitions()

    def select(self, opts) -> list[tuple[str, int, TopicIdPartition]]:
        # every selected partition gets planned: resolve them together, not one by one
        selected = super().select(opts)
        self.resolve(tip for _, _, tip in selected)
        return selected

    def resolve(self, tips: Iterable[TopicIdPartition]) -> None:
        self.bucket.resolve(tips)

    def _where(self) -> str:
        return f"bucket {self.bucket.url}"

    def chain(self, tip: TopicIdPartition):
        view = self.bucket.partition(tip)
        # with no segment kept, the unreadable ones are the partition's lost data
        view.check_range(*(view.bounds() or (0, 0)), self.fail_on_data_loss)
        return view.chain


def aborted_transactions(rsm, chain) -> list[tuple[int, int, int]]:
    """(producer id, first offset, last offset) of every aborted transaction recorded in
    the transaction indexes of the chain's segments."""
    out: list[tuple[int, int, int]] = []
    for link in chain:
        rows = aborted_txn_rows(rsm, link.segment)
        out.extend((int(r["producer_id"]), int(r["first_offset"]), int(r["last_offset"]))
                   for r in rows)
    return out


def last_stable_offset(rsm, chain) -> int | None:
    """The tier's last stable offset: its end, or the first offset of a transaction still
    open at the end of the last tiered segment (its marker is not tiered yet, so whether it
    commits is not known here), from that segment's producer snapshot. A read_committed scan
    stops there, as a read_committed consumer stops at the LSO. An empty snapshot (a log that
    kept none) counts as no open transaction."""
    bounds = tier_bounds(chain)
    if bounds is None:
        return None
    last = chain[-1].segment
    data = index_bytes(rsm, last, IndexType.PRODUCER_SNAPSHOT)
    entries = decode_snapshot(data, file=f"producer snapshot of remote segment "
                                        f"{last.remote_log_segment_id.id}") if data else []
    firsts = [e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0]
    return max(bounds[0], min([bounds[1], *firsts]))


def open_tier(opts: TierOptions) -> Tier:
    """The remote tier the options name: a bucket alone, or the broker's (RLMM + RSM)."""
    if opts.bucket:
        return BucketTier(opts)
    return Tier(opts.broker_properties)


def tier_for_export(props: Mapping[str, str], config_path: str | None, topic: str,
                    bucket: str | None, store: Mapping[str, str] | None) -> Tier:
    """The tier an export reads: the broker's (`props`), or a bucket alone (the options
    the export's scans take, so both list the same segments)."""
    if bucket is None:
        return Tier(props)
    options = {"bucket": bucket, **(store or {})}
    if config_path is not None:
        options["config"] = config_path
    return open_tier(parse_tier_options(options))
