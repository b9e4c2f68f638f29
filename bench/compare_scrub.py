"""Side by side against one local S3 server (SeaweedFS `weed mini`, started here): `scrub`
of an object-store tier through its RLMM against raw sequential GETs of the same objects,
in one run.

    .venv/bin/python bench/compare_scrub.py              # 256 MiB of records in 8 segments
    .venv/bin/python bench/compare_scrub.py --mb 64 --segments 4 --reps 5
    .venv/bin/python bench/compare_scrub.py --fs   # the filesystem tier too

Set-up: bench/segment.py's zstd segment (batches of 100 realistic records) cut at batch
boundaries into --segments remote segments, each with an offset and a time index entry per
4 KiB and its leader-epoch checkpoint, copied through the object-store RSM (plain chunks of
--chunk-mb, the plugin's default layout) and recorded COPY_SEGMENT_FINISHED in the embedded
RLMM, as the broker's copier would.

Contenders (round-robin, best of --reps, so both see the same machine load; every scrub on
a fresh RSM, so nothing is cached; clients are built outside the timing):
  raw    obstore.get(...).bytes() of every object (.log, .indexes, .rsm-manifest), one
         after the other: the bytes a scrub must fetch, with no checks;
  scrub  engine.remote.scrub_tier.scrub_tier with --threads (default 4): the RLMM read, the
         listing, every manifest, every chunk, every batch CRC, every index entry against
         the log, lineage and orphans.
Both rates are the objects' bytes over the wall time. Target: scrub >= 0.8x raw.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __package__ in (None, ""):  # run as a script: make `bench` and `engine` importable
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import obstore
from s3_server import S3Server

from bench.compare_records import Report
from bench.segment import segment
from engine.common import Uuid
from engine.config import BrokerConfig
from engine.records import scan_batches
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.factory import create_remote_storage_manager, open_remote_log_metadata_reader
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.scrub_tier import scrub_tier
from engine.remote.storage import LogSegmentData

MiB = 1 << 20
INDEX_INTERVAL = 4096


def build_tier(base: Path, server: S3Server | None, mb: int, segments: int, chunk_mb: int
               ) -> dict[str, str]:
    """The broker properties of a tier holding `segments` segments cut from one `mb` MiB
    zstd log: on the S3 `server`, or (None) on the filesystem tier."""
    props = {"log.dirs": str(base / "logs"), "remote.log.storage.system.enable": "true"}
    if server is None:
        props.update({"rsm.config.dirs": str(base / "tier"), "rsm.config.fsync": "false"})
    else:
        props.update({"remote.log.storage.manager.class.name":
                      "io.aiven.kafka.tieredstorage.RemoteStorageManager",
                      "rsm.config.key.prefix": f"bench-{Uuid.random()}/",
                      "rsm.config.chunk.size": str(chunk_mb * MiB)})
        props.update({f"rsm.config.{k}": v for k, v in server.config().items()})
    (base / "logs").mkdir(parents=True)
    log = segment("zstd", mb * MiB)
    h = scan_batches(log, verify_crc=False).headers
    cuts = np.array_split(np.arange(len(h)), segments)
    epoch = int(h["partition_leader_epoch"][0])  # bench/segment.py writes one epoch
    tip = TopicIdPartition(Uuid.random(), "bench", 0)
    rsm = create_remote_storage_manager(BrokerConfig(dict(props)))
    rlmm = EmbeddedRemoteLogMetadataManager(base / "logs" / "__remote_log_metadata")
    try:
        for n, rows in enumerate(cuts):
            first, last = int(rows[0]), int(rows[-1])
            lo = int(h["position"][first])
            hi = int(h["position"][last]) + int(h["size"][last])
            data = _segment_files(base / f"seg-{n}", log[lo:hi], h[first:last + 1], lo, epoch)
            start, end = int(h["base_offset"][first]), int(h["last_offset"][last])
            md = RemoteLogSegmentMetadata(
                RemoteLogSegmentId(tip, Uuid.random()), start, end,
                int(h["max_timestamp"][first:last + 1].max()), 0, 0, hi - lo, {epoch: start})
            rlmm.add_remote_log_segment_metadata(md)
            custom = rsm.copy_log_segment_data(md, data)
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, 0, custom,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
    finally:
        rlmm.close()
        rsm.close()
    return props


def _segment_files(stem: Path, data: bytes, h, lo: int, epoch: int) -> LogSegmentData:
    base = int(h["base_offset"][0])
    offsets, times, last_entry = [], [], -INDEX_INTERVAL
    for i in range(len(h)):
        pos = int(h["position"][i]) - lo
        if pos - last_entry >= INDEX_INTERVAL and i:
            offsets.append(np.array([int(h["last_offset"][i]) - base, pos], ">i4").tobytes())
            times.append(np.array([int(h["max_timestamp"][i])], ">i8").tobytes()
                         + np.array([int(h["last_offset"][i]) - base], ">i4").tobytes())
            last_entry = pos
    paths = {}
    for suffix, content in ((".log", data), (".index", b"".join(offsets)),
                            (".timeindex", b"".join(times))):
        paths[suffix] = stem.with_suffix(suffix)
        paths[suffix].write_bytes(content)
    return LogSegmentData(paths[".log"], paths[".index"], paths[".timeindex"], None, None,
                          f"0\n1\n{epoch} {base}\n".encode())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256, help="uncompressed MiB of records")
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--chunk-mb", type=int, default=4)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fs", action="store_true",
                    help="also the filesystem tier: scrub against reading every file whole")
    args = ap.parse_args(argv)
    rep = Report()
    with tempfile.TemporaryDirectory(prefix="bench-scrub-") as tmp:
        server = S3Server(Path(tmp) / "weed")
        server.start()
        try:
            props = build_tier(Path(tmp) / "tier", server, args.mb, args.segments,
                               args.chunk_mb)
            measure(rep, props, args)
        finally:
            server.stop()
        if args.fs:
            props = build_tier(Path(tmp) / "fs", None, args.mb, args.segments, args.chunk_mb)
            measure_fs(rep, props, args, Path(tmp) / "fs" / "tier")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines()
                  if ln.startswith("Model name")), platform.processor())
    print(f"\nCPU: {model}, {os.cpu_count()} cores; Python {platform.python_version()}")
    print(rep.text_tables())
    return 0


def measure(rep: Report, props: dict[str, str], args) -> None:
    config = BrokerConfig(dict(props))
    prefix = props["rsm.config.key.prefix"]
    rsm = create_remote_storage_manager(config)
    store = rsm.store
    keys = [(o.key, o.size) for o in store.list(prefix)]
    total = sum(size for _, size in keys)
    raw_store = store._store  # the obstore client the tier itself uses
    rsm.close()
    print(f"{len(keys)} objects, {total / MiB:.1f} MiB under {prefix}", flush=True)

    def raw() -> None:
        got = 0
        for key, _ in keys:
            got += len(obstore.get(raw_store, key).bytes())
        assert got == total, (got, total)

    def scrub(fresh) -> None:
        report = scrub_tier(fresh, lambda: open_remote_log_metadata_reader(config),
                            threads=args.threads)
        assert report.clean and report.segments == args.segments, report.summary()

    best = {"raw": float("inf"), "scrub": float("inf")}
    for _ in range(args.reps):
        t0 = time.perf_counter()
        raw()
        best["raw"] = min(best["raw"], time.perf_counter() - t0)
        # a fresh RSM (no cached manifest, index or chunk), built outside the timing as the
        # raw side's client is
        with create_remote_storage_manager(BrokerConfig(dict(props))) as fresh:
            t0 = time.perf_counter()
            scrub(fresh)
            best["scrub"] = min(best["scrub"], time.perf_counter() - t0)
    rep.add("scrub", "raw sequential GETs of every object", total / MiB / best["raw"], "MB/s")
    rep.add("scrub", f"scrub_tier, {args.threads} threads", total / MiB / best["scrub"],
            "MB/s")
    rep.ratio("scrub vs raw sequential GETs", best["raw"] / best["scrub"], 0.8)


def measure_fs(rep: Report, props: dict[str, str], args, tier: Path) -> None:
    config = BrokerConfig(dict(props))
    files = sorted(p for p in tier.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    print(f"{len(files)} files, {total / MiB:.1f} MiB under {tier}", flush=True)

    def raw() -> None:
        assert sum(len(p.read_bytes()) for p in files) == total

    best = {"raw": float("inf"), "scrub": float("inf")}
    for _ in range(args.reps):
        t0 = time.perf_counter()
        raw()
        best["raw"] = min(best["raw"], time.perf_counter() - t0)
        with create_remote_storage_manager(BrokerConfig(dict(props))) as fresh:
            t0 = time.perf_counter()
            report = scrub_tier(fresh, lambda: open_remote_log_metadata_reader(config),
                                threads=args.threads)
            best["scrub"] = min(best["scrub"], time.perf_counter() - t0)
        assert report.clean and report.segments == args.segments, report.summary()
    rep.add("fs", "sequential reads of every file (page cache)", total / MiB / best["raw"],
            "MB/s")
    rep.add("fs", f"scrub_tier, {args.threads} threads", total / MiB / best["scrub"], "MB/s")
    rep.ratio("filesystem tier: scrub vs sequential reads", best["raw"] / best["scrub"])


if __name__ == "__main__":
    sys.exit(main())
