"""The columnar decode of uncompressed batches against one memcpy of the segment, with the CRC
checked while copying (fused, the default) and in a pass of its own first (unfused), and
the stages that make up the difference.

    .venv/bin/python bench/compare_column_decode.py [--mb 48] [--repeat 15] [--markdown FILE]
        [--baseline OLD/engine/_native/columnar.cpython-*.so]

The segment holds the record shape the peers are measured on (bench/segment.py's records:
keys `user-N`, JSON-like values of 100-1,000 bytes, one header a record) in batches of 100
built by aiokafka's own DefaultRecordBatchBuilder, uncompressed. Contenders run round-robin
(A B C A B C ...) `--repeat` times after a warm-up, so they share whatever load the machine
has; each is timed by wall clock and by the process's CPU time (user + system of all its
threads: the decode is one thread, and CPU time is what other jobs on a shared machine
disturb least). Reported: median, min and max of each, and the median's ratio to memcpy.

  memcpy             one memmove of the segment into a warm buffer of its size (the floor)
  decode, fused      decode_columns(verify_crc=True): CRC checked while copying
  decode, unfused    decode_columns(verify_crc=True, fuse_crc=False): CRC pass, then copy
  decode, baseline   with --baseline: decode_columns(verify_crc=True) of a columnar module
                     built from an earlier commit (a git worktree), loaded beside this one
  stage: scan+CRC    scan(verify_crc=True): batch headers and every CRC, nothing decoded
  stage: scan        scan(verify_crc=False): batch headers only
  stage: no CRC      decode_columns(verify_crc=False): each batch streamed into cache, parsed
                     and its keys, values and headers copied
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.compare_floors import aiokafka_segment
from bench.segment import make_records
from engine._native.columnar import decode_columns
from engine._native.scan import scan

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def baseline(path: str):
    """decode_columns of the columnar extension at `path`, loaded as a module of its own
    (not registered in sys.modules, so this process's own module stays in use)."""
    from importlib.machinery import ExtensionFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    loader = ExtensionFileLoader("engine._native.columnar", path)
    spec = spec_from_loader("engine._native.columnar", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module.decode_columns


def contenders(buf: bytes, baseline_decode=None) -> dict:
    dst = bytearray(len(buf))
    into = (ctypes.c_char * len(buf)).from_buffer(dst)
    headers, _ = scan(buf, False)

    def floor():
        ctypes.memmove(into, buf, len(buf))

    fns = {
        "memcpy": floor,
        "decode, fused": lambda: decode_columns(buf, headers),
        "decode, unfused": lambda: decode_columns(buf, headers, fuse_crc=False),
    }
    if baseline_decode is not None:
        fns["decode, baseline"] = lambda: baseline_decode(buf, headers)
    return fns | {
        "stage: scan+CRC": lambda: scan(buf, True),
        "stage: scan": lambda: scan(buf, False),
        "stage: no CRC": lambda: decode_columns(buf, headers, verify_crc=False),
    }


def measure(fns: dict, repeat: int) -> dict:
    """{name: {clock: [seconds per run]}}, the functions run round-robin, GC off."""
    for fn in fns.values():
        fn()
    times: dict = {name: {clock: [] for clock in CLOCKS} for name in fns}
    gc.disable()
    try:
        for _ in range(repeat):
            for name, fn in fns.items():
                wall, cpu = time.perf_counter(), time.process_time()
                fn()
                times[name]["cpu"].append(time.process_time() - cpu)
                times[name]["wall"].append(time.perf_counter() - wall)
    finally:
        gc.enable()
    return times


def table(times: dict, nbytes: int) -> list[str]:
    rows = ["| contender | clock | median ms | min ms | max ms | GiB/s (median) | "
            "memcpy / contender (median) |", "|---|---|---:|---:|---:|---:|---:|"]
    for clock in CLOCKS:
        floor = statistics.median(times["memcpy"][clock])
        for name, by_clock in times.items():
            runs = by_clock[clock]
            med = statistics.median(runs)
            rows.append(f"| {name} | {clock} | {med * 1e3:.2f} | {min(runs) * 1e3:.2f} | "
                        f"{max(runs) * 1e3:.2f} | {nbytes / med / 2**30:.2f} | "
                        f"{floor / med:.3f} |")
    return rows


def machine() -> list[str]:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return [platform.processor() or platform.machine()]
    keep = ("Model name", "CPU(s)", "Thread(s) per core", "L1d cache", "L2 cache", "L3 cache",
            "Hypervisor vendor")
    return [" ".join(line.split()) for line in lscpu.splitlines() if line.split(":")[0] in keep]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=48, help="segment MiB (uncompressed)")
    p.add_argument("--repeat", type=int, default=15, help="round-robin runs per contender")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    p.add_argument("--baseline", metavar="SO", help="a columnar extension built from an "
                   "earlier commit, timed as 'decode, baseline'")
    args = p.parse_args(argv)
    buf = aiokafka_segment(make_records(int(args.mb * (1 << 20))), "none")
    old = baseline(args.baseline) if args.baseline else None
    if old is not None:  # the same columns, or the comparison means nothing
        new, was = decode_columns(buf), old(buf)
        assert all(np.array_equal(new[k], was[k]) for k in new if isinstance(new[k], np.ndarray))
    times = measure(contenders(buf, old), args.repeat)
    fused, unfused = (statistics.median(times[k]["cpu"])
                      for k in ("decode, fused", "decode, unfused"))
    lines = [f"- segment: {len(buf) / 2**20:.1f} MiB, {len(buf)} bytes, aiokafka "
             f"DefaultRecordBatchBuilder, 100 records a batch, uncompressed",
             f"- {args.repeat} round-robin runs; load average at the end: "
             f"{os.getloadavg()[0]:.1f}"]
    lines += [f"- {line}" for line in machine()]
    lines += ["", *table(times, len(buf)), "",
              f"unfused / fused CPU time (median): {unfused / fused:.3f}"]
    if old is not None:
        lines.append("baseline / fused CPU time (median): "
                     f"{statistics.median(times['decode, baseline']['cpu']) / fused:.3f}")
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
