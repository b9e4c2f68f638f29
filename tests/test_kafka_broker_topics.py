"""Apache Kafka's tiered-storage topic scenarios on a real Kafka 4.x broker whose
RemoteStorageManager is the engine (see tests/test_kafka_broker_tiering.py): remote storage
enabled on a topic that already holds data, partitions added to a tiered topic later, and
copies disabled, enabled again, then remote storage disabled with its data deleted. The
first two end with every segment but the active one tiered and gone from the broker's disk, and a
Java consumer reading every partition from offset 0 gets exactly what was produced."""

from __future__ import annotations

import pytest
from kafka_tiered_support import (
    SEGMENT_BYTES,
    TIERED_TOPIC,
    consume,
    local_segments,
    offsets,
    produced_view,
    record_view,
    tiered_cluster,
    tiered_segments,
    topic_objects,
    wait_all_tiered,
    wait_until,
)

VALUE_SIZE = 10_000  # about a hundred records to a 1 MiB segment
OBJECTS = {"log", "indexes", "rsm-manifest"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory, s3_server):
    with tiered_cluster(tmp_path_factory.mktemp("kafka-topics"), s3_server) as cluster:
        yield cluster


def produce(broker, topic: str, count: int, seed: int, *args: str) -> list[dict]:
    produced = broker.run_client(
        ["produce", "--topic", topic, "--count", str(count), "--seed", str(seed),
         "--value-size", str(VALUE_SIZE), *args], timeout=240)
    assert len(produced) == count
    return produced


def assert_tiered_from_zero(broker, s3_server, topic: str, produced, partitions) -> None:
    """Every closed segment of every partition in the bucket from offset 0 with its three
    objects, the local logs start later, and a consumer from 0 reads what was produced."""
    active = wait_all_tiered(broker, topic, partitions)
    segments = tiered_segments(s3_server, broker.key_prefix, topic)
    assert all(s == OBJECTS for s in segments.values()), segments
    for p in partitions:
        starts = sorted(s for q, s in segments if q == p)
        assert len(starts) >= 2 and starts[0] == 0 and starts[-1] < active[p], (p, starts)
    got = offsets(broker, topic, partitions, "earliest", "earliest-local")
    for p in partitions:
        assert got[("earliest", p)] == 0 < got[("earliest-local", p)] == active[p]
    records = consume(broker, topic, partitions)
    want = produced_view(produced)
    assert len(records) == len(want)
    assert record_view(records) == want


def test_enabling_remote_storage_on_an_existing_topic(broker, s3_server):
    """Segments written before remote storage was enabled are tiered too, from offset 0."""
    topic = "enabled-later"
    broker.run_client(["create-topic", "--topic", topic, "--partitions", "2",
                       "--config", "remote.storage.enable=false",
                       "--config", f"segment.bytes={SEGMENT_BYTES}"])
    produced = produce(broker, topic, 600, 1)
    for p in (0, 1):
        assert len(local_segments(broker, topic, p)) >= 2
    assert offsets(broker, topic, [0, 1], "latest-tiered") == {
        ("latest-tiered", 0): -1, ("latest-tiered", 1): -1}
    assert not tiered_segments(s3_server, broker.key_prefix, topic)

    broker.run_client(["alter-config", "--topic", topic, "--set", "remote.storage.enable=true",
                       "--set", f"local.retention.bytes={TIERED_TOPIC['local.retention.bytes']}"])
    produced += produce(broker, topic, 400, 2)
    assert_tiered_from_zero(broker, s3_server, topic, produced, (0, 1))


def test_partitions_added_later_tier_and_read_back(broker, s3_server):
    topic = "expanded"
    words = [w for k, v in TIERED_TOPIC.items() for w in ("--config", f"{k}={v}")]
    broker.run_client(["create-topic", "--topic", topic, "--partitions", "1", *words])
    produced = produce(broker, topic, 300, 3, "--partition", "0")
    wait_all_tiered(broker, topic, [0])

    [added] = broker.run_client(["add-partitions", "--topic", topic, "--count", "3"])
    assert added["count"] == 3
    [desc] = broker.run_client(["describe-topic", "--topic", topic])
    assert sorted(p["partition"] for p in desc["partitions"]) == [0, 1, 2]
    for p, seed in ((1, 4), (2, 5), (0, 6)):
        produced += produce(broker, topic, 300, seed, "--partition", str(p))
    assert_tiered_from_zero(broker, s3_server, topic, produced, (0, 1, 2))


def test_copies_disabled_then_remote_storage_disabled_with_deletion(broker, s3_server):
    """remote.log.copy.disable: the tier still reads and new segments stay on the broker's
    disk; copies enabled again tier them; remote storage then disabled with
    remote.log.delete.on.disable: every object of the topic leaves the bucket, and the log
    starts where the broker's disk does, which still reads."""
    topic = "disabled"
    words = [w for k, v in TIERED_TOPIC.items() for w in ("--config", f"{k}={v}")]
    broker.run_client(["create-topic", "--topic", topic, *words])
    produced = produce(broker, topic, 300, 7)
    wait_all_tiered(broker, topic, [0])
    tiered_before = offsets(broker, topic, [0], "latest-tiered")

    # local retention must follow retention while copies are off (Kafka checks it)
    broker.run_client(["alter-config", "--topic", topic, "--set", "remote.log.copy.disable=true",
                       "--set", "local.retention.bytes=-2", "--set", "local.retention.ms=-2"])
    produced += produce(broker, topic, 300, 8)
    records = consume(broker, topic, [0])
    assert record_view(records) == produced_view(produced)
    assert len(local_segments(broker, topic, 0)) >= 3
    assert offsets(broker, topic, [0], "latest-tiered") == tiered_before

    broker.run_client(["alter-config", "--topic", topic, "--set", "remote.log.copy.disable=false",
                       "--set", "local.retention.bytes=1", "--delete", "local.retention.ms"])
    assert_tiered_from_zero(broker, s3_server, topic, produced, (0,))
    assert offsets(broker, topic, [0], "latest-tiered") != tiered_before

    broker.run_client(["alter-config", "--topic", topic, "--set", "remote.storage.enable=false",
                       "--set", "remote.log.delete.on.disable=true"])
    wait_until(f"every object of {topic} to leave the bucket",
               lambda: not topic_objects(s3_server, broker.key_prefix, topic))
    [active] = local_segments(broker, topic, 0)

    def local_start():
        got = offsets(broker, topic, [0], "earliest", "earliest-local")
        return got[("earliest", 0)] == got[("earliest-local", 0)] == active

    wait_until(f"the log of {topic} to start on the broker's disk, at {active}", local_start)
    records = consume(broker, topic, [0])
    assert record_view(records) == [r for r in produced_view(produced) if r[1] >= active]
