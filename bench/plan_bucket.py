"""Planning a bucket alone (engine.remote.bucket): seconds, bytes fetched and GETs of
resolving every partition of bench/compare_spark_bucket.py's topic, on a SeaweedFS server
started here.

    .venv/bin/python bench/plan_bucket.py --mb 256 --rounds 3

Contenders, alternating each round (medians kept; only ratios of one run mean anything on
a shared machine):
- "tails through chunks": each segment's tail read through the chunk reader, as reads of
  records are (whole chunks), i.e. planning before `read_range_once`;
- "exact tails, one by one": partitions resolved one after another (`Bucket.partition`);
- "exact tails, resolve": partitions resolved together (`Bucket.resolve`).
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

import engine.remote.bucket as bucket_module
from bench.compare_spark_bucket import build
from engine.remote.bucket import Bucket
from engine.remote.segment_access import RemoteSegmentReader

CONTENDERS = ("tails through chunks", "exact tails, one by one", "exact tails, resolve")


def _through_chunks(rsm, metadata, nonblocking=False, once=False):
    return RemoteSegmentReader(rsm, metadata, nonblocking)


def plan(url: str, settings: dict, contender: str) -> tuple[float, float, float, int]:
    """(seconds, bytes fetched, GETs, segments kept) of resolving every partition."""
    bucket_module.RemoteSegmentReader = (_through_chunks if contender == CONTENDERS[0]
                                         else RemoteSegmentReader)
    try:
        with Bucket(url, settings) as bucket:
            metrics = bucket.store.metrics
            tips = list(bucket.partitions().values())
            nbytes, gets = metrics.value("object_fetch_bytes"), metrics.value("object_fetch")
            t = time.perf_counter()
            if contender == CONTENDERS[2]:
                bucket.resolve(tips)
            else:
                for tip in tips:
                    bucket.partition(tip)
            secs = time.perf_counter() - t
            kept = sum(len(bucket.partition(tip).chain) for tip in tips)
            return (secs, metrics.value("object_fetch_bytes") - (nbytes or 0),
                    metrics.value("object_fetch") - (gets or 0), kept)
    finally:
        bucket_module.RemoteSegmentReader = RemoteSegmentReader


def main(argv=None) -> int:
    from s3_server import S3Server

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=256, help="uncompressed MiB per partition")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--codec", default="none")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="plan_bucket-"))
    try:
        with S3Server(base / "weed") as s3:
            source = build(base, s3, args)["bucket"]
            url = source.pop("bucket")
            runs: dict[str, list] = {c: [] for c in CONTENDERS}
            for i in range(args.rounds):
                for c in (CONTENDERS if i % 2 == 0 else CONTENDERS[::-1]):
                    runs[c].append(plan(url, source, c))
            print(f"{args.partitions} partitions x {args.mb} MiB ({args.codec}); "
                  f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; medians of "
                  f"{args.rounds}\n")
            print("| planning | seconds | bytes fetched | GETs | segments |")
            print("|---|---|---|---|---|")
            for c, rs in runs.items():
                secs = statistics.median(r[0] for r in rs)
                print(f"| {c} | {secs:.3f} | {rs[0][1] / 1e6:,.2f} MB | {int(rs[0][2])} | "
                      f"{rs[0][3]} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
