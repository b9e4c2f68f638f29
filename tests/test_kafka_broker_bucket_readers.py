"""One bucket, every reader: a real Kafka 4.x broker tiers a topic through the plugin (the
engine as its RemoteStorageManager) into the test bucket, then stops; with no broker, the
bucket is read by the `kafka-tiered` Spark source, `engine.arrow`, `serve --bucket` (Kafka's
Java consumer and confluent-kafka) and `scrub`. Every reader's rows equal what Kafka's Java
consumer read from the broker before it stopped, over the offsets the bucket holds.

The topic: partition 0 produced uncompressed, partition 1 with zstd, both in transactions of
which every other one is aborted, so aborted transactions span segment boundaries. The
broker's tier compresses with the plugin's heuristic (`compression.enabled` and
`compression.heuristic.enabled`): a segment whose first batch is uncompressed is stored as
the plugin's zstd chunks, the others as they are, so the bucket holds both. The readers that
take a metadata source read Kafka's own `__remote_log_metadata` partitions from the
stopped broker's log dir, and once more the objects alone (leader-epoch lineage).

The bucket holds the offsets up to the broker's last tiered offset (latest-tiered); the rest
stayed in the broker's active segment. read_committed through the bucket alone also stops at
the tier's last stable offset: the first offset of a transaction whose marker was not
tiered."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka_cluster import run_client
from kafka_tiered_support import (
    TIERED_TOPIC,
    consume,
    offsets,
    record_view,
    segment_keys,
    tiered_cluster,
    wait_until,
)
from serve_support import ROOT, ServeProcess
from spark_support import arrow_rows

from engine.arrow import read_topic

TOPIC = "readers"
PARTITIONS = (0, 1)
CODECS = {0: "none", 1: "zstd"}
RECORDS = 1200  # per partition
ISOLATIONS = ("read_uncommitted", "read_committed")
# small segments (Kafka's test-only topic config under segment.bytes' 1 MiB floor): several
# per partition, zstd batches included, from little data
SEGMENT_BYTES = 128 << 10
DEADLINE_S = 90


@dataclass
class Tiered:
    """The broker's bucket after the broker stopped, and what its Java consumer read."""

    url: str
    store: dict  # the store's settings, the plugin's names without `rsm.config.`
    metadata_dir: Path  # the broker's log dir, holding `__remote_log_metadata-<N>`
    consumed: dict  # isolation -> the Java consumer's records, from the broker
    latest_tiered: dict  # partition -> the last offset in the bucket
    tier_lso: dict  # partition -> the first offset read_committed cannot pass in the bucket
    segment_starts: dict  # partition -> the start offsets of its segments in the bucket
    transactions: dict  # (partition, transaction) -> (first offset, marker offset, committed)

    def end(self, isolation: str) -> dict[int, int]:
        """Partition -> where a reader of the bucket alone stops: the offset after the last
        tiered one, or (read_committed) the tier's last stable offset."""
        if isolation == "read_committed":
            return dict(self.tier_lso)
        return {p: o + 1 for p, o in self.latest_tiered.items()}

    def want(self, isolation: str) -> list[tuple]:
        """What a reader of the bucket alone must return: the broker's records below
        `end`."""
        end = self.end(isolation)
        return record_view(r for r in self.consumed[isolation]
                           if r["offset"] < end[r["partition"]])


def _produce(broker, partition: int, base_timestamp: int) -> list[dict]:
    return broker.run_client(
        ["produce", "--topic", TOPIC, "--partition", str(partition), "--count", str(RECORDS),
         "--seed", str(20 + partition), "--value-size", "1000",
         "--compression", CODECS[partition], "--transactional-id", f"readers-{partition}",
         "--transaction-size", "40", "--abort-every", "2",
         "--base-timestamp", str(base_timestamp), "--timestamp-step", "10"], timeout=180)


def _local_logs(broker, partition: int) -> list[int]:
    d = broker.node(1).data_dir / f"{TOPIC}-{partition}"
    return sorted(int(f.name[:-len(".log")]) for f in d.iterdir() if f.name.endswith(".log"))


def _wait_all_closed_segments_tiered(broker) -> dict[int, int]:
    """latest-tiered per partition, once every segment but the active one is in the bucket
    and gone from the broker's disk."""
    def done():
        got = offsets(broker, TOPIC, PARTITIONS, "latest-tiered", "earliest-local")
        for p in PARTITIONS:
            logs = _local_logs(broker, p)
            if len(logs) != 1 or got[("latest-tiered", p)] + 1 != logs[0] \
                    or got[("earliest-local", p)] != logs[0]:
                return None
        return {p: got[("latest-tiered", p)] for p in PARTITIONS}
    return wait_until(f"{TOPIC}'s closed segments to be tiered", done, 180, 1.0)


