"""Real segments for the remote-tier tests, and the child process of the RSM crash test.

As a module: `make_segment` writes a closed local segment (records built with the engine's
RecordBatchBuilder, indexes written by LogSegment, optional aborted transactions, a producer
snapshot) and returns its LogSegmentData; `segment_metadata` builds matching metadata.

As a script (tests/test_remote_storage.py kills it with SIGKILL at random points):

    rsm_crash_writer.py <remote dir> <source dir> <topic id> <last offset> <size> <uuid>...

copies the segment at offset 0 in <source dir> (written by `make_segment`) once per uuid with the
filesystem tier, printing
"copied <uuid>" after each, forever (the parent kills it).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.common import Uuid
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from engine.log.producer_state import write_snapshot
from engine.log.segment import LogSegment
from engine.log.transaction_index import AbortedTxn
from engine.records import RecordBatchBuilder
from engine.remote import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata
from engine.remote.metadata import TopicIdPartition

BASE_TS = 1_700_000_000_000


def make_segment(directory, base_offset: int = 0, batches: int = 20, records: int = 10,
                 *, value_size: int = 200, aborted: int = 0, seed: int = 0,
                 index_interval_bytes: int = 1024) -> tuple[LogSegmentData, int, int]:
    """Writes a closed segment; returns (LogSegmentData, last offset, .log size)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    seg = LogSegment.create(directory, base_offset, index_interval_bytes=index_interval_bytes,
                            max_index_size=1 << 20)
    offset = base_offset
    for b in range(batches):
        builder = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=b // 7)
        for r in range(records):
            builder.append(rng.randbytes(value_size), key=b"k%d" % r,
                           timestamp=BASE_TS + (offset - base_offset + r) * 10)
        data = builder.build()
        last = offset + records - 1
        seg.append(last, BASE_TS + (last - base_offset) * 10, last, data)
        offset = last + 1
    for i in range(aborted):
        first = base_offset + i * 3
        seg.txn_index.append(AbortedTxn(1000 + i, first, first + 2, first))
    seg.on_become_inactive_segment()
    size = seg.size_in_bytes
    seg.close()
    name = f"{base_offset:020d}"
    snapshot = directory / f"{offset:020d}.snapshot"
    write_snapshot(snapshot, [], sync=False)
    epochs = LeaderEpochCheckpointFile(directory / f"{name}.epochs", create=False)
    epochs.write([EpochEntry(e, base_offset + e * 7 * records)
                  for e in range((batches - 1) // 7 + 1)], sync=False)
    return load_segment_data(directory, base_offset), offset - 1, size


def load_segment_data(directory, base_offset: int) -> LogSegmentData:
    """The LogSegmentData of a segment `make_segment` wrote."""
    directory = Path(directory)
    name = f"{base_offset:020d}"
    txn = directory / f"{name}.txnindex"
    snapshots = sorted(p for p in directory.glob("*.snapshot")
                       if int(p.stem) > base_offset)
    return LogSegmentData(directory / f"{name}.log", directory / f"{name}.index",
                          directory / f"{name}.timeindex", txn if txn.exists() else None,
                          snapshots[0], (directory / f"{name}.epochs").read_bytes())


def segment_metadata(tip: TopicIdPartition, start: int, end: int, size: int,
                     segment_id: Uuid | None = None,
                     custom: bytes | None = None) -> RemoteLogSegmentMetadata:
    rid = RemoteLogSegmentId(tip, segment_id or Uuid.random())
    return RemoteLogSegmentMetadata(rid, start, end, BASE_TS, 0, BASE_TS, size, {0: start},
                                    custom_metadata=custom)


def _main(argv: list[str]) -> None:
    from engine.remote.filesystem import FileSystemRemoteStorageManager

    remote, source, topic_id = argv[0], Path(argv[1]), Uuid.from_string(argv[2])
    last, size = int(argv[3]), int(argv[4])
    tip = TopicIdPartition(topic_id, "crash", 0)
    data = load_segment_data(source, 0)
    rsm = FileSystemRemoteStorageManager([remote])
    print("ready", flush=True)
    while True:
        for text in argv[5:]:
            md = segment_metadata(tip, 0, last, size, Uuid.from_string(text))
            rsm.copy_log_segment_data(md, data)
            print("copied", text, flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
