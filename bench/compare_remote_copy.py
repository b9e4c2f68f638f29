"""Side by side: the filesystem tier's copy_log_segment_data against a raw copy of the same
files, in one process.

    /work/venv/bin/python bench/compare_remote_copy.py                 # 256 MiB segment
    /work/venv/bin/python bench/compare_remote_copy.py --mb 64 --reps 5

The segment is bench/segment.py's uncompressed one (batches of 100 realistic records) with
the indexes recovery builds for it (index.interval.bytes 4096), a producer snapshot and a
leader-epoch checkpoint. Sources are read once first (page cache warm); destinations go to
--dir (default: a temporary directory on the disk holding /tmp) and are deleted between
runs (not timed). Contenders run round-robin (A B A B ...), medians and bests reported, so
both see the same machine load; every run starts after an os.sync() (not timed) so no
writeback of an earlier run's pages competes with it. Sections:
  (a) no fsync: copy_log_segment_data (kernel copy + CRC32C of every byte, .tmp + rename)
      vs shutil.copyfile of each file (sendfile in the kernel, no CRC). Target >= 0.8x.
      Also this process's CPU seconds (every thread) per GiB copied, each side.
  (b) fsync: the same with fsync=true vs raw copy + fsync of every file + directory fsync.
  (c) threads: 1, 2, 4 threads each copying a different segment (no fsync), aggregate
      throughput of both sides.
  (d) reads: read_range in 1 MiB chunks over the stored .log (opening the file per call,
      size check, and on a manager's first read of the segment the whole-file CRC32C) vs
      os.pread of the same ranges on a file opened once.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.cpu import CpuPerGiB, self_cpu
from bench.segment import segment
from engine.common import Uuid, fsync_dir
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from engine.log.producer_state import write_snapshot
from engine.log.segment import LogSegment
from engine.remote import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import TopicIdPartition

TIP = TopicIdPartition(Uuid.random(), "bench", 0)


def make_source(directory: Path, data: bytes) -> tuple[LogSegmentData, int]:
    """A closed segment at offset 0 holding `data`, with recovered indexes."""
    directory.mkdir(parents=True)
    (directory / f"{0:020d}.log").write_bytes(data)
    seg = LogSegment.open(directory, 0)
    seg.resize_indexes(10 << 20)
    seg.recover()
    next_offset = seg.next_offset()
    seg.on_become_inactive_segment()
    seg.close()
    snapshot = directory / f"{next_offset:020d}.snapshot"
    write_snapshot(snapshot, [], sync=False)
    epochs = LeaderEpochCheckpointFile(directory / "epochs", create=False).encode(
        [EpochEntry(3, 0)])
    files = LogSegmentData(directory / f"{0:020d}.log", directory / f"{0:020d}.index",
                           directory / f"{0:020d}.timeindex", None, snapshot, epochs)
    return files, next_offset - 1


def total_bytes(files: LogSegmentData) -> int:
    return sum(os.path.getsize(p) for p in (files.log_segment, files.offset_index,
                                            files.time_index, files.producer_snapshot)
               ) + len(files.leader_epoch_index)


def warm(files: LogSegmentData) -> None:
    for p in (files.log_segment, files.offset_index, files.time_index, files.producer_snapshot):
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass


def engine_copy(rsm, files: LogSegmentData, last: int) -> RemoteLogSegmentMetadata:
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, Uuid.random()), 0, last, 0, 0, 0,
                                  os.path.getsize(files.log_segment), {3: 0})
    custom = rsm.copy_log_segment_data(md, files)
    return dataclasses.replace(md, custom_metadata=custom)


def raw_copy(files: LogSegmentData, dest: Path, sync: bool) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    tag = Uuid.random()
    targets = []
    for src in (files.offset_index, files.time_index, files.producer_snapshot,
                files.log_segment):
        target = dest / f"{tag}{src.suffix}"
        shutil.copyfile(src, target)
        targets.append(target)
    epoch = dest / f"{tag}.leader_epoch_checkpoint"
    epoch.write_bytes(files.leader_epoch_index)
    targets.append(epoch)
    if sync:
        for target in targets:
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dest)


def clear(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def run_threads(n: int, fn) -> float:
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def rates(times: dict, size: int) -> dict:
    """GB/s of each side: median run and best run."""
    return {side: (size / statistics.median(v) / 1e9, size / min(v) / 1e9)
            for side, v in times.items()}


def measure(args, sources, workdir: Path) -> dict:
    size = total_bytes(sources[0][0])
    out = {"segment_bytes": size}
    sweep = [n for n in (1, 2, 4) if n <= len(sources)]
    for label, sync in (("no fsync", False), ("fsync", True)):
        reps = args.reps if not sync else max(3, args.reps // 2)
        rsm = FileSystemRemoteStorageManager([workdir / "engine"], fsync=sync)
        times = {"engine": [], "raw": []}
        cpu = CpuPerGiB()
        for _ in range(reps):
            used = {}
            for side in ("engine", "raw"):
                clear(workdir / "engine")
                clear(workdir / "raw")
                os.sync()  # no writeback of the previous run's pages during this one
                t0, c0 = time.perf_counter(), self_cpu()
                if side == "engine":
                    engine_copy(rsm, *sources[0])
                else:
                    raw_copy(sources[0][0], workdir / "raw", sync)
                times[side].append(time.perf_counter() - t0)
                used[side] = self_cpu() - c0
            cpu.add(used["engine"], used["raw"], size)
        out[label] = rates(times, size)
        out.setdefault("cpu", {})[label] = cpu
    rsm = FileSystemRemoteStorageManager([workdir / "engine"], fsync=False)
    for n in sweep:
        times = {"engine": [], "raw": []}
        for _ in range(args.reps):
            for side in ("engine", "raw"):
                clear(workdir / "engine")
                clear(workdir / "raw")
                os.sync()
                if side == "engine":
                    elapsed = run_threads(n, lambda i: engine_copy(rsm, *sources[i]))
                else:
                    elapsed = run_threads(n, lambda i: raw_copy(sources[i][0],
                                                                workdir / "raw" / str(i),
                                                                False))
                times[side].append(elapsed)
        out[f"{n} threads"] = rates(times, n * size)
    out.update(measure_reads(args, sources, workdir))
    return out


def measure_reads(args, sources, workdir: Path) -> dict:
    """(d) read_range in 1 MiB chunks over the stored .log vs os.pread of the same ranges
    on a file opened once; "first read" uses a fresh manager each run, so it includes the
    whole-file CRC32C check, "verified" reuses one that already checked."""
    clear(workdir / "engine")
    md = engine_copy(FileSystemRemoteStorageManager([workdir / "engine"], fsync=False),
                     *sources[0])
    size = md.segment_size_in_bytes
    chunk = 1 << 20
    path = FileSystemRemoteStorageManager([workdir / "engine"]).segment_path(md, ".log")
    verified = FileSystemRemoteStorageManager([workdir / "engine"])
    verified.read_range(md, 0, 1)

    def engine_reads(rsm):
        for pos in range(0, size, chunk):
            rsm.read_range(md, pos, min(size, pos + chunk))

    def raw_reads():
        fd = os.open(path, os.O_RDONLY)
        try:
            for pos in range(0, size, chunk):
                os.pread(fd, min(chunk, size - pos), pos)
        finally:
            os.close(fd)

    sides = {"first read": lambda: engine_reads(FileSystemRemoteStorageManager(
                 [workdir / "engine"])),
             "verified": lambda: engine_reads(verified), "raw": raw_reads}
    times = {k: [] for k in sides}
    for _ in range(args.reps):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    raw = rates({"raw": times.pop("raw")}, size)["raw"]
    return {f"read_range 1 MiB, {name}": {"engine": rate, "raw": raw}
            for name, rate in rates(times, size).items()}


def report(out: dict, mb: int) -> str:
    lines = [f"segment {mb} MiB .log + indexes: {out['segment_bytes'] / 2**20:.1f} MiB per copy",
             ("| run | copy_log_segment_data GB/s median (best) | raw copy GB/s median (best) "
             "| ratio of medians | ratio of bests |"),
             "|---|---|---|---|---|"]
    for key, row in out.items():
        if key in ("segment_bytes", "cpu"):
            continue
        (em, eb), (rm, rb) = row["engine"], row["raw"]
        lines.append(f"| {key} | {em:.2f} ({eb:.2f}) | {rm:.2f} ({rb:.2f}) | "
                     f"{em / rm:.2f}x | {eb / rb:.2f}x |")
    lines.append("")
    for label, cpu in out["cpu"].items():
        lines.append(f"CPU of this process per GiB copied, {label}: "
                     + cpu.line("copy_log_segment_data", "raw copy"))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256, help="segment size in MiB")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=4, help="largest thread count")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="remote-copy-") as tmp:
        workdir = Path(tmp)
        data = segment("none", args.mb << 20)
        sources = [make_source(workdir / f"src{i}", data) for i in range(args.threads)]
        del data
        for files, _ in sources:
            warm(files)
        out = measure(args, sources, workdir)
    print(report(out, args.mb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
