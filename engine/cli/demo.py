"""`demo`, the README's main job: tiered storage end to end on this machine.

1. Writes a broker file for two log dirs and a tier with aggressive tiering settings (small
   segments, small `log.local.retention.bytes`; Kafka's default time retention, which keeps
   the records: they are stamped up to the current time) and loads it with
   engine.config.load_broker_config. The tier is the filesystem tier (`--tier filesystem`,
   the default), or with `--tier s3` the object-store tier in the Aiven plugin's format on
   a local SeaweedFS that the demo starts and stops itself (engine.cli._local_s3; without
   SeaweedFS installed, exit 2 with how to install it).
2. Produces a realistic topic over several partitions with produce-demo's generator
   (JSON-like values, keys, headers, transactions with aborts, two leader epochs), then
   records every batch's (base offset, last offset, CRC) as the reference.
3. Tiers it: RemoteLogManager passes (run_once) until idle; local retention deletes the
   tiered segments beyond the local size limit.
4. Reads every offset back through RemoteLogManager.read(): a sequential sweep per
   partition whose batches must tile [log start, log end) exactly and match the reference
   CRCs (every batch CRC verified), then random single-offset reads for latency figures.
5. Prints a summary: segments and bytes tiered, local bytes left, read throughput and
   point-read latency percentiles, local vs remote. Exit status 1 on any mismatch.

Read throughput compares like with like: before tiering, the same 1 MiB reads are timed
over the local log (a second pass, so the page cache is as warm as the tier's files are);
after tiering, the checked sweep is the first touch of each remote segment (its first
open checks the whole file against its stored CRC and fetches its indexes), and a second
sweep at the same offsets is the warm remote figure. The summary shows warm remote against
local on the offsets that were read remotely, and the first-open cost on a line of its own.

Progress lines go to stderr (--quiet drops them); the summary to stdout.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time

import numpy as np

from engine.cli._broker import BrokerSession
from engine.cli._local_s3 import LocalS3Server, LocalS3ServerError
from engine.cli.produce_demo import produce_partition
from engine.common import Uuid
from engine.config import load_broker_config
from engine.records import CompressionType, scan_batches

__all__ = ["run", "write_broker_file"]

TOPIC = "clickstream"


def write_broker_file(base: str, segment_bytes: int, local_retention_bytes: int,
                      s3_configs: dict[str, str] | None = None) -> str:
    """The demo's broker file under `base` (its log dirs and tier are created): the
    filesystem tier, or with `s3_configs` (the store settings under their `rsm.config.`
    names) the object-store tier."""
    dirs = [os.path.join(base, name) for name in ("logs-1", "logs-2", "tier")]
    for d in dirs[:2] if s3_configs else dirs:
        os.makedirs(d, exist_ok=True)
    if s3_configs is None:
        tier = f"rsm.config.dirs={dirs[2]}\n"
    else:
        tier = ("remote.log.storage.manager.class.name="
                "engine.remote.ObjectStorageRemoteStorageManager\n"
                "rsm.config.key.prefix=demo/\nrsm.config.chunk.size=262144\n"
                "rsm.config.fetch.chunk.cache.class="
                "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache\n"
                "rsm.config.fetch.chunk.cache.size=134217728\n")
        tier += "".join(f"rsm.config.{k}={v}\n" for k, v in s3_configs.items())
    path = os.path.join(base, "server.properties")
    with open(path, "w") as f:
        f.write(f"""# written by `python -m engine demo`
