"""What writing and administering clients see on `serve`, a read-only broker: a producer's
sends are answered NOT_LEADER_OR_FOLLOWER (as a Kafka replica that leads nothing answers
them), so kafka-python and librdkafka retry until their delivery timeout and then fail
with their retriable timeout, nothing is written and consumers are served throughout; and
DescribeConfigs gives each topic config Kafka's declared type."""

from __future__ import annotations

import logging

import pytest
from serve_support import TOPIC, ServeProcess, build_small_broker

RECORDS = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServeProcess(build_small_broker(tmp_path_factory.mktemp("read_only"),
                                           records=RECORDS))
    yield proc
    proc.kill()
    assert "Traceback" not in proc.output(), proc.output()


def _watermarks(bootstrap: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
    finally:
        c.close()


def _consume_all(bootstrap: str, end: int) -> list[int]:
    """Every offset a fresh consumer reads from 0 to `end`."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    offsets: list[int] = []
    try:
        for _ in range(200):
            for m in c.consume(500, 0.1):
                assert m.error() is None, m.error()
                offsets.append(m.offset())
            if c.position([TopicPartition(TOPIC, 0)])[0].offset >= end:
                break
    finally:
        c.close()
    return offsets


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_kafka_python_send_fails_retriable_after_its_delivery_timeout(server, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError, RetriableError

    before = _watermarks(server.bootstrap)
    # idempotence needs InitProducerId, which a broker that takes no writes does not serve
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=False,
                             delivery_timeout_ms=3000, request_timeout_ms=2000,
                             linger_ms=0, retry_backoff_ms=200)
    try:
        with caplog.at_level(logging.WARNING, logger="kafka.producer.sender"):
            future = producer.send(TOPIC, b"never stored", partition=0)
            with pytest.raises(KafkaTimeoutError) as failed:
                future.get(60)
    finally:
        producer.close(10)
    assert isinstance(failed.value, RetriableError)
    # it retried on the broker's answer, the retriable not-leader error
    assert any("NotLeaderForPartitionError" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    assert _watermarks(server.bootstrap) == before
    offsets = _consume_all(server.bootstrap, before[1])
    assert offsets and max(offsets) < before[1] and offsets == sorted(set(offsets))


def test_a_librdkafka_send_fails_after_its_message_timeout(server):
    from confluent_kafka import KafkaError, Producer

    before = _watermarks(server.bootstrap)
    lines = _Lines()
    logger = logging.getLogger("test_serve_read_only.librdkafka")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    reports: list = []
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 3000,
                         "retry.backoff.ms": 200, "debug": "msg"}, logger=logger)
    try:
        producer.produce(TOPIC, b"never stored", partition=0,
                         on_delivery=lambda err, msg: reports.append(err))
        assert producer.flush(60) == 0
    finally:
        logger.removeHandler(lines)
    [error] = reports
    assert error is not None and error.code() == KafkaError._MSG_TIMED_OUT, error
    # each attempt was refused with the retriable not-leader error, never persisted
    refused = [line for line in lines.lines if "Not leader for partition" in line]
    assert refused and all("MsgNotPersisted" in line for line in refused), lines.lines[-20:]
    assert _watermarks(server.bootstrap) == before
    offsets = _consume_all(server.bootstrap, before[1])
    assert offsets and max(offsets) < before[1] and offsets == sorted(set(offsets))


def test_describe_configs_gives_each_topic_config_its_declared_type(server):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from engine.config.definitions import TOPIC_CONFIGS

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC)], config_filter="all")
    finally:
        admin.close()
    types = {name: c["config_type"] for name, c in described["topic"][TOPIC].items()}
    assert types == {name: d.type.name for name, d in TOPIC_CONFIGS.items()}
    # Kafka's types, as its own broker reports them
    assert (types["segment.bytes"], types["retention.ms"], types["preallocate"],
            types["cleanup.policy"], types["message.timestamp.type"]) == (
        "INT", "LONG", "BOOLEAN", "LIST", "STRING")
