"""`produce-demo`: fill partition logs over several log dirs with realistic records.

Partitions are placed by `LogManager` (fewest partitions first). Each partition gets about
`--records / --partitions` records in batches of varied sizes: JSON-like values of 100-1000
bytes (`engine.records.sample`), user-id keys (some null), zero to two headers; the third
batch and about one in five after it are replaced by a transaction (one to three
transactional batches of one producer, then its ABORT or COMMIT marker; the first is
aborted, later ones one in three). The leader epoch
moves from 0 to 1 half way, so the epoch cache has two entries. Everything is appended as
leader; the manager then shuts down cleanly and a summary line per partition is printed.

Timestamps (CreateTime) run from the current time backwards: the last record is stamped
no later than now, so the default `log.retention.ms` (7 days) keeps what was produced.
`--start-timestamp MS` stamps the first record at MS instead: with it the output is
deterministic for a given --seed (byte for byte), as tests and reproducible data need.

UnifiedLog keeps the producer state: each aborted transaction is in the `.txnindex` of the
segment holding its marker, and a `.snapshot` is written at each roll and at shutdown
(`dump-log --verify` replays the log and checks both).
"""

from __future__ import annotations

import os
import random
import sys
import time

from engine.cli._broker import cli_errors
from engine.log.log_manager import LogManager
from engine.records import CompressionType, RecordBatchBuilder, build_end_txn_marker
from engine.records.sample import sample_value

__all__ = ["default_start_timestamp", "produce_partition", "run"]

#: Upper bound of the time one record moves the clock on: 0-4 ms per record, 1 ms per
#: transaction marker (at most one marker per record). Starting this many ms per record
#: before now keeps every timestamp at or before now.
_MAX_MS_PER_RECORD = 5
_HEADER_NAMES = ("trace-id", "content-type", "source")


def _fill(builder: RecordBatchBuilder, rng: random.Random, count: int, ts: int) -> int:
    for _ in range(count):
        ts += rng.randrange(0, 5)
        key = None if rng.random() < 0.1 else b"user-%d" % rng.randrange(100_000)
        headers = []
        for name in rng.sample(_HEADER_NAMES, rng.randrange(0, 3)):
            headers.append((name, b"%016x" % rng.getrandbits(64)))
        builder.append(sample_value(rng, rng.randint(100, 1000)), key=key, headers=headers,
                       timestamp=ts)
    return ts


def default_start_timestamp(num_records: int) -> int:
    """A first timestamp such that `num_records` records end at or before now."""
    return int(time.time() * 1000) - _MAX_MS_PER_RECORD * num_records


def produce_partition(manager: LogManager, topic: str, partition: int, num_records: int,
                      codec: CompressionType, seed: int,
                      start_timestamp: int | None = None) -> dict:
    """Appends `num_records` data records (plus transaction markers) to the partition as
    leader, timestamps from `start_timestamp` (default: `default_start_timestamp`, so the
    last one is at or before now). Returns counts: records, batches, transactions,
    aborted."""
    rng = random.Random(seed * 1_000_003 + partition)
    ts = default_start_timestamp(num_records) if start_timestamp is None else start_timestamp
    left = num_records
    stats = {"records": 0, "batches": 0, "transactions": 0, "aborted": 0}
    sequences: dict[int, int] = {}
    next_producer_id = 1000 + partition * 100
    while left > 0:
        epoch = 0 if stats["records"] < num_records // 2 else 1
        if left >= 3 and (stats["batches"] == 2 or rng.random() < 0.2):
            producer_id, producer_epoch = next_producer_id, 0
            next_producer_id += 1
            for _ in range(rng.randint(1, 3)):
                if left <= 0:
                    break
                n = min(left, rng.randint(1, 50))
                seq = sequences.get(producer_id, 0)
                builder = RecordBatchBuilder(compression_type=codec, producer_id=producer_id,
                                             producer_epoch=producer_epoch, base_sequence=seq,
                                             is_transactional=True)
                ts = _fill(builder, rng, n, ts)
                sequences[producer_id] = seq + n
                manager.append_as_leader(topic, partition, builder.build(), epoch)
                stats["records"] += n
                stats["batches"] += 1
                left -= n
            commit = stats["aborted"] > 0 and rng.random() >= 1 / 3
            ts += 1
            marker = build_end_txn_marker(commit, base_offset=0, producer_id=producer_id,
                                          producer_epoch=producer_epoch, timestamp=ts)
            manager.append_as_leader(topic, partition, marker, epoch)
            stats["batches"] += 1
            stats["transactions"] += 1
            stats["aborted"] += 0 if commit else 1
            continue
        n = min(left, rng.randint(1, 200))
        builder = RecordBatchBuilder(compression_type=codec)
        ts = _fill(builder, rng, n, ts)
        manager.append_as_leader(topic, partition, builder.build(), epoch)
        stats["records"] += n
        stats["batches"] += 1
        left -= n
    return stats


@cli_errors
def run(args) -> int:
    dirs = [d for d in args.log_dirs.split(",") if d]
    if not dirs:
        print("error: --log-dirs names no directory", file=sys.stderr)
        return 2
    for d in dirs:  # LogManager would take such a dir offline and fail on the first append
        if os.path.lexists(d) and not os.path.isdir(d):
            print(f"error: --log-dirs: {d} exists but is not a directory", file=sys.stderr)
            return 2
    if args.partitions < 1 or args.records < 0:
        print("error: --partitions must be >= 1 and --records >= 0", file=sys.stderr)
        return 2
    try:
        codec = CompressionType[args.codec.upper()]
    except KeyError:
        print(f"error: unknown codec {args.codec!r} (none, gzip, snappy, lz4, zstd)",
              file=sys.stderr)
        return 2
    topic_defaults = {}
    if args.segment_bytes is not None:
        topic_defaults["segment.bytes"] = args.segment_bytes
    manager = LogManager(dirs, topic_defaults=topic_defaults)
    summary = []
    try:
        for p in range(args.partitions):
            n = args.records // args.partitions + (1 if p < args.records % args.partitions
                                                   else 0)
            manager.get_or_create_log(args.topic, p)
            stats = produce_partition(manager, args.topic, p, n, codec, args.seed,
                                      args.start_timestamp)
            unified = manager.get_log(args.topic, p)
            summary.append((p, manager.log_dir_of(args.topic, p), len(unified.segments),
                            unified.log_start_offset, unified.log_end_offset, stats))
    finally:
        manager.shutdown()
    if manager.offline_dirs:
        print("error: offline log dirs: " + ", ".join(map(str, manager.offline_dirs)),
              file=sys.stderr)
        return 1
    for p, d, segments, start, end, stats in summary:
        print(f"{args.topic}-{p} dir={d} segments={segments} log_start_offset={start} "
              f"log_end_offset={end} records={stats['records']} batches={stats['batches']} "
              f"transactions={stats['transactions']} aborted={stats['aborted']}")
    return 0
