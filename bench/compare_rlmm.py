"""Side by side: the embedded RemoteLogMetadataManager against raw file I/O, in one process.

    /work/venv/bin/python bench/compare_rlmm.py                 # 2,000 events, 200k lookups
    /work/venv/bin/python bench/compare_rlmm.py --events 500 --dir /mnt/disk/tmp

The contenders run round-robin (A B A B ...) and the medians are compared, so both share
whatever load the machine has. Only ratios from one run mean anything.

  (a) durable append: EmbeddedRemoteLogMetadataManager add + update (check, encode, frame,
      write, fsync, apply) against a raw os.write + os.fsync of the same frame bytes.
      The fsync dominates both; the ratio is the engine's overhead on top of it.
  (b) restart: load of one partition's log of N events (read, CRC check, decode, replay)
      against reading the same file and CRC32C-checking its bytes whole. Also given: the
      load from a compacted snapshot of the same state.
  (c) lookups: remote_log_segment_metadata(tip, epoch, offset) at random offsets of a
      partition with N/2 segments over 10 epochs, per call.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.checksums import crc32c
from engine.common import Uuid
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.metadata_log import encode_event, encode_frame

TIP = TopicIdPartition(Uuid(7, 11), "bench-topic", 0)


def segments(n: int) -> list[RemoteLogSegmentMetadata]:
    out = []
    for i in range(n):
        start = i * 1000
        out.append(RemoteLogSegmentMetadata(
            RemoteLogSegmentId(TIP, Uuid(1, i + 1)), start, start + 999, 1_700_000_000_000,
            0, 1, 1 << 30, {i * 10 // n: start}, custom_metadata=b"x" * 56))
    return out


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def engine_writes(directory: Path, mds) -> None:
    with EmbeddedRemoteLogMetadataManager(directory, snapshot_interval_entries=10**9) as rlmm:
        for md in mds:
            rlmm.add_remote_log_segment_metadata(md)
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, 2, b"y" * 56, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                0))


def raw_writes(path: Path, frames) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for frame in frames:
            os.write(fd, frame)
            os.fsync(fd)
    finally:
        os.close(fd)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="events (half adds)")
    parser.add_argument("--lookups", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    mds = segments(args.events // 2)
    frames = []
    for md in mds:
        frames.append(encode_frame(encode_event(md)))
        frames.append(encode_frame(encode_event(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, 2, b"y" * 56, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            0))))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        tmp = Path(tmp)
        eng, raw = [], []
        for r in range(args.rounds):
            eng.append(timed(lambda r=r: engine_writes(tmp / f"e{r}", mds)))
            raw.append(timed(lambda r=r: raw_writes(tmp / f"raw{r}", frames)))
        e, w = statistics.median(eng), statistics.median(raw)
        n = len(frames)
        print(f"(a) durable append: engine {e / n * 1e6:.0f} us/event, raw write+fsync "
              f"{w / n * 1e6:.0f} us/event, ratio {w / e:.2f}x raw")

        store = tmp / "e0"
        log_file = next(store.glob("*/*.log"))
        loads, reads = [], []
        for _ in range(args.rounds):
            def load():
                with EmbeddedRemoteLogMetadataManager.open_read_only(store) as rlmm:
                    rlmm.highest_offset_for_epoch(TIP, 0)
            loads.append(timed(load))
            reads.append(timed(lambda: crc32c(log_file.read_bytes())))
        e, w = statistics.median(loads), statistics.median(reads)
        print(f"(b) restart from a log of {n} events ({log_file.stat().st_size} bytes): "
              f"{e * 1e3:.1f} ms, raw read+CRC32C {w * 1e3:.2f} ms, ratio {w / e:.3f}x raw")
        with EmbeddedRemoteLogMetadataManager(store, snapshot_interval_entries=1) as rlmm:
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                mds[0].remote_log_segment_id, 3, None,
                RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 0))     # triggers compaction
        snaps = []
        for _ in range(args.rounds):
            def load_snapshot():
                with EmbeddedRemoteLogMetadataManager.open_read_only(store) as rlmm:
                    rlmm.highest_offset_for_epoch(TIP, 0)
            snaps.append(timed(load_snapshot))
        print(f"    restart from the compacted snapshot: {statistics.median(snaps) * 1e3:.1f} ms")

        rng = random.Random(1)
        queries = []
        for _ in range(args.lookups):
            md = mds[rng.randrange(len(mds))]
            queries.append((md.first_epoch, rng.randrange(md.start_offset, md.end_offset + 1)))
        with EmbeddedRemoteLogMetadataManager.open_read_only(store) as rlmm:
            def lookups():
                for epoch, offset in queries:
                    rlmm.remote_log_segment_metadata(TIP, epoch, offset)
            took = statistics.median(timed(lookups) for _ in range(args.rounds))
        print(f"(c) lookups over {len(mds)} segments: {took / len(queries) * 1e6:.2f} us/call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
