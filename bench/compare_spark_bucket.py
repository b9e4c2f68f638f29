"""The `kafka-tiered` Spark source reading a bucket alone (`bucket` option, SeaweedFS on
loopback) against the same scan of the filesystem tier, in one local Spark session.

    .venv/bin/python bench/compare_spark_bucket.py                    # 2 x 1 GiB
    .venv/bin/python bench/compare_spark_bucket.py --mb 256 --rounds 3 --markdown /tmp/b.md

Data: bench/compare_spark.py's topic (bench/segment.py records, --partitions partitions of
--mb uncompressed MiB, 16 MiB segments), appended twice by the engine's LogManager and
tiered by RemoteLogManager.run_once(): once into the filesystem tier, once into the
object-store tier (the Aiven plugin's layout, the engine's default chunk size) on a
SeaweedFS server started here (tests/s3_server.py). The bucket side reads with no broker
config and no RLMM: the source lists the bucket and reads the manifests itself.

The scan: count(*) and sum(length(value)) of every record, so every row is materialised in
the JVM; both sides must return the same two numbers. Scans last seconds, not a fraction of
one, so a job's fixed cost does not hide the read path.

(a) bucket vs filesystem tier, local[2], the default maxBytesPerPartition. Target >= 0.9x.
(b) local[2] vs local[1] (a new session each), both tiers. Target >= 1.6x.
(c) maxBytesPerPartition sweep (--sweep MiB values), both tiers, local[2].
Also: the driver's planning time (plan_scan in this process) per tier, and the time of a
task's read and decode alone (scan_ranges in this process, no Spark) per tier, with the CPU
seconds it took in this process (every thread: the object store client's too) and in the
S3 server, which on this machine shares the cores Spark and the reader run on.

CPU per GiB of the tiered .log bytes a scan reads, per process, for every scan of (a) and
(b): the Python workers (the JVM's pyspark children, with the children they reaped), the
JVM, the S3 server (/proc/<pid>/stat, every thread). Python workers' CPU per GiB, bucket /
filesystem tier at local[2]: target <= 1.2x. And (b) again with the S3 server's CPU
subtracted: at local[2] both cores are busy, so the server's CPU seconds during a scan took
half as many seconds of its wall time (two cores); the local[2] wall time less that, against
local[1]'s (where the server ran on the core Spark left idle). Target >= 1.6x.

Contenders alternate (A B B A ...) and medians of --rounds are kept: on a shared, noisy
2-vCPU machine only ratios measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from bench.compare_spark import TOPIC, session, tier_data
from bench.cpu import GiB, cmdline, descendants, process_cpu, spread

PREFIX = "spark-bench/"
SIDES = ("filesystem", "bucket")


def reader(spark, side: str, sources: dict, max_bytes: int):
    r = spark.read.format("kafka-tiered").option("subscribe", TOPIC) \
        .option("maxBytesPerPartition", str(max_bytes))
    for k, v in sources[side].items():
        r = r.option(k, v)
    return r.load()


def timed_scan(spark, side: str, sources: dict, max_bytes: int) -> tuple[float, tuple]:
    t = time.perf_counter()
    row = reader(spark, side, sources, max_bytes) \
        .selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    return time.perf_counter() - t, (row["n"], row["bytes"])


def spark_cpu() -> tuple[float, float]:
    """(Python workers', the JVM's) CPU seconds so far. The workers are the JVM's children
    (pyspark.daemon and what it forks, data source planners): their own time and what each
    reaped; what the JVM reaped (its exited Python children) counts as the workers' too."""
    workers = jvm = 0.0
    for pid in descendants(os.getpid()):
        program = cmdline(pid).split(" ", 1)
        try:
            if program[0].endswith("java"):
                own = process_cpu(pid)
                jvm += own
                workers += process_cpu(pid, reaped=True) - own
            elif "pyspark" in program[-1]:
                workers += process_cpu(pid, reaped=True)
        except OSError:
            continue  # gone meanwhile
    return workers, jvm


