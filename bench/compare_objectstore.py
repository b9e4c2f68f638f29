"""Side by side against one local S3 server (SeaweedFS `weed mini`, started here): the
object-store tier's I/O layer (engine/remote/objectstore) against raw obstore calls moving
the same bytes with the same concurrency, in one run.

    .venv/bin/python bench/compare_objectstore.py                 # 64 MiB object
    .venv/bin/python bench/compare_objectstore.py --mb 128 --markdown /tmp/objstore.md

The data is random (SeaweedFS compresses compressible uploads). Contenders run round-robin
(A B A B ...), best of --reps reported, so both see the same machine load. Sections:
  (a) sweep, for chunk sizes 1, 4, 8, 16 MiB and max_in_flight 1, 2, 4, 8: a cold read of
      the whole object in 8 MiB windows through RangeReader with no cache (how well one
      large fetch is split and coalesced), and a cold sequential read in 1 MiB reads (the
      RLM's fetch size) through a memory chunk cache with 16 MiB of read-ahead (the path a
      consumer catching up takes): MB/s, and the CPU seconds the process spent per GiB.
  (b) reads vs raw: RangeReader.read (views of the fetched buffers where a window lies in
      one chunk, one join otherwise) at the default in-flight count and --chunk-mb chunks
      vs raw obstore `get_range_async` issuing the very GETs the engine plans for each
      8 MiB window, as many in flight: the layer's own overhead (planning, single-flight
      bookkeeping, the hand-off to the store's event loop). Target >= 0.9x. Also shown:
      read_into a reused buffer (one more copy, which the raw side does not make).
  (c) upload: ObjectStore.upload of a file (parts of 8 MiB, 4 in flight) vs raw
      `obstore.put(Path, chunk_size=8 MiB, max_concurrency=4)` of the same file. Target
      >= 0.9x.
  (d) memory: the growth of the process's peak RSS (VmHWM, reset through
      /proc/self/clear_refs) while uploading a --mem-mb file, from the path and as an
      iterator of 4 MiB blocks (the transforms' path), against the bound parts in flight x
      part size + 64 MiB; raw obstore.put of the file for reference. `--sections d
      --mem-mb 1024` runs the issue's 1 GiB case alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import obstore
from objectstore_support import plain_segment
from s3_server import S3Server

from bench.compare_records import Report
from engine.remote.objectstore import (
    DEFAULT_MAX_IN_FLIGHT,
    ChunkCache,
    ObjectStore,
    RangeReader,
    StoreConfig,
)

MiB = 1024 * 1024
WINDOW = 8 * MiB
CHUNK_SIZES = (1, 4, 8, 16)
IN_FLIGHT = (1, 2, 4, 8)
PART = 8 * MiB
PARTS_IN_FLIGHT = 4
PREFETCH = 16 * MiB


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def best(fn, reps: int) -> tuple[float, float]:
    """(best wall seconds, CPU seconds of that run)."""
    out = []
    for _ in range(reps):
        c0, t0 = cpu(), time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0, cpu() - c0))
    return min(out)


def peak_rss_growth(fn) -> int:
    """Bytes the process's peak RSS grew by while fn ran (Linux)."""
    def status(field):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"{field} not in /proc/self/status")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    base = status("VmRSS:")
    fn()
    return status("VmHWM:") - base


def section_a(report, store, key, size, reps):
    mbs = size / MiB
    # (a) sweep, round-robin over the grid so every point sees the same load
    segs = {c: plain_segment(key, size, c * MiB) for c in CHUNK_SIZES}
    grid = [(c, n) for c in CHUNK_SIZES for n in IN_FLIGHT]
    windows, sequential = {}, {}
    for _ in range(reps):
        for chunk, inflight in grid:
            seg = segs[chunk]
            reader = RangeReader(store, None, max_in_flight=inflight,
                                 fetch_max_wait_ms=120_000)

            def read_windows(reader=reader, seg=seg):
                for pos in range(0, size, WINDOW):
                    reader.read(seg, pos, pos + WINDOW)

            cached = RangeReader(store, ChunkCache(memory_bytes=4 * PREFETCH),
                                 max_in_flight=inflight, fetch_max_wait_ms=120_000,
                                 prefetch_max_bytes=PREFETCH)

            def read_sequential(reader=cached, seg=seg):
                for pos in range(0, size, MiB):
                    reader.read(seg, pos, pos + MiB)

            for out, fn in ((windows, read_windows), (sequential, read_sequential)):
                wall, used = best(fn, 1)
                if (chunk, inflight) not in out or wall < out[(chunk, inflight)][0]:
                    out[(chunk, inflight)] = (wall, used)
            cached.close()
    for name, out in (("8 MiB windows, no cache", windows),
                      ("1 MiB sequential, cache + 16 MiB read-ahead", sequential)):
        for (chunk, inflight), (wall, used) in out.items():
            report.add("a", f"{name}: chunk {chunk:>2} MiB, {inflight} in flight",
                       mbs / wall, f"MB/s  ({used / (size / 2**30):.2f} CPU s/GiB)")
        (bc, bi) = min(out, key=lambda k: out[k][0])
        report.notes.append(f"sweep ({name}) best: chunk {bc} MiB, {bi} in flight "
                            f"({mbs / out[(bc, bi)][0]:.0f} MB/s)")



