"""`python -m engine serve --bucket`: a read-only replica of a bucket the engine's
object-store tier wrote on a real S3 server (SeaweedFS), served as a real subprocess with no
log dirs and no RLMM. confluent-kafka, kafka-python and aiokafka consume from earliest to end
and every record equals `engine fetch --json` of the source broker, in both isolation levels;
Metadata carries the topic id of the object keys; ListOffsets answers from the bucket; group
offsets persist in the state dir; a segment uploaded later is served after a refresh; offsets
between a bucket's segments are OFFSET_OUT_OF_RANGE, never other records."""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import struct
import time
import uuid

import pytest
from bucket_support import HandBucket, value_of
from serve_support import Record, ServeProcess
from spark_support import TieredCluster

from engine.errors import OffsetOutOfRangeError
from engine.protocol import codec
from engine.records import MemoryRecords

TOPIC = "replica"
PARTITIONS = 3
DEADLINE_S = 90
REFRESH_MS = 300


class BucketServe(ServeProcess):
    @staticmethod
    def command(config):
        return config  # the whole argument list


def _records(rows: list[dict]) -> list[Record]:
    def b64(s):
        return None if s is None else base64.b64decode(s)
    return [Record(r["offset"], r["timestamp"], b64(r["key"]), b64(r["value"]),
                   [(k, b64(v)) for k, v in r["headers"]]) for r in rows]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server):
    prefix = f"serve-bucket-{uuid.uuid4().hex[:8]}/"
    props = {"remote.log.storage.manager.class.name":
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.key.prefix": prefix, "rsm.config.chunk.size": "16384"}
    props.update({f"rsm.config.{k}": v for k, v in s3_server.config().items()})
    c = TieredCluster(tmp_path_factory.mktemp("serve-bucket"), props)
    c.produce_and_tier(TOPIC, PARTITIONS, 1200, codec="lz4")
    c.bucket_url = f"s3://{s3_server.buckets[0]}/{prefix}"
    return c


@pytest.fixture(scope="module")
def server(cluster, s3_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-bucket-node")
    config = base / "node.properties"
    # the endpoint from the file's rsm.config.* keys, the credentials from --store
    settings = {k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"}
    endpoint = {k: v for k, v in settings.items() if "endpoint" in k}
    config.write_text("listeners=PLAINTEXT://127.0.0.1:0\ngroup.initial.rebalance.delay.ms=0\n"
                      + "".join(f"rsm.config.{k}={v}\n" for k, v in endpoint.items()))
    store = [a for k, v in settings.items() if k not in endpoint
             for a in ("--store", f"{k}={v}")]
    import sys
    cmd = [sys.executable, "-m", "engine", "serve", "--bucket", cluster.bucket_url, *store,
           "--config", str(config), "--state-dir", str(base / "state"),
           "--refresh-interval-ms", str(REFRESH_MS)]
    proc = BucketServe(cmd)
    proc.state_dir = base / "state"
    yield proc
    assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()


@pytest.fixture(scope="module")
def want(cluster):
    """(read_committed, partition) -> the source's records from offset 0."""
    return {(rc, p): _records(cluster.fetch(TOPIC, p, 0, read_committed=rc))
            for rc in (False, True) for p in range(PARTITIONS)}


def _check(got, want, read_committed):
    for p in range(PARTITIONS):
        expected = want[(read_committed, p)]
        assert len(got.get(p, [])) == len(expected), (p, len(got.get(p, [])), len(expected))
        assert got[p] == expected, p
    if read_committed:  # aborted transactions are really hidden
        assert sum(len(want[(True, p)]) for p in range(PARTITIONS)) < \
            sum(len(want[(False, p)]) for p in range(PARTITIONS))


def _confluent(bootstrap, read_committed, starts, want_counts, group="bucket-conf"):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False,
                         "isolation.level": ("read_committed" if read_committed
                                             else "read_uncommitted"),
                         "max.partition.fetch.bytes": 32768})
    got: dict[int, list] = {}
    try:
        consumer.assign([TopicPartition(TOPIC, p, o) for p, o in starts.items()])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and any(
                len(got.get(p, [])) < n for p, n in want_counts.items()):
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.setdefault(m.partition(), []).append(Record(
                m.offset(), m.timestamp()[1], m.key(), m.value(), list(m.headers() or [])))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("read_committed", [False, True])
def test_confluent_kafka_consumes_the_bucket(server, want, read_committed):
    from confluent_kafka import OFFSET_BEGINNING

    got = _confluent(server.bootstrap, read_committed,
                     {p: OFFSET_BEGINNING for p in range(PARTITIONS)},
                     {p: len(want[(read_committed, p)]) for p in range(PARTITIONS)})
    _check(got, want, read_committed)


@pytest.mark.parametrize("read_committed", [False, True])
def test_kafka_python_consumes_the_bucket(server, want, read_committed):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                             isolation_level=("read_committed" if read_committed
                                              else "read_uncommitted"),
                             max_partition_fetch_bytes=32768)
    got: dict[int, list] = {}
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and any(
                len(got.get(p, [])) < len(want[(read_committed, p)])
                for p in range(PARTITIONS)):
            for tp, records in consumer.poll(timeout_ms=500).items():
                got.setdefault(tp.partition, []).extend(
                    Record(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                    for r in records)
        end = consumer.end_offsets(tps)
        assert {tp.partition: o for tp, o in end.items()} == {
            p: want[(False, p)][-1].offset + 1 for p in range(PARTITIONS)}
    finally:
        consumer.close()
    _check(got, want, read_committed)
    # read through the default chunk cache in the state dir
    assert any((server.state_dir / "chunk-cache").rglob("*.chunk"))


@pytest.mark.parametrize("read_committed", [False, True])
def test_aiokafka_consumes_the_bucket_in_a_group(server, want, read_committed):
    """Subscribed in a group: the coordinator assigns the partitions, offsets are
    committed to the state dir and read back by a second consumer of the group."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    group = f"bucket-aio-{read_committed}"

    async def consume():
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap,
                                    group_id=group, enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    isolation_level=("read_committed" if read_committed
                                                     else "read_uncommitted"),
                                    max_partition_fetch_bytes=32768)
        await consumer.start()
        got: dict[int, list] = {}
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline and any(
                    len(got.get(p, [])) < len(want[(read_committed, p)])
                    for p in range(PARTITIONS)):
                batches = await consumer.getmany(timeout_ms=500)
                for tp, records in batches.items():
                    got.setdefault(tp.partition, []).extend(
                        Record(r.offset, r.timestamp, r.key, r.value, list(r.headers))
                        for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()
        again = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group,
                                 enable_auto_commit=False)
        await again.start()
        try:
            committed = {p: await again.committed(TopicPartition(TOPIC, p))
                         for p in range(PARTITIONS)}
        finally:
            await again.stop()
        return got, committed

    got, committed = asyncio.run(consume())
    _check(got, want, read_committed)
    assert committed == {p: want[(read_committed, p)][-1].offset + 1
                         for p in range(PARTITIONS)}


class _Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

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
        self.sock.sendall(codec.encode_request(api_key, version, self.correlation, "t", body))
        size = struct.unpack(">i", self._exactly(4))[0]
        corr, resp = codec.decode_response(api_key, version, self._exactly(size))
        assert corr == self.correlation
        return resp

    def close(self) -> None:
        self.sock.close()


def test_metadata_and_list_offsets_from_the_bucket(cluster, server, want):
    client = _Client(server.port)
    try:
        keys = {k["api_key"] for k in client.call(18, 3, {})["api_keys"]}
        assert {0, 1, 2, 3, 8, 9, 10, 11} <= keys and 32 not in keys  # no topic configs
        meta = client.call(3, 12, {"topics": None})
        [topic] = meta["topics"]
        assert topic["name"] == TOPIC and len(topic["partitions"]) == PARTITIONS
        assert bytes(topic["topic_id"]) == bytes(cluster._topic_id(TOPIC))
        parts = [{"partition_index": p, "timestamp": spec}
                 for p in range(PARTITIONS) for spec in (-2, -1, -4, -5, -3)]
        resp = client.call(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": parts}]})
        for req, row in zip(parts, resp["topics"][0]["partitions"]):
            records = want[(False, req["partition_index"])]
            end = records[-1].offset + 1
            assert row["error_code"] == 0
            top = max(r.timestamp for r in records)
            expected = {-2: (-1, 0), -1: (-1, end), -4: (-1, end), -5: (-1, end - 1),
                        -3: (top, next(r.offset for r in records if r.timestamp == top))}
            assert (row["timestamp"], row["offset"]) == expected[req["timestamp"]], req
        # by timestamp: the first record at or after it, and its own timestamp
        records = want[(False, 1)]
        probe = records[len(records) // 3]
        first = next(r for r in records if r.timestamp >= probe.timestamp)
        resp = client.call(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [
                {"partition_index": 1, "timestamp": probe.timestamp},
                {"partition_index": 2, "timestamp": 2**62}]}]})
        hit, miss = resp["topics"][0]["partitions"]
        assert (hit["offset"], hit["timestamp"]) == (first.offset, first.timestamp)
        assert (miss["offset"], miss["timestamp"]) == (-1, -1)
        # v0 answers an offsets array: a bucket has no local segments to list, so the one
        # offset of the later versions
        resp = client.call(2, 0, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "timestamp": spec, "max_num_offsets": n}
            for spec, n in ((-2, 5), (-1, 5), (-1, 0), (2**62, 1))]}]})
        end = want[(False, 0)][-1].offset + 1
        assert [row["old_style_offsets"] for row in resp["topics"][0]["partitions"]] == [
            [0], [end], [], []]
        # a fetch past the end: OFFSET_OUT_OF_RANGE with no records
        end = want[(False, 0)][-1].offset + 1
        resp = client.call(1, 12, {
            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "fetch_offset": end + 5, "partition_max_bytes": 1 << 20}]}]})
        row = resp["responses"][0]["partitions"][0]
        assert row["error_code"] == 1 and not memoryview(row["records"]).nbytes
        # Kafka's limits: the first partition whole past max_bytes, the others nothing
        resp = client.call(1, 16, {
            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{
                "topic_id": topic["topic_id"], "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1}
                    for p in range(PARTITIONS)]}]})
        rows = resp["responses"][0]["partitions"]
        sizes = [memoryview(r["records"]).nbytes for r in rows]
        assert sizes[0] > 1 and sizes[1:] == [0] * (PARTITIONS - 1), sizes
        assert [r["high_watermark"] for r in rows] == [
            want[(False, p)][-1].offset + 1 for p in range(PARTITIONS)]
    finally:
        client.close()


def test_a_segment_uploaded_later_is_served_after_a_refresh(cluster, server, want):
    """Runs last in this module: it appends to the source's topic."""
    ends = {p: want[(False, p)][-1].offset + 1 for p in range(PARTITIONS)}
    cluster.produce_and_tier(TOPIC, PARTITIONS, 300, codec="zstd", seed=7)
    more = {p: _records(cluster.fetch(TOPIC, p, ends[p])) for p in range(PARTITIONS)}
    assert all(more.values())
    time.sleep(3 * REFRESH_MS / 1000)
    got = _confluent(server.bootstrap, False, ends,
                     {p: len(more[p]) for p in range(PARTITIONS)}, group="bucket-later")
    for p in range(PARTITIONS):
        assert got.get(p) == more[p], p


def test_offsets_between_segments_are_out_of_range(s3_server, tmp_path):
    """A bucket with a hole (offsets 10-19 never uploaded): reads on either side return
    their records, a read inside the hole is OffsetOutOfRangeError naming the missing
    offsets; ListOffsets answers the kept segments' bounds."""
    from engine.protocol.replica import open_replica

    hand = HandBucket(s3_server)
    try:
        hand.segment(0, 9, [(0, 0)])
        hand.segment(20, 29, [(0, 0), (1, 20)])
        replica = open_replica(hand.url, hand.settings, None, tmp_path)
        try:
            def values(offset):
                result = replica.read("hand", 0, offset, 1 << 20, False)
                return [r.value for b in MemoryRecords(bytes(result.records)).batches()
                        for r in b if r.offset >= offset], result.next_offset

            assert values(0) == ([value_of(o) for o in range(10)], 10)
            assert values(20) == ([value_of(o) for o in range(20, 30)], 30)
            with pytest.raises(OffsetOutOfRangeError, match="offsets 10-19 are missing"):
                replica.read("hand", 0, 12, 1 << 20, False)
            with pytest.raises(OffsetOutOfRangeError, match="out of range"):
                replica.read("hand", 0, 31, 1 << 20, False)
            assert replica.list_offset("hand", 0, -2, False) == (-1, 0, 0)
            assert replica.list_offset("hand", 0, -1, False) == (-1, 30, 1)
            # the hole filled by a later upload: served after a refresh
            hand.segment(10, 19, [(0, 0)])
            replica.refresh()
            assert values(12)[0][:3] == [value_of(o) for o in (12, 13, 14)]
        finally:
            replica.close()
    finally:
        hand.close()


def test_a_consumer_reading_on_needs_no_offset_index(s3_server, tmp_path, monkeypatch):
    """Fetches that go on where the previous one ended start from its end: no offset-index
    lookup for a consumer reading forward, every record still read; a fetch back within
    batches already checked is cut from their rows, and anywhere else takes the index's
    position."""
    from engine.protocol.replica import open_replica
    from engine.remote.checked_batches import CHECKED_BATCHES
    from engine.remote.remote_log import StoreIndexes

    lookups = []
    position = StoreIndexes.position
    monkeypatch.setattr(StoreIndexes, "position",
                        lambda self, md, offset, nonblocking=False: lookups.append(offset)
                        or position(self, md, offset, nonblocking))
    hand = HandBucket(s3_server)
    try:
        hand.segment(0, 29, [(0, 0)])
        replica = open_replica(hand.url, hand.settings, None, tmp_path)
        try:
            offset, got = 0, []
            while offset < 30:  # one batch a fetch
                result = replica.read("hand", 0, offset, 1, False)
                got += [r.value for b in MemoryRecords(bytes(result.records)).batches()
                        for r in b if r.offset >= offset]
                assert result.next_offset > offset
                offset = result.next_offset
            assert got == [value_of(o) for o in range(30)]
            assert lookups == []
            # a read back within the batches read is cut from their checked rows; without
            # them (another process, rows evicted) it takes the index's position
            result = replica.read("hand", 0, 17, 1, False)
            assert lookups == []
            CHECKED_BATCHES.clear()
            result = replica.read("hand", 0, 17, 1, False)
            assert lookups == [17]
            values = [r.offset for b in MemoryRecords(bytes(result.records)).batches()
                      for r in b]
            assert values[0] <= 17 <= values[-1]
        finally:
            replica.close()
    finally:
        hand.close()


def test_serve_bucket_arguments(tmp_path, s3_server):
    """Bad arguments are one `error:` line and exit status 2, before anything listens."""
    import subprocess
    import sys

    def serve(*args):
        return subprocess.run([sys.executable, "-m", "engine", "serve", *args],
                              capture_output=True, text=True, timeout=120, check=False)

    url = f"s3://{s3_server.buckets[0]}/nothing-here/"
    for args, message in (
            (["--bucket", url], "--state-dir"),
            (["--bucket", url, "--state-dir", str(tmp_path), "--store", "novalue"],
             "expected KEY=VALUE"),
            (["--bucket", "http://x/y", "--state-dir", str(tmp_path)], "s3://<bucket>"),
            (["--store", "a=b", "--config", str(tmp_path / "none.properties")],
             "only with --bucket"),
            ([], "--config")):
        run = serve(*args)
        assert run.returncode == 2 and run.stderr.startswith("error: "), (args, run.stderr)
        assert message in run.stderr, (args, run.stderr)


def test_serve_bucket_on_a_store_that_does_not_answer_exits_1(tmp_path):
    """A store nothing answers at (the first listing fails on the connection) is a failing
    tier, exit status 1 naming the bucket's URL, as `run` and `export` treat one; a bad
    argument stays exit status 2 (above)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a loopback port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "serve.properties"
    config.write_text("listeners=PLAINTEXT://127.0.0.1:0\n")
    run = subprocess.run(
        [sys.executable, "-m", "engine", "serve", "--config", str(config),
         "--bucket", "s3://nobody/prefix", "--state-dir", str(tmp_path / "state"),
         "--store", f"storage.s3.endpoint.url=http://127.0.0.1:{port}",
         "--store", "storage.s3.region=us-east-1",
         "--store", "storage.aws.access.key.id=AKIDEXAMPLE",
         "--store", "storage.aws.secret.access.key=not-a-real-secret"],
        capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1, run.stderr
    assert run.stderr.startswith("error: RemoteStorageError: "), run.stderr
    assert "s3://nobody/prefix" in run.stderr and "(io)" in run.stderr, run.stderr
    assert "not-a-real-secret" not in run.stderr


def test_serve_bucket_on_a_store_that_refuses_the_listing_exits_2(tmp_path, s3_server):
    """A store that answers but refuses the first listing (no such bucket, a wrong secret)
    is a bad `--bucket` or `--store`: exit status 2, one line naming the bucket, no secret."""
    import subprocess
    import sys

    config = tmp_path / "serve.properties"
    config.write_text("listeners=PLAINTEXT://127.0.0.1:0\n")
    settings = {k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"}
    for url, extra in (("s3://no-such-bucket/prefix", {}),
                       (f"s3://{s3_server.buckets[0]}/prefix",
                        {"storage.aws.secret.access.key": "a-wrong-secret"})):
        store = [a for k, v in {**settings, **extra}.items() for a in ("--store", f"{k}={v}")]
        run = subprocess.run(
            [sys.executable, "-m", "engine", "serve", "--config", str(config), "--bucket", url,
             "--state-dir", str(tmp_path / "state"), *store],
            capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 2, run.stderr
        assert run.stderr.startswith("error: ") and "cannot be listed" in run.stderr
        assert url in run.stderr and "a-wrong-secret" not in run.stderr, run.stderr


def test_a_failed_listing_keeps_serving_what_was_listed(s3_server, fault_proxy, tmp_path):
    """The store failing every request for a while: each refresh fails with a warning, the
    partitions listed before are still answered, and the next listing after the store is
    back serves a segment uploaded meanwhile."""
    import sys

    from fault_proxy import Fault

    hand = HandBucket(s3_server)
    try:
        hand.segment(0, 9, [(0, 0)])
        settings = {**hand.settings, "storage.s3.endpoint.url": fault_proxy.endpoint}
        store = [a for k, v in settings.items() for a in ("--store", f"{k}={v}")]
        config = tmp_path / "node.properties"
        config.write_text("listeners=PLAINTEXT://127.0.0.1:0\n")
        proc = BucketServe([sys.executable, "-m", "engine", "serve", "--bucket", hand.url,
                            *store, "--config", str(config), "--state-dir",
                            str(tmp_path / "state"), "--refresh-interval-ms", "200"])
        try:
            def latest():
                client = _Client(proc.port)
                try:
                    resp = client.call(2, 1, {"replica_id": -1, "topics": [
                        {"name": "hand", "partitions": [{"partition_index": 0,
                                                         "timestamp": -1}]}]})
                finally:
                    client.close()
                return resp["topics"][0]["partitions"][0]["offset"]

            assert latest() == 10
            fault_proxy.add(Fault("status", status=500, times=None))
            hand.segment(10, 19, [(0, 0)])  # written to the store directly
            deadline = time.monotonic() + 60
            while "not listed again" not in proc.output() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "not listed again" in proc.output()
            assert latest() == 10 and proc.proc.poll() is None
            fault_proxy.clear()
            deadline = time.monotonic() + 60
            while latest() != 20 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert latest() == 20
        finally:
            assert proc.stop() == 0, proc.output()
        assert "Traceback" not in proc.output(), proc.output()
    finally:
        hand.close()


def test_stray_objects_are_reported_once_and_skipped(s3_server, tmp_path, caplog):
    """A segment of partition 0 under another topic id, and a key that is no segment
    object: each is logged once, and every partition is still served (partition 0 under
    the id its topic's other partition has)."""
    from engine.common import Uuid
    from engine.protocol.replica import open_replica

    hand = HandBucket(s3_server)
    try:
        for p in (0, 1):
            hand.segment(0, 9, [(0, 0)], partition=p)
        live_id = hand.topic_id
        hand.topic_id = Uuid.random()  # a foreign upload: the topic under another id
        hand.segment(0, 5, [(0, 0)], partition=0)
        hand.put_raw(f"{hand.prefix}not-a-segment.bin", b"x")
        with caplog.at_level(logging.WARNING, logger="engine.protocol.replica"):
            replica = open_replica(hand.url, hand.settings, None, tmp_path)
            try:
                replica.refresh()
                assert replica.topics() == {"hand": [0, 1]}
                assert replica.partition("hand", 0).tip.topic_id == live_id
                for p in (0, 1):
                    result = replica.read("hand", p, 0, 1 << 20, False)
                    assert result.next_offset == 10, p
            finally:
                replica.close()
        warnings = [r.getMessage() for r in caplog.records
                    if r.name == "engine.protocol.replica"]
        assert len(warnings) == 2, warnings  # once each, over two listings
        assert any("not-a-segment.bin" in w for w in warnings)
        assert any(str(hand.topic_id) in w and str(live_id) in w for w in warnings)
    finally:
        hand.close()
