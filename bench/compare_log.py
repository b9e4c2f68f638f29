"""Side by side: the local log (UnifiedLog) against raw file I/O on the same bytes, in one
process.

    /work/venv/bin/python bench/compare_log.py                     # 256 MiB log
    /work/venv/bin/python bench/compare_log.py --gib1              # the issue's 1 GiB log
    /work/venv/bin/python bench/compare_log.py --mb 64 --markdown /tmp/log.md
    /work/venv/bin/python bench/compare_log.py --clock cpu         # thread CPU time

Every comparison runs its contenders round-robin (A B A B ...) and takes medians, so they
share whatever load the machine has; only ratios measured in one run mean anything. The
data is bench/segment.py's uncompressed segment (batches of 100 realistic records, about
60 KB each). Files go to --dir (default: a temporary directory on the disk holding /tmp),
so everything reads from and writes to the page cache; no fsync is timed. Sections (targets
from issue 3):
  (a) append: UnifiedLog.append_as_leader of every batch (validation, offset assignment,
      epoch stamping, offset/time index entries every index.interval.bytes) into a fresh log
      vs raw sequential os.write of the same batch bytes to a fresh file.
      Target: >= 0.7x raw.
  (b) read from page cache: UnifiedLog.read(offset, max_bytes) chunk after chunk over the
      whole log (each returned view touched: one byte per 4 KiB page, so mapped pages are
      really faulted in) vs raw FileIO.readinto of the same (position, size) ranges into a
      preallocated buffer, touched the same way. Target: >= 0.8x raw. Also reported with
      every byte of each chunk read (an XOR over 8-byte words) on both sides.
  (c) recovery: UnifiedLog.open(clean_shutdown=False, recovery_point=0) of the whole log
      (CRC scan, index rebuild, epoch cache) vs our validate-scan
      (engine.records.scan_batches(verify_crc=True)) of the same .log files, mapped.
      Target: >= 0.8x the validate-scan.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import mmap
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench.compare_records import Report
from bench.segment import segment
from engine._native import records as _records
from engine.log import UnifiedLog
from engine.records import scan_batches

PAGE = 4096
SEGMENT_BYTES = 1 << 30  # Kafka's segment.bytes default


# ---- timing --------------------------------------------------------------------------------


#: The timer of every measurement: wall time by default; --clock cpu switches to the calling
#: thread's CPU time (user + kernel, so the pwrite copies and nogil scans still count), which
#: other processes on a shared machine disturb much less.
CLOCK = {"wall": time.perf_counter, "cpu": time.thread_time}
_clock = CLOCK["wall"]


def measure_group(fns: dict, repeat: int, setup: dict | None = None,
                  teardown: dict | None = None, warmup: int = 1) -> dict:
    """Median seconds (of the `--clock` timer) of each function, run round-robin (A B A B
    ..), GC off while timing. When `setup[k]` is given it runs untimed before each run of
    `fns[k]`, whose argument is its result; `teardown[k](that result)` runs untimed after
    it."""
    setup, teardown = setup or {}, teardown or {}
    times = {k: [] for k in fns}
    gc_was = gc.isenabled()
    try:
        for i in range(warmup + repeat):
            for k, fn in fns.items():
                arg = setup[k]() if k in setup else None
                gc.collect()
                gc.disable()
                try:
                    t0 = _clock()
                    fn(arg) if k in setup else fn()
                    dt = _clock() - t0
                finally:
                    gc.enable()
                    if k in teardown:
                        teardown[k](arg)
                if i >= warmup:
                    times[k].append(dt)
    finally:
        if not gc_was:
            gc.disable()
    return {k: statistics.median(v) for k, v in times.items()}


def touch(view) -> int:
    """Reads one byte per page of `view` (faults mapped pages in)."""
    n = view.nbytes if isinstance(view, memoryview) else len(view)
    if not n:
        return 0
    return int(np.frombuffer(view, dtype=np.uint8)[::PAGE].sum())


def touch_all(view) -> int:
    """Reads every byte of `view` (an XOR of its 8-byte words, plus the tail)."""
    n = view.nbytes if isinstance(view, memoryview) else len(view)
    words = n // 8
    acc = int(np.bitwise_xor.reduce(np.frombuffer(view, dtype=np.uint64, count=words))) \
        if words else 0
    return acc ^ sum(bytes(view[words * 8:n]))


# ---- (a) append ----------------------------------------------------------------------------


def split_batches(buf: bytes) -> list[bytes]:
    h = scan_batches(buf, verify_crc=False).headers
    mv = memoryview(buf)
    return [bytes(mv[p:p + s]) for p, s in zip(h["position"].tolist(), h["size"].tolist())]


def section_a(rep: Report, root: Path, buf: bytes, repeat: int) -> None:
    print("(a) append with indexes vs raw sequential os.write", flush=True)
    batches = split_batches(buf)
    total = sum(len(b) for b in batches)
    log_dir = root / "append-0"
    raw_file = root / "append-raw.bin"

    def setup_log():
        shutil.rmtree(log_dir, ignore_errors=True)
        return UnifiedLog.open(log_dir, segment_bytes=SEGMENT_BYTES)

    def run_log(log):
        for b in batches:
            log.append_as_leader(b, 5)

    def setup_raw():
        raw_file.unlink(missing_ok=True)
        return os.open(raw_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def run_raw(fd):
        write = os.write
        for b in batches:
            write(fd, b)

    def run_native(fd):
        # the native steps of a leader append alone (validate with CRC, assign offsets and
        # epoch, stamped pwritev): what the log adds on top of them is Python bookkeeping
        position, next_offset = 0, 0
        for b in batches:
            headers, _, _ = _records.scan_for_append(b)
            next_offset = _records.assign_offsets(headers, next_offset, 5)[1] + 1
            position += _records.write_batches(fd, b, headers, position)

    try:
        t = measure_group({"log": run_log, "raw": run_raw, "native": run_native},
                          repeat, setup={"log": setup_log, "raw": setup_raw,
                                         "native": setup_raw},
                          teardown={"log": lambda log: log.close(), "raw": os.close,
                                    "native": os.close})
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
        raw_file.unlink(missing_ok=True)
    mb = total / 1e6
    rep.add("a", f"UnifiedLog.append_as_leader, {len(batches)} batches", mb / t["log"], "MB/s")
    rep.add("a", "raw os.write of the same batches", mb / t["raw"], "MB/s")
    rep.add("a", "native steps alone (scan+CRC, assign, stamped pwritev)", mb / t["native"],
            "MB/s")
    per_batch = (t["log"] - t["native"]) / len(batches) * 1e6
    rep.notes.append(f"(a) the log's Python work per append (log minus native steps): "
                     f"{per_batch:.1f} us; native steps vs raw: {t['raw'] / t['native']:.2f}x")
    rep.ratio("append with indexes vs raw os.write", t["raw"] / t["log"], 0.7)
    rep.notes.append(f"(a) {len(batches)} batches, {mb:.1f} MB per run, avg batch "
                     f"{total / len(batches) / 1e3:.1f} KB; segment.bytes 1 GiB, "
                     "index.interval.bytes 4096; the log's close (fsync) is not timed")


# ---- building the log for (b) and (c) --------------------------------------------------------


def build_log(log_dir: Path, buf: bytes) -> tuple[int, int]:
    """A closed log holding `buf`'s batches, appended as leader one batch per append (as
    producers send them), so the offset index has Kafka's usual density. Returns (end
    offset, bytes)."""
    shutil.rmtree(log_dir, ignore_errors=True)
    mv = memoryview(buf)
    h = scan_batches(buf, verify_crc=False).headers
    with UnifiedLog.open(log_dir, segment_bytes=SEGMENT_BYTES) as log:
        for p, s in zip(h["position"].tolist(), h["size"].tolist()):
            log.append_as_leader(mv[p:p + s], 7)
        return log.log_end_offset, log.size_in_bytes


# ---- (b) read ------------------------------------------------------------------------------


def section_b(rep: Report, log_dir: Path, end_offset: int, max_bytes: int,
              repeat: int) -> None:
    print(f"(b) read() from page cache in {max_bytes}-byte chunks vs raw readinto", flush=True)
    log = UnifiedLog.open(log_dir, segment_bytes=SEGMENT_BYTES, clean_shutdown=True,
                          recovery_point=end_offset)
    try:
        # the (segment file, position, size) ranges read() returns, for the raw contender
        ranges: list[tuple[int, int, int]] = []
        files = {s.base_offset: str(s.log_file) for s in log.segments}
        offset = log.log_start_offset
        while offset < end_offset:
            view, nxt = log.read(offset, max_bytes)
            seg = max(b for b in files if b <= offset)
            info = next(s for s in log.segments if s.base_offset == seg).read(offset, max_bytes)
            ranges.append((seg, info.position, info.size_in_bytes))
            assert info.size_in_bytes == view.nbytes
            offset = nxt
        total = sum(r[2] for r in ranges)
        buffer = bytearray(max(r[2] for r in ranges))
        bufview = memoryview(buffer)
        stack = contextlib.ExitStack()
        raw = {b: stack.enter_context(open(path, "rb", buffering=0))  # noqa: SIM115
               for b, path in files.items()}

        def run_log(touch=touch):
            off, n = log.log_start_offset, 0
            while off < end_offset:
                view, off = log.read(off, max_bytes)
                touch(view)
                n += view.nbytes
                view.release()
            assert n == total

        def run_raw(touch=touch):
            n = 0
            for seg, pos, size in ranges:
                f = raw[seg]
                f.seek(pos)
                chunk = bufview[:size]
                got = f.readinto(chunk)
                assert got == size
                touch(chunk)
                n += got
            assert n == total

        try:
            t = measure_group({"log": run_log, "raw": run_raw,
                               "log_all": lambda: run_log(touch_all),
                               "raw_all": lambda: run_raw(touch_all)}, repeat)
        finally:
            stack.close()
    finally:
        log.close()
    mb = total / 1e6
    rep.add("b", f"UnifiedLog.read, {len(ranges)} chunks, views touched", mb / t["log"], "MB/s")
    rep.add("b", "raw FileIO.readinto of the same ranges, touched", mb / t["raw"], "MB/s")
    rep.add("b", "UnifiedLog.read, every byte of the views read", mb / t["log_all"], "MB/s")
    rep.add("b", "raw readinto, every byte of the buffer read", mb / t["raw_all"], "MB/s")
    rep.ratio("read() vs raw readinto (pages touched)", t["raw"] / t["log"], 0.8)
    rep.ratio("read() vs raw readinto (every byte read)", t["raw_all"] / t["log_all"], 0.8)
    rep.notes.append(f"(b) {mb:.1f} MB per run in {len(ranges)} reads of up to {max_bytes} "
                     "bytes (whole batches); the log's views are zero-copy slices of a "
                     "mapping that stays open between runs")


# ---- (c) recovery --------------------------------------------------------------------------


def validate_scan(log_dir: Path) -> int:
    """Our validate-scan of every .log file of the directory: map, scan with CRCs, unmap."""
    n = 0
    for path in sorted(log_dir.glob("*.log")):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not size:
                continue
            with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)
                try:
                    scan = scan_batches(view, verify_crc=True)
                    if not scan.headers["crc_valid"].all() or scan.partial_bytes:
                        raise AssertionError(f"{path}: invalid batch in the benchmark log")
                    n += len(scan)
                    del scan
                finally:
                    view.release()
    return n


def section_c(rep: Report, log_dir: Path, end_offset: int, size: int, repeat: int) -> None:
    print(f"(c) recovery of a {size / (1 << 20):.0f} MiB log vs validate-scan", flush=True)
    def setup_recover():
        return []

    def run_recover(opened):
        log = UnifiedLog.open(log_dir, segment_bytes=SEGMENT_BYTES, recovery_point=0,
                              clean_shutdown=False)
        opened.append(log)
        assert log.log_end_offset == end_offset

    def close_opened(opened):
        for log in opened:
            log.close()  # untimed

    t = measure_group({"recover": run_recover, "scan": lambda: validate_scan(log_dir)},
                      repeat, setup={"recover": setup_recover},
                      teardown={"recover": close_opened})
    mb = size / 1e6
    rep.add("c", "UnifiedLog.open unclean (recovery from 0)", mb / t["recover"], "MB/s")
    rep.add("c", "scan_batches(verify_crc=True) of the mapped .log files", mb / t["scan"],
            "MB/s")
    rep.ratio("recovery vs validate-scan", t["scan"] / t["recover"], 0.8)
    rep.notes.append(f"(c) {mb:.1f} MB log, {end_offset} records, "
                     f"{len(list(log_dir.glob('*.log')))} segment(s); the close after each "
                     "recovery (fsync of the recovered segment) is not timed")


# ---- the run -------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=256, help="log size for (b) and (c), MiB")
    p.add_argument("--gib1", action="store_true", help="a 1 GiB log for (b) and (c)")
    p.add_argument("--append-mb", type=float, default=64, help="bytes appended per run in (a)")
    p.add_argument("--max-bytes", type=int, default=1 << 20,
                   help="max_bytes of each read() in (b) (Kafka's max.partition.fetch.bytes)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs of each contender")
    p.add_argument("--sections", default="a,b,c")
    p.add_argument("--dir", default=None, help="where to write the logs (default: a temp dir)")
    p.add_argument("--markdown", metavar="FILE", help="also write the tables as markdown")
    p.add_argument("--clock", choices=sorted(CLOCK), default="wall",
                   help="wall time, or the thread's CPU time (steadier on a shared machine)")
    args = p.parse_args(argv)
    global _clock
    _clock = CLOCK[args.clock]
    logging.basicConfig(level=logging.ERROR)
    total = (1 << 30) if args.gib1 else int(args.mb * (1 << 20))
    sections = set(args.sections.split(","))
    rep = Report()
    timer = "wall time" if args.clock == "wall" else "thread CPU time (user + system)"
    env = [environment_cpu(), f"timer: {timer}, median of {args.repeat} round-robin runs"]
    env.append(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for line in env:
        print(line)
    root = Path(tempfile.mkdtemp(prefix="compare_log-", dir=args.dir))
    try:
        env.append(f"files in {root} ({_fs_of(root)})")
        if "a" in sections:
            t0 = time.perf_counter()
            buf = segment("none", int(args.append_mb * (1 << 20)))
            print(f"  generated {len(buf) >> 20} MiB in {time.perf_counter() - t0:.1f} s")
            section_a(rep, root, buf, args.repeat)
            del buf
        if sections & {"b", "c"}:
            t0 = time.perf_counter()
            buf = segment("none", total)
            log_dir = root / "topic-0"
            end_offset, size = build_log(log_dir, buf)
            del buf
            segment.cache_clear()
            print(f"  built a {size >> 20} MiB log ({end_offset} records) in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            if "b" in sections:
                section_b(rep, log_dir, end_offset, args.max_bytes, args.repeat)
            if "c" in sections:
                section_c(rep, log_dir, end_offset, size, args.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rep.notes.append("load average at the end: "
                     + " ".join(f"{x:.2f}" for x in os.getloadavg())
                     + f" ({os.cpu_count()} CPUs)")
    print()
    print(rep.text_tables())
    for n in rep.notes:
        print("note:", n)
    if args.markdown:
        header = ["# Local log: UnifiedLog vs raw file I/O (one process, same bytes)", ""]
        header += [f"- {line}" for line in env]
        command = " ".join(["compare_log.py"] + (argv if argv is not None else sys.argv[1:]))
        header.append(f"- command: `{command}`")
        with open(args.markdown, "w") as f:
            f.write(rep.markdown(header))
        print(f"markdown written to {args.markdown}")
    return 0


def environment_cpu() -> str:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"CPU: {cpu}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}; "
            f"{platform.system()} {platform.release()}")


def _fs_of(path: Path) -> str:
    best = ("?", "")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                _, mnt, fstype = line.split()[:3]
                if str(path).startswith(mnt) and len(mnt) >= len(best[1]):
                    best = (fstype, mnt)
    except OSError:
        pass
    return f"{best[0]} on {best[1] or '?'}"


if __name__ == "__main__":
    raise SystemExit(main())
