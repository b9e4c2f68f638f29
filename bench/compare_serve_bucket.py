"""`serve --bucket` (a read-only replica of a bucket on a local SeaweedFS S3 server) with a
real librdkafka consumer on loopback, against the in-memory server of compare_serve.

    .venv/bin/python bench/compare_serve_bucket.py [--records 400000] [--rounds 4]
        [--segment-bytes 262144] [--chunk-size 65536]

1. Starts SeaweedFS (tests/s3_server.py); produces a topic (4 partitions, zstd, 256 KiB
   segments unless --segment-bytes, local retention two segments) and tiers it with
   `run --until-idle` into the bucket with the object-store tier (64 KiB chunks unless
   --chunk-size; the per-segment and per-chunk costs weigh less with larger ones).
2. One consumer reading what the bucket holds from earliest: against `serve --bucket` (its
   default disk chunk cache with read-ahead, under a fresh state dir each round: cold, every
   chunk from the S3 server; then a second consumer on the same process: warm) and against
   the in-memory server of compare_serve (the same records read once through the broker's
   RLM into memory). Rounds alternate which server goes first; medians and each server's
   CPU seconds while the consumer read; then eight consumers at once on that warm
   process. Also the filesystem-backed `serve` of compare_serve over the same records (a
   second topic built alike, tiered to the filesystem tier; a fresh process each round).
   Every consumer reads to each partition's end. The server's CPU seconds (every thread,
   /proc) per GiB of record payload delivered: serve --bucket / the filesystem-backed
   serve, target <= 1.25x (cold and warm); eight consumers / one (warm), target <= 1.1x.
   Beside the cold figure, the least a cold read can cost: the warm figure plus raw obstore
   GETs of the bucket's `.log` objects in chunk-size ranges, 4 in flight, each range
   CRC-checked once (`raw_get_cpu`, in this process, a round each).
3. Fetch latency p50/p99 with raw requests (one partition, 1 MiB) on a fresh
   `serve --bucket`: cold (every segment read for the first time: indexes and chunks come
   from the S3 server), then the same offsets again (warm: from its caches).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import compare_serve as cs

from bench.cpu import GiB, process_cpu, spread

PREFIX = "bench-serve-bucket/"


class _BucketServe:
    """`serve --bucket` as a subprocess (ServeProcess with another command line)."""

    def __init__(self, url: str, settings: dict, base: Path, state: str) -> None:
        from serve_support import ServeProcess

        config = base / "node.properties"
        config.write_text("listeners=PLAINTEXT://127.0.0.1:0\n")
        store = [a for k, v in settings.items() for a in ("--store", f"{k}={v}")]
        cmd = [sys.executable, "-m", "engine", "serve", "--bucket", url, *store,
               "--config", str(config), "--state-dir", str(base / state)]

        class Proc(ServeProcess):
            @staticmethod
            def command(_):
                return cmd

        self.proc = Proc("")


def build(base: Path, records: int, s3, segment_bytes: int, chunk_size: int) -> str:
    """The bench topic of compare_serve, tiered into the S3 server's bucket."""
    config = Path(cs.build(base, records, tier={
        "remote.log.storage.manager.class.name":
            "io.aiven.kafka.tieredstorage.RemoteStorageManager",
        "rsm.config.key.prefix": PREFIX, "rsm.config.chunk.size": str(chunk_size),
        **{f"rsm.config.{k}": v for k, v in s3.config().items()}},
        segment_bytes=segment_bytes))
    return str(config)


def _bucket_ends(port: int) -> dict[int, int]:
    """Each partition's high watermark as `serve --bucket` answers it."""
    from engine.protocol import codec

    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(codec.encode_request(2, 1, 1, "bench", {"replica_id": -1, "topics": [
            {"name": cs.TOPIC, "partitions": [{"partition_index": p, "timestamp": -1}
                                              for p in range(cs.PARTITIONS)]}]}))
        f = s.makefile("rb")
        resp = codec.decode_response(2, 1, f.read(struct.unpack(">i", f.read(4))[0]))[1]
    return {r["partition_index"]: r["offset"] for r in resp["topics"][0]["partitions"]}


