"""Apache Kafka's tiered-storage deletion scenarios on a real Kafka 4.x broker whose
RemoteStorageManager is the engine (see tests/test_kafka_broker_tiering.py): segments leave
the tier by retention time (retention.ms), by retention size (retention.bytes) and by a log
start offset breach (DeleteRecords), and every object of a deleted topic leaves the bucket.

Each scenario tiers every closed segment of its own topic first, then changes one thing:
the objects of exactly the segments Kafka's rules delete are gone from the bucket, every
other tiered segment keeps its three objects, and a Java consumer reading from the new
earliest offset gets exactly the produced records from there (from the tier, then the
broker's disk)."""

from __future__ import annotations

import time

import pytest
from kafka_tiered_support import (
    TIERED_TOPIC,
    consume,
    local_segments,
    offsets,
    produced_view,
    record_view,
    rlmm_segments,
    segment_keys,
    tiered_cluster,
    tiered_segments,
    topic_objects,
    wait_all_tiered,
    wait_until,
)

from engine.remote.metadata import RemoteLogSegmentState

#: about 10 KB a record: a 1 MiB segment holds about a hundred
VALUE_SIZE = 10_000
OBJECTS = {"log", "indexes", "rsm-manifest"}
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory, s3_server):
    with tiered_cluster(tmp_path_factory.mktemp("kafka-retention"), s3_server) as cluster:
        yield cluster


def create(broker, topic: str, partitions: int = 1, **configs: str) -> None:
    words = [w for k, v in {**TIERED_TOPIC, **configs}.items()
             for w in ("--config", f"{k}={v}")]
    broker.run_client(["create-topic", "--topic", topic, "--partitions", str(partitions),
                       *words])


def produce(broker, topic: str, count: int, seed: int, *args: str) -> list[dict]:
    produced = broker.run_client(
        ["produce", "--topic", topic, "--count", str(count), "--seed", str(seed),
         "--value-size", str(VALUE_SIZE), *args], timeout=240)
    assert len(produced) == count
    return produced


def tiered(broker, s3_server, topic: str, partitions=(0,)) -> dict[tuple[int, int], int]:
    """Waits until every closed segment is tiered; the tiered segments by (partition, start
    offset) -> size of their `.log` object (the segment's size), each with its three
    objects."""
    active = wait_all_tiered(broker, topic, partitions)
    segments = tiered_segments(s3_server, broker.key_prefix, topic)
    assert all(s == OBJECTS for s in segments.values()), segments
    for p in partitions:
        starts = sorted(s for q, s in segments if q == p)
        assert len(starts) >= 3 and starts[0] == 0 and starts[-1] < active[p], (p, starts)
    return log_sizes(broker, s3_server, topic)


def log_sizes(broker, s3_server, topic: str) -> dict[tuple[int, int], int]:
    """(partition, start offset) -> size of the segment's `.log` object."""
    return {(int(tail.split("/")[0]), int(tail.split("/")[1].split("-", 1)[0])): size
            for tail, size in topic_objects(s3_server, broker.key_prefix, topic).items()
            if tail.endswith(".log")}


def leader_epoch(broker, topic: str) -> int:
    [answer] = broker.run_client(["list-offsets", "--topic", topic, "--partitions", "0",
                                  "--spec", "latest"])
    return answer["leader_epoch"]


def wait_deleted(broker, s3_server, topic: str, earliest: int, partition: int = 0) -> dict:
    """Waits until the log starts at `earliest` and no tiered segment wholly below it is
    left in the bucket; returns the bucket's segments then."""
    def done():
        got = offsets(broker, topic, [partition], "earliest")[("earliest", partition)]
        if got != earliest:
            return None
        segments = tiered_segments(s3_server, broker.key_prefix, topic)
        starts = sorted(s for p, s in segments if p == partition)
        below = [s for s, nxt in zip(starts, starts[1:] + [None])
                 if nxt is not None and nxt <= earliest]
        return None if below else segments
    segments = wait_until(f"{topic} to start at {earliest} in the log and the bucket", done)
    # Kafka's RLMM agrees: the segments it still lists are the ones left in the bucket
    wait_until(f"the RLMM of {topic} to list the bucket's segments", lambda: {
        f"{p}/{m.start_offset:020d}-{m.remote_log_segment_id.id}"
        for p, listed in rlmm_segments(broker, topic).items() for m in listed
        if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    } == set(segment_keys(s3_server, broker.key_prefix, topic)))
    return segments