def rounds(spark, sources: dict, max_bytes: int, n: int, expected: tuple,
           server_pid: int = 0, cpu: dict | None = None) -> dict:
    """Median seconds per side, the order alternating each round; with `cpu`, each scan's
    (seconds, Python workers' CPU s, JVM CPU s, S3 server CPU s) appended per side."""
    times: dict[str, list[float]] = {s: [] for s in SIDES}
    for i in range(n):
        for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
            before = (*spark_cpu(), process_cpu(server_pid)) if cpu is not None else ()
            secs, got = timed_scan(spark, side, sources, max_bytes)
            assert got == expected, (side, got, expected)
            times[side].append(secs)
            if cpu is not None:
                after = (*spark_cpu(), process_cpu(server_pid))
                cpu.setdefault(side, []).append(
                    (secs, *(a - b for a, b in zip(after, before))))
    return {s: statistics.median(t) for s, t in times.items()}


def in_process(sources: dict, max_bytes: int, server_pid: int) -> dict:
    """Per side: seconds of the driver's planning, and of every task's read + decode run
    one after the other in this process (no Spark, no JVM: the read path alone), with the
    CPU seconds of this process and of the S3 server meanwhile."""
    from engine.scan.schema import arrow_schema
    from engine.scan.tasks import scan_ranges
    from engine.spark.options import parse_options
    from engine.spark.source import plan_scan

    out = {}
    for side in SIDES:
        opts = parse_options({**sources[side], "subscribe": TOPIC,
                              "maxBytesPerPartition": str(max_bytes)})
        t = time.perf_counter()
        tasks = plan_scan(opts)
        plan = time.perf_counter() - t
        t, cpu, server = time.perf_counter(), time.process_time(), process_cpu(server_pid)
        rows = sum(b.num_rows for task in tasks for b in scan_ranges(
            task.ranges, opts.broker_properties, arrow_schema(False)))
        out[side] = (plan, time.perf_counter() - t, rows, len(tasks),
                     time.process_time() - cpu, process_cpu(server_pid) - server)
    return out


def build(base: Path, s3, args) -> dict:
    """The options of each side's reader."""
    fs = tier_data(base / "fs", args.partitions, args.mb, args.codec)
    tier_data(base / "s3", args.partitions, args.mb, args.codec, tier={
        "remote.log.storage.manager.class.name":
            "io.aiven.kafka.tieredstorage.RemoteStorageManager",
        "rsm.config.key.prefix": PREFIX,
        **{f"rsm.config.{k}": v for k, v in s3.config().items()}})
    settings = {k: v for k, v in s3.config().items() if k != "storage.s3.bucket.name"}
    return {"filesystem": fs,
            "bucket": {"bucket": f"s3://{s3.buckets[0]}/{PREFIX}", **settings}}


