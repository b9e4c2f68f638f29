"""`python -m engine serve` answering unmodified Kafka clients (librdkafka through
confluent-kafka, kafka-python, aiokafka) over a topic produced by the engine in every codec,
with headers and transactions, and tiered so its early offsets are only in the remote tier:
every record each client consumes from earliest to end, with assign() and with subscribe()
(a group of its own each), equals `engine fetch --json`'s view, in both isolation levels;
timestamp lookups and seeks into tiered offsets work (all three clients); the wire
behaviours Kafka has for what it does not serve are kept (raw requests through the codec)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from serve_support import CODECS, TOPIC, Record, ServeProcess, build_tiered_broker

from engine.protocol import codec

DEADLINE_S = 90


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    return build_tiered_broker(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(tiered):
    proc = ServeProcess(tiered.config)
    yield proc
    assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()


def _want(tiered, read_committed):
    return {p: tiered.view(p, read_committed) for p in range(len(CODECS))}


def _check(got: dict, tiered, read_committed: bool) -> None:
    want = _want(tiered, read_committed)
    for p in want:
        assert len(got.get(p, [])) == len(want[p]), (p, len(got.get(p, [])), len(want[p]))
        assert got[p] == want[p], p
    if read_committed:  # the fixture has aborted transactions: they really are hidden
        assert sum(map(len, want.values())) < sum(map(len, _want(tiered, False).values()))


# ------------------------------------------------------------------------ real clients

def _group(client, subscribe, read_committed):
    """A group of its own for each subscribing test: none starts from another's commits."""
    return f"{client}-{'subscribe' if subscribe else 'assign'}-{int(read_committed)}"


BOTH_WAYS = pytest.mark.parametrize("subscribe", [False, True], ids=["assign", "subscribe"])


@BOTH_WAYS
@pytest.mark.parametrize("read_committed", [False, True])
def test_confluent_kafka_consumes_everything_from_earliest(tiered, server, read_committed,
                                                           subscribe):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": server.bootstrap,
                         "group.id": _group("conf", subscribe, read_committed),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": ("read_committed" if read_committed
                                             else "read_uncommitted"),
                         "max.partition.fetch.bytes": 65536})
    want = _want(tiered, read_committed)
    got: dict[int, list] = {}
    try:
        if subscribe:
            consumer.subscribe([TOPIC])
        else:
            consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in want])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and any(
                len(got.get(p, [])) < len(want[p]) for p in want):
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.setdefault(m.partition(), []).append(Record(
                m.offset(), m.timestamp()[1], m.key(), m.value(), list(m.headers() or [])))
    finally:
        consumer.close()
    _check(got, tiered, read_committed)


