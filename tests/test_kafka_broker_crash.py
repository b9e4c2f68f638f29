"""A real Kafka 4.x broker tiering through the engine (see tests/test_kafka_broker_tiering.py)
that restarts, crashes, or loses its object store for a while.

The broker reaches the test S3 server through a fault-injecting proxy (tests/fault_proxy.py)
for the whole module. After a clean restart and after a `kill -9` in the middle of uploads,
every acknowledged record reads back with the Java consumer, from the tier and the broker's
disk, and every segment manifest in the bucket has its `.log` and `.indexes` beside it.
With the store slow, failing every PUT (503) or dropping every connection, producing and
consuming what is still on the broker's disk go on, and the copies resume once the store
answers again."""

from __future__ import annotations

import pytest
from fault_proxy import Fault, FaultProxy
from kafka_tiered_support import (
    TIERED_TOPIC,
    consume,
    local_segments,
    offsets,
    produced_view,
    record_view,
    segment_keys,
    tiered_cluster,
    wait_all_tiered,
    wait_rlmm_finished,
    wait_until,
)

VALUE_SIZE = 10_000  # about a hundred records to a 1 MiB segment
NODE = 1


@pytest.fixture(scope="module")
def proxy(s3_server):
    with FaultProxy(s3_server.port) as p:
        yield p


@pytest.fixture(scope="module")
def broker(tmp_path_factory, s3_server, proxy):
    # a store that stops answering fails a copy within seconds (one retry, 10 s a call)
    store = {"rsm.config.storage.s3.endpoint.url": proxy.endpoint,
             "rsm.config.storage.api.call.max.retries": "1",
             "rsm.config.storage.s3.api.call.attempt.timeout": "5000",
             "rsm.config.storage.s3.api.call.timeout": "10000"}
    with tiered_cluster(tmp_path_factory.mktemp("kafka-crash"), s3_server, **store) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def no_faults(proxy):
    proxy.clear()
    yield
    proxy.clear()


def create(broker, topic: str) -> None:
    words = [w for k, v in TIERED_TOPIC.items() for w in ("--config", f"{k}={v}")]
    broker.run_client(["create-topic", "--topic", topic, *words])


def produce(broker, topic: str, count: int, seed: int) -> list[dict]:
    produced = broker.run_client(
        ["produce", "--topic", topic, "--count", str(count), "--seed", str(seed),
         "--value-size", str(VALUE_SIZE)], timeout=240)
    assert len(produced) == count
    return produced


def manifests(s3_server, broker, topic: str) -> set[str]:
    return {stem for stem, suffixes in segment_keys(s3_server, broker.key_prefix, topic).items()
            if "rsm-manifest" in suffixes}


def assert_bucket_whole(s3_server, broker, topic: str, active: dict[int, int]) -> None:
    """Every segment Kafka's RLMM says is COPY_SEGMENT_FINISHED (and they cover every
    offset below the local log, `active`) has its three objects in the bucket, and every
    manifest in the bucket has its log and indexes."""
    segments = segment_keys(s3_server, broker.key_prefix, topic)
    for p, finished in wait_rlmm_finished(broker, topic, active).items():
        for m in finished:
            stem = f"{p}/{m.start_offset:020d}-{m.remote_log_segment_id.id}"
            assert segments.get(stem) == {"log", "indexes", "rsm-manifest"}, (stem, m)
    torn = {stem: s for stem, s in segments.items()
            if "rsm-manifest" in s and not {"log", "indexes"} <= s}
    assert not torn, f"manifests without their objects: {torn}"


def assert_reads_back(broker, topic: str, produced: list[dict]) -> None:
    """Every produced record, from offset 0 (in the tier) to the end of the log."""
    got = offsets(broker, topic, [0], "earliest", "earliest-local")
    assert got[("earliest", 0)] == 0 < got[("earliest-local", 0)]
    records = consume(broker, topic, [0])
    want = produced_view(produced)
    assert len(records) == len(want)
    assert record_view(records) == want


def test_a_clean_restart_keeps_every_offset_and_tiers_on(broker, s3_server):
    topic = "bounce"
    create(broker, topic)
    produced = produce(broker, topic, 400, 1)
    wait_all_tiered(broker, topic, [0])
    before = manifests(s3_server, broker, topic)
    assert len(before) >= 3

    # SIGTERM: the JVM's exit status after its shutdown hooks, not a SIGKILL after a hang
    assert broker.stop_node(NODE) in (0, 143)
    broker.start_node(NODE)
    assert_reads_back(broker, topic, produced)
    produced += produce(broker, topic, 300, 2)
    active = wait_all_tiered(broker, topic, [0])
    assert manifests(s3_server, broker, topic) > before
    assert_reads_back(broker, topic, produced)
    assert_bucket_whole(s3_server, broker, topic, active)


def test_kill_9_during_uploads(broker, s3_server, proxy):
    """Every PUT held a second, so copies are under way when the broker is killed: some
    segments finished, one in flight, others not started. After the restart every
    acknowledged record reads back and every manifest has its objects."""
    topic = "killed"
    create(broker, topic)
    proxy.add(Fault("delay", method="PUT", path_contains=f"/{topic}-", delay_s=1.0,
                    times=None))
    produced = produce(broker, topic, 800, 3)
    wait_until("a segment copied and the next under way",
               lambda: len(proxy.requests("PUT", f"/{topic}-")) >= 5, timeout=120)
    broker.kill(NODE)
    copied = manifests(s3_server, broker, topic)
    assert copied, "no segment finished before the kill"
    # closed segments still on disk: their copies had not finished
    assert len(local_segments(broker, topic, 0)) > 2, "every segment was copied before the kill"

    proxy.clear()
    broker.start_node(NODE)
    active = wait_all_tiered(broker, topic, [0])
    assert len(manifests(s3_server, broker, topic)) > len(copied)
    assert_reads_back(broker, topic, produced)
    assert_bucket_whole(s3_server, broker, topic, active)


FAULTS = {
    "slow": Fault("delay", delay_s=1.0, times=None),
    "failing": Fault("status", method="PUT", status=503, times=None),
    "unreachable": Fault("drop", times=None),
}


@pytest.mark.parametrize("kind", list(FAULTS))
def test_the_store_down_while_the_broker_runs(broker, s3_server, proxy, kind):
    """The store goes bad before the topic's first copy: its records are produced and read
    from the broker's disk all the same, and tiered once the store is back."""
    topic = f"store-{kind}"
    create(broker, topic)
    fault = FAULTS[kind]
    fault.applied = 0
    proxy.add(fault)
    produced = produce(broker, topic, 400, 4)
    records = consume(broker, topic, [0])
    assert record_view(records) == produced_view(produced)
    wait_until(f"copies of {topic} to try the store",
               lambda: proxy.requests("PUT", f"/{topic}-"), timeout=60)
    if kind == "slow":
        assert all(r.fault == "delay" for r in proxy.requests())
    else:
        assert not manifests(s3_server, broker, topic)
        local = offsets(broker, topic, [0], "earliest-local")[("earliest-local", 0)]
        assert local == 0, "a segment left the disk without being copied"

    proxy.clear()
    active = wait_all_tiered(broker, topic, [0])
    assert len(manifests(s3_server, broker, topic)) >= 3
    assert_reads_back(broker, topic, produced)
    assert_bucket_whole(s3_server, broker, topic, active)