def main(argv=None) -> int:
    from s3_server import S3Server

    from engine.spark.options import DEFAULT_MAX_BYTES_PER_PARTITION

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=1024, help="uncompressed MiB per partition")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--codec", default="none")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sweep", default="64,128,256", help="MiB values for (c); empty: skip")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)
    default = DEFAULT_MAX_BYTES_PER_PARTITION
    base = Path(tempfile.mkdtemp(prefix="compare_spark_bucket-"))
    lines: list[str] = []

    def out(line=""):
        print(line, flush=True)
        lines.append(line)

    try:
        with S3Server(base / "weed") as s3:
            t = time.perf_counter()
            sources = build(base, s3, args)
            setup = time.perf_counter() - t
            spark = session(2)
            _, expected = timed_scan(spark, "filesystem", sources, default)  # warm-up
            out(f"data: {args.partitions} partitions x {args.mb} MiB ({args.codec}), "
                f"{expected[0]:,} rows, {expected[1]:,} value bytes; set-up {setup:.0f} s; "
                f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; medians of "
                f"{args.rounds}")
            out()
            cpu2: dict = {}
            cpu1: dict = {}
            two = rounds(spark, sources, default, args.rounds, expected, s3.proc.pid, cpu2)
            sweep = {mib: rounds(spark, sources, mib << 20, args.rounds, expected)
                     for mib in (int(x) for x in args.sweep.split(",") if x.strip())}
            spark.stop()
            spark = session(1)
            one = rounds(spark, sources, default, args.rounds, expected, s3.proc.pid, cpu1)
            spark.stop()
            alone = in_process(sources, default, s3.proc.pid)
            report(out, expected[0], default, two, one, sweep, alone)
            log_bytes = sum(f.stat().st_size for f in (base / "fs" / "tier").rglob("*.log"))
            cpu_report(out, log_bytes, cpu2, cpu1)
            out(f"\nload at the end {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


def report(out, rows: int, default: int, two: dict, one: dict, sweep: dict, alone: dict):
    ratio = two["filesystem"] / two["bucket"]
    out(f"| (a) scan, local[2], {default >> 20} MiB a task | seconds | rows/s | ratio |")
    out("|---|---|---|---|")
    out(f"| filesystem tier | {two['filesystem']:.2f} | {rows / two['filesystem']:,.0f} "
        "| 1.00x |")
    out(f"| bucket (SeaweedFS) | {two['bucket']:.2f} | {rows / two['bucket']:,.0f} | "
        f"{ratio:.2f}x (target >= 0.9x: {'met' if ratio >= 0.9 else 'missed'}) |")
    out()
    out("| (b) local[2] / local[1] | local[1] rows/s | local[2] rows/s | ratio |")
    out("|---|---|---|---|")
    for side in SIDES:
        scale = one[side] / two[side]
        out(f"| {side} | {rows / one[side]:,.0f} | {rows / two[side]:,.0f} | {scale:.2f}x "
            f"(target >= 1.6x: {'met' if scale >= 1.6 else 'missed'}) |")
    if sweep:
        out()
        out("| (c) maxBytesPerPartition, local[2] | filesystem rows/s | bucket rows/s | "
            "bucket / filesystem |")
        out("|---|---|---|---|")
        for mib, t in sweep.items():
            out(f"| {mib} MiB | {rows / t['filesystem']:,.0f} | {rows / t['bucket']:,.0f} | "
                f"{t['filesystem'] / t['bucket']:.2f}x |")
    out()
    out("| without Spark, one thread | planning s | tasks | read + decode s | rows/s | "
        "CPU s, reader | CPU s, S3 server |")
    out("|---|---|---|---|---|---|---|")
    for side in SIDES:
        plan, scan, n, tasks, cpu, server = alone[side]
        out(f"| {side} | {plan:.3f} | {tasks} | {scan:.2f} | {n / scan:,.0f} | {cpu:.2f} | "
            f"{server:.2f} |")


def cpu_report(out, log_bytes: int, cpu2: dict, cpu1: dict) -> None:
    """CPU seconds per GiB of tiered .log bytes scanned, per process kind, and the
    local[2] / local[1] wall-time ratio with the S3 server's CPU subtracted."""
    out()
    out(f"CPU s per GiB of tiered .log bytes ({log_bytes / GiB:.2f} GiB a scan), median "
        "(range) of the scans; wall-clock ratios above were taken under shared load")
    out()
    out("| scan | Python workers | JVM | S3 server |")
    out("|---|---|---|---|")

    def per_gib(rows, i):
        return [r[i] * GiB / log_bytes for r in rows]

    for cores, cpu in (("local[2]", cpu2), ("local[1]", cpu1)):
        for side in SIDES:
            out(f"| {side}, {cores} | " + " | ".join(
                spread(per_gib(cpu[side], i)) for i in (1, 2, 3)) + " |")
    ratio = statistics.median(per_gib(cpu2["bucket"], 1)) / statistics.median(
        per_gib(cpu2["filesystem"], 1))
    out()
    out(f"Python workers' CPU per GiB, bucket / filesystem tier, local[2]: {ratio:.2f}x "
        f"(target <= 1.2x: {'met' if ratio <= 1.2 else 'missed'})")
    out()
    out("| local[2] / local[1] wall | measured | S3 server's CPU subtracted | cores the "
        "scan kept busy (workers + JVM), local[1] / local[2] |")
    out("|---|---|---|---|")
    for side in SIDES:
        one = statistics.median(r[0] for r in cpu1[side])
        two = statistics.median(r[0] for r in cpu2[side])
        # at local[2] both cores are busy: the server's CPU seconds took that much /2 of
        # the scan's wall time; at local[1] it ran on the core Spark left idle
        adjusted = statistics.median(r[0] - r[3] / 2 for r in cpu2[side])
        scale = one / adjusted
        busy = [statistics.median((r[1] + r[2]) / r[0] for r in c[side]) for c in (cpu1, cpu2)]
        out(f"| {side} | {one / two:.2f}x | {scale:.2f}x (target >= 1.6x: "
            f"{'met' if scale >= 1.6 else 'missed'}) | {busy[0]:.2f} / {busy[1]:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
