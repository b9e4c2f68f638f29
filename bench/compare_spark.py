"""Side by side: the `kafka-tiered` Spark source against a reference Python data source
that yields pre-built Arrow batches of the same schema, in one local Spark session.

    /work/venv/bin/python bench/compare_spark.py                 # 64 MiB per partition
    /work/venv/bin/python bench/compare_spark.py --mb 256 --markdown /tmp/spark.md

Data: bench/segment.py's realistic records (batches of 100, values 100-1000 B, one header,
uncompressed or --codec), appended by the engine's LogManager to --partitions partitions
and tiered by RemoteLogManager.run_once() into a filesystem tier. Every scan is a full
read with the headers column into Spark's `noop` sink (the rows are materialized in the
JVM, nothing is written).

(a) rows/s of `kafka-tiered` vs the reference source: the same number of input partitions,
    each yielding the Arrow batches our own decode produced for it, read back from an Arrow
    IPC file memory-mapped by the worker (no decoding left, so it measures what Spark's
    Arrow ingestion allows). Target: >= 0.9x the reference.
(b) scan rows/s at local[2] vs local[1] (a new session each). Target: >= 1.6x.
(c) maxBytesPerPartition sweep at local[2], to pick the default.

Contenders alternate (A B A B ...) and the best of --rounds is kept: on a shared, noisy
2-vCPU machine only ratios measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = Path(__file__).resolve().parent.parent
TOPIC = "bench"


def tier_data(base: Path, partitions: int, mb: int, codec: str, tier: dict | None = None
              ) -> dict:
    """Produces and tiers the bench topic; returns the broker properties. `tier`: the RSM's
    properties (class name, `rsm.config.*`) instead of the filesystem tier's."""
    from bench.segment import segment
    from engine.config import BrokerConfig
    from engine.log.log_manager import LogManager
    from engine.records import scan_batches
    from engine.rlm import RemoteLogManager

    dirs = [base / "logs"]
    dirs[0].mkdir(parents=True)
    (base / "tier").mkdir(exist_ok=True)
    props = {"log.dirs": str(dirs[0]), "remote.log.storage.system.enable": "true",
             **(tier or {"rsm.config.dirs": str(base / "tier"), "rsm.config.fsync": "false"})}
    config = BrokerConfig(props)
    data = segment(codec, mb << 20)
    heads = scan_batches(data, verify_crc=False).headers
    manager = LogManager(dirs, broker_config=config, topic_defaults={
        "segment.bytes": 16 << 20, "retention.ms": -1, "remote.storage.enable": True})
    try:
        for p in range(partitions):
            manager.get_or_create_log(TOPIC, p)
            for pos, size in zip(heads["position"], heads["size"]):
                manager.append_as_leader(TOPIC, p, data[pos:pos + size], 0)
            manager.get_log(TOPIC, p).roll()
        rlm = RemoteLogManager.from_config(config, manager)
        try:
            while rlm.run_once().copied_segments:
                pass
        finally:
            rlm.close()
    finally:
        manager.shutdown()
    return props


def session(cores: int):
    os.environ.update({"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                       "PYTHONPATH": os.pathsep.join(
                           p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)})
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("compare_spark")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from engine.spark import register

    register(spark)
    return spark


def build_reference(props: dict, ipc_dir: Path, max_bytes: int) -> int:
    """Decodes what `kafka-tiered` would read, task by task, into Arrow IPC files (one per
    input partition). Returns the number of partitions."""
    import pyarrow as pa

    from engine.scan.schema import arrow_schema
    from engine.scan.tasks import scan_ranges
    from engine.spark.options import parse_options
    from engine.spark.source import plan_scan

    opts = parse_options({**props, "subscribe": TOPIC, "includeHeaders": "true",
                          "maxBytesPerPartition": str(max_bytes)})
    schema = arrow_schema(True)
    tasks = plan_scan(opts)
    for i, task in enumerate(tasks):
        with pa.OSFile(str(ipc_dir / f"part-{i}.arrow"), "wb") as sink, \
                pa.ipc.new_file(sink, schema) as writer:
            for batch in scan_ranges(task.ranges, opts.broker_properties, schema):
                writer.write_batch(batch)
    return len(tasks)