def section_b(report, store, raw, key, size, reps, chunk_mb):
    mbs = size / MiB
    # (b) engine reads at the defaults vs raw obstore issuing the very GETs the
    # engine plans (same ranges, same number in flight): the layer's own overhead
    chunk, inflight = chunk_mb, DEFAULT_MAX_IN_FLIGHT
    seg = plain_segment(key, size, chunk * MiB)
    reader = RangeReader(store, None, max_in_flight=inflight, fetch_max_wait_ms=120_000)
    buf = bytearray(WINDOW)

    def engine_reads():
        for pos in range(0, size, WINDOW):
            reader.read(seg, pos, pos + WINDOW)

    def engine_reads_into():
        for pos in range(0, size, WINDOW):
            reader.read_into(seg, pos, buf)

    plans = []
    for pos in range(0, size, WINDOW):
        runs = reader._plan_runs(seg, list(seg.index.chunks_for(pos, pos + WINDOW)))
        plans.append([(seg.index.transformed_range(r[0])[0],
                       seg.index.transformed_range(r[-1])[1]) for r in runs])

    async def raw_window(ranges):
        return await asyncio.gather(*(obstore.get_range_async(raw, key, start=a, end=b)
                                      for a, b in ranges))

    loop = asyncio.new_event_loop()

    def raw_reads():
        for ranges in plans:
            loop.run_until_complete(raw_window(ranges))

    e_runs, i_runs, r_runs = [], [], []
    for _ in range(reps):
        e_runs.append(best(engine_reads, 1))
        r_runs.append(best(raw_reads, 1))
        i_runs.append(best(engine_reads_into, 1))
    (iw, ic) = min(i_runs)
    report.add("b", f"RangeReader.read_into a reused buffer, chunk {chunk} MiB", mbs / iw,
               f"MB/s  ({ic / (size / 2**30):.2f} CPU s/GiB)")
    (ew, ec), (rw, rc) = min(e_runs), min(r_runs)
    report.add("b", f"RangeReader.read, chunk {chunk} MiB, {inflight} in flight",
               mbs / ew,
               f"MB/s  ({ec / (size / 2**30):.2f} CPU s/GiB)")
    report.add("b", "raw obstore get_range_async, the same GETs", mbs / rw,
               f"MB/s  ({rc / (size / 2**30):.2f} CPU s/GiB)")
    report.ratio("cold ranged reads: RangeReader / raw obstore", rw / ew, 0.9)



def section_c(report, store, raw, src, size, reps):
    mbs = size / MiB
    # (c) upload vs raw multipart put, and peak memory
    e_runs, r_runs = [], []
    for i in range(reps):
        e_runs.append(best(lambda i=i: store.upload(f"bench/up-e-{i}", src), 1))
        r_runs.append(best(lambda i=i: obstore.put(
            raw, f"bench/up-r-{i}", src, chunk_size=PART,
            max_concurrency=PARTS_IN_FLIGHT), 1))
    (ew, ec), (rw, rc) = min(e_runs), min(r_runs)
    report.add("c", "ObjectStore.upload (8 MiB parts, 4 in flight)", mbs / ew,
               f"MB/s  ({ec / (size / 2**30):.2f} CPU s/GiB)")
    report.add("c", "raw obstore.put(Path), same parts", mbs / rw,
               f"MB/s  ({rc / (size / 2**30):.2f} CPU s/GiB)")
    report.ratio("upload: ObjectStore.upload / raw obstore put", rw / ew, 0.9)