@BOTH_WAYS
@pytest.mark.parametrize("read_committed", [False, True])
def test_kafka_python_consumes_everything_from_earliest(tiered, server, read_committed,
                                                        subscribe):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                             group_id=_group("kp", subscribe, read_committed),
                             auto_offset_reset="earliest",
                             isolation_level=("read_committed" if read_committed
                                              else "read_uncommitted"),
                             max_partition_fetch_bytes=65536)
    want = _want(tiered, read_committed)
    got: dict[int, list] = {}
    try:
        if subscribe:
            consumer.subscribe([TOPIC])
        else:
            tps = [TopicPartition(TOPIC, p) for p in want]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and any(
                len(got.get(p, [])) < len(want[p]) for p in want):
            for tp, records in consumer.poll(timeout_ms=500).items():
                got.setdefault(tp.partition, []).extend(
                    Record(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                    for r in records)
    finally:
        consumer.close()
    _check(got, tiered, read_committed)


@BOTH_WAYS
@pytest.mark.parametrize("read_committed", [False, True])
def test_aiokafka_consumes_everything_from_earliest(tiered, server, read_committed, subscribe):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    want = _want(tiered, read_committed)

    async def consume():
        consumer = AIOKafkaConsumer(bootstrap_servers=server.bootstrap,
                                    enable_auto_commit=False,
                                    group_id=_group("aio", subscribe, read_committed),
                                    auto_offset_reset="earliest",
                                    isolation_level=("read_committed" if read_committed
                                                     else "read_uncommitted"),
                                    max_partition_fetch_bytes=65536)
        await consumer.start()
        got: dict[int, list] = {}
        try:
            if subscribe:
                consumer.subscribe([TOPIC])
            else:
                tps = [TopicPartition(TOPIC, p) for p in want]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline and any(
                    len(got.get(p, [])) < len(want[p]) for p in want):
                batches = await consumer.getmany(timeout_ms=500)
                for tp, records in batches.items():
                    got.setdefault(tp.partition, []).extend(
                        Record(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                        for r in records)
        finally:
            await consumer.stop()
        return got

    _check(asyncio.run(consume()), tiered, read_committed)


def _timestamp_target(tiered, p):
    """A timestamp of a record well inside the tiered range, and the offset Kafka's
    by-timestamp lookup must answer: the first offset whose timestamp is >= it."""
    records = tiered.view(p, False)
    tiered_end = tiered.offsets[p]["earliest-local"]
    probe = next(r for r in records if r.offset >= tiered_end // 2)
    target = probe.timestamp
    first = next(r for r in records if r.timestamp >= target)
    assert first.offset < tiered_end  # the answer is in the remote tier
    return target, first


def test_confluent_offsets_for_times_and_seek_into_the_tier(tiered, server):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "conf-times",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        for p in range(len(CODECS)):
            target, first = _timestamp_target(tiered, p)
            [found] = consumer.offsets_for_times([TopicPartition(TOPIC, p, target)],
                                                 timeout=30)
            assert found.error is None and found.offset == first.offset, (p, found)
            consumer.assign([TopicPartition(TOPIC, p, found.offset)])
            deadline = time.monotonic() + DEADLINE_S
            m = None
            while m is None and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.partition() != p:  # fetched before the unassign
                    m = None
            assert m is not None and m.error() is None
            assert (m.offset(), m.value()) == (first.offset, first.value)
            consumer.unassign()
    finally:
        consumer.close()


def test_kafka_python_offsets_for_times_gives_the_record_timestamp(tiered, server):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False)
    try:
        for p in range(len(CODECS)):
            target, first = _timestamp_target(tiered, p)
            tp = TopicPartition(TOPIC, p)
            found = consumer.offsets_for_times({tp: target})[tp]
            assert (found.offset, found.timestamp) == (first.offset, first.timestamp)
            consumer.assign([tp])
            consumer.seek(tp, found.offset)
            deadline = time.monotonic() + DEADLINE_S
            records = []
            while not records and time.monotonic() < deadline:
                records = consumer.poll(timeout_ms=500).get(tp, [])
            assert records and (records[0].offset, records[0].value) == (first.offset,
                                                                          first.value)
        beginning = consumer.beginning_offsets([TopicPartition(TOPIC, 0)])
        end = consumer.end_offsets([TopicPartition(TOPIC, 0)])
        assert list(beginning.values()) == [0]
        assert list(end.values()) == [tiered.offsets[0]["latest"]]
    finally:
        consumer.close()


def test_aiokafka_offsets_for_times_and_seek_into_the_tier(tiered, server):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def check():
        consumer = AIOKafkaConsumer(bootstrap_servers=server.bootstrap,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            for p in range(len(CODECS)):
                target, first = _timestamp_target(tiered, p)
                tp = TopicPartition(TOPIC, p)
                found = (await consumer.offsets_for_times({tp: target}))[tp]
                assert (found.offset, found.timestamp) == (first.offset, first.timestamp)
                consumer.assign([tp])
                consumer.seek(tp, found.offset)
                records = (await consumer.getmany(tp, timeout_ms=DEADLINE_S * 1000)).get(tp)
                assert records and (records[0].offset, records[0].value) == (first.offset,
                                                                              first.value)
            tp0 = TopicPartition(TOPIC, 0)
            assert (await consumer.beginning_offsets([tp0]))[tp0] == 0
            assert (await consumer.end_offsets([tp0]))[tp0] == tiered.offsets[0]["latest"]
        finally:
            await consumer.stop()

    asyncio.run(check())


# -------------------------------------------------------------- raw requests (the codec)

class _Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def receive(self) -> bytes:
        head = self._exactly(4)
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return bytes(out)

    def call(self, api_key: int, version: int, body: dict) -> dict:
        self.correlation += 1
        self.send_raw(codec.encode_request(api_key, version, self.correlation, "t", body))
        corr, resp = codec.decode_response(api_key, version, self.receive())
        assert corr == self.correlation
        return resp

    def closed_by_server(self) -> bool:
        self.sock.settimeout(30)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def test_list_offsets_tiered_specs_and_isolation(tiered, server):
    client = _Client(server.port)
    try:
        for version in (1, 7, 9):
            parts = [{"partition_index": p, "timestamp": spec}
                     for p in range(len(CODECS)) for spec in (-2, -1, -4, -5)]
            resp = client.call(2, version, {"replica_id": -1, "topics": [
                {"name": TOPIC, "partitions": parts}]})
            rows = resp["topics"][0]["partitions"]
            for i, row in enumerate(rows):
                p, spec = parts[i]["partition_index"], parts[i]["timestamp"]
                assert row["error_code"] == 0
                want = {-2: 0, -1: tiered.offsets[p]["latest"],
                        -4: tiered.offsets[p]["earliest-local"],
                        -5: tiered.offsets[p]["latest-tiered"]}[spec]
                assert row["offset"] == want, (version, p, spec)
        # -3: the record with the largest timestamp (timestamps only grow here: the last
        # data record)
        resp = client.call(2, 9, {"replica_id": -1, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -3}]}]})
        row = resp["topics"][0]["partitions"][0]
        last = tiered.view(0, False)[-1]
        assert (row["timestamp"], row["offset"]) == (last.timestamp, last.offset)
        resp = client.call(2, 9, {"replica_id": -1, "topics": [
            {"name": "nope", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert resp["topics"][0]["partitions"][0]["error_code"] == 3
    finally:
        client.close()


def test_fetch_limits_sessions_and_long_poll(tiered, server):
    client = _Client(server.port)
    try:
        meta = client.call(3, 12, {"topics": None})
        [topic] = meta["topics"]
        assert topic["name"] == TOPIC and len(topic["partitions"]) == len(CODECS)
        assert meta["brokers"][0]["port"] == server.port
        topic_id = topic["topic_id"]
        parts = [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1}
                 for p in range(len(CODECS))]
        body = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1, "isolation_level": 0,
                "session_id": 0, "session_epoch": 0,
                "topics": [{"topic_id": topic_id, "partitions": parts}]}
        resp = client.call(1, 16, body)
        assert (resp["error_code"], resp["session_id"]) == (0, 0)  # session declined
        sizes = [memoryview(p["records"]).nbytes for p in resp["responses"][0]["partitions"]]
        # the first partition gets one whole batch past both limits; the others nothing
        assert sizes[0] > 1 and sizes[1:] == [0] * (len(CODECS) - 1)
        # a fetch naming a session Kafka does not know
        resp = client.call(1, 16, {**body, "session_id": 7, "session_epoch": 3})
        assert resp["error_code"] == 70 and resp["responses"] == []
        # at the end of the log with min_bytes: waits max_wait_ms, then answers empty
        end = tiered.offsets[0]["latest"]
        started = time.monotonic()
        resp = client.call(1, 12, {
            "max_wait_ms": 300, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "fetch_offset": end, "partition_max_bytes": 1 << 20}]}]})
        assert time.monotonic() - started >= 0.29
        row = resp["responses"][0]["partitions"][0]
        assert (row["error_code"], row["high_watermark"], row["aborted_transactions"]) == (
            0, end, [])
        assert memoryview(row["records"]).nbytes == 0
        # past the end, and an unknown topic id
        resp = client.call(1, 16, {**body, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": 0, "fetch_offset": end + 5,
                                                   "partition_max_bytes": 100}]},
            {"topic_id": b"\x09" * 16, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                      "partition_max_bytes": 100}]}]})
        assert [t["partitions"][0]["error_code"] for t in resp["responses"]] == [1, 100]
    finally:
        client.close()


