"""Instructions per decode of one segment, counted by valgrind's callgrind (load does not
move them, so they settle before/after questions that a shared machine's timings cannot).

    .venv/bin/python bench/count_instructions.py                      # 2 MiB per codec
    .venv/bin/python bench/count_instructions.py --paths records --codecs none,lz4 --keep /tmp/cg

Each count covers one call of the contender of bench/compare_floors.py (`records`: records()
with the same fields touched and CRCs checked; `columns`: decode_columns(verify_crc=True);
`aiokafka`: its compiled reader), after one warm-up call outside the count: only calls made
through itertools.starmap are counted (`--toggle-collect=starmap_next`). With `--keep DIR`
the callgrind files stay there for `callgrind_annotate`.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PATHS = ("records", "columns", "aiokafka")


def child(path: str, segment: str) -> None:
    from bench.compare_floors import engine_columns
    from bench.compare_records import aiokafka_decode_records, engine_decode_records

    fn = {"records": engine_decode_records, "columns": engine_columns,
          "aiokafka": aiokafka_decode_records}[path]
    with open(segment, "rb") as f:
        buf = f.read()
    fn(buf)  # warm: lazy imports, scratch buffers
    collections.deque(itertools.starmap(fn, [(buf,)]), 0)


def count(path: str, segment: str, out: str) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
           "--toggle-collect=starmap_next", f"--callgrind-out-file={out}",
           sys.executable, os.path.abspath(__file__), "--child", path, segment]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"Collected : (\d+)", r.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in: {r.stderr[-500:]}")
    return int(m.group(1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=2, help="uncompressed MiB per segment")
    p.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd")
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--keep", metavar="DIR", help="keep the callgrind files in DIR")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(*a.child)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    from bench.segment import build_segment, make_records

    records = make_records(int(a.mb * (1 << 20)))
    n = len(records)
    work = a.keep or tempfile.mkdtemp(prefix="count-instructions-")
    os.makedirs(work, exist_ok=True)
    print(f"{n} records a segment; instructions per decode (per record)", flush=True)
    try:
        for codec in a.codecs.split(","):
            segment = os.path.join(work, f"segment-{codec}.bin")
            with open(segment, "wb") as f:
                f.write(build_segment(records, codec))
            for path in a.paths.split(","):
                total = count(path, segment, os.path.join(work, f"callgrind.{codec}.{path}"))
                print(f"  {codec:<6} {path:<8} {total:>12,} ({total / n:,.0f})", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