def assert_reads_from(broker, produced, topic: str, earliest: int) -> None:
    """A consumer from the earliest offset reads exactly the produced records from it, and
    the earliest offset is in the tier."""
    got = offsets(broker, topic, [0], "earliest", "earliest-local")
    assert got[("earliest", 0)] == earliest < got[("earliest-local", 0)]
    records = consume(broker, topic, [0])
    want = [r for r in produced_view(produced) if r[1] >= earliest]
    assert records and records[0]["offset"] == earliest
    assert len(records) == len(want)
    assert record_view(records) == want


def test_retention_time_deletes_the_segments_past_it(broker, s3_server):
    """Records two hours old, then current ones; retention.ms of an hour: the tiered
    segments holding only old records are deleted, the one where the current records begin
    is the new start of the log."""
    topic = "by-time"
    create(broker, topic)
    old = produce(broker, topic, 300, 1, "--base-timestamp",
                  str(int(time.time() * 1000) - 2 * HOUR_MS))
    new = produce(broker, topic, 300, 2)
    first_new = min(r["offset"] for r in new)
    assert first_new > max(r["offset"] for r in old)
    before = tiered(broker, s3_server, topic)
    boundary = max(s for _, s in before if s <= first_new)
    assert boundary > 0, "no tiered segment holds old records only"

    broker.run_client(["alter-config", "--topic", topic, "--set", f"retention.ms={HOUR_MS}"])
    after = wait_deleted(broker, s3_server, topic, boundary)
    assert set(after) == {k for k in before if k[1] >= boundary}
    assert all(s == OBJECTS for s in after.values()), after
    assert_reads_from(broker, old + new, topic, boundary)


def test_retention_size_deletes_the_oldest_segments_past_it(broker, s3_server):
    """retention.bytes of 3 MiB over about 6 MiB: Kafka deletes the oldest tiered segments
    while what is left (tiered and local) stays at or above the limit."""
    topic = "by-size"
    limit = 3 << 20
    create(broker, topic)
    produced = produce(broker, topic, 600, 3)
    sizes = tiered(broker, s3_server, topic)
    [active] = local_segments(broker, topic, 0)
    local = (broker.node(1).data_dir / f"{topic}-0" / f"{active:020d}.log").stat().st_size
    starts = sorted(s for _, s in sizes)
    total = sum(sizes.values()) + local
    assert total > limit + max(sizes.values()), "too little data to breach the limit"
    # Kafka's rule, oldest first: a segment goes while the rest still reaches the limit
    kept = total
    deleted = 0
    for s in starts:
        if kept - sizes[(0, s)] < limit:
            break
        kept -= sizes[(0, s)]
        deleted += 1
    assert 0 < deleted < len(starts)
    earliest = starts[deleted]

    broker.run_client(["alter-config", "--topic", topic, "--set", f"retention.bytes={limit}"])
    after = wait_deleted(broker, s3_server, topic, earliest)
    assert set(after) == {(0, s) for s in starts[deleted:]}
    assert all(s == OBJECTS for s in after.values()), after
    assert_reads_from(broker, produced, topic, earliest)


