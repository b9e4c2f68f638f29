"""The read APIs of `serve --bucket`: ReadBroker's answers (engine.protocol.broker), with
every partition from a BucketReplica (engine.protocol.replica) instead of log dirs and the
RLM. Metadata lists the bucket's topics (their ids from the object keys) and partitions, led
by this node at the lineage's last leader epoch; ListOffsets and Fetch answer from the
bucket's segments and indexes; the high watermark is the end of the last segment.

Kafka's Fetch limits are kept as ReadBroker keeps them (KIP-74: a partition reads at most
min(its `partition_max_bytes`, the response bytes left), only the first batch of the response
may pass `max_bytes`), and so is its answer to a remote read past its wait (no error, no
records). The partitions of a request are read at once (BucketReplica.read_many).
DescribeConfigs is not served: the bucket holds no topic configs.
"""

from __future__ import annotations

import logging

from engine.protocol import errors as E
from engine.protocol.broker import ReadBroker, cluster_id_of
from engine.protocol.replica import BucketReplica

__all__ = ["BucketBroker"]

log = logging.getLogger(__name__)


class BucketBroker(ReadBroker):
    """One broker leading every partition of a bucket (see the module docstring)."""

    describes_configs = False

    def __init__(self, replica: BucketReplica) -> None:
        self.replica = replica
        self.log_manager = replica  # what `get_log` is asked of (groups: known partitions)
        self.rlm = None
        self.cluster_id = cluster_id_of([replica.url])
        self.topic_ids: dict[str, bytes] = {}
        self.topics_by_id: dict[bytes, str] = {}
        self.refresh_topics()

    def refresh(self) -> int:
        """Lists the bucket again (BucketReplica.refresh) and takes its topic ids."""
        count = self.replica.refresh()
        self.refresh_topics()
        return count

    def refresh_topics(self) -> None:
        ids = {}
        for topic, partitions in self.replica.topics().items():
            ids[topic] = bytes(self.replica.partition(topic, partitions[0]).tip.topic_id)
        self.topic_ids = ids
        self.topics_by_id = {v: k for k, v in ids.items()}

    def partitions_of(self, topic: str) -> list[int]:
        return self.replica.topics().get(topic, [])

    def topics(self) -> list[str]:
        return list(self.replica.topics())

    def leader_epoch_of(self, topic: str, partition: int) -> int:
        return self.replica.partition(topic, partition).leader_epoch

    def _list_offset(self, topic: str, partition: int, spec: int,
                     read_committed: bool) -> tuple[int, int, int]:
        return self.replica.list_offset(topic, partition, spec, read_committed)

    def legacy_offsets(self, topic: str, partition: int, timestamp: int, max_num: int,
                       client: bool) -> list[int]:
        """ListOffsets v0: a bucket has no local segments to list, so the one offset the
        later versions give (as a consumer sees it), if any and `max_num` allows."""
        _, offset, _ = self._fetchable(topic, partition, timestamp, self._list_offset(
            topic, partition, timestamp, False), False, client)
        return [offset] if offset >= 0 and max_num > 0 else []

    def end_offsets(self, targets, read_committed: bool) -> list:
        ends = []
        for _, name, parts in targets:
            for p in parts:
                part = (self.replica.get_log(name, p["partition"]) if isinstance(name, str)
                        else None)
                ends.append(None if part is None else (
                    part.last_stable_offset if read_committed else part.high_watermark))
        return ends

    def fetch_once(self, targets, max_bytes: int, read_committed: bool,
                   version: int, file_regions: bool = False) -> tuple[list, int]:
        """One pass over the requested partitions: (responses, record bytes). Records are
        views of the chunks read (`file_regions` has no effect: nothing is a local file)."""
        responses, requests, slots = self.fetch_requests(targets, max_bytes)
        total = 0
        for (row, _), request, result in zip(slots, requests,
                                             self.replica.read_many(requests, read_committed)):
            if isinstance(result, Exception) and E.is_expired_remote_read(result):
                # no error, no records: the consumer fetches again
                part = self.replica.get_log(*request[:2])
                if part is None:  # gone with a refresh since the read began
                    row["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    self._fill_offsets(row, part)
                continue
            if isinstance(result, Exception):
                row["error_code"] = E.error_code(result)
                log.log(logging.WARNING if row["error_code"] == E.UNKNOWN_SERVER_ERROR
                        else logging.INFO, "Fetch %s-%s at %s: %s", *request[:3], result)
                continue
            self._fill_offsets(row, result.partition)
            total = self.add_records(row, result.records, result.aborted_transactions,
                                     total, min(request[3], max_bytes - total),
                                     read_committed)
        return responses, total

    @staticmethod
    def _fill_offsets(row: dict, part) -> None:
        row["high_watermark"] = part.high_watermark
        row["last_stable_offset"] = part.last_stable_offset
        row["log_start_offset"] = part.log_start_offset
