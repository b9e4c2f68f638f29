"""Apache Kafka's tiered-storage scenarios on a real Kafka 4.x broker whose
RemoteStorageManager is the engine (the plugin jar, jep, the object-store tier in the Aiven
plugin's format on the test S3 server), produced and consumed with Kafka's Java client: every
record a consumer reads from the tier equals what the producer had acknowledged.

This module: offload and consume from the leader (every offset from 0 after the local
segments are gone, both isolation levels, aborted transactions across segments), and
ListOffsets on tiered offsets (earliest, latest, earliest-local, latest-tiered, max
timestamp, by timestamp)."""

from __future__ import annotations

import time

import pytest
from kafka_tiered_support import (
    TIERED_TOPIC,
    consume,
    offsets,
    produced_view,
    record_view,
    segment_keys,
    tiered_cluster,
    wait_tiered,
)

TOPIC = "offload"
PARTITIONS = (0, 1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, s3_server):
    with tiered_cluster(tmp_path_factory.mktemp("kafka-tiered"), s3_server) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def offloaded(broker):
    """Two partitions of about 3.5 MiB each: transactions of 100 records, every fourth
    aborted, so aborted transactions span segment boundaries; tiered and gone from the
    broker's disk below the active segment. Record timestamps lie half an hour ahead (within
    Kafka's log.message.timestamp.after.max.ms), above the markers' wall-clock timestamps, so
    the newest record is the max-timestamp answer."""
    configs = [w for k, v in TIERED_TOPIC.items() for w in ("--config", f"{k}={v}")]
    broker.run_client(["create-topic", "--topic", TOPIC, "--partitions", "2", *configs])
    produced = broker.run_client(
        ["produce", "--topic", TOPIC, "--count", "7000", "--seed", "11", "--value-size", "1000",
         "--transactional-id", "offload-tx", "--transaction-size", "100", "--abort-every", "4",
         "--timestamp-step", "10", "--base-timestamp", str(int(time.time() * 1000) + 1_800_000)],
        timeout=300)
    assert len(produced) == 7000
    last = {p: max(r["offset"] for r in produced if r["partition"] == p) for p in PARTITIONS}
    # every partition has at least two closed segments below its active one
    wait_tiered(broker, TOPIC, PARTITIONS, {p: last[p] // 2 for p in PARTITIONS})
    return produced


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_every_offset_from_zero_reads_from_the_tier(broker, offloaded, isolation):
    local = offsets(broker, TOPIC, PARTITIONS, "earliest-local", "earliest")
    for p in PARTITIONS:
        assert local[("earliest", p)] == 0
        assert local[("earliest-local", p)] > 0, "nothing left the broker's disk"
    got = consume(broker, TOPIC, PARTITIONS, "--isolation", isolation)
    want = produced_view(offloaded, isolation)
    assert len(got) == len(want)
    assert record_view(got) == want
    if isolation == "read_committed":
        assert len(want) < len(offloaded), "no transaction was aborted"


def test_a_consumer_starting_inside_a_tiered_segment(broker, offloaded):
    start = 1234
    got = consume(broker, TOPIC, [0], "--from", str(start), "--isolation", "read_committed")
    want = [r for r in produced_view(offloaded, "read_committed")
            if r[0] == 0 and r[1] >= start]
    assert record_view(got) == want


def test_the_bucket_holds_three_objects_per_tiered_segment(broker, offloaded, s3_server):
    segments = segment_keys(s3_server, broker.key_prefix, TOPIC)
    assert len(segments) >= 4
    assert all(s == {"log", "indexes", "rsm-manifest"} for s in segments.values()), segments


def test_list_offsets_on_tiered_offsets(broker, offloaded):
    got = offsets(broker, TOPIC, PARTITIONS, "earliest", "latest", "earliest-local",
                  "latest-tiered", "max-timestamp")
    for p in PARTITIONS:
        records = [r for r in offloaded if r["partition"] == p]
        assert got[("earliest", p)] == 0
        # the log end is past the last record (the last transaction's marker)
        assert got[("latest", p)] > max(r["offset"] for r in records)
        assert 0 < got[("earliest-local", p)] <= got[("latest-tiered", p)] + 1
        newest = max(records, key=lambda r: (r["timestamp"], -r["offset"]))
        assert got[("max-timestamp", p)] == newest["offset"]
    # by timestamp, inside the tier: the first offset whose timestamp is at or after it
    tiered_end = got[("latest-tiered", 0)]
    records = sorted((r for r in offloaded if r["partition"] == 0), key=lambda r: r["offset"])
    inside = [r for r in records if r["offset"] < tiered_end]
    for r in (inside[0], inside[len(inside) // 3], inside[-1]):
        want = next(x["offset"] for x in records if x["timestamp"] >= r["timestamp"])
        by_time = offsets(broker, TOPIC, [0], str(r["timestamp"]))
        assert by_time[(str(r["timestamp"]), 0)] == want
