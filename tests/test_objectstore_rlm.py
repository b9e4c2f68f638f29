"""The object-store tier behind a RemoteLogManager, on a real S3 server (SeaweedFS,
tests/s3_server.py) configured as a broker file for the Aiven plugin would be: its metrics
are scraped from the RLM's metrics port, and a sequential remote read crosses segment
boundaries on read-ahead."""

from __future__ import annotations

import re
import urllib.request

import pytest
from test_tiered_scenarios import Broker, expected


def scrape(port: int) -> dict[str, float]:
    """The samples of a Prometheus text page: `name{labels}` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


@pytest.fixture
def broker(tmp_path, s3_server):
    extra = ("log.local.retention.bytes=1\n"
             "rsm.config.fetch.chunk.cache.class="
             "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
             "rsm.config.fetch.chunk.cache.size=-1\n")
    b = Broker(tmp_path, extra, s3_server=s3_server)
    yield b
    b.close()


def test_store_metrics_are_served_on_the_rlm_metrics_port(broker):
    broker.create("metered", remote_storage_enable=True)
    broker.produce("metered", batches=9, records=3)
    broker.tier()
    records, remote_reads = broker.consume("metered", offset=0)
    assert records == expected("metered", 0, 0, 27) and remote_reads
    port = broker.rlm.metrics.serve(0)
    samples = scrape(port)
    copied = len(broker.remote_segments("metered"))
    # the RLM's own metrics and the store's, in one scrape
    assert samples['RemoteCopyRequestsPerSec_total{topic="metered"}'] >= copied
    assert samples['object_upload_total{object_type="log"}'] == copied
    assert samples['object_upload_total{object_type="rsm-manifest"}'] == copied
    assert samples['object_upload_bytes_total{object_type="log"}'] > 0
    assert samples["get_object_requests_total"] >= 1
    assert samples["object_fetch_total"] >= 1 and samples["object_fetch_bytes_total"] > 0
    for kind in ("throttling", "server", "configured_timeout", "io", "other"):
        assert samples[f"{kind}_errors_total"] == 0
    assert samples['cache_misses_total{cache="chunk-cache"}'] >= 1
    assert samples['cache_load_success_total{cache="chunk-cache"}'] >= 1
    assert 'cache_hits_total{cache="segment-manifest-cache"}' in samples
    # the RLM's registry itself holds them (what `RLMMetrics.value` reads)
    assert broker.rlm.metrics.registry.get_sample_value(
        "object_upload_total", {"object_type": "log"}) == copied