def _one_round(side: str, config: str, url: str, settings: dict, base: Path, expected: int,
               state: str, s3_pid: int) -> list[tuple[float, float, int, float]]:
    """[(MiB/s, server CPU s, payload bytes delivered, S3 server CPU s)]: the in-memory
    server's, or the
    filesystem-backed `serve`'s (`config`: its fresh process, one consumer); or a fresh
    `serve --bucket`'s (empty caches: every chunk from the S3 server), then a second
    consumer's on the same process (warm: from its chunk cache), then eight consumers' at
    once on it (warm)."""
    if side in ("ceiling", "serve"):
        store = process_cpu(s3_pid)
        rate, used, _, nbytes = cs._one_consumer(side, config, expected)
        return [(rate, used, nbytes, process_cpu(s3_pid) - store)]
    serve = _BucketServe(url, settings, base, state).proc
    out = []
    try:
        for n in (1, 1, 8):
            before, store = process_cpu(serve.proc.pid), process_cpu(s3_pid)
            reports, rate = cs._consumers(serve.bootstrap, expected, n)
            out.append((rate, process_cpu(serve.proc.pid) - before,
                        sum(r["bytes"] for r in reports), process_cpu(s3_pid) - store))
    finally:
        serve.stop()
    return out


def raw_get_cpu(s3, chunk_size: int) -> float:
    """CPU seconds of this process for raw obstore GETs of every `.log` object of the
    bench's prefix in `chunk_size` ranges, 4 in flight, each range CRC-checked once as it
    arrives (`compare_objectstore.raw_gets`): the least a cold read of the bucket does
    beyond a warm one. The allocator setting of the object-store tier applies here as in
    `serve --bucket`."""
    import asyncio

    import obstore

    from bench.compare_objectstore import raw_gets
    from bench.cpu import self_cpu
    from engine.remote.objectstore.allocator import tune_for_object_reads

    tune_for_object_reads()
    store = s3.raw_store(s3.buckets[0])
    objects = [(o["path"], o["size"]) for page in obstore.list(store, prefix=PREFIX)
               for o in page if o["path"].endswith(".log")]
    before = self_cpu()
    asyncio.run(raw_gets(store, objects, chunk_size, 4, check=True))
    return self_cpu() - before


def _cpu_report(cpu: dict, raw: list[float]) -> None:
    """serve --bucket's CPU seconds per GiB delivered against the filesystem-backed
    serve's (and the in-memory server's), and eight consumers' against one's; the S3
    server's meanwhile beside each. `raw`: CPU seconds of raw GETs of the stored bytes
    (`raw_get_cpu`), a round each."""
    per_gib = {k: [c * GiB / n for c, n, _ in v] for k, v in cpu.items()}
    store = {k: [s * GiB / n for _, n, s in v] for k, v in cpu.items()}
    fs = statistics.median(per_gib["serve"])
    print("server CPU per GiB of record payload delivered, median (range):")
    for name, side in (("in-memory server", "ceiling"), ("serve (filesystem tier)", "serve"),
                       ("serve --bucket, cold", "cold"), ("serve --bucket, warm", "warm"),
                       ("serve --bucket, warm, 8 consumers", "eight")):
        ratio = statistics.median(per_gib[side]) / fs
        verdict = f" (target <= 1.25x: {'met' if ratio <= 1.25 else 'MISSED'})" \
            if side in ("cold", "warm") else ""
        # the in-memory server reads the topic from the S3 server as it starts: not shown
        beside = "" if side == "ceiling" else f"; S3 server {spread(store[side])} s/GiB"
        print(f"  {name:34s} {spread(per_gib[side])} s/GiB   {ratio:.2f}x the "
              f"filesystem-backed serve's{verdict}{beside}")
    # payload bytes a consumer got: the same each round
    gets = [c * GiB / n for c, (_, n, _) in zip(raw, cpu["cold"])]
    floor = statistics.median(per_gib["warm"]) + statistics.median(gets)
    print(f"  the least a cold read costs: the warm figure + raw GETs of the stored bytes with "
          f"one CRC pass ({spread(gets)} s/GiB of payload) = {floor:.2f} s/GiB, "
          f"{floor / fs:.2f}x the filesystem-backed serve's")
    eight = statistics.median(per_gib["eight"]) / statistics.median(per_gib["warm"])
    print(f"  eight consumers / one (warm): {eight:.2f}x (target <= 1.1x: "
          f"{'met' if eight <= 1.1 else 'MISSED'})")