def test_delete_records_deletes_the_segments_below_the_log_start(broker, s3_server):
    """DeleteRecords to an offset inside the third tiered segment: the two segments wholly
    below it leave the bucket, the third stays and is read from that offset on. Then again
    in a later leader epoch, past every segment of the first one."""
    topic = "log-start"
    create(broker, topic)
    produced = produce(broker, topic, 500, 4)
    before = tiered(broker, s3_server, topic)
    starts = sorted(s for _, s in before)
    target = starts[2] + 7
    assert target < starts[3]

    [answer] = broker.run_client(["delete-records", "--topic", topic, "--partitions", "0",
                                  "--before-offset", str(target)])
    assert answer["low_watermark"] == target
    after = wait_deleted(broker, s3_server, topic, target)
    assert set(after) == {(0, s) for s in starts[2:]}
    assert all(s == OBJECTS for s in after.values()), after
    assert_reads_from(broker, produced, topic, target)

    # a new leader epoch (the only replica restarts), more records, then DeleteRecords past
    # every segment holding records of the old epoch: the tier starts in the new epoch
    epoch = leader_epoch(broker, topic)
    broker.restart(1)
    assert leader_epoch(broker, topic) > epoch
    more = produce(broker, topic, 300, 7)
    wait_all_tiered(broker, topic, [0])
    starts = sorted(s for _, s in tiered_segments(s3_server, broker.key_prefix, topic))
    new_only = [s for s in starts if s >= min(r["offset"] for r in more)]
    target = new_only[0] + 3
    assert target < new_only[1]
    broker.run_client(["delete-records", "--topic", topic, "--partitions", "0",
                       "--before-offset", str(target)])
    after = wait_deleted(broker, s3_server, topic, target)
    assert set(after) == {(0, s) for s in new_only}
    assert all(s == OBJECTS for s in after.values()), after
    # the segments being deleted stay listed (DELETE_SEGMENT_STARTED) until Kafka records
    # DELETE_SEGMENT_FINISHED after their objects are gone, and its high watermark checkpoint
    # makes that visible in the log dir a few seconds later
    wait_until(f"the RLMM of {topic} to list only segments of the new epoch", lambda: (
        (listed := rlmm_segments(broker, topic).get(0))
        and all(min(m.segment_leader_epochs) > epoch for m in listed)))
    assert_reads_from(broker, produced + more, topic, target)


def test_topic_deletion_deletes_every_object_of_the_topic(broker, s3_server):
    """Two partitions tiered, then the topic deleted: none of its objects is left, and a
    topic beside it keeps all of its own."""
    topic, neighbour = "doomed", "neighbour"
    create(broker, topic, partitions=2)
    create(broker, neighbour)
    produce(broker, topic, 900, 5)
    produce(broker, neighbour, 450, 6)
    tiered(broker, s3_server, topic, (0, 1))
    tiered(broker, s3_server, neighbour)
    kept = topic_objects(s3_server, broker.key_prefix, neighbour)

    broker.run_client(["delete-topic", "--topic", topic])
    wait_until(f"every object of {topic} to leave the bucket",
               lambda: not topic_objects(s3_server, broker.key_prefix, topic))
    assert topic_objects(s3_server, broker.key_prefix, neighbour) == kept


def test_the_bucket_helpers_find_a_topic_whatever_its_id(s3_server):
    """A topic's directory is `<topic>-<topic id>`, and ids hold `-` and `_` (URL-safe
    base64), as topic names do: each directory is matched to its topic whole."""
    import uuid

    import obstore

    prefix = f"helpers-{uuid.uuid4().hex[:8]}/"
    dirs = {"a-b": "AAAA-AAAAAAAAAAAAAAAAA", "a": "b-AAAAAAAAAAAAAAAAAAAA",
            "c": "A_AAAAAAAAAAAAAAAAAAA-"}
    for topic, topic_id in dirs.items():
        for suffix in OBJECTS:
            obstore.put(s3_server.raw_store(),
                        f"{prefix}{topic}-{topic_id}/0/{7:020d}-{topic_id}.{suffix}", b"x")
    for topic in dirs:
        assert tiered_segments(s3_server, prefix, topic) == {(0, 7): OBJECTS}, topic