log.dirs={dirs[0]},{dirs[1]}
remote.log.storage.system.enable=true
{tier}remote.storage.enable=true
log.segment.bytes={segment_bytes}
log.local.retention.bytes={local_retention_bytes}
remote.log.manager.task.interval.ms=200
""")
    return path


class _Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, text: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.t0:6.1f}s] {text}", file=sys.stderr,
                  flush=True)


def _reference(session: BrokerSession, partition: int) -> np.ndarray:
    """(base_offset, last_offset, crc) of every batch, read locally before tiering."""
    unified = session.log(TOPIC, partition)
    rows, offset = [], unified.log_start_offset
    while offset < unified.log_end_offset:
        data, _ = session.log_manager.read(TOPIC, partition, offset, 8 << 20)
        h = scan_batches(bytes(data), verify_crc=True).headers
        if not len(h):
            break
        rows.append(np.stack([h["base_offset"], h["last_offset"], h["crc"].astype(np.int64)],
                             axis=1))
        offset = int(h["last_offset"][-1]) + 1
    return np.concatenate(rows) if rows else np.zeros((0, 3), np.int64)


def _percentiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    p50, p90, p99 = np.percentile(np.array(values) * 1e3, [50, 90, 99])
    return f"p50 {p50:.2f} ms  p90 {p90:.2f} ms  p99 {p99:.2f} ms  ({len(values)} reads)"


def _rate(nbytes: float, seconds: float) -> str:
    return f"{nbytes / seconds / 2**20:.0f} MiB/s" if seconds > 0 and nbytes else "n/a"


def _tier(session: BrokerSession, progress: _Progress) -> dict:
    rlm = session.remote_log_manager()
    manager = session.log_manager
    totals = {"segments": 0, "bytes": 0, "deleted_local": 0, "passes": 0}
    while True:
        summary = rlm.run_once()
        manager.cleanup_logs()
        totals["passes"] += 1
        totals["segments"] += summary.copied_segments
        totals["bytes"] += summary.copied_bytes
        totals["deleted_local"] += summary.deleted_local_segments
        if summary.errors:
            raise RuntimeError(f"tiering failed: {summary.errors[0]}")
        local = sum(session.log(TOPIC, p).size_in_bytes for p in _partitions(session))
        progress(f"tiering pass {totals['passes']}: {totals['segments']} segments "
                 f"({totals['bytes'] / 2**20:.1f} MiB) in the remote tier, "
                 f"{local / 2**20:.1f} MiB left locally")
        if rlm.is_idle():
            return totals


def _partitions(session: BrokerSession) -> list[int]:
    return [tp.partition for tp in session.log_manager.partitions() if tp.topic == TOPIC]


_SWEEP_BYTES = 1 << 20


def _timed_read(rlm, partition: int, offset: int):
    """(result, bytes, seconds) of one sweep read, as a consumer gets it: bytes (local
    reads are views until copied)."""
    t = time.perf_counter()
    result = rlm.read(TOPIC, partition, offset, _SWEEP_BYTES)
    data = bytes(result.records)
    return result, data, time.perf_counter() - t


def _timed_pass(session, partition: int, offsets=None) -> dict[int, tuple[int, float, bool]]:
    """Read start offset -> (bytes, seconds, from remote) of one pass over the partition:
    from its log start chunk after chunk, or at the given `offsets`."""
    rlm = session.remote_log_manager()
    unified = session.log(TOPIC, partition)
    timings: dict[int, tuple[int, float, bool]] = {}
    todo = list(offsets) if offsets is not None else None
    offset = unified.log_start_offset
    while (todo if todo is not None else offset < unified.log_end_offset):
        if todo is not None:
            offset = todo.pop(0)
        result, data, elapsed = _timed_read(rlm, partition, offset)
        if not data:
            break
        timings[offset] = (len(data), elapsed, bool(result.from_remote))
        offset = int(result.next_offset) if result.next_offset > offset else offset + 1
    return timings


def _best_of(session, partition: int, passes: int, offsets=None):
    """Per read start offset, the fastest of `passes` timed passes (what the machine does
    when nothing else interrupts it)."""
    best = _timed_pass(session, partition, offsets)
    for _ in range(passes - 1):
        for offset, timing in _timed_pass(session, partition, list(best)).items():
            if offset in best and timing[1] < best[offset][1]:
                best[offset] = timing
    return best


def _sweep(session, partition, reference, stats) -> str | None:
    """Reads the partition from its log start to its end through read(); checks the batches
    tile the range and match the reference. Returns a problem or None. Records each read's
    start offset and time in stats["starts"][partition] (the warm sweep reads the same)."""
    rlm = session.remote_log_manager()
    unified = session.log(TOPIC, partition)
    start, end = unified.log_start_offset, unified.log_end_offset
    ref = reference[reference[:, 1] >= start]
    starts = stats["starts"].setdefault(partition, {})
    i, offset = 0, start
    while offset < end:
        result, data, elapsed = _timed_read(rlm, partition, offset)
        h = scan_batches(data, verify_crc=True).headers
        if not len(h):
            return f"partition {partition}: read at {offset} returned no batch"
        starts[offset] = elapsed
        where = "remote" if result.from_remote else "local"
        stats[where + "_bytes"] += int(h["size"].sum())
        stats[where + "_seconds"] += elapsed
        for row in h:
            if not row["crc_valid"]:
                return f"partition {partition}: bad CRC in batch at {row['base_offset']}"
            if i >= len(ref) or (int(row["base_offset"]), int(row["last_offset"]),
                                 int(row["crc"])) != tuple(int(x) for x in ref[i]):
                return (f"partition {partition}: batch {int(row['base_offset'])}-"
                        f"{int(row['last_offset'])} read at {offset} does not match the "
                        "batch produced there")
            i += 1
            stats["records"] += int(row["record_count"])
        offset = int(h["last_offset"][-1]) + 1
    if i != len(ref):
        return f"partition {partition}: {len(ref) - i} produced batches never read back"
    stats["offsets"] += end - start
    return None


def _point_reads(session, references, count, seed, latencies) -> str | None:
    rlm = session.remote_log_manager()
    rng = random.Random(seed)
    parts = sorted(references)
    for _ in range(count):
        p = rng.choice(parts)
        unified = session.log(TOPIC, p)
        offset = rng.randrange(unified.log_start_offset, unified.log_end_offset)
        t = time.perf_counter()
        result = rlm.read(TOPIC, p, offset, 64 << 10)
        data = bytes(result.records)
        elapsed = time.perf_counter() - t
        h = scan_batches(data, verify_crc=True).headers
        ref = references[p]
        row = ref[(ref[:, 0] <= offset) & (ref[:, 1] >= offset)]
        if not len(h) or not len(row) or int(h["crc"][0]) != int(row[0][2]):
            return f"partition {p}: point read at {offset} returned the wrong batch"
        latencies["remote" if result.from_remote else "local"].append(elapsed)
    return None


def _produce(session: BrokerSession, args, codec: CompressionType, progress: _Progress):
    """Produces `args.records` records spread over the partitions; returns each partition's
    reference batches (see `_reference`) and the totals of `produce_partition`."""
    manager = session.log_manager
    topic_id = Uuid.random()
    references, produced = {}, {"records": 0, "aborted": 0, "transactions": 0}
    for p in range(args.partitions):
        n = args.records // args.partitions + (p < args.records % args.partitions)
        manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
        stats = produce_partition(manager, TOPIC, p, n, codec, args.seed)
        for k in produced:
            produced[k] += stats[k]
        references[p] = _reference(session, p)
        unified = session.log(TOPIC, p)
        progress(f"produced {TOPIC}-{p} in {manager.log_dir_of(TOPIC, p)}: "
                 f"{stats['records']} records, {len(unified.segments)} segments, "
                 f"{unified.size_in_bytes / 2**20:.1f} MiB")
    return references, produced


def _warm_same_reads(session: BrokerSession, references, stats, local_timings) -> dict:
    """The first sweep's read starts read again (warm); the bytes and seconds of those that
    were remote now and local in the baseline, at the same offset and size."""
    same = {"bytes": 0, "remote": 0.0, "local": 0.0, "cold": 0.0}
    for p in sorted(references):
        cold = stats["starts"][p]
        warm = _best_of(session, p, 3, list(cold))
        for offset, (nbytes, seconds, remote) in warm.items():
            local = local_timings[p].get(offset)
            if remote and local is not None and local[0] == nbytes:
                same["bytes"] += nbytes
                same["remote"] += seconds
                same["local"] += local[1]
                same["cold"] += cold[offset]
    return same


def _demo(session: BrokerSession, args, codec: CompressionType, progress: _Progress,
          server: LocalS3Server | None, base: str, temporary: bool) -> int:
    """Produce, time local reads, tier, read everything back (cold, warm, point reads) and
    print the summary. 1 when a read returned something other than what was produced."""
    t0 = time.perf_counter()
    references, produced = _produce(session, args, codec, progress)
    t_produce = time.perf_counter() - t0
    produced_bytes = sum(session.log(TOPIC, p).size_in_bytes for p in references)

    local_timings, bases = {}, {}
    for p in sorted(references):  # the local baseline: a warm-up pass, a timed one
        _timed_pass(session, p)
        local_timings[p] = _best_of(session, p, 3)
        bases[p] = [seg.base_offset for seg in session.log(TOPIC, p).segments]
    progress("local reads timed")

    t0 = time.perf_counter()
    totals = _tier(session, progress)
    t_tier = time.perf_counter() - t0

    stats = {"records": 0, "offsets": 0, "local_bytes": 0, "local_seconds": 0.0,
             "remote_bytes": 0, "remote_seconds": 0.0, "starts": {}}
    for p in sorted(references):
        problem = _sweep(session, p, references[p], stats)
        if problem:
            print("problem: " + problem)
            return 1
        progress(f"read back {TOPIC}-{p}: every offset, batches match")
    same = _warm_same_reads(session, references, stats, local_timings)
    opened = 0  # segments read remotely: tiered and gone locally
    for p in sorted(references):
        unified = session.log(TOPIC, p)
        opened += sum(unified.log_start_offset <= b < unified.local_log_start_offset
                      for b in bases[p])
    latencies: dict[str, list[float]] = {"local": [], "remote": []}
    problem = _point_reads(session, references, args.point_reads, args.seed, latencies)
    if problem:
        print("problem: " + problem)
        return 1
    progress(f"{args.point_reads} random point reads checked")

    local_left = sum(session.log(TOPIC, p).size_in_bytes for p in references)
    local_segments = sum(len(session.log(TOPIC, p).segments) for p in references)
    print(f"produced  {produced['records']} records in {args.partitions} partitions "
          f"over 2 log dirs ({produced_bytes / 2**20:.1f} MiB {codec.name.lower()}, "
          f"{produced['transactions']} transactions, {produced['aborted']} aborted) "
          f"in {t_produce:.1f} s")
    print(f"tiered    {totals['segments']} segments, "
          f"{totals['bytes'] / 2**20:.1f} MiB in {totals['passes']} passes "
          f"({t_tier:.1f} s); {totals['deleted_local']} local segments deleted")
    print(f"local     {local_left / 2**20:.1f} MiB left in {local_segments} segments "
          f"(local.retention.bytes {args.local_retention_bytes})")
    print(f"read back {stats['offsets']} offsets ({stats['records']} records incl. "
          "markers), every batch CRC and position checked")
    _print_read_summary(same, opened, stats, latencies, server is not None)
    if server is not None:
        print(f"tier      s3://{server.bucket}/demo/ on SeaweedFS at "
              f"{server.endpoint} (stopped at exit)")
    print(f"files     {base}" + (" (temporary, removed)" if temporary else ""))
    return 0


def _print_read_summary(same: dict, opened: int, stats: dict, latencies, on_s3: bool) -> None:
    """The read lines of the summary: warm sweep remote vs local, the cost of a remote
    segment's first read, point-read latencies."""
    ratio = (f" ({same['local'] / same['remote']:.2f}x local)"
             if same["remote"] > 0 and same["local"] > 0 else "")
    print(f"sweep     remote {_rate(same['bytes'], same['remote'])} warm vs local "
          f"{_rate(same['bytes'], same['local'])}{ratio}: the same "
          f"{same['bytes'] / 2**20:.1f} MiB read at the same offsets, 1 MiB reads")
    first_open = same["cold"] - same["remote"]
    print(f"open      {opened} remote segments read for the first time: "
          + (f"+{first_open / opened * 1e3:.1f} ms each " if opened else "")
          + ("(manifest and index fetch)" if on_s3 else
             "(whole-file CRC check, index fetch)") + "; first sweep "
          f"{_rate(stats['remote_bytes'], stats['remote_seconds'])}")
    print(f"point     remote {_percentiles(latencies['remote'])}")
    print(f"point     local  {_percentiles(latencies['local'])}")


def run(args) -> int:
    codec = CompressionType[args.codec.upper()]
    if args.partitions < 1 or args.records < args.partitions:
        print("error: need --partitions >= 1 and --records >= --partitions", file=sys.stderr)
        return 2
    owner = None
    if args.dir is None:
        owner = tempfile.TemporaryDirectory(prefix="engine-demo-")
        base = owner.name
    else:
        base = args.dir
    progress = _Progress(args.quiet)
    server = None
    try:
        s3_configs = None
        if args.tier == "s3":
            server = LocalS3Server(os.path.join(base, "s3"))
            try:
                server.start()
            except LocalS3ServerError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            s3_configs = server.rsm_configs()
            progress(f"SeaweedFS S3 on {server.endpoint}, bucket {server.bucket}")
        config_path = write_broker_file(base, args.segment_bytes, args.local_retention_bytes,
                                        s3_configs)
        broker = load_broker_config(config_path)
        with BrokerSession(broker, config_path) as session:
            return _demo(session, args, codec, progress, server, base, owner is not None)
    finally:
        if server is not None:
            server.stop()
        if owner is not None:
            owner.cleanup()
