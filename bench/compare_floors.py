"""The record paths against the physical floor, on engine- and aiokafka-built segments.

    .venv/bin/python bench/compare_floors.py                 # 16 MiB per codec
    .venv/bin/python bench/compare_floors.py --mb 48 --repeat 7 --markdown /tmp/floors.md

"Floor" is the fastest raw decompression of every batch's records section into one reused,
already-touched output buffer: ISA-L (the `isal` package; it has no decompress-into call, so
its output is a fresh bytes object per batch) for gzip, cramjam's `decompress_raw_into` per
xerial chunk for snappy and `decompress_into` for lz4 and zstd; for uncompressed data it is
one memcpy of the segment into a warm buffer. Nothing in the floor parses a record, checks a
CRC or builds an object, so it bounds what any decoder can reach on this machine.

Contenders, run round-robin (A B C A B C ...) with medians, so they share the machine's load:
  records()        MemoryRecords.records() touching offset, timestamp, key and value, CRCs
                   checked (as bench/compare_records.py section ii)
  aiokafka         aiokafka's compiled reader, the same fields touched, CRCs checked
  decode_columns() MemoryRecords.decode_columns(verify_crc=True)
  columns, views   decode_columns(views=True): Arrow view columns pointing into the segment
                   or the decompressed sections (when the engine has it)
  views, no CRC    the same with verify_crc=False: for bytes whose CRCs were checked before
                   (at upload, by a scrub); the only contender here that skips them
Each codec gets two segments holding the same records (100 a batch, values 100-1000 B, a key
and a header each): one built by the engine's builder, one by aiokafka's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import sys

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bench.compare_records import (
    CLOCKS,
    aiokafka_decode_records,
    batch_payloads,
    engine_decode_records,
    measure_group,
    xerial_chunks,
)
from bench.segment import CODECS, RECORDS_PER_BATCH, build_segment, codec_id, make_records
from engine.records import MemoryRecords


def aiokafka_segment(records, codec: str) -> bytes:
    """The records as v2 batches built by aiokafka's (compiled) DefaultRecordBatchBuilder;
    base offsets patched in (outside the CRC), as a broker assigns them."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    parts = []
    n = len(records)
    for start in range(0, n, RECORDS_PER_BATCH):
        b = DefaultRecordBatchBuilder(2, codec_id(codec), 0, -1, -1, -1, 1 << 30)
        for i in range(start, min(n, start + RECORDS_PER_BATCH)):
            b.append(i - start, records.timestamps[i], records.keys[i], records.values[i],
                     list(records.headers[i]))
        batch = bytearray(b.build())
        batch[0:8] = start.to_bytes(8, "big")
        parts.append(bytes(batch))
    return b"".join(parts)


def floor(buf: bytes, codec: int):
    """(function, decompressed bytes) of the floor for this segment (see the docstring)."""
    if codec == 0:
        dst = bytearray(len(buf))
        d = (ctypes.c_char * len(buf)).from_buffer(dst)

        def copy():
            ctypes.memmove(d, buf, len(buf))
        copy()
        return copy, len(buf)
    payloads = batch_payloads(buf)[0]
    if codec == 1:
        from isal import isal_zlib

        out_bytes = sum(len(isal_zlib.decompress(p, 31)) for p in payloads)
        return (lambda: [isal_zlib.decompress(p, 31) for p in payloads]), out_bytes
    import cramjam

    if codec == 2:
        chunks = [c for p in payloads for c in xerial_chunks(p)]
        out = bytearray(max(cramjam.snappy.decompress_raw_len(c) for c in chunks))
        into = cramjam.snappy.decompress_raw_into

        def run():
            for c in chunks:
                into(c, out)
        run()
        return run, sum(cramjam.snappy.decompress_raw_len(c) for c in chunks)
    lib = cramjam.lz4 if codec == 3 else cramjam.zstd
    sizes = [len(bytes(lib.decompress(p))) for p in payloads]
    out = bytearray(max(sizes))
    into = lib.decompress_into

    def run():
        for p in payloads:
            into(p, out)
    run()
    return run, sum(sizes)


