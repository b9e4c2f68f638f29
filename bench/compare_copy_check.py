"""The copier's batch check (LogSegment.verify_batches: framing, every batch CRC, offset
continuity, one native scan) against the same copies without it, in one process.

    .venv/bin/python bench/compare_copy_check.py            # 64 MiB a partition
    .venv/bin/python bench/compare_copy_check.py --mb 16 --repeat 5

Set-up as bench/compare_remote_read.py (a): bench/segment.py's uncompressed segment in
topic `tiered` (4 partitions, segments of 1/8 of a partition), the filesystem tier (fsync
off) and the embedded RLMM, files under a temporary directory on the disk holding /tmp (the
local segments are in the page cache, as a copier finds segments it tiers soon after they
roll). Each repeat tiers every inactive segment with `RemoteLogManager.run_once()` on a
fresh tier and RLMM, alternately with the check and with it replaced by a no-op; the
smallest time of each is kept. Target: the check costs <= 10% of copy throughput.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.compare_remote_read import PARTITIONS, Setup
from bench.segment import segment
from engine.log.segment import LogSegment


def _copy_all(s: Setup) -> float:
    rlm = s.new_rlm(1)
    started = time.perf_counter()
    summary = rlm.run_once()
    elapsed = time.perf_counter() - started
    assert not summary.errors and summary.copied_segments, summary
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64, help="MiB of records per partition")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="copy-check-"))
    s = Setup(root, segment("none", args.mb << 20))
    checked = LogSegment.verify_batches
    try:
        total = sum(seg.size_in_bytes for p in range(PARTITIONS)
                    for seg in s.lm.get_log("tiered", p).segments[:-1])
        with_check, without = [], []
        for _ in range(args.repeat):
            LogSegment.verify_batches = checked
            with_check.append(_copy_all(s))
            LogSegment.verify_batches = lambda self, end_offset: 0
            without.append(_copy_all(s))
        LogSegment.verify_batches = checked
        scan = []
        for seg in s.lm.get_log("tiered", 0).segments[:-1]:
            started = time.perf_counter()
            seg.verify_batches(1 << 62)
            scan.append((seg.size_in_bytes, time.perf_counter() - started))
    finally:
        LogSegment.verify_batches = checked
        s.close()
        shutil.rmtree(root, ignore_errors=True)
    a, b = min(with_check), min(without)
    print(f"{total / 2**20:.0f} MiB copied by run_once, best of {args.repeat}")
    print(f"  with the batch check:    {total / a / 1e6:8.0f} MB/s")
    print(f"  without it:              {total / b / 1e6:8.0f} MB/s")
    print(f"  with / without:          {b / a:8.3f}x")
    rate = sum(n for n, _ in scan) / sum(t for _, t in scan) / 1e6
    print(f"  verify_batches alone:    {rate:8.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