def main() -> int:
    from s3_server import S3Server

    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--segment-bytes", type=int, default=cs.SEGMENT_BYTES,
                    help="log.segment.bytes of both topics (default 256 KiB)")
    ap.add_argument("--chunk-size", type=int, default=64 * 1024,
                    help="the object-store tier's chunk.size (default 64 KiB)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-serve-bucket-"))
    with S3Server(base / "weed") as s3:
        config = build(base, args.records, s3, args.segment_bytes, args.chunk_size)
        url = f"s3://{s3.buckets[0]}/{PREFIX}"
        settings = {k: v for k, v in s3.config().items() if k != "storage.s3.bucket.name"}
        probe = _BucketServe(url, settings, base, "probe").proc
        try:
            ends = _bucket_ends(probe.port)
        finally:
            probe.stop()
        # data records in the bucket (a few offsets are transaction markers); every
        # consumer reads to each partition's end
        expected = sum(ends.values())
        # the same records, filesystem tier
        fs_config = cs.build(base / "fs", args.records, segment_bytes=args.segment_bytes)
        print(f"topic: {args.records} records, the bucket holds offsets up to {ends}",
              file=sys.stderr)
        names = {"ceiling": ["ceiling"], "serve": ["serve"], "bucket": ["cold", "warm", "eight"]}
        rates: dict[str, list[float]] = {n: [] for v in names.values() for n in v}
        cpu: dict[str, list[tuple[float, int, float]]] = {n: [] for n in rates}
        raw: list[float] = []
        for i in range(args.rounds):
            order = ("ceiling", "serve", "bucket")
            for side in (order if i % 2 else order[::-1]):
                for name, (rate, used, nbytes, store) in zip(names[side], _one_round(
                        side, fs_config if side == "serve" else config, url, settings, base,
                        expected, f"state-{i}", s3.proc.pid)):
                    rates[name].append(rate)
                    cpu[name].append((used, nbytes, store))
            raw.append(raw_get_cpu(s3, args.chunk_size))
        fresh = _BucketServe(url, settings, base, "state-latency").proc
        try:
            remote = [(p, o) for p in range(cs.PARTITIONS)
                      for o in range(0, ends[p], max(1, ends[p] // 25))]
            cold = cs._fetch_latency(fresh.port, remote)
            warm = cs._fetch_latency(fresh.port, remote)
        finally:
            fresh.stop()
    shutil.rmtree(base, ignore_errors=True)
    ceiling = statistics.median(rates["ceiling"])
    print(f"one consumer, MiB/s of record payload (median of {args.rounds}):")
    for name, side in (("ceiling (in-memory server)", "ceiling"),
                       ("serve (filesystem tier)", "serve"),
                       ("serve --bucket, cold", "cold"), ("serve --bucket, warm", "warm"),
                       ("eight consumers, warm", "eight")):
        rate = statistics.median(rates[side])
        print(f"  {name:26s} {rate:8.1f}   rounds "
              + " ".join(f"{r:.0f}" for r in rates[side])
              + f"   ratio {rate / ceiling:.2f}x")
    _cpu_report(cpu, raw)
    for name, lat in (("bucket warm", warm), ("bucket cold", cold)):
        print(f"fetch latency {name:12s} p50 {cs._pct(lat, 0.5):7.2f} ms  "
              f"p99 {cs._pct(lat, 0.99):7.2f} ms  ({len(lat)} requests)")
    print(json.dumps(rates), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
