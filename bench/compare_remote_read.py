"""Side by side: remote reads through the RemoteLogManager against local reads of the same
bytes, and the remote tier's read and copy throughput at 1, 2 and 4 threads, in one process.

    /work/venv/bin/python bench/compare_remote_read.py                  # 64 MiB a partition
    /work/venv/bin/python bench/compare_remote_read.py --mb 16 --markdown /tmp/remote.md
    /work/venv/bin/python bench/compare_remote_read.py --sections b --tier objectstore

Set-up (files under --dir, default a temporary directory on the disk holding /tmp, so both
tiers read from the page cache; no fsync is timed): bench/segment.py's uncompressed segment
(batches of 100 realistic records) appended to topic `tiered` (4 partitions, segments of
1/8 of a partition, tiering on) and to topic `local` (1 partition, tiering off): the same batches at
the same offsets. The filesystem tier (FileSystemRemoteStorageManager, fsync off) and the
embedded RLMM hold the remote copies. With `--tier objectstore`, the object-store tier
(ObjectStorageRemoteStorageManager, plain mode, 8 MiB chunks) against a SeaweedFS server
started here (`weed mini`, tests/s3_server.py) holds them instead, with a memory chunk cache
large enough for every chunk, filled by one read of the partition before the timed reads:
the object store warm (no GET while timed: checked).

Sections:
  (a) copy: the RLM's scheduled copy tasks (start()) tier every inactive segment of the 4
      partitions with `remote.log.manager.copier.thread.pool.size` = 1, 2, 4 (a fresh tier
      and RLMM each time); aggregate MB/s and speed-up.
  (b) remote vs local read, same offsets: RemoteLogManager.read(tiered-0, offset, 1 MiB)
      chunk after chunk over the whole partition (local copies deleted, so every read is
      remote: reader pool hand-off, RLMM lookup, warm RemoteIndexCache, header walk, and
      the records as a view of the tier's mapped .log via map_range) against UnifiedLog
      reads of local-0 at the same offsets (zero-copy views). Each returned chunk is touched
      (one byte per 4 KiB page), and again with every byte read. Target: remote >= 0.9x local.
      Also shown: the remote path without the reader pool (engine.rlm.reader.read_remote on
      the calling thread; and with RemoteLogManager's plan/quota/metrics work), the copying
      path the reader takes for an RSM whose ranges are not zero-copy (the contract's
      defaults: read_range_into, a pread into a recycled buffer), with and without the
      pool, and local-0 read through RemoteLogManager.read (the consumer-facing batch
      checks: CRC and offset continuity) against UnifiedLog.read.
  (c) remote read throughput: 1, 2, 4 threads each reading a whole tiered partition through
      RemoteLogManager.read (remote.log.reader.threads = 4); aggregate MB/s and speed-up.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bench import compare_log
from bench.compare_log import measure_group, split_batches, touch, touch_all
from bench.compare_records import Report
from bench.cpu import self_cpu
from bench.segment import segment
from engine.config import BrokerConfig
from engine.log import LogManager
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.storage import RemoteStorageManager
from engine.rlm import RemoteLogManager, fetch
from engine.rlm.reader import read_remote

PARTITIONS = 4
MAX_BYTES = 1 << 20
THREADS = (1, 2, 4)


def objectstore_rsm(server, root: Path, mb: int) -> RemoteStorageManager:
    """The object-store tier on `server`, its memory chunk cache holding every chunk of the
    partitions' copies."""
    from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

    rsm = ObjectStorageRemoteStorageManager()
    rsm.configure({**server.config(), "key.prefix": f"bench-{root.name}/",
                   "chunk.size": str(8 << 20),
                   "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache."
                                              "MemoryChunkCache",
                   "fetch.chunk.cache.size": str((PARTITIONS * mb + 64) << 20)})
    return rsm


