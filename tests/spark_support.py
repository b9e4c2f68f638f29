"""Helpers of the Spark tests: a real local Spark session (Java required: a missing JDK
fails the tests, it never skips them), topics produced by the engine and tiered by the
RemoteLogManager, and what `engine fetch` returns for them."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
START_TIMESTAMP = 1_700_000_000_000  # produce-demo's first record timestamp


def spark_env() -> dict:
    """Environment for Spark and its Python workers: loopback only, this interpreter,
    the repository importable (the workers import engine and pyspark_kafka_tiered)."""
    env = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), path) if p)
    return env


def require_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = (Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        pytest.fail("Java is missing: the Spark tests need a JDK 17+ (install openjdk-17-jdk "
                    "or set JAVA_HOME); PySpark cannot start without it", pytrace=False)
    return str(java)


def start_spark(cores: int = 2):
    require_java()
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(f"local[{cores}]").appName("engine-spark-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate())


_TOPIC_IDS: dict = {}  # one id per topic per cluster, across produce rounds


class TieredCluster:
    """Log dirs, a filesystem tier and a properties file; topics produced with
    produce-demo's generator and tiered by RemoteLogManager.run_once()."""

    def __init__(self, base: Path, tier_props: dict[str, str] | None = None):
        """`tier_props`: the RSM's properties (class name, `rsm.config.*`) instead of the
        filesystem tier's."""
        self.base = Path(base)
        self.log_dirs = [self.base / "logs-a", self.base / "logs-b"]
        self.tier_dir = self.base / "tier"
        for d in (*self.log_dirs, self.tier_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.props = {
            "log.dirs": ",".join(map(str, self.log_dirs)),
            "remote.log.storage.system.enable": "true",
            **(tier_props or {"rsm.config.dirs": str(self.tier_dir),
                              "rsm.config.fsync": "false"}),
        }
        self.config = self.base / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))

    def produce_and_tier(self, topic: str, partitions: int, records: int, *, codec="zstd",
                         segment_bytes=48 << 10, seed=1) -> None:
        """Appends `records` per partition (transactions, some aborted, two leader epochs)
        and tiers every closed segment."""
        from engine.cli.produce_demo import produce_partition
        from engine.config import BrokerConfig
        from engine.log.log_manager import LogManager
        from engine.records import CompressionType
        from engine.rlm import RemoteLogManager

        config = BrokerConfig(self.props)
        topic_defaults = {"segment.bytes": segment_bytes, "retention.ms": -1,
                          "remote.storage.enable": True}
        manager = LogManager(self.log_dirs, broker_config=config, topic_defaults=topic_defaults)
        try:
            for p in range(partitions):
                if manager.get_log(topic, p) is None:
                    manager.get_or_create_log(topic, p, topic_id=self._topic_id(topic))
                produce_partition(manager, topic, p, records, CompressionType[codec.upper()],
                                  seed + manager.get_log(topic, p).log_end_offset,
                                  start_timestamp=START_TIMESTAMP)
                manager.get_log(topic, p).roll()  # everything produced becomes tierable
            rlm = RemoteLogManager.from_config(config, manager)
            try:
                for _ in range(50):
                    summary = rlm.run_once()
                    assert not summary.errors, summary.errors
                    if summary.copied_segments == 0:
                        break
            finally:
                rlm.close()
        finally:
            manager.shutdown()

    def tier_with_marker_untiered(self, topic: str) -> None:
        """Partition 0 of `topic`: 5 plain records, then 3 records of a transaction; the
        segment rolls; the transaction's ABORT marker lands in the new active segment. The
        RLM tiers the first segment only: the tier ends inside a transaction whose outcome
        it does not hold."""
        from engine.config import BrokerConfig
        from engine.log.log_manager import LogManager
        from engine.records import RecordBatchBuilder, build_end_txn_marker
        from engine.rlm import RemoteLogManager

        config = BrokerConfig(self.props)
        manager = LogManager(self.log_dirs, broker_config=config, topic_defaults={
            "retention.ms": -1, "remote.storage.enable": True})
        try:
            manager.get_or_create_log(topic, 0, topic_id=self._topic_id(topic))
            plain = RecordBatchBuilder()
            for i in range(5):
                plain.append(b"committed-%d" % i, key=b"k", timestamp=START_TIMESTAMP + i)
            manager.append_as_leader(topic, 0, plain.build(), 0)
            txn = RecordBatchBuilder(producer_id=4242, producer_epoch=0, base_sequence=0,
                                     is_transactional=True)
            for i in range(3):
                txn.append(b"aborted-%d" % i, timestamp=START_TIMESTAMP + 10 + i)
            manager.append_as_leader(topic, 0, txn.build(), 0)
            manager.get_log(topic, 0).roll()
            manager.append_as_leader(topic, 0, build_end_txn_marker(
                False, base_offset=0, producer_id=4242, producer_epoch=0,
                timestamp=START_TIMESTAMP + 20), 0)
            rlm = RemoteLogManager.from_config(config, manager)
            try:
                while rlm.run_once().copied_segments:
                    pass
            finally:
                rlm.close()
        finally:
            manager.shutdown()

    def _topic_id(self, topic):
        from engine.common import Uuid

        return _TOPIC_IDS.setdefault((self.base, topic), Uuid.random())

    def fetch(self, topic: str, partition: int, offset: int, *, read_committed=False
              ) -> list[dict]:
        """Every record from `offset` on, as `python -m engine fetch --json` prints it (the
        command run in this process)."""
        from broker_support import engine_in_process

        args = ["fetch", "--config", str(self.config), "--topic", topic, "--partition",
                str(partition), "--offset", str(offset), "--to-end", "--json"]
        if read_committed:
            args += ["--isolation-level", "read_committed"]
        out = engine_in_process(*args).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]


