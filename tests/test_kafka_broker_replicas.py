"""Replicas on a real 3-broker Kafka 4.1.1 cluster whose RemoteStorageManager is the engine:
a replica added to a partition whose early segments exist only in the tier builds its state
from the tier (the leader answers its fetch from offset 0 with OFFSET_MOVED_TO_TIERED_STORAGE;
the follower reads the leader-epoch checkpoint and producer snapshot through its own RSM, the
plugin), joins the ISR, and after a kill -9 of the old leader serves every old offset from
the tier as the new leader, each record equal to what the producer had acknowledged."""

from __future__ import annotations

import pytest
from kafka_tiered_support import (
    TIERED_TOPIC,
    consume,
    offsets,
    produced_view,
    record_view,
    tiered_cluster,
    wait_tiered,
    wait_until,
)

TOPIC = "moved"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    with tiered_cluster(tmp_path_factory.mktemp("kafka-3"), s3_server, brokers=3) as c:
        yield c


def describe(cluster, topic: str) -> dict:
    [d] = cluster.run_client(["describe-topic", "--topic", topic], timeout=90)
    return next(p for p in d["partitions"] if p["partition"] == 0)


def test_an_added_replica_builds_from_the_tier_and_serves_old_offsets_as_leader(cluster):
    configs = [w for k, v in TIERED_TOPIC.items() for w in ("--config", f"{k}={v}")]
    cluster.run_client(["create-topic", "--topic", TOPIC, "--partitions", "1",
                        "--replication-factor", "1", *configs])
    produced = cluster.run_client(
        ["produce", "--topic", TOPIC, "--count", "4000", "--seed", "21", "--value-size",
         "1000", "--transactional-id", "moved-tx", "--transaction-size", "50",
         "--abort-every", "5"], timeout=300)
    last = max(r["offset"] for r in produced)
    wait_tiered(cluster, TOPIC, [0], {0: last // 2})
    leader = describe(cluster, TOPIC)["leader"]
    follower = next(n for n in cluster.nodes if n != leader)
    # the new replica has nothing: everything below the leader's local start is in the tier
    cluster.run_client(["reassign", "--topic", TOPIC, "--partitions", "0", "--replicas",
                        f"{leader},{follower}"], timeout=90)
    wait_until("the added replica to join the ISR",
               lambda: set(describe(cluster, TOPIC)["isr"]) == {leader, follower},
               timeout=180, interval=1)
    node = cluster.node(follower)
    # the follower's local log starts above 0: what lies below came from the tier's
    # metadata and auxiliary state, not from replication
    local = sorted(p.name for p in (node.data_dir / f"{TOPIC}-0").glob("*.log"))
    assert local and int(local[0].split(".")[0]) > 0, local
    cluster.kill(leader)
    wait_until("the follower to lead", lambda: describe(cluster, TOPIC)["leader"] == follower,
               timeout=120, interval=1)
    got = offsets(cluster, TOPIC, [0], "earliest", "earliest-local", "latest-tiered")
    assert got[("earliest", 0)] == 0 and got[("earliest-local", 0)] > 0, got
    for isolation in ("read_committed", "read_uncommitted"):
        records = consume(cluster, TOPIC, [0], "--isolation", isolation)
        assert record_view(records) == produced_view(produced, isolation), isolation
