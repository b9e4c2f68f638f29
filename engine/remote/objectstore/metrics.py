"""Metrics of the object-store tier under the Aiven plugin's names, through prometheus-client.

The plugin reports JMX sensors named like `object-upload-total`; Prometheus names cannot hold
`-`, so each becomes a counter with underscores (`object_upload`, exposed as
`object_upload_total`), the same convention as the RLM's KIP-956 sensors (engine/rlm/metrics.py).

- `object_upload`, `object_upload_bytes` (label `object_type`: log, indexes, rsm-manifest ...,
  the key's suffix): the plugin's remote-storage-manager metrics.
- `object_fetch`, `object_fetch_bytes`: ranged GETs issued and bytes they returned (the plugin
  has no per-object fetch sensor; these mirror the upload pair);
  `segment_fetch_requested_bytes`: original bytes asked of ranged reads (the plugin's).
- S3 request counts as the plugin's S3 backend names them: `get_object_requests`,
  `put_object_requests`, `create_multipart_upload_requests`, `upload_part_requests`,
  `complete_multipart_upload_requests`, `abort_multipart_upload_requests`,
  `delete_objects_requests`, `list_objects_requests`;
  and errors by kind: `throttling_errors` (503 SlowDown, 429), `server_errors` (other 5xx),
  `configured_timeout_errors`, `io_errors` (connection refused/reset, bodies cut short),
  `other_errors`.
- Caches, labelled `cache` (`chunk-cache`, `segment-manifest-cache`,
  `segment-indexes-cache`, the plugin's cache metric groups): `cache_hits`, `cache_misses`,
  `cache_eviction`, `cache_eviction_weight`, `cache_load_success`, `cache_load_failure`, and
  the gauge `cache_size_bytes`.

`ObjectStoreMetrics(registry)` registers into a given CollectorRegistry (the RLM's
`RLMMetrics.registry`, so one scrape sees both) or a registry of its own. Counters are
created once per registry; labelled children are cached, since `labels()` takes a lock and
builds a key on every call.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["ERROR_KINDS", "ObjectStoreMetrics", "StoreMetricsCollector"]

ERROR_KINDS = ("throttling", "server", "configured_timeout", "io", "other")

_REQUESTS = {
    "get_object_requests": "Ranged or whole-object GET requests issued",
    "put_object_requests": "Single-request PUTs issued",
    "create_multipart_upload_requests": "Multipart uploads started",
    "upload_part_requests": "Multipart upload parts sent",
    "complete_multipart_upload_requests": "Multipart uploads completed",
    "abort_multipart_upload_requests": "Multipart uploads aborted after a failure",
    "delete_objects_requests": "Batched delete requests issued",
    "list_objects_requests": "List pages requested",
}
_ERRORS = {f"{kind}_errors": f"Object-store calls that failed: {kind.replace('_', ' ')}"
           for kind in ERROR_KINDS}
_CACHE_COUNTERS = {
    "cache_hits": "Cache lookups answered from the cache",
    "cache_misses": "Cache lookups that went to storage",
    "cache_eviction": "Entries evicted",
    "cache_eviction_weight": "Bytes evicted",
    "cache_load_success": "Loads that filled the cache",
    "cache_load_failure": "Loads that failed (never cached)",
}


class ObjectStoreMetrics:
    """Every metric of one object-store tier. `value(name, **labels)` reads one back."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry(
            auto_describe=True)
        self._lock = threading.Lock()
        self._children: dict = {}
        r = self.registry
        self.object_upload = Counter("object_upload", "Objects uploaded", ["object_type"],
                                     registry=r)
        self.object_upload_bytes = Counter("object_upload_bytes", "Bytes uploaded",
                                           ["object_type"], registry=r)
        self.object_fetch = Counter("object_fetch", "Ranged GETs completed", registry=r)
        self.object_fetch_bytes = Counter("object_fetch_bytes", "Bytes fetched", registry=r)
        self.segment_fetch_requested_bytes = Counter(
            "segment_fetch_requested_bytes", "Original segment bytes asked of ranged reads",
            registry=r)
        self.requests = {n: Counter(n, d, registry=r) for n, d in _REQUESTS.items()}
        self.errors = {n: Counter(n, d, registry=r) for n, d in _ERRORS.items()}
        self.cache = {n: Counter(n, d, ["cache"], registry=r)
                      for n, d in _CACHE_COUNTERS.items()}
        self.cache_size = Gauge("cache_size_bytes", "Bytes held by the cache", ["cache"],
                                registry=r)

    def request(self, name: str, amount: int = 1) -> None:
        self.requests[name].inc(amount)

    def error(self, kind: str) -> None:
        self.errors[f"{kind}_errors"].inc()

    def uploaded(self, object_type: str, nbytes: int) -> None:
        self._child(self.object_upload, object_type).inc()
        self._child(self.object_upload_bytes, object_type).inc(nbytes)

    def fetched(self, nbytes: int) -> None:
        self.object_fetch.inc()
        self.object_fetch_bytes.inc(nbytes)

    def requested(self, nbytes: int) -> None:
        self.segment_fetch_requested_bytes.inc(nbytes)

    def cache_event(self, cache: str, name: str, amount: float = 1) -> None:
        self._child(self.cache[name], cache).inc(amount)

    def set_cache_size(self, cache: str, nbytes: int) -> None:
        self._child(self.cache_size, cache).set(nbytes)

    def _child(self, metric, label: str):
        key = (id(metric), label)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = metric.labels(label)
        return child

    def value(self, name: str, **labels) -> float | None:
        """Current value of a sample (a counter by its name without `_total`)."""
        for sample_name in (f"{name}_total", name):
            v = self.registry.get_sample_value(sample_name, labels or None)
            if v is not None:
                return v
        return None


class StoreMetricsCollector:
    """The metrics of an RSM's current store (its `_store`, which a reconfiguration
    replaces), for another registry (prometheus_client's custom-collector protocol:
    `collect`)."""

    def __init__(self, rsm):
        self._rsm = rsm

    def collect(self):
        store = self._rsm._store
        if store is None:
            return iter(())
        return store.metrics.registry.collect()
