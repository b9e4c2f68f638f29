"""The read APIs of `serve --bucket`: ReadBroker's answers (engine.protocol.broker), with
every partition from a BucketReplica (engine.protocol.replica) instead of log dirs and the
RLM. Metadata lists the bucket's topics (their ids from the object keys) and partitions, led
by this node at the lineage's last leader epoch; ListOffsets and Fetch answer from the
bucket's segments and indexes; the high watermark is the end of the last segment.

Kafka's Fetch budget is kept: a partition reads at most its `partition_max_bytes` and what is
left of the response's `max_bytes`; the first partition with data is returned whole even
past it. Partitions are read one after the other on the I/O thread serving the request.
DescribeConfigs is not served: the bucket holds no topic configs.
"""

from __future__ import annotations

import logging

from engine.protocol import errors as E
from engine.protocol.broker import ReadBroker, cluster_id_of, whole_batches
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
        for topic in self.replica.topics():
            part = self.replica.partition(topic, self.replica.topics()[topic][0])
            ids[topic] = bytes(part.tip.topic_id)
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
        responses = []
        total = 0
        for head, name, parts in targets:
            rows = []
            for p in parts:
                row = {"partition_index": p["partition"], "error_code": E.NONE,
                       "high_watermark": -1, "last_stable_offset": -1,
                       "log_start_offset": -1, "aborted_transactions": None,
                       "preferred_read_replica": -1, "records": b""}
                rows.append(row)
                if not isinstance(name, str):
                    row["error_code"] = E.UNKNOWN_TOPIC_ID if name is None else name
                    continue
                total += self._fetch_partition(row, name, p, max_bytes, total,
                                               read_committed)
            responses.append({**head, "partitions": rows})
        return responses, total

    def _fetch_partition(self, row: dict, name: str, p: dict, max_bytes: int, total: int,
                         read_committed: bool) -> int:
        """Fills one partition's row; returns its record bytes."""
        budget = max(0, p["partition_max_bytes"])
        if total:
            budget = min(budget, max(0, max_bytes - total))
        try:
            if total and not budget:  # the response is full: no read, only the offsets
                self._fill_offsets(row, self.replica.partition(name, p["partition"]))
                return 0
            result = self.replica.read(name, p["partition"], p["fetch_offset"], budget,
                                       read_committed)
        except Exception as exc:  # noqa: BLE001 - one partition fails alone
            row["error_code"] = E.error_code(exc)
            if row["error_code"] == E.UNKNOWN_SERVER_ERROR:
                log.warning("Fetch %s-%s at %s failed: %s", name, p["partition"],
                            p["fetch_offset"], exc)
            else:
                log.info("Fetch %s-%s at %s: %s", name, p["partition"], p["fetch_offset"], exc)
            return 0
        self._fill_offsets(row, result.partition)
        view = memoryview(result.records)
        if total and view.nbytes > budget:
            view = whole_batches(view, budget)
        row["records"] = view
        if read_committed:
            row["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in result.aborted_transactions] if view.nbytes else []
        return view.nbytes

    @staticmethod
    def _fill_offsets(row: dict, part) -> None:
        row["high_watermark"] = part.high_watermark
        row["last_stable_offset"] = part.last_stable_offset
        row["log_start_offset"] = part.log_start_offset