def fetch_row(topic: str, partition: int, r: dict, headers: bool = True) -> tuple:
    """A fetch --json record as the Kafka source's row (timestamp in ms)."""
    def b64(s):
        return None if s is None else base64.b64decode(s)
    row = (b64(r["key"]), b64(r["value"]), topic, partition, r["offset"], r["timestamp"],
           {"CreateTime": 0, "LogAppendTime": 1, "NoTimestampType": -1}[r["timestamp_type"]])
    if headers:
        row += (tuple((k, b64(v)) for k, v in r["headers"]),)
    return row


def arrow_rows(table) -> list[tuple]:
    """Rows of a Spark result (toArrow) in the same shape as fetch_row, sorted."""
    cols = table.to_pydict()
    ts = [None if t is None else int(t.timestamp() * 1000) if hasattr(t, "timestamp") else t
          for t in cols["timestamp"]]
    rows = list(zip(cols["key"], cols["value"], cols["topic"], cols["partition"],
                    cols["offset"], ts, cols["timestampType"]))
    if "headers" in cols:
        rows = [r + (tuple((h["key"], h["value"]) for h in hs),)
                for r, hs in zip(rows, cols["headers"])]
    return sorted(rows, key=lambda r: (r[3], r[4]))


class StreamSink:
    """A streaming query's parquet sink, read back from what it committed (its
    `_spark_metadata` log), never from files still being written."""

    def __init__(self, root: Path):
        self.path = root / "sink"
        self.checkpoint = root / "checkpoint"

    def start(self, df, trigger: dict):
        return (df.writeStream.format("parquet").option("path", str(self.path))
                .option("checkpointLocation", str(self.checkpoint)).trigger(**trigger).start())

    def committed_files(self) -> list[str]:
        files = set()
        log = self.path / "_spark_metadata"
        for entry in sorted(log.glob("*")) if log.exists() else []:
            if entry.name.startswith(".") or entry.suffix == ".crc":
                continue
            for line in entry.read_text().splitlines()[1:]:
                doc = json.loads(line)
                if doc.get("action", "add") == "add":
                    files.add(doc["path"].removeprefix("file://"))
        return sorted(files)

    def table(self, columns=None):
        import pyarrow.dataset as pads

        files = self.committed_files()
        return None if not files else pads.dataset(files, format="parquet").to_table(
            columns=columns)

    def offsets(self) -> list[tuple[int, int]]:
        t = self.table(["partition", "offset"])
        if t is None:
            return []
        return list(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist()))

    def wait_for(self, rows: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.offsets()) >= rows:
                return
            time.sleep(0.5)
        raise AssertionError(f"the stream wrote {len(self.offsets())} rows, expected {rows}")