class Setup:
    def __init__(self, root: Path, buf: bytes, verification: str = "full", server=None):
        self.root = root
        self.verification = verification
        self.server = server  # an S3 server: the object-store tier, else the filesystem's
        self.mb = len(buf) >> 20
        self.segment_bytes = max(1 << 20, len(buf) // 8)
        self.log_dir = root / "logs"
        self.config_props = {"log.dirs": str(self.log_dir),
                             "remote.log.storage.system.enable": "true",
                             "rsm.config.dirs": str(root / "tier"),
                             "remote.log.manager.task.interval.ms": "10",
                             "remote.log.reader.threads": "4",
                             "remote.log.reader.max.pending.tasks": "100",
                             "remote.fetch.max.wait.ms": "60000"}
        config = BrokerConfig(self.config_props)
        self.lm = LogManager([self.log_dir], broker_config=config)
        tiered = {"remote.storage.enable": "true", "segment.bytes": str(self.segment_bytes),
                  "retention.ms": "-1"}
        batches = split_batches(buf)
        for p in range(PARTITIONS):
            log = self.lm.get_or_create_log("tiered", p, topic_config=tiered)
            for b in batches:
                log.append_as_leader(b, 0)
        local = self.lm.get_or_create_log("local", 0, topic_config={
            "segment.bytes": str(self.segment_bytes), "retention.ms": "-1"})
        for b in batches:
            local.append_as_leader(b, 0)
        self.lm.flush_all()
        self.rlm = None

    def new_rlm(self, copier_threads: int) -> RemoteLogManager:
        if self.rlm is not None:
            self.close_rlm()
        for name in ("tier", "meta", "index-cache"):
            shutil.rmtree(self.root / name, ignore_errors=True)
        props = dict(self.config_props)
        props["remote.log.manager.copier.thread.pool.size"] = str(copier_threads)
        if self.server is not None:
            self.rsm = objectstore_rsm(self.server, self.root, self.mb)
        else:
            self.rsm = FileSystemRemoteStorageManager([self.root / "tier"], fsync=False,
                                                      log_read_verification=self.verification)
        self.rlmm = EmbeddedRemoteLogMetadataManager(self.root / "meta")
        shutil.rmtree(self.log_dir / "remote-log-index-cache", ignore_errors=True)
        self.rlm = RemoteLogManager(BrokerConfig(props), self.lm, self.rsm, self.rlmm)
        return self.rlm

    def close_rlm(self) -> None:
        self.rlm.close()
        self.rlmm.close()
        self.rsm.close()
        self.rlm = None

    def close(self) -> None:
        if self.rlm is not None:
            self.close_rlm()
        self.lm.shutdown()


def _copy_all(s: Setup) -> None:
    """Starts the RLM and waits until every inactive segment of the 4 partitions is copied."""
    logs = [s.lm.get_log("tiered", p) for p in range(PARTITIONS)]
    targets = {p: log.segments[-1].base_offset - 1 for p, log in enumerate(logs)}
    rlm = s.rlm
    rlm.start()
    while not all(st.copy.copied_offset >= targets[st.partition]
                  for st in list(rlm._partitions.values())) or \
            len(rlm._partitions) < PARTITIONS:
        time.sleep(0.002)


def _copy_sync(s: Setup) -> None:
    """Copies every inactive segment of the 4 partitions through RemoteLogManager.run_once
    passes (no scheduler)."""
    logs = [s.lm.get_log("tiered", p) for p in range(PARTITIONS)]
    for _ in range(1000):
        s.rlm.run_once()
        if all(log.highest_offset_in_remote_storage >= log.segments[-1].base_offset - 1
               for log in logs):
            return
    raise RuntimeError(f"tiering did not finish: {s.rlm.status()}")


def section_a(rep: Report, s: Setup) -> None:
    print("(a) copy through the scheduled copy tasks", flush=True)
    logs = [s.lm.get_log("tiered", p) for p in range(PARTITIONS)]
    total = sum(seg.size_in_bytes for log in logs for seg in log.segments[:-1])
    base = None
    for threads in THREADS:
        s.new_rlm(threads)
        t0 = time.perf_counter()
        _copy_all(s)
        dt = time.perf_counter() - t0
        rate = total / dt / 1e6
        base = base or rate
        rep.add("(a)", f"copy 4 partitions, {threads} copier thread(s)", rate, "MB/s")
        if threads > 1:
            rep.ratio(f"(a) copy {threads} threads / 1 thread", rate / base)


def _chunk_starts(log, end: int) -> list[int]:
    starts, offset = [], 0
    while offset < end:
        starts.append(offset)
        _, offset = log.read(offset, MAX_BYTES)
    return starts


def section_b(rep: Report, s: Setup, repeat: int) -> None:
    print("(b) remote read vs local read, same offsets", flush=True)
    rlm = s.rlm
    tiered = s.lm.get_log("tiered", 0)
    local = s.lm.get_log("local", 0)
    end = tiered.local_log_start_offset
    starts = _chunk_starts(local, end)
    st = rlm._partitions[("tiered", 0)]
    nbytes = sum(local.read(o, MAX_BYTES)[0].nbytes for o in starts)

    def run_local():
        for o in starts:
            touch(local.read(o, MAX_BYTES)[0])

    def run_remote():
        for o in starts:
            touch(rlm.read("tiered", 0, o, MAX_BYTES).records)

    def run_remote_inline():
        # RemoteLogManager.read's own work (plan, quota, metrics) without the pool hand-off
        for o in starts:
            plan = rlm.reader.plan_read("tiered", 0, o, MAX_BYTES, True, "read_uncommitted")
            touch(fetch.read_remote(rlm.reader, plan).records)

    def run_remote_direct():
        for o in starts:
            touch(read_remote(rlm.reader, st, o, MAX_BYTES, True, "read_uncommitted")[0])

    def without_map_range(run):
        # the RSM contract's defaults in place of the tier's zero-copy views: the reader
        # then reads with read_range_into (a pread into a recycled buffer), as it does for
        # an RSM whose ranges are not zero-copy
        hidden = ("map_range", "map_range_if_open")

        def go():
            s.rsm.zero_copy_ranges = False
            for name in hidden:
                setattr(s.rsm, name, partial(getattr(RemoteStorageManager, name), s.rsm))
            try:
                run()
            finally:
                for name in ("zero_copy_ranges", *hidden):
                    delattr(s.rsm, name)
        return go

    def run_rlm_local():
        # a local read through RemoteLogManager.read: the consumer-facing batch checks
        for o in starts:
            touch(rlm.read("local", 0, o, MAX_BYTES).records)

    def run_local_all():
        for o in starts:
            touch_all(local.read(o, MAX_BYTES)[0])

    def run_remote_all():
        for o in starts:
            touch_all(rlm.read("tiered", 0, o, MAX_BYTES).records)

    assert rlm.read("tiered", 0, 0, MAX_BYTES).from_remote
    gets = _store_gets(s)
    if gets is not None:  # the object store: one read of the partition fills its cache
        _read_through(rlm, end)
        gets = _store_gets(s)
    runs = {"local": run_local, "rlm_local": run_rlm_local, "remote": run_remote,
            "remote_direct": run_remote_direct, "remote_inline": run_remote_inline,
            "local_all": run_local_all, "remote_all": run_remote_all}
    if gets is None:  # the filesystem tier's views hidden (the object store's are its cache)
        runs.update({"remote_pread": without_map_range(run_remote),
                     "remote_pread_direct": without_map_range(run_remote_direct),
                     "remote_pread_all": without_map_range(run_remote_all)})
    t = measure_group(runs, repeat)
    if gets is not None and _store_gets(s) != gets:
        raise RuntimeError("a warm read of the object store went to the store")
    names = {"local": "UnifiedLog.read (local)",
             "rlm_local": "RemoteLogManager.read (local)",
             "remote": "RemoteLogManager.read (remote)",
             "remote_direct": "reader.read_remote on the caller (remote, no pool)",
             "remote_inline": "RemoteLogManager read work on the caller (quota, metrics)",
             "remote_pread": "RemoteLogManager.read, pread path (no map_range)",
             "remote_pread_direct": "reader.read_remote on the caller, pread path",
             "local_all": "UnifiedLog.read, every byte read",
             "remote_all": "RemoteLogManager.read, every byte read",
             "remote_pread_all": "RemoteLogManager.read, pread path, every byte read"}
    for k, v in t.items():
        rep.add("(b)", f"{names[k]}, {len(starts)} x 1 MiB", nbytes / v / 1e6, "MB/s")
    rep.ratio("(b) remote read / local read, same offsets", t["local"] / t["remote"], 0.9,
              "warm index cache")
    rep.ratio("(b) RemoteLogManager.read (local) / UnifiedLog.read (local)",
              t["local"] / t["rlm_local"])
    rep.ratio("(b) remote read without the reader pool / local read",
              t["local"] / t["remote_direct"])
    rep.ratio("(b) RemoteLogManager read work on the caller (no pool hop) / local read",
              t["local"] / t["remote_inline"])
    rep.ratio("(b) remote read / local read, every byte read", t["local_all"] / t["remote_all"],
              0.9)
    if "remote_pread" in t:
        rep.ratio("(b) remote read, pread path / local read", t["local"] / t["remote_pread"])
        rep.ratio("(b) remote read without the reader pool, pread path / local read",
                  t["local"] / t["remote_pread_direct"])
        rep.ratio("(b) remote read, pread path / local read, every byte read",
                  t["local_all"] / t["remote_pread_all"])


def _store_gets(s: Setup) -> float | None:
    """GETs the object-store tier made so far (None for the filesystem tier)."""
    store = getattr(s.rsm, "store", None)
    return None if store is None else store.metrics.value("get_object_requests")


def _read_through(rlm, end: int) -> None:
    offset = 0
    while offset < end:
        offset = rlm.read("tiered", 0, offset, MAX_BYTES).next_offset


def section_c(rep: Report, s: Setup, repeat: int) -> None:
    print("(c) remote read throughput by threads", flush=True)
    rlm = s.rlm
    ends = [s.lm.get_log("tiered", p).local_log_start_offset for p in range(PARTITIONS)]

    def read_partition(p):
        offset, got = 0, 0
        while offset < ends[p]:
            r = rlm.read("tiered", p, offset, MAX_BYTES)
            touch(r.records)
            got += r.size_in_bytes
            offset = r.next_offset
        return got

    per_partition = read_partition(0)
    base = None
    for threads in THREADS:
        def run(threads=threads):
            workers = [threading.Thread(target=read_partition, args=(p,))
                       for p in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        dt = measure_group({"run": run}, repeat)["run"]
        rate = per_partition * threads / dt / 1e6
        base = base or rate
        rep.add("(c)", f"remote read, {threads} thread(s), one partition each", rate, "MB/s")
        if threads > 1:
            rep.ratio(f"(c) remote read {threads} threads / 1 thread", rate / base)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64, help="MiB of records per partition")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--verification", choices=("full", "size"), default="full",
                        help="the filesystem tier's log.read.verification")
    parser.add_argument("--tier", choices=("filesystem", "objectstore"), default="filesystem",
                        help="the remote tier: the filesystem's, or the object store's on a "
                             "SeaweedFS server started here (warm: its chunks all cached)")
    parser.add_argument("--clock", choices=("wall", "cpu", "process"), default="wall",
                        help="wall time, the calling thread's CPU time, or this process's "
                             "CPU time (every thread: the reader pool's too)")
    parser.add_argument("--sections", default="abc")
    args = parser.parse_args(argv)
    compare_log._clock = {"wall": time.perf_counter, "cpu": time.thread_time,
                          "process": self_cpu}[args.clock]
    logging.basicConfig(level=logging.WARNING)
    rep = Report()
    header = [(f"CPU: {platform.processor() or platform.machine()} ({os.cpu_count()} logical "
               f"CPUs), Python {platform.python_version()}; {args.mb} MiB a partition; "
               + (f"log.read.verification={args.verification}"
                  if args.tier == "filesystem" else "object store, memory chunk cache")
               + f"; clock {args.clock}")]
    print(header[0], flush=True)
    buf = segment("none", args.mb << 20)
    root = Path(tempfile.mkdtemp(prefix="remote-read-", dir=args.dir))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        server = None
        if args.tier == "objectstore":
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
                os.path.abspath(__file__))), "tests"))
            from s3_server import S3Server
            server = stack.enter_context(S3Server(root / "weed"))
        _run(args, rep, Setup(root, buf, args.verification, server))
    print(rep.text_tables())
    if args.markdown:
        Path(args.markdown).write_text(rep.markdown(header))
    return 0


def _run(args, rep: Report, s: Setup) -> None:
    try:
        if "a" in args.sections:
            section_a(rep, s)
        # the copies (b) and (c) read, made by passes on this thread: with the scheduler
        # started, its tasks would run every 10 ms while reads are timed, and the process
        # clock would charge their CPU to whichever read ran then
        s.new_rlm(2)
        _copy_sync(s)
        s.lm.update_topic_config("tiered", {"remote.storage.enable": "true",
                                            "segment.bytes": str(s.segment_bytes),
                                            "retention.ms": "-1",
                                            "local.retention.bytes": "1"})
        for p in range(PARTITIONS):
            s.lm.get_log("tiered", p).delete_old_segments()
        s.rlm.run_once()
        if "b" in args.sections:
            section_b(rep, s, args.repeat)
        if "c" in args.sections:
            section_c(rep, s, args.repeat)
    finally:
        s.close()


if __name__ == "__main__":
    sys.exit(main())
