"""Consumer groups on `python -m engine serve` (classic protocol) with real clients: two
librdkafka consumers of one group split the partitions and one takes over when the other
leaves; committed offsets survive a clean restart and a kill -9 of `serve` (the group resumes
from them), and the AdminClient lists groups, offsets and topic configs."""

from __future__ import annotations

import socket
import time

import pytest
from serve_support import CODECS, TOPIC, ServeProcess, build_tiered_broker

from engine.protocol.offsets_store import OFFSETS_STORE_FILE

DEADLINE_S = 90
ALL = set(range(len(CODECS)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    # a fixed port: clients reconnect to the same address after serve restarts
    port = _free_port()
    return build_tiered_broker(tmp_path_factory.mktemp("groups"),
                               f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
                               "group.min.session.timeout.ms=1000\n")


@pytest.fixture
def serve(tiered):
    procs = []

    def start():
        procs.append(ServeProcess(tiered.config))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        assert "Traceback" not in proc.output(), proc.output()


def _consumer(bootstrap, group, **extra):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "isolation.level": "read_uncommitted", **extra})


def _poll_until(consumers, done, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and not done():
        for c in consumers:
            m = c.poll(0.2)
            assert m is None or m.error() is None, m.error()
    assert done()


def test_two_consumers_split_the_partitions_and_one_takes_over(serve):
    server = serve()
    a = _consumer(server.bootstrap, "split")
    b = _consumer(server.bootstrap, "split")
    try:
        a.subscribe([TOPIC])
        b.subscribe([TOPIC])

        def owned(c):
            return {tp.partition for tp in c.assignment()}

        _poll_until([a, b], lambda: owned(a) and owned(b) and owned(a) | owned(b) == ALL)
        assert not owned(a) & owned(b)
        b.close()
        _poll_until([a], lambda: owned(a) == ALL)
    finally:
        a.close()


def _commit_some(bootstrap, group, per_partition=200, keep_open=False):
    """Consumes with subscribe() and commits explicitly; returns what it committed (and,
    with keep_open, the consumer, still a member of the group)."""
    from confluent_kafka import TopicPartition

    c = _consumer(bootstrap, group)
    seen: dict[int, int] = {}
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and not (
                set(seen) == ALL and min(seen.values()) >= per_partition):
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                seen[m.partition()] = m.offset() + 1
        committed = {p: o for p, o in seen.items()}
        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in committed.items()],
                 asynchronous=False)
        for _ in range(5):  # and goes on consuming past its commits
            c.poll(0.1)
    finally:
        if not keep_open:
            c.close()
    return (committed, c) if keep_open else committed


def _committed(bootstrap, group) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    c = _consumer(bootstrap, group)
    try:
        return {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(TOPIC, p) for p in ALL], timeout=30)}
    finally:
        c.close()


def test_committed_offsets_survive_a_restart_and_the_admin_client_lists_them(serve):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    server = serve()
    committed = _commit_some(server.bootstrap, "keep")
    assert set(committed) == ALL
    assert server.stop() == 0
    server = serve()
    assert _committed(server.bootstrap, "keep") == committed
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    groups = admin.list_consumer_groups().result(timeout=30)
    assert "keep" in {g.group_id for g in groups.valid}
    [future] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("keep", [TopicPartition(TOPIC, p) for p in ALL])]
    ).values()
    listed = future.result(timeout=30)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == committed
    [described] = admin.describe_consumer_groups(["keep"]).values()
    assert described.result(timeout=30).state.name == "EMPTY"
    [configs] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, TOPIC)]).values()
    entries = configs.result(timeout=30)
    assert entries["remote.storage.enable"].value == "true"
    assert entries["local.retention.bytes"].value == "131072"
    assert entries["segment.bytes"].value == "65536"


def test_kill_9_mid_consumption_then_the_group_resumes_from_its_commits(serve, tiered):
    server = serve()
    committed, running = _commit_some(server.bootstrap, "crash", per_partition=300,
                                      keep_open=True)
    server.kill()  # SIGKILL mid-consumption: no clean shutdown of the logs or offsets file
    running.close()  # its group session is gone with the process
    assert (tiered.dirs["d1"] / OFFSETS_STORE_FILE).exists()
    server = serve()
    c = _consumer(server.bootstrap, "crash")
    first: dict[int, int] = {}
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and set(first) != ALL:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                first.setdefault(m.partition(), m.offset())
    finally:
        c.close()
    # each partition resumes at its committed offset (or the next data record after it,
    # when the committed offset is a transaction marker)
    for p in ALL:
        offsets = [r.offset for r in tiered.view(p, False)]
        assert first[p] == next(o for o in offsets if o >= committed[p]), p


def test_kafka_python_and_aiokafka_groups_consume_with_subscribe(serve, tiered):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    server = serve()
    want = {p: len(tiered.view(p, False)) for p in ALL}
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id="kp",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    got: dict[int, int] = {}
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and got != want:
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition] = got.get(tp.partition, 0) + len(records)
        consumer.commit()
    finally:
        consumer.close()
    assert got == want

    async def aio():
        c = AIOKafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id="kp",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            # everything was committed by the first member: nothing left to read
            assert not await c.getmany(timeout_ms=2000)
            return {tp.partition: await c.committed(tp) for tp in c.assignment()}
        finally:
            await c.stop()

    committed = asyncio.run(aio())
    assert set(committed) == ALL
    for p in ALL:
        assert committed[p] == tiered.offsets[p]["latest"] or committed[p] > \
            tiered.view(p, False)[-1].offset