def _transactions(produced: list[dict]) -> dict[tuple[int, int], tuple[int, int, bool]]:
    """(partition, transaction) -> (first offset, marker offset, committed). One producer
    per partition: a transaction's marker is the offset after its last record."""
    out: dict[tuple[int, int], tuple[int, int, bool]] = {}
    for r in produced:
        key = (r["partition"], r["transaction"])
        first, marker, committed = out.get(key, (r["offset"], r["offset"] + 1, r["committed"]))
        out[key] = (min(first, r["offset"]), max(marker, r["offset"] + 1), committed)
    return out


def _tier_lso(transactions, latest_tiered: dict[int, int]) -> dict[int, int]:
    lso = {p: o + 1 for p, o in latest_tiered.items()}
    for (p, _), (first, marker, _) in transactions.items():
        if first <= latest_tiered[p] < marker:  # its outcome is not in the bucket
            lso[p] = min(lso[p], first)
    return lso


@pytest.fixture(scope="module")
def tiered(tmp_path_factory, s3_server) -> Tiered:
    broker = tiered_cluster(tmp_path_factory.mktemp("kafka-readers"), s3_server,
                            **{"rsm.config.compression.enabled": "true",
                               "rsm.config.compression.heuristic.enabled": "true"})
    with broker:
        configs = {**TIERED_TOPIC, "internal.segment.bytes": str(SEGMENT_BYTES)}
        broker.run_client(["create-topic", "--topic", TOPIC, "--partitions", "2",
                           *[w for k, v in configs.items() for w in ("--config", f"{k}={v}")]])
        now = int(time.time() * 1000)
        produced = [r for p in PARTITIONS for r in _produce(broker, p, now)]
        latest_tiered = _wait_all_closed_segments_tiered(broker)
        consumed = {iso: consume(broker, TOPIC, PARTITIONS, "--isolation", iso)
                    for iso in ISOLATIONS}
    # the broker is stopped: from here on the bucket and its log dir are all there is
    assert record_view(consumed["read_uncommitted"]) == record_view(produced)
    assert record_view(consumed["read_committed"]) == record_view(
        r for r in produced if r["committed"])
    segments = segment_keys(s3_server, broker.key_prefix, TOPIC)
    starts = {p: sorted(int(k.split("/")[1].split("-")[0]) for k in segments
                        if int(k.split("/")[0]) == p) for p in PARTITIONS}
    return Tiered(
        url=f"s3://{s3_server.buckets[0]}/{broker.key_prefix}",
        store={k: v for k, v in s3_server.config().items() if k != "storage.s3.bucket.name"},
        metadata_dir=broker.node(1).data_dir, consumed=consumed, latest_tiered=latest_tiered,
        tier_lso=_tier_lso(_transactions(produced), latest_tiered), segment_starts=starts,
        transactions=_transactions(produced))


def test_the_bucket_is_what_the_comparisons_need(tiered, s3_server):
    """Several segments per partition, aborted transactions across segment boundaries,
    both kinds of chunks, and records left on the broker's disk."""
    assert all(len(tiered.segment_starts[p]) >= 3 for p in PARTITIONS), tiered.segment_starts
    aborted = [(first, marker, p) for (p, _), (first, marker, committed)
               in tiered.transactions.items() if not committed]
    assert any(first < start <= marker for first, marker, p in aborted
               for start in tiered.segment_starts[p]), "no aborted transaction spans segments"
    from engine.remote.objectstore.store import ObjectStore, StoreConfig

    store = ObjectStore(StoreConfig.from_configs(s3_server.config()))
    try:
        prefix = tiered.url.split("/", 3)[3]
        compression = {json.loads(store.get(o.key))["compression"]
                       for o in store.list(prefix) if o.key.endswith(".rsm-manifest")}
    finally:
        store.close()
    assert compression == {True, False}
    for p in PARTITIONS:
        last = max(m for (q, _), (_, m, _) in tiered.transactions.items() if q == p)
        assert tiered.latest_tiered[p] < last, "every record was tiered: nothing stays local"


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _views(rows) -> list[tuple]:
    """Rows in the Kafka source's shape (key, value, topic, partition, offset, timestamp,
    timestamp type, headers) as record_view shows the Java consumer's."""
    return sorted((p, offset, ts, _b64(key), _b64(value),
                   tuple((k, _b64(v)) for k, v in headers))
                  for key, value, _, p, offset, ts, _, headers in rows)


