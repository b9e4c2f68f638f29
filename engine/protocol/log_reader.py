"""The PartitionReader (engine.protocol.partition_reader), with TopicConfigs, of a broker's
log dirs: every partition of the LogManager, read through the RemoteLogManager (its local
segments and the tier), as Kafka's ReplicaManager answers KafkaApis.

Kafka's answers kept here:
- a topic's id is the LogManager's (`LogManager.topic_id`: the one its partitions'
  `partition.metadata` record, also written to those that record none;
  InconsistentTopicIdError naming each partition when they disagree, so `serve` refuses to
  start as `run` does);
- the leader epoch is the last of the partition's leader-epoch cache (0 when it is empty);
- ListOffsets latest is the high watermark (the last stable offset for read_committed); max
  timestamp is answered from the local segments, with the offset of the record holding it;
  the other specs are the RLM's (`RemoteLogManager.list_offsets`), a timestamp's record
  read through it for its own timestamp;
- ListOffsets v0 lists the local segments only (Kafka's legacy path, `legacy_offsets`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from engine.common import Uuid
from engine.errors import UnknownTopicOrPartitionError
from engine.protocol import errors as E
from engine.protocol.partition_reader import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    FetchPartitionData,
    LogOffsets,
    cluster_id_of,
)
from engine.records import MemoryRecords

__all__ = ["LogReader"]



class LogReader:
    """The partitions of `log_manager`, read through `rlm` (a RemoteLogManager, or
    engine.cli._broker.LocalReads for a broker without a tier)."""

    def __init__(self, log_manager, rlm) -> None:
        self.log_manager = log_manager
        self.rlm = rlm
        self.cluster_id = cluster_id_of(log_manager.log_dirs)

    def _log(self, topic: str, partition: int):
        unified = self.log_manager.get_log(topic, partition)
        if unified is None:
            raise UnknownTopicOrPartitionError.no_log(topic, partition)
        return unified

    # -- topics and partitions -------------------------------------------------------------

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for tp in self.log_manager.partitions():  # sorted
            out.setdefault(tp.topic, []).append(tp.partition)
        return out

    def topic_id(self, topic: str) -> Uuid:
        return self.log_manager.topic_id(topic)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._leader_epoch(self._log(topic, partition))

    @staticmethod
    def _leader_epoch(unified) -> int:
        cache = unified.leader_epoch_cache
        epoch = cache.latest_epoch if cache is not None else None
        return 0 if epoch is None else epoch

    def log_offsets(self, topic: str, partition: int) -> LogOffsets | None:
        return self.log_manager.get_log(topic, partition)

    def topic_config(self, topic: str, partition: int):
        return self._log(topic, partition).config

    # -- Fetch -----------------------------------------------------------------------------

    def fetch(self, requests: Sequence[tuple[str, int, int, int]],
              read_committed: bool) -> list[FetchPartitionData]:
        """The RLM's `read_many` of `requests`; each partition's offsets are taken after its
        read (those of the log the records came from)."""
        if not requests:
            return []
        isolation = "read_committed" if read_committed else "read_uncommitted"
        out = []
        for result in self.rlm.read_many(requests, isolation=isolation):
            expired = result.error is not None and E.is_expired_remote_read(result.error)
            if result.error is not None and not expired:
                out.append(FetchPartitionData(result.error))
                continue
            try:
                unified = self.log_manager.get_log(result.topic, result.partition)
            except Exception as exc:  # noqa: BLE001 - an offline log dir fails its partitions
                out.append(FetchPartitionData(exc))
                continue
            # an expired read is Kafka's placeholder: no records and no aborted transactions
            # (null), as `serve --bucket` answers it
            out.append(FetchPartitionData(
                None, result.records, unified,
                None if expired else result.aborted_transactions,
                result.local_segment, result.local_position))
        return out

    # -- ListOffsets -----------------------------------------------------------------------

    def list_offset(self, topic: str, partition: int, spec: int,
                    read_committed: bool) -> tuple[int, int, int]:
        unified = self._log(topic, partition)
        if spec == LATEST:
            end = unified.last_stable_offset if read_committed else unified.high_watermark
            return -1, end, self._leader_epoch(unified)
        if spec == MAX_TIMESTAMP:
            ts, offset = self._max_timestamp(unified)
            epoch = unified.leader_epoch_cache.epoch_for_offset(offset) if offset >= 0 else None
            return ts, offset, -1 if epoch is None else epoch
        offset, epoch = self.rlm.list_offsets(topic, partition, spec)
        if spec >= 0 and offset >= 0:
            return self._timestamp_at(topic, partition, offset), offset, epoch
        return -1, offset, epoch

    def _timestamp_at(self, topic: str, partition: int, offset: int) -> int:
        """The timestamp of the record at `offset` (read through the RLM: local or remote)."""
        result = self.rlm.read(topic, partition, offset, 1, min_one_message=True)
        for batch in MemoryRecords(bytes(result.records)).batches():
            for record in batch:
                if record.offset >= offset:
                    return record.timestamp
        return -1

    @staticmethod
    def _max_timestamp(unified) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp in the local log
        (Kafka's MAX_TIMESTAMP is answered from local segments)."""
        best = None
        for seg in unified.segments:
            ts = seg.max_timestamp_so_far
            if ts >= 0 and (best is None or ts > best[0]):
                best = (ts, seg.shallow_offset_of_max_timestamp_so_far)
        if best is None:
            return -1, -1
        ts, shallow = best
        # the shallow offset is the batch's last: the record is the first one of that batch
        # holding the timestamp (Kafka answers the record's own offset)
        batches = MemoryRecords(bytes(unified.read(shallow, 1, True)[0])).batches()
        for batch in batches:
            for record in batch:
                if record.timestamp == ts:
                    return ts, record.offset
        return ts, shallow

    def legacy_offsets(self, topic: str, partition: int, timestamp: int, max_num: int,
                       from_consumer: bool) -> list[int]:
        """Kafka's ListOffsets v0 (legacyFetchOffsetsBefore), from the local segments only:
        each segment's base offset (at least the log start offset) with its `.log`
        modification time, then the log end offset (now) if the last segment holds data.
        Earliest picks the first of them, latest the last, a timestamp the last one modified
        at or before it; the answer is the picked one and those before it, at most
        `max_num`, highest first. For a consumer, offsets past the high watermark give way
        to the high watermark."""
        unified = self._log(topic, partition)
        segments = unified.segments
        start = unified.log_start_offset
        points = [(max(seg.base_offset, start), os.stat(seg.log_file).st_mtime_ns // 1_000_000)
                  for seg in segments]
        if segments[-1].size_in_bytes > 0:
            points.append((unified.log_end_offset, int(time.time() * 1000)))
        if timestamp == LATEST:
            picked = len(points) - 1
        elif timestamp == EARLIEST:
            picked = 0
        else:
            picked = max((i for i, (_, mtime) in enumerate(points) if mtime <= timestamp),
                         default=-1)
        count = max(0, min(max_num, picked + 1))
        offsets = [offset for offset, _ in points[picked + 1 - count:picked + 1]][::-1]
        if from_consumer:
            hw = unified.high_watermark
            if any(o > hw for o in offsets):
                offsets = [hw] + [o for o in offsets if o <= hw]
        return offsets
