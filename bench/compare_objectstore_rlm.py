"""Side by side against one local S3 server (SeaweedFS `weed mini`, started here): the
object-store tier behind a RemoteLogManager against raw obstore calls moving the same bytes
with the same concurrency, and against the filesystem tier, in one run.

    .venv/bin/python bench/compare_objectstore_rlm.py                  # 64 MiB partition
    .venv/bin/python bench/compare_objectstore_rlm.py --sections c --upload-mb 1024

Set-up: bench/segment.py's uncompressed records (batches of 100) appended to one partition
of two identical logs (segments of 1/4 of the partition, tiering on): one tiered by an RLM
to the object-store tier (ObjectStorageRemoteStorageManager, plain mode, `chunk.size`
8 MiB, `fetch.max.in.flight.requests` 4), the other to the filesystem tier; then
`local.retention.bytes=1` leaves only the active segment locally, so every read below the
local log start is remote. Contenders run round-robin (A B A B ...) so both see the same
machine load; each ratio is reported for the best run of each side, with the range of the
per-round ratios.

Sections:
  (a) cold sequential read: RemoteLogManager.read(offset, 1 MiB) fetch after fetch over the
      whole tiered part of the partition, each round with a fresh RSM and RLM (empty memory
      chunk cache of 256 MiB, `fetch.chunk.cache.prefetch.max.size` 4 chunks, no index
      cache), against raw obstore `get_range_async` of the same `.log` objects in 8 MiB
      ranges (the chunk size), 4 in flight. Target >= 0.9x. Also the CPU seconds each side
      took in this process (every thread) and in the S3 server, medians: on a small
      machine the server's CPU comes out of the same cores. CPU per GiB of .log bytes,
      this process, RLM (manifest and index GETs included) / raw: target <= 1.15x. Beside
      it, the least any verified read can cost: the raw loop with one CRC-32C pass over each
      range as its GET returns (the bytes still in cache); and each side's CPU by thread
      (obstore's runtime threads, which do the GETs, against the reading thread).
  (b) warm read: the same reads with a disk chunk cache (`DiskChunkCache`, a memory tier of
      two chunks in front: `fetch.chunk.cache.memory.size` 16 MiB) already holding every
      chunk, against the filesystem tier's RLM reading the same offsets (its files in the
      page cache). Every returned fetch is touched (one byte a page). Target >= 0.8x.
  (c) upload: `copy_log_segment_data` of a --upload-mb segment through the RSM (8 MiB parts,
      4 in flight) against raw `obstore.put(Path, chunk_size=8 MiB, max_concurrency=4)` of
      the same file (target >= 0.9x); CPU per GiB of this process, RSM / raw, target
      <= 1.1x (the S3 server's beside it); and the growth of the process's peak RSS during the
      RSM's upload, against parts in flight x part size + 64 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
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
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import obstore
from rsm_crash_writer import segment_metadata
from s3_server import S3Server

from bench.compare_log import split_batches, touch
from bench.compare_objectstore import peak_rss_growth, raw_gets, write_random
from bench.compare_records import Report
from bench.cpu import CpuPerGiB, GiB, process_cpu, self_cpu, thread_cpu
from bench.segment import segment
from engine.common import Uuid
from engine.config import BrokerConfig
from engine.log import LogManager
from engine.remote import LogSegmentData
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import TopicIdPartition
from engine.remote.objectstore.keys import LOG
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager
from engine.rlm import RemoteLogManager

MiB = 1024 * 1024
MAX_BYTES = 1 << 20
CHUNK = 8 * MiB
IN_FLIGHT = 4
PART = 8 * MiB
PARTS_IN_FLIGHT = 4
TOPIC = "tiered"


class Tier:
    """One log dir with the partition, its RLMM, and an RLM over a given RSM."""

    def __init__(self, root: Path, batches: list[bytes], segment_bytes: int):
        self.root = root
        self.props = {"log.dirs": str(root / "logs"),
                      "remote.log.storage.system.enable": "true",
                      "remote.log.reader.threads": "4",
                      "remote.log.reader.max.pending.tasks": "100",
                      "remote.fetch.max.wait.ms": "60000"}
        self.lm = LogManager([root / "logs"], broker_config=BrokerConfig(self.props))
        self.config = {"remote.storage.enable": "true", "segment.bytes": str(segment_bytes),
                       "retention.ms": "-1"}
        log = self.lm.get_or_create_log(TOPIC, 0, topic_config=self.config)
        for b in batches:
            log.append_as_leader(b, 0)
        self.lm.flush_all()
        self.rlmm = EmbeddedRemoteLogMetadataManager(root / "meta")
        self.rlm = self.rsm = None

    def open(self, rsm) -> RemoteLogManager:
        self.close_rlm()
        shutil.rmtree(self.root / "logs" / "remote-log-index-cache", ignore_errors=True)
        self.rsm = rsm
        self.rlm = RemoteLogManager(BrokerConfig(self.props), self.lm, rsm, self.rlmm)
        return self.rlm

    def tier_all(self) -> None:
        """Copies every inactive segment, then drops the local copies."""
        log = self.lm.get_log(TOPIC, 0)
        target = log.segments[-1].base_offset - 1
        for _ in range(1000):
            self.rlm.run_once()
            if log.highest_offset_in_remote_storage >= target and self.rlm.is_idle():
                break
        else:
            raise RuntimeError(f"tiering did not finish: {self.rlm.status()}")
        self.lm.update_topic_config(TOPIC, {**self.config, "local.retention.bytes": "1"})
        log.delete_old_segments()
        self.rlm.run_once()
        assert log.local_log_start_offset == target + 1

    def read_all(self, touch_pages: bool = False) -> int:
        log = self.lm.get_log(TOPIC, 0)
        offset, end, total = log.log_start_offset, log.local_log_start_offset, 0
        while offset < end:
            result = self.rlm.read(TOPIC, 0, offset, MAX_BYTES)
            if not result.from_remote or result.next_offset <= offset:
                raise RuntimeError(f"no remote progress at offset {offset}")
            if touch_pages:
                touch(result.records)
            total += memoryview(result.records).nbytes
            offset = result.next_offset
        return total

    def close_rlm(self) -> None:
        if self.rlm is not None:
            self.rlm.close()
            self.rsm.close()
            self.rlm = self.rsm = None

    def close(self) -> None:
        self.close_rlm()
        self.rlmm.close()
        self.lm.shutdown()


def object_rsm(server, prefix: str, **extra) -> ObjectStorageRemoteStorageManager:
    rsm = ObjectStorageRemoteStorageManager()
    rsm.configure({**server.config(), "key.prefix": prefix, "chunk.size": str(CHUNK),
                   "fetch.max.in.flight.requests": str(IN_FLIGHT),
                   "storage.s3.multipart.upload.part.size": str(PART),
                   "storage.upload.parts.in.flight": str(PARTS_IN_FLIGHT), **extra})
    return rsm


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def timed_cpu(fn, server_pid: int, cpu: list) -> float:
    """timed(fn), appending (this process's, the server's) CPU seconds to `cpu`."""
    own, server = self_cpu(), process_cpu(server_pid)
    seconds = timed(fn)
    cpu.append((self_cpu() - own, process_cpu(server_pid) - server))
    return seconds


def ratio_rows(rep: Report, what: str, ours: list[float], theirs: list[float],
               target: float) -> None:
    """The ratio of the best runs (time theirs / time ours), with the per-round range."""
    rounds = [t / o for o, t in zip(ours, theirs)]
    rep.ratio(what, min(theirs) / min(ours), target,
              f"rounds {min(rounds):.2f}-{max(rounds):.2f}x")


def section_a(rep: Report, s3: Tier, server, prefix: str, reps: int) -> None:
    print("(a) cold sequential read: RLM over the object store vs raw ranged GETs", flush=True)
    objects = [(s3.rsm.keys.key(md, LOG), md.segment_size_in_bytes)
               for md in sorted(s3.rlmm.list_remote_log_segments(s3.tip),
                                key=lambda md: md.start_offset)]
    nbytes = sum(size for _, size in objects)
    raw = server.raw_store()

    async def raw_read(check: bool = False):
        assert await raw_gets(raw, objects, CHUNK, IN_FLIGHT, check) == nbytes

    loop = asyncio.new_event_loop()
    ours, theirs = [], []
    ours_cpu: list[tuple[float, float]] = []
    theirs_cpu: list[tuple[float, float]] = []
    floor_cpu: list[tuple[float, float]] = []
    threads: dict[str, dict[str, float]] = {"RLM": {}, "raw": {}, "raw + CRC": {}}

    def by_thread(side: str, fn):
        before = thread_cpu()
        fn()
        for kind, seconds in thread_cpu().items():
            threads[side][kind] = threads[side].get(kind, 0.0) + seconds - before.get(kind, 0)

    for _ in range(reps):
        s3.open(object_rsm(server, prefix, **{
            "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache."
                                       "MemoryChunkCache",
            "fetch.chunk.cache.size": str(256 * MiB),
            "fetch.chunk.cache.prefetch.max.size": str(IN_FLIGHT * CHUNK)}))
        s3.rlm.run_once()  # the partition's state loaded (nothing to copy): reads only
        by_thread("RLM", lambda: ours.append(timed_cpu(s3.read_all, server.proc.pid,
                                                       ours_cpu)))
        by_thread("raw", lambda: theirs.append(timed_cpu(
            lambda: loop.run_until_complete(raw_read()), server.proc.pid, theirs_cpu)))
        by_thread("raw + CRC", lambda: timed_cpu(
            lambda: loop.run_until_complete(raw_read(True)), server.proc.pid, floor_cpu))
    loop.close()
    mb = nbytes / 1e6
    rep.add("(a)", "RemoteLogManager.read 1 MiB fetches, cold cache", mb / min(ours),
            f"MB/s (range {mb / max(ours):.0f}-{mb / min(ours):.0f})")
    rep.add("(a)", "raw obstore get_range_async, 8 MiB ranges, 4 in flight",
            mb / min(theirs), f"MB/s (range {mb / max(theirs):.0f}-{mb / min(theirs):.0f})")
    for who, cpu in (("RLM", ours_cpu), ("raw obstore", theirs_cpu)):
        rep.add("(a)", f"{who}: CPU of this process, median",
                statistics.median(c for c, _ in cpu), "s")
        rep.add("(a)", f"{who}: CPU of the S3 server meanwhile, median",
                statistics.median(s for _, s in cpu), "s")
    ratio_rows(rep, "(a) cold read: RLM on the object store / raw obstore", ours, theirs, 0.9)
    cpu_notes(rep, "(a) cold read", "RLM", "raw obstore", ours_cpu, theirs_cpu, nbytes, 1.15)
    floor = CpuPerGiB()
    for (f, _), (t, _) in zip(floor_cpu, theirs_cpu):
        floor.add(f, t, nbytes)
    note = "(a) the least a verified read costs, this process: " + floor.line(
        "raw obstore + one CRC-32C pass over each range as its GET returns", "raw obstore")
    rep.notes.append(note)
    print("  cpu   ", note, flush=True)
    # where each side's CPU goes: the store's I/O threads against the reading thread
    for side, kinds in threads.items():
        note = (f"(a) {side}, CPU s/GiB by thread (all rounds): " + ", ".join(
            f"{kind} {seconds * GiB / nbytes / reps:.3f}" for kind, seconds in
            sorted(kinds.items(), key=lambda kv: -kv[1]) if seconds * GiB / nbytes / reps >= 0.005))
        rep.notes.append(note)
        print("  cpu   ", note, flush=True)


def cpu_notes(rep: Report, what: str, ours: str, theirs: str, ours_cpu: list,
              theirs_cpu: list, nbytes: int, target: float) -> None:
    """CPU seconds per GiB of .log bytes: this process on each side (the target's), and
    the S3 server's meanwhile beside it."""
    own, server = CpuPerGiB(), CpuPerGiB()
    for (o, os_), (t, ts) in zip(ours_cpu, theirs_cpu):
        own.add(o, t, nbytes)
        server.add(os_, ts, nbytes)
    for note in (f"{what}, this process: " + own.line(ours, theirs, target),
                 f"{what}, the S3 server meanwhile: " + server.line(ours, theirs)):
        rep.notes.append(note)
        print("  cpu   ", note, flush=True)


def section_b(rep: Report, s3: Tier, fs: Tier, server, prefix: str, root: Path,
              reps: int) -> None:
    print("(b) warm read: disk chunk cache vs the filesystem tier", flush=True)
    cache_dir = root / "chunk-cache"
    shutil.rmtree(cache_dir, ignore_errors=True)
    s3.open(object_rsm(server, prefix, **{
        "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache",
        "fetch.chunk.cache.size": str(1024 * MiB), "fetch.chunk.cache.path": str(cache_dir),
        "fetch.chunk.cache.memory.size": str(2 * CHUNK)}))
    nbytes = s3.read_all()  # fills the disk cache
    if not s3.rsm.chunk_cache.flush(60):
        raise RuntimeError("the disk chunk cache did not finish its writes")
    fs.read_all(True)  # the filesystem tier's files into the page cache, its indexes cached
    gets = s3.rsm.store.metrics.value("get_object_requests")
    ours, theirs = [], []
    for _ in range(reps):
        ours.append(timed(lambda: s3.read_all(True)))
        theirs.append(timed(lambda: fs.read_all(True)))
    if s3.rsm.store.metrics.value("get_object_requests") != gets:
        raise RuntimeError("a warm read went to the store")
    mb = nbytes / 1e6
    rep.add("(b)", "RemoteLogManager.read, object store, disk chunk cache", mb / min(ours),
            f"MB/s (range {mb / max(ours):.0f}-{mb / min(ours):.0f})")
    rep.add("(b)", "RemoteLogManager.read, filesystem tier", mb / min(theirs),
            f"MB/s (range {mb / max(theirs):.0f}-{mb / min(theirs):.0f})")
    ratio_rows(rep, "(b) warm read: object store (disk cache) / filesystem tier", ours,
               theirs, 0.8)


def section_c(rep: Report, server, root: Path, upload_mb: int, reps: int) -> None:
    print(f"(c) upload of a {upload_mb} MiB segment: RSM vs raw multipart put", flush=True)
    src = root / "upload" / f"{0:020d}.log"
    src.parent.mkdir(parents=True, exist_ok=True)
    write_random(src, upload_mb)
    empty = root / "upload" / "empty.index"
    empty.write_bytes(b"")
    data = LogSegmentData(src, empty, empty, None, None, b"0\n1\n0 0\n")
    tip = TopicIdPartition(Uuid.random(), "upload", 0)
    size = src.stat().st_size
    rsm = object_rsm(server, "bench-upload/")
    raw = server.raw_store()
    ours, theirs = [], []
    ours_cpu: list[tuple[float, float]] = []
    theirs_cpu: list[tuple[float, float]] = []
    pid = server.proc.pid
    try:
        for i in range(reps):
            md = segment_metadata(tip, 0, 1000, size)
            ours.append(timed_cpu(lambda md=md: rsm.copy_log_segment_data(md, data), pid,
                                  ours_cpu))
            theirs.append(timed_cpu(lambda i=i: obstore.put(
                raw, f"bench-upload/raw-{i}.log", src, chunk_size=PART,
                max_concurrency=PARTS_IN_FLIGHT), pid, theirs_cpu))
            rsm.delete_log_segment_data(md)
            obstore.delete(raw, f"bench-upload/raw-{i}.log")
        md = segment_metadata(tip, 0, 1000, size)
        growth = peak_rss_growth(lambda: rsm.copy_log_segment_data(md, data))
        rsm.delete_log_segment_data(md)
    finally:
        rsm.close()
        src.unlink()
    mb = size / 1e6
    rep.add("(c)", "copy_log_segment_data (8 MiB parts, 4 in flight)", mb / min(ours),
            f"MB/s (range {mb / max(ours):.0f}-{mb / min(ours):.0f})")
    rep.add("(c)", "raw obstore.put(Path), same parts", mb / min(theirs),
            f"MB/s (range {mb / max(theirs):.0f}-{mb / min(theirs):.0f})")
    ratio_rows(rep, "(c) upload: RSM copy / raw obstore put", ours, theirs, 0.9)
    cpu_notes(rep, "(c) upload", "RSM copy", "raw put", ours_cpu, theirs_cpu, size, 1.1)
    bound = PARTS_IN_FLIGHT * PART + 64 * MiB
    rep.add("(c)", f"peak RSS growth, RSM copy of the {upload_mb} MiB segment",
            growth / MiB, "MiB")
    rep.ratio("(c) upload memory: bound / peak growth", bound / max(growth, 1), 1.0,
              f"bound {bound // MiB} MiB")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="MiB of records in the partition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--upload-mb", type=int, default=256, help="segment size for (c)")
    ap.add_argument("--sections", default="abc")
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rep = Report()
    header = [(f"CPU: {platform.processor() or platform.machine()} ({os.cpu_count()} "
               f"logical CPUs), Python {platform.python_version()}; {args.mb} MiB partition, "
               f"load average {os.getloadavg()[0]:.1f} at the start")]
    print(header[0], flush=True)
    with tempfile.TemporaryDirectory(prefix="objstore-rlm-bench-") as tmp, \
            S3Server(Path(tmp) / "weed") as server:
        root = Path(tmp)
        s3 = fs = None
        try:
            if "a" in args.sections or "b" in args.sections:
                batches = split_batches(segment("none", args.mb << 20))
                segment_bytes = max(1 << 20, (args.mb << 20) // 4)
                prefix = f"bench-{Uuid.random()}/"
                s3 = Tier(root / "s3", batches, segment_bytes)
                s3.open(object_rsm(server, prefix))
                s3.tier_all()
                s3.tip = s3.rlm._partitions[(TOPIC, 0)].tip
                fs = Tier(root / "fs", batches, segment_bytes)
                fs.open(FileSystemRemoteStorageManager([root / "fs" / "tier"], fsync=False))
                fs.tier_all()
                if "a" in args.sections:
                    section_a(rep, s3, server, prefix, args.reps)
                if "b" in args.sections:
                    section_b(rep, s3, fs, server, prefix, root, args.reps)
            if "c" in args.sections:
                section_c(rep, server, root, args.upload_mb, args.reps)
        finally:
            for t in (s3, fs):
                if t is not None:
                    t.close()
    header.append(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(rep.text_tables())
    if args.markdown:
        Path(args.markdown).write_text(rep.markdown(header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
