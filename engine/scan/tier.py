"""Driver-side access to the remote tier: the RLMM (read-only) for segment lists, the RSM
for indexes, both built from the engine's broker properties."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from engine.config import BrokerConfig, ConfigError
from engine.errors import UnknownTopicOrPartitionError
from engine.remote.metadata import RemotePartitionDeleteState, TopicIdPartition
from engine.remote.remote_log import ChainSegments, RemoteLog, StoreIndexes
from engine.scan.planning import ChainLink, lineage
from engine.scan.tier_options import TierOptions, parse_tier_options

__all__ = ["BucketTier", "Tier", "UnknownTopicError", "broker_config", "create_rsm",
           "open_tier", "tier_for_export"]


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
        self.indexes = StoreIndexes(self.rsm)

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

    # -- the read model (engine.remote.remote_log) ----------------------------------------

    def offset_entries(self, segment) -> np.ndarray:
        return self.indexes.offset_entries(segment)

    def remote_log(self, chain, topic: str = "", partition: int = 0) -> RemoteLog:
        """The read model over one partition's chain, its indexes this tier's."""
        return RemoteLog(self.rsm, ChainSegments(f"{topic}-{partition}", chain, self._where()),
                         self.indexes)


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
        self.indexes = StoreIndexes(self.rsm)

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