def section_d(report, store, raw, tmp, mem_mb):
    src = Path(tmp) / "memory.log"
    write_random(src, mem_mb)
    blocks = 4 * MiB

    def transformed_chunks():  # the transforms' path: an iterator of chunk-sized blocks
        with open(src, "rb") as f:
            for _ in range(mem_mb * MiB // blocks + 1):
                block = f.read(blocks)
                if not block:
                    return
                yield block

    grow_e = peak_rss_growth(lambda: store.upload("bench/mem-e", src))
    grow_i = peak_rss_growth(lambda: store.upload("bench/mem-i", transformed_chunks()))
    grow_r = peak_rss_growth(lambda: obstore.put(raw, "bench/mem-r", src, chunk_size=PART,
                                                 max_concurrency=PARTS_IN_FLIGHT))
    bound = PARTS_IN_FLIGHT * PART + 64 * MiB
    report.add("d", f"peak RSS growth, ObjectStore.upload of a {mem_mb} MiB file",
               grow_e / MiB, "MiB")
    report.add("d", "peak RSS growth, ObjectStore.upload of 4 MiB blocks", grow_i / MiB, "MiB")
    report.add("d", "peak RSS growth, raw obstore.put of the file", grow_r / MiB, "MiB")
    report.ratio("upload memory (file): bound / peak growth", bound / max(grow_e, 1), 1.0,
                 f"(bound {bound // MiB} MiB)")
    report.ratio("upload memory (blocks): bound / peak growth", bound / max(grow_i, 1), 1.0,
                 f"(bound {bound // MiB} MiB)")


async def raw_gets(store, objects, chunk: int, in_flight: int, check: bool = False) -> int:
    """Raw obstore `get_range_async` of every (key, size) of `objects` in `chunk`-byte
    ranges, `in_flight` at once; with `check`, one CRC-32C pass over each range as its GET
    returns (the least a read of bytes nobody verified adds). The bytes fetched."""
    from engine.checksums import crc32c

    gate = asyncio.Semaphore(in_flight)

    async def get(key, a, b):
        async with gate:
            data = await obstore.get_range_async(store, key, start=a, end=b)
        if check:
            crc32c(data)
        return len(data)

    return sum(await asyncio.gather(*(get(key, a, min(a + chunk, size))
                                      for key, size in objects
                                      for a in range(0, size, chunk))))


def write_random(path: Path, mb: int) -> None:
    with open(path, "wb") as f:
        f.writelines(os.urandom(MiB) for _ in range(mb))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="object size in MiB")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--chunk-mb", type=int, default=8, help="chunk size for (b)")
    ap.add_argument("--mem-mb", type=int, default=256, help="file size for (d)")
    ap.add_argument("--sections", default="abcd", help="which sections to run")
    ap.add_argument("--markdown", help="also write the tables as markdown to this file")
    args = ap.parse_args(argv)
    size = args.mb * MiB
    report = Report()
    with tempfile.TemporaryDirectory(prefix="objstore-bench-") as tmp, \
            S3Server(Path(tmp) / "weed") as server:
        src = Path(tmp) / "segment.log"
        write_random(src, args.mb)
        configs = {**server.config(), "storage.s3.multipart.upload.part.size": str(PART),
                   "storage.upload.parts.in.flight": str(PARTS_IN_FLIGHT)}
        store = ObjectStore(StoreConfig.from_configs(configs))
        raw = server.raw_store()
        key = "bench/segment.log"
        store.upload(key, src)
        if "a" in args.sections:
            section_a(report, store, key, size, args.reps)
        if "b" in args.sections:
            section_b(report, store, raw, key, size, args.reps, args.chunk_mb)
        if "c" in args.sections:
            section_c(report, store, raw, src, size, args.reps)
        if "d" in args.sections:
            section_d(report, store, raw, tmp, args.mem_mb)
        store.close()

    header = [(f"CPU: {platform.processor() or platform.machine()}, "
               f"{os.cpu_count()} cores; object {args.mb} MiB; reps {args.reps}")]
    print("\n" + report.text_tables())
    for n in report.notes:
        print(n)
    if args.markdown:
        Path(args.markdown).write_text(report.markdown(header) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
