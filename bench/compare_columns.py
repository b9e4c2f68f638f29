"""What column selection saves a columnar decode: MemoryRecords.decode_columns of the same
batches with every column, and with offsets and timestamps only (with_keys, with_values,
with_headers False), with and without the CRC check, for uncompressed and zstd batches.

    .venv/bin/python bench/compare_columns.py [--mb 64] [--value-bytes 1024] [--repeat 5]

Medians of `--repeat` round-robin runs (wall time and the thread's CPU time); prints MB/s of
source bytes per row and the ratio of the selected decode to the full one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def build(total: int, value_bytes: int, codec) -> bytes:
    from engine.records import RecordBatchBuilder

    rng = os.urandom(value_bytes * 64)
    out, size, offset = [], 0, 0
    while size < total:
        b = RecordBatchBuilder(base_offset=offset, compression_type=codec)
        for i in range(200):
            start = (i * 997) % (len(rng) - value_bytes)
            b.append(rng[start:start + value_bytes], key=b"key-%d" % i,
                     headers=[("h", b"x")], timestamp=1_700_000_000_000 + offset + i)
        data = b.build()
        out.append(data)
        size += len(data)
        offset += 200
    return b"".join(out)


def main(argv=None) -> int:
    from engine.records import CompressionType, MemoryRecords

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    slim = {"with_keys": False, "with_values": False, "with_headers": False}
    print(f"{'codec':6} {'crc':5} {'full MB/s':>10} {'slim MB/s':>10} {'wall ratio':>11} "
          f"{'cpu ratio':>10}")
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        data = build(args.mb << 20, args.value_bytes, codec)
        records = MemoryRecords(data)
        records.scan()
        for crc in (True, False):
            runs: dict[str, list[tuple[float, float]]] = {"full": [], "slim": []}
            for _ in range(args.repeat):
                for name, kwargs in (("full", {}), ("slim", slim)):
                    w, c = time.perf_counter(), time.thread_time()
                    records.decode_columns(verify_crc=crc, **kwargs)
                    runs[name].append((time.perf_counter() - w, time.thread_time() - c))
            wall = {k: statistics.median(t[0] for t in v) for k, v in runs.items()}
            cpu = {k: statistics.median(t[1] for t in v) for k, v in runs.items()}
            mb = len(data) / 1e6
            print(f"{codec.name.lower():6} {crc!s:5} {mb / wall['full']:10.0f} "
                  f"{mb / wall['slim']:10.0f} {wall['full'] / wall['slim']:10.2f}x "
                  f"{cpu['full'] / cpu['slim']:9.2f}x")
    return 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