def engine_columns(buf, verify_crc=True, **options) -> int:
    return len(MemoryRecords(buf).decode_columns(verify_crc=verify_crc, **options))


def has_views() -> bool:
    import inspect

    return "views" in inspect.signature(MemoryRecords.decode_columns).parameters


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=16, help="uncompressed MiB per segment")
    p.add_argument("--codecs", default=",".join(CODECS))
    p.add_argument("--builders", default="engine,aiokafka")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                   help="cpu (default): this process's CPU time, which other jobs on a shared "
                        "machine disturb much less than wall time; every contender here runs "
                        "on one thread")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    a = p.parse_args(argv)
    records = make_records(int(a.mb * (1 << 20)))
    n = len(records)
    views = has_views()
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}; {n} records, {a.repeat} interleaved rounds, "
          f"{a.clock} clock",
          flush=True)
    rows = []
    for builder in a.builders.split(","):
        for codec in a.codecs.split(","):
            cid = codec_id(codec)
            buf = (build_segment(records, codec) if builder == "engine"
                   else aiokafka_segment(records, codec))
            floor_fn, out_bytes = floor(buf, cid)
            fns = {
                "floor": floor_fn,
                "records": lambda b=buf: engine_decode_records(b),
                "aiokafka": lambda b=buf: aiokafka_decode_records(b),
                "columns": lambda b=buf: engine_columns(b),
            }
            if views:
                fns["views"] = lambda b=buf: engine_columns(b, views=True)
                fns["views_no_crc"] = lambda b=buf: engine_columns(b, False, views=True)
            t = measure_group(fns, a.repeat, clock=CLOCKS[a.clock])
            row = {"builder": builder, "codec": codec, "mb": len(buf) / 1e6,
                   "floor_gbs": out_bytes / t["floor"] / 1e9,
                   "rec_vs_aiokafka": t["aiokafka"] / t["records"],
                   "rec_vs_floor": t["floor"] / t["records"],
                   "col_vs_floor": t["floor"] / t["columns"],
                   "records_per_s": n / t["records"], "columns_per_s": n / t["columns"],
                   "views_vs_floor": t["floor"] / t["views"] if views else None,
                   "views_no_crc_vs_floor": t["floor"] / t["views_no_crc"] if views else None}
            rows.append(row)
            print(f"  {builder:<8} {codec:<6} {row['mb']:6.1f} MB  floor {row['floor_gbs']:5.2f} "
                  f"GB/s out  records {row['records_per_s'] / 1e6:5.2f} M/s "
                  f"(x{row['rec_vs_aiokafka']:.2f} aiokafka, x{row['rec_vs_floor']:.2f} floor)"
                  f"  columns {row['columns_per_s'] / 1e6:5.2f} M/s (x{row['col_vs_floor']:.2f}"
                  f" floor)" + (f"  views x{row['views_vs_floor']:.2f} floor (no CRC "
                                f"x{row['views_no_crc_vs_floor']:.2f})" if views else ""),
                  flush=True)
    table = markdown(rows)
    print(table)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(table)
    return 0


def markdown(rows) -> str:
    out = []
    for builder in dict.fromkeys(r["builder"] for r in rows):
        sel = [r for r in rows if r["builder"] == builder]
        out += [f"{builder}-built segments:", "",
                "| path | " + " | ".join(r["codec"] for r in sel) + " |",
                "|---|" + "---|" * len(sel)]
        lines = [("`records()` vs aiokafka's compiled reader", "rec_vs_aiokafka"),
                 ("`records()` vs floor", "rec_vs_floor"),
                 ("`decode_columns()` vs floor (none: vs memcpy)", "col_vs_floor")]
        if sel[0]["views_vs_floor"] is not None:
            lines.append(("`decode_columns(views=True)` vs floor (none: vs memcpy)",
                          "views_vs_floor"))
            lines.append(("the same, `verify_crc=False` (CRCs checked before)",
                          "views_no_crc_vs_floor"))
        for label, key in lines:
            out.append(f"| {label} | " + " | ".join(f"{r[key]:.2f}×" for r in sel) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