@pytest.mark.parametrize("metadata", ["remote_log_metadata", "lineage"])
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_spark_reads_the_bucket(spark, tiered, isolation, metadata):
    """With Kafka's metadata partitions, and from the objects alone (leader-epoch lineage)."""
    reader = (spark.read.format("kafka-tiered").option("bucket", tiered.url)
              .option("subscribe", TOPIC).option("includeHeaders", "true")
              .option("failOnDataLoss", "true")
              .option("readCommitted", str(isolation == "read_committed").lower())
              .option("maxBytesPerPartition", str(256 << 10)))
    if metadata != "lineage":
        reader = reader.option("remoteLogMetadataPath", str(tiered.metadata_dir))
    for k, v in tiered.store.items():
        reader = reader.option(k, v)
    got = _views(arrow_rows(reader.load().toArrow()))
    want = tiered.want(isolation)
    assert len(got) == len(want)
    assert got == want


@pytest.mark.parametrize("metadata", ["remote_log_metadata", "lineage"])
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_engine_arrow_reads_the_bucket(tiered, isolation, metadata):
    """With Kafka's metadata partitions, and from the objects alone (leader-epoch lineage)."""
    source = {"remote_log_metadata": tiered.metadata_dir} if metadata != "lineage" else {}
    with read_topic(TOPIC, bucket=tiered.url, store=tiered.store, include_headers=True,
                    isolation_level=isolation, **source) as stream:
        got = _views(arrow_rows(stream.read_all()))
    want = tiered.want(isolation)
    assert len(got) == len(want)
    assert got == want


def test_scrub_finds_nothing_in_the_bucket(tiered):
    store = [a for k, v in tiered.store.items() for a in ("--store", f"{k}={v}")]
    run = subprocess.run([sys.executable, "-m", "engine", "scrub", "--bucket", tiered.url,
                          *store, "--json"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["findings"] == [] and report["clean"]
    assert report["partitions"] == len(PARTITIONS)
    assert report["segments"] == sum(map(len, tiered.segment_starts.values()))


class BucketServe(ServeProcess):
    @staticmethod
    def command(config):
        return config  # the whole argument list


@pytest.fixture(scope="module")
def server(tiered, tmp_path_factory):
    base = tmp_path_factory.mktemp("readers-serve")
    config = base / "node.properties"
    config.write_text("listeners=PLAINTEXT://127.0.0.1:0\n")  # never a fixed port
    store = [a for k, v in tiered.store.items() for a in ("--store", f"{k}={v}")]
    proc = BucketServe([sys.executable, "-m", "engine", "serve", "--bucket", tiered.url,
                        *store, "--config", str(config), "--state-dir", str(base / "state")])
    yield proc
    assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()


@pytest.mark.parametrize(("isolation", "mode"), [
    ("read_uncommitted", ["--partitions", ",".join(map(str, PARTITIONS))]),
    ("read_committed", ["--subscribe", "--group", "readers-java", "--commit"])],
    ids=["read_uncommitted-assign", "read_committed-group"])
def test_the_java_consumer_reads_serve_bucket(tiered, server, isolation, mode):
    lines = run_client(["consume", "--bootstrap", server.bootstrap, "--topic", TOPIC, *mode,
                        "--isolation", isolation, "--idle-ms", "4000",
                        "--timeout-ms", str(DEADLINE_S * 1000)], timeout=DEADLINE_S + 30)
    assert lines[-1]["type"] == "end" and not lines[-1]["timed_out"], lines[-1]
    got = record_view(r for r in lines if r["type"] == "record")
    want = tiered.want(isolation)
    assert len(got) == len(want)
    assert got == want
    # it stopped where the bucket ends: its high watermark, or its last stable offset
    assert lines[-1]["positions"] == {str(p): o for p, o in tiered.end(isolation).items()}


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_confluent_kafka_reads_serve_bucket(tiered, server, isolation):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    want = tiered.want(isolation)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "readers",
                         "enable.auto.commit": False, "isolation.level": isolation})
    got = []
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in PARTITIONS])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(want) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.timestamp()[1], _b64(m.key()),
                        _b64(m.value()), tuple((k, _b64(v)) for k, v in m.headers() or [])))
        m = consumer.poll(2.0)  # nothing more than the bucket holds
        assert m is None or m.error() is not None, (m.partition(), m.offset())
    finally:
        consumer.close()
    assert len(got) == len(want)
    assert sorted(got) == want