def reference_source():
    """A Python data source yielding pre-built Arrow batches (the ceiling for any Python
    source with this schema)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from engine.scan.schema import spark_ddl

    class Reader(DataSourceReader):
        def __init__(self, directory):
            self.directory = directory

        def partitions(self):
            files = sorted(Path(self.directory).glob("part-*.arrow"))
            return [InputPartition(str(f)) for f in files]

        def read(self, partition):
            import pyarrow as pa

            with pa.memory_map(partition.value) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    class Reference(DataSource):
        @classmethod
        def name(cls):
            return "prebuilt-arrow"

        def schema(self):
            return spark_ddl(True)

        def reader(self, schema):
            return Reader(self.options["path"])

    return Reference


def timed_scan(df) -> float:
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def ours(spark, props, max_bytes, decode_ahead=True):
    reader = spark.read.format("kafka-tiered").option("subscribe", TOPIC) \
        .option("includeHeaders", "true").option("maxBytesPerPartition", str(max_bytes)) \
        .option("decodeAhead", str(decode_ahead).lower())
    for k, v in props.items():
        reader = reader.option(k, v)
    return reader.load()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="uncompressed MiB per partition")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--codec", default="none")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-bytes", type=int, default=None,
                    help="maxBytesPerPartition (default: the source's default)")
    ap.add_argument("--sweep", default="16,64,256", help="MiB values for (c); empty: skip")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)

    from engine.spark.options import DEFAULT_MAX_BYTES_PER_PARTITION

    max_bytes = args.max_bytes or DEFAULT_MAX_BYTES_PER_PARTITION
    base = Path(tempfile.mkdtemp(prefix="compare_spark-"))
    lines = []

    def out(line=""):
        print(line, flush=True)
        lines.append(line)

    try:
        t = time.perf_counter()
        props = tier_data(base, args.partitions, args.mb, args.codec)
        ipc = base / "ipc"
        ipc.mkdir()
        tasks = build_reference(props, ipc, max_bytes)
        spark = session(2)
        rows = ours(spark, props, max_bytes).count()
        out(f"data: {args.partitions} partitions x {args.mb} MiB ({args.codec}), {rows:,} rows, "
            f"{tasks} input partitions at maxBytesPerPartition={max_bytes >> 20} MiB; "
            f"set-up {time.perf_counter() - t:.0f} s; {os.cpu_count()} CPUs, load "
            f"{os.getloadavg()[0]:.1f}")
        out()
        spark.dataSource.register(reference_source())
        ref_df = spark.read.format("prebuilt-arrow").option("path", str(ipc)).load()
        assert ref_df.count() == rows
        contenders = {
            "kafka-tiered": lambda: ours(spark, props, max_bytes),
            "reference": lambda: ref_df,
            "kafka-tiered, decodeAhead=false": lambda: ours(spark, props, max_bytes, False),
        }
        best = dict.fromkeys(contenders, float("inf"))
        names = list(contenders)
        for i in range(args.rounds):  # the order rotates so no contender always goes first
            for name in names[i % 3:] + names[:i % 3]:
                best[name] = min(best[name], timed_scan(contenders[name]()))
        ratio = best["reference"] / best["kafka-tiered"]
        out("| (a) full scan, local[2] | rows/s | ratio |")
        out("|---|---|---|")
        out(f"| reference (pre-built Arrow) | {rows / best['reference']:,.0f} | 1.00x |")
        out(f"| kafka-tiered | {rows / best['kafka-tiered']:,.0f} | {ratio:.2f}x "
            f"(target >= 0.9x: {'met' if ratio >= 0.9 else 'missed'}) |")
        serial = best["kafka-tiered, decodeAhead=false"]
        out(f"| kafka-tiered, decodeAhead=false | {rows / serial:,.0f} | "
            f"{best['reference'] / serial:.2f}x |")
        out()

        sweep = {}
        for mib in [int(x) for x in args.sweep.split(",") if x.strip()]:
            sweep[mib] = min(timed_scan(ours(spark, props, mib << 20))
                             for _ in range(args.rounds))
        two = best["kafka-tiered"]
        spark.stop()

        spark = session(1)
        one = min(timed_scan(ours(spark, props, max_bytes)) for _ in range(args.rounds))
        spark.stop()
        scale = one / two
        out("| (b) kafka-tiered full scan | rows/s | ratio |")
        out("|---|---|---|")
        out(f"| local[1] | {rows / one:,.0f} | 1.00x |")
        out(f"| local[2] | {rows / two:,.0f} | {scale:.2f}x "
            f"(target >= 1.6x: {'met' if scale >= 1.6 else 'missed'}) |")
        if sweep:
            out()
            out("| (c) maxBytesPerPartition, local[2] | rows/s |")
            out("|---|---|")
            for mib, secs in sweep.items():
                out(f"| {mib} MiB | {rows / secs:,.0f} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
