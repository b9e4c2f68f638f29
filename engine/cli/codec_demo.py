"""`codec-demo` (the main job before tiering): write a realistic partition directory with
one segment per codec, then validate, decode and verify it, printing what was found and
how fast."""

from __future__ import annotations

import os
import tempfile
import time

from engine.common import Uuid
from engine.log import EpochEntry, LeaderEpochCheckpointFile, PartitionMetadataFile, rebuild_indexes
from engine.log.index_rebuild import write_offset_index, write_time_index
from engine.records import CompressionType, MemoryRecords, scan_batches
from engine.records.sample import sample_batches

__all__ = ["run", "write_partition"]


def write_partition(directory: str, records_per_codec: int, codecs: list[CompressionType],
                    seed: int = 1) -> list[str]:
    """Writes one segment per codec with the offset and time indexes Kafka's recovery would
    build, a leader-epoch checkpoint and partition.metadata; returns the .log paths."""
    os.makedirs(directory, exist_ok=True)
    paths, base = [], 0
    for codec in codecs:
        path = os.path.join(directory, f"{base:020d}.log")
        with open(path, "wb") as f:
            for batch in sample_batches(records_per_codec, codec, base_offset=base,
                                        seed=seed + int(codec)):
                f.write(batch)
        with open(path, "rb") as f:
            headers = MemoryRecords(f.read(), file=path).scan()
        offsets, times = rebuild_indexes(headers, base)
        stem = path[: -len(".log")]
        write_offset_index(stem + ".index", offsets, base, sync=False)
        write_time_index(stem + ".timeindex", times, base, sync=False)
        paths.append(path)
        base += records_per_codec
    LeaderEpochCheckpointFile(os.path.join(directory, "leader-epoch-checkpoint")).write(
        [EpochEntry(0, 0)], sync=False)
    PartitionMetadataFile(os.path.join(directory, "partition.metadata")).write(
        Uuid.random(), sync=False)
    return paths


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def run(args) -> int:
    codecs = [CompressionType[name.upper()] for name in args.codecs.split(",") if name]
    owner = None
    if args.dir is None:
        owner = tempfile.TemporaryDirectory(prefix="engine-demo-")
        directory = os.path.join(owner.name, "demo-0")
    else:
        directory = os.path.join(args.dir, "demo-0")
    try:
        t0 = time.perf_counter()
        paths = write_partition(directory, args.records, codecs, args.seed)
        print(f"wrote {len(paths)} segments of {args.records} records to {directory} "
              f"in {time.perf_counter() - t0:.1f} s")
        print(f"{'codec':7} {'batches':>8} {'records':>9} {'MiB':>8} {'scan GB/s':>10} "
              f"{'records/s':>11} {'columns rec/s':>14}")
        for codec, path in zip(codecs, paths):
            with open(path, "rb") as f:
                data = f.read()
            t = time.perf_counter()
            scan = scan_batches(data, verify_crc=True)
            t_scan = time.perf_counter() - t
            bad = int((~scan.headers["crc_valid"]).sum())
            mr = MemoryRecords(data, file=path)
            t = time.perf_counter()
            n = 0
            for _r in mr.records():
                n += 1
            t_rec = time.perf_counter() - t
            t_col = float("inf")
            cols = None
            for _ in range(2):  # the second run shows the steady state (buffers reused)
                cols = None  # drop the previous result first, so its buffers can be reused
                t = time.perf_counter()
                cols = mr.decode_columns()
                t_col = min(t_col, time.perf_counter() - t)
            if bad or n != args.records or cols.num_records != args.records:
                print(f"{codec.name}: problem: {bad} bad CRCs, {n} records decoded, "
                      f"{cols.num_records} in columns (expected {args.records})")
                return 1
            print(f"{codec.name.lower():7} {len(scan):>8} {n:>9} {len(data) / 2**20:>8.1f} "
                  f"{_rate(len(data), t_scan) / 1e9:>10.2f} {_rate(n, t_rec):>11,.0f} "
                  f"{_rate(n, t_col):>14,.0f}")
        from engine.cli.dump_log import DumpContext, dump_file

        files = sorted(os.path.join(directory, f) for f in os.listdir(directory))
        with open(os.devnull, "w") as devnull:
            ctx = DumpContext(out=devnull, verify=True)
            for path in files:
                dump_file(path, ctx)
        if ctx.problems:
            print("verify: " + ctx.problems[0])
            return 1
        print(f"verify: {len(files)} files OK (every CRC, record and index entry)")
        return 0
    finally:
        if owner is not None:
            owner.cleanup()