def test_produce_is_refused_and_unknown_versions_get_what_kafka_gives(server):
    client = _Client(server.port)
    try:
        resp = client.call(0, 9, {"acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": b""}]}]})
        # a read-only replica's answer (NOT_LEADER_OR_FOLLOWER), Produce still advertised
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 6
        # ApiVersions of a version this broker does not know: a v0 answer with
        # UNSUPPORTED_VERSION and the versions it does know
        client.send_raw(struct.pack(">ihhih", 10, 18, 99, 5, -1))
        corr, resp = codec.decode_response(18, 0, client.receive())
        assert corr == 5 and resp["error_code"] == 35
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
        assert keys[1] == (4, 16) and keys[3] == (0, 12) and keys[2] == (0, 9)
        # any other unknown key or version: the connection is closed, as Kafka closes it
        client.send_raw(struct.pack(">ihhih", 10, 1, 99, 6, -1))
        assert client.closed_by_server()
    finally:
        client.close()
    for frame in (struct.pack(">ihhih", 10, 777, 0, 1, -1),        # unknown API key
                  struct.pack(">i", 200 * 1024 * 1024),             # past the request limit
                  struct.pack(">i", -5),                            # negative size
                  struct.pack(">ihhih", 12, 1, 4, 1, -1) + b"\xff\xff\xff\xff"):  # malformed
        client = _Client(server.port)
        try:
            client.send_raw(frame)
            assert client.closed_by_server(), frame
        finally:
            client.close()
    # the server is still answering
    client = _Client(server.port)
    try:
        assert client.call(18, 3, {})["error_code"] == 0
    finally:
        client.close()
