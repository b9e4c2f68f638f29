"""Side by side: loading the same remote-log metadata from Kafka's `__remote_log_metadata`
partition files and from the embedded RLMM's log, in one process.

    .venv/bin/python bench/compare_metadata_topic.py            # 5,000 segments, 10,000 events
    .venv/bin/python bench/compare_metadata_topic.py --segments 20000

Both build the same RemoteLogMetadataCache from N adds and N COPY_SEGMENT_FINISHED updates:
  (a) Kafka's topic: one segment file of record batches (100 records each), every batch's
      CRC checked, every value decoded by the generic message codec, events replayed;
  (b) the embedded RLMM: its own checksummed frames, decoded by hand-written struct code,
      events replayed (snapshots off, so it replays every event too).
The contenders run round-robin (A B A B ...) and the medians are compared; only the ratio
from one run means anything.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.common import Uuid
from engine.records import RecordBatchBuilder
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.metadata_log import PartitionMetadataLog, partition_dir_name
from engine.remote.metadata_topic import RemoteLogMetadataTopic, encode_record_value

TIP = TopicIdPartition(Uuid(7, 11), "bench-topic", 0)


def events(n: int) -> list:
    out: list = []
    for i in range(n):
        start = i * 1000
        md = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(TIP, Uuid(1, i + 1)), start, start + 999, 1_700_000_000_000,
            0, 1, 1 << 30, {i * 10 // n: start}, custom_metadata=b"x" * 56)
        out += [md, RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, 2, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0)]
    return out


def write_kafka(log_dir: Path, evs) -> Path:
    directory = log_dir / "__remote_log_metadata-0"
    directory.mkdir(parents=True)
    data = bytearray()
    for i in range(0, len(evs), 100):
        b = RecordBatchBuilder(base_offset=i)
        for ev in evs[i:i + 100]:
            b.append(encode_record_value(ev), key=None, timestamp=0)
        data += b.build()
    (directory / f"{0:020d}.log").write_bytes(bytes(data))
    return directory


def write_embedded(directory: Path, evs) -> None:
    with EmbeddedRemoteLogMetadataManager(directory, snapshot_interval_entries=10**9) as rlmm:
        for ev in evs:
            if isinstance(ev, RemoteLogSegmentMetadata):
                rlmm.add_remote_log_segment_metadata(ev)
            else:
                rlmm.update_remote_log_segment_metadata(ev)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--segments", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    evs = events(args.segments)
    with tempfile.TemporaryDirectory() as tmp:
        kafka_dir = write_kafka(Path(tmp) / "logs", evs)
        embedded = Path(tmp) / "embedded"
        write_embedded(embedded, evs)
        partition = embedded / partition_dir_name(TIP)
        times: dict[str, list[float]] = {"kafka topic": [], "embedded log": []}
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            a = RemoteLogMetadataTopic([kafka_dir]).load().caches[TIP]
            times["kafka topic"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = PartitionMetadataLog(partition, TIP, read_only=True).load().cache
            times["embedded log"].append(time.perf_counter() - t0)
            assert a.epoch_states() == b.epoch_states() and len(a) == len(b) == args.segments
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(evs)} events ({args.segments} segments), median of {args.rounds}")
    for k, v in med.items():
        print(f"  {k:14s} {v * 1000:8.1f} ms  {v / len(evs) * 1e6:6.1f} us/event")
    print(f"  kafka topic / embedded log: {med['kafka topic'] / med['embedded log']:.2f}x")


if __name__ == "__main__":
    main()
