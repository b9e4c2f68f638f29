"""The RemoteLogManager's metrics under Kafka's names (BrokerTopicMetrics and
RemoteStorageMetrics, kafka.server:type=BrokerTopicMetrics), through
prometheus-client, in a registry of their own per RemoteLogManager.

Kafka's meters (`...PerSec`: a count and rates) are Prometheus counters here (exposed as
`<name>_total`; the scraper derives the rate), labelled by `topic`. Kafka's per-partition
gauges carry `topic` and `partition` labels. Pool and quota metrics are unlabelled gauges:
`RemoteLogReaderTaskQueueSize`, `RemoteLogReaderAvgIdlePercent`,
`RemoteLogManagerTasksAvgIdlePercent` (copier pool), and the KIP-956 throttle-time sensors
`remote-copy-throttle-time-avg/-max` and `remote-fetch-throttle-time-avg/-max` (named with
underscores, as Prometheus requires). `RemoteLogReaderFetchRateAndTimeMs` is a histogram of
remote read times in ms. One partition gauge is the engine's own:
`RemoteCopyCorruptSegments`, 1 while the partition's copying is stopped at a local segment
found damaged before tiering (engine.rlm.copier), 0 once it is copied. So is one meter:
`LocalRetentionErrorsPerSec`, failed local retention runs (the partition's status gives the
last error as `last_local_retention_error`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from engine.rlm.pools import RemoteLogReaderPool
    from engine.rlm.quota import ThrottleTimeSensor

__all__ = ["RLMMetrics", "register_gauges"]

_METERS = {
    "RemoteCopyBytesPerSec": "Bytes copied to remote storage",
    "RemoteFetchBytesPerSec": "Bytes read from remote storage",
    "RemoteCopyRequestsPerSec": "Segment copy attempts",
    "RemoteFetchRequestsPerSec": "Remote reads",
    "RemoteCopyErrorsPerSec": "Failed segment copies",
    "RemoteFetchErrorsPerSec": "Failed remote reads",
    "RemoteDeleteRequestsPerSec": "Remote segment deletes",
    "RemoteDeleteErrorsPerSec": "Failed remote segment deletes",
    "BuildRemoteLogAuxStateRequestsPerSec": "Follower states built from remote storage",
    "BuildRemoteLogAuxStateErrorsPerSec": "Failed builds of a follower state from remote "
                                          "storage",
    # engine extension: local retention runs after each copy run, and can fail on its own
    "LocalRetentionErrorsPerSec": "Failed local retention runs of tiered partitions",
}
_PARTITION_GAUGES = {
    "RemoteCopyLagBytes": "Bytes of local inactive segments not yet copied",
    "RemoteCopyLagSegments": "Local inactive segments not yet copied",
    "RemoteDeleteLagBytes": "Bytes of remote segments due for deletion, not yet deleted",
    "RemoteDeleteLagSegments": "Remote segments due for deletion, not yet deleted",
    "RemoteLogMetadataCount": "Remote segment metadata entries of the partition",
    "RemoteLogSizeBytes": "Bytes of the partition's remote segments",
    "RemoteLogSizeComputationTime": "ms spent computing the remote size for retention",
    # engine extension: 1 while copying of the partition is stopped at a damaged segment
    "RemoteCopyCorruptSegments": "Local segments refused for tiering as damaged (copying "
                                 "of the partition stops there)",
}


class RLMMetrics:
    """All metrics of one RemoteLogManager. `value(name, **labels)` reads one back."""

    def __init__(self):
        self._meter_children: dict = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.meters = {name: Counter(name, doc, ["topic"], registry=self.registry)
                       for name, doc in _METERS.items()}
        self.gauges = {name: Gauge(name, doc, ["topic", "partition"], registry=self.registry)
                       for name, doc in _PARTITION_GAUGES.items()}
        self.fetch_time = Histogram(
            "RemoteLogReaderFetchRateAndTimeMs", "Remote read time in ms",
            registry=self.registry,
            buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000))
        self._server = None

    def mark(self, name: str, topic: str, amount: float = 1) -> None:
        # labelled children are cached: `labels()` takes a lock and builds a key per call,
        # a cost every remote read pays several times
        child = self._meter_children.get((name, topic))
        if child is None:
            child = self._meter_children[(name, topic)] = self.meters[name].labels(topic=topic)
        child.inc(amount)

    def set_gauge(self, name: str, topic: str, partition: int, value: float) -> None:
        self.gauges[name].labels(topic=topic, partition=str(partition)).set(value)

    def remove_partition(self, topic: str, partition: int) -> None:
        for gauge in self.gauges.values():
            try:
                gauge.remove(topic, str(partition))
            except KeyError:
                pass

    def gauge_function(self, name: str, doc: str, fn) -> None:
        """An unlabelled gauge whose value is `fn()` at collection."""
        Gauge(name, doc, registry=self.registry).set_function(fn)

    def value(self, name: str, **labels) -> float | None:
        """Current value of a metric (a meter by its Kafka name), None if never set."""
        labels = {k: str(v) for k, v in labels.items()}
        if name in self.meters:
            return self.registry.get_sample_value(f"{name}_total", labels)
        return self.registry.get_sample_value(name, labels)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serves the registry over HTTP (Prometheus text format); returns the port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def register_gauges(metrics: RLMMetrics, *, reader_pool: RemoteLogReaderPool,
                    copier_idle_percent: Callable[[], float],
                    offline_log_dirs: Callable[[], int],
                    offline_partitions: Callable[[], int],
                    copy_quota_sensor: ThrottleTimeSensor,
                    fetch_quota_sensor: ThrottleTimeSensor) -> None:
    """The RemoteLogManager's unlabelled gauges, each read at collection: the reader and
    copier pools, the offline log dirs and partitions, and the quota throttle sensors.

    Args:
        copier_idle_percent: idle share of the copier threads (100 before they start).
        offline_log_dirs: log dirs taken offline by an I/O error.
        offline_partitions: tiered partitions whose remote log metadata cannot be served.
    """
    m = metrics
    m.gauge_function("RemoteLogReaderTaskQueueSize", "Remote reads waiting for a thread",
                     reader_pool.queue_size)
    m.gauge_function("RemoteLogReaderAvgIdlePercent", "Idle share of the reader threads",
                     reader_pool.busy.idle_percent)
    m.gauge_function("RemoteLogManagerTasksAvgIdlePercent", "Idle share of the copier threads",
                     copier_idle_percent)
    m.gauge_function("OfflineLogDirectoryCount",  # Kafka's LogManager gauge
                     "Log dirs taken offline by an I/O error (a failed local retention run "
                     "among them)", offline_log_dirs)
    m.gauge_function("RemoteLogOfflinePartitionsCount",
                     "Tiered partitions whose remote log metadata cannot be served",
                     offline_partitions)
    for kind, sensor in (("copy", copy_quota_sensor), ("fetch", fetch_quota_sensor)):
        m.gauge_function(f"remote_{kind}_throttle_time_avg",
                         f"{kind.capitalize()} quota throttle ms, avg", sensor.avg)
        m.gauge_function(f"remote_{kind}_throttle_time_max",
                         f"{kind.capitalize()} quota throttle ms, max", sensor.max)
