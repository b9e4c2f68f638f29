"""`serve` against the client's own ceiling, with a real librdkafka consumer on loopback.

    .venv/bin/python bench/compare_serve.py [--records 400000] [--rounds 4] [--dir DIR]

1. Builds a tiered topic (4 partitions, zstd, produce-demo's records, 256 KiB segments and
   512 KiB local retention, tiered by `run --until-idle`). The RLM's tasks run every 100 ms
   while tiering, so that set-up is quick; every measured `serve` runs with Kafka's default
   `remote.log.manager.task.interval.ms` (30 s), as a broker in steady state does: a short
   interval would add its expiration passes to the CPU a consumer's bytes cost.
2. Throughput of one confluent-kafka consumer reading the whole topic from earliest with
   assign(), against `serve` and against a minimal server in this file that answers the same
   Fetch requests from record chunks pre-built in memory (read once through the RLM, keyed
   by partition and fetch offset) on plain blocking sockets: the client's ceiling. Rounds
   alternate which server goes first; medians. Target: serve >= 0.8x the ceiling. Each
   consumer reads to the end of every partition (partition EOF), so the server sent what
   it counted: the server's CPU seconds (every thread, /proc) per GiB of record payload
   (keys and values) delivered, serve / in-memory server: target <= 1.25x.
3. Eight consumers at once against `serve` (--many-rounds rounds, a fresh `serve` each; 0
   leaves this step out):
   aggregate throughput vs one, target >= 1.5x; serve's CPU seconds per GiB delivered to
   all eight vs to one, target <= 1.1x (no cost that grows with connections).
   Every consumer process first starts (Python, confluent-kafka, its Consumer) and says it
   is ready; then all are told to go at once: the aggregate is every consumer's bytes over
   the span from the first record any of them got to the last one's end (the one consumer
   of 2. is timed the same way, from its first record). Process start-up stays out of it.
4. Fetch latency p50/p99 with raw requests (one partition, 1 MiB): local offsets, remote
   offsets read before (warm), and remote segments not read since serve started (cold).

Consumers run as separate processes (`--consume`), so the client never shares a GIL with
a server. The consumer keeps a deep fetch queue (`queued.min.messages`,
`queued.max.messages.kbytes`) and a short `fetch.queue.backoff.ms`: with librdkafka's
defaults a server that answers at once fills the queue, and the consumer stops fetching for
a whole backoff (1 s by default) each time, so a faster server measured slower (the
in-memory server came out below `serve` that way).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import resource
import signal
import socket
import socketserver
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench.cpu import CpuPerGiB, GiB, process_cpu, spread

TOPIC = "bench"
PARTITIONS = 4
PARTITION_MAX = 1 << 20


#: the bench's segments: small, so that a topic of seconds' reading has many of them
SEGMENT_BYTES = 256 * 1024


def build(base: Path, records: int, tier: dict | None = None,
          segment_bytes: int = SEGMENT_BYTES) -> str:
    """The topic, tiered (local retention: two segments); `tier`: the RSM's properties
    instead of the filesystem tier's."""
    from engine.cli.produce_demo import produce_partition
    from engine.common import Uuid
    from engine.config import load_broker_config
    from engine.log.log_manager import LogManager
    from engine.records import CompressionType

    for d in ("d1", "d2", "tier"):
        (base / d).mkdir(parents=True, exist_ok=True)
    config = base / "server.properties"
    served = (
        f"log.dirs={base / 'd1'},{base / 'd2'}\nremote.log.storage.system.enable=true\n"
        + "".join(f"{k}={v}\n" for k, v in (tier or {"rsm.config.dirs": base / "tier"}).items())
        + "remote.storage.enable=true\n"
        f"log.segment.bytes={segment_bytes}\nlog.local.retention.bytes={2 * segment_bytes}\n"
        "log.retention.ms=-1\n"
        "listeners=PLAINTEXT://127.0.0.1:0\n")
    # tiering runs its tasks every 100 ms so that set-up is quick; the measured `serve`
    # keeps Kafka's default interval (30 s), as a broker in steady state would
    config.write_text(served + "remote.log.manager.task.interval.ms=100\n")
    broker = load_broker_config(config)
    topic_id = Uuid.random()
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p in range(PARTITIONS):
            manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
            produce_partition(manager, TOPIC, p, records // PARTITIONS,
                              CompressionType.ZSTD, seed=3)
    subprocess.run([sys.executable, "-m", "engine", "run", "--config", str(config),
                    "--until-idle"], cwd=ROOT, check=True, capture_output=True)
    config.write_text(served)
    return str(config)


# ------------------------------------------------------------------ the ceiling server

class _Ceiling(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def ceiling_server(config: str) -> None:
    """Reads every partition once through the RLM into memory, then answers ApiVersions,
    Metadata, ListOffsets and Fetch from memory (the chunk holding the fetch offset: whole
    batches, as a broker returns them); prints its port."""
    from engine.cli._broker import open_broker
    from engine.protocol import codec
    from engine.protocol.broker import Endpoint, ReadBroker
    from engine.protocol.log_reader import LogReader

    session = open_broker(config)
    rlm = session.remote_log_manager()
    broker = ReadBroker(LogReader(session.log_manager, rlm))
    chunks: dict[tuple[int, int], bytes] = {}
    starts: dict[int, list[int]] = {}
    ends = {}
    for p in range(PARTITIONS):
        unified = session.log_manager.get_log(TOPIC, p)
        offset, end = unified.log_start_offset, unified.high_watermark
        ends[p] = end
        while offset < end:
            result = rlm.read(TOPIC, p, offset, PARTITION_MAX)
            chunks[(p, offset)] = bytes(result.records)
            starts.setdefault(p, []).append(offset)
            offset = result.next_offset
    keys = frozenset({0, 1, 2, 3, 18})
    state = {}

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            sock = self.request
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            f = sock.makefile("rb")
            while len(head := f.read(4)) == 4:
                req = codec.decode_request(f.read(struct.unpack(">i", head)[0]))
                b = req.body
                if req.api_key == 18:
                    body = ReadBroker.api_versions(keys)
                elif req.api_key == 3:
                    body = broker.metadata(b, req.api_version, state["endpoint"])
                elif req.api_key == 2:
                    body = broker.list_offsets(b, req.api_version)
                elif req.api_key == 1:
                    body = {"responses": [self._topic(t, req.api_version) for t in b["topics"]]}
                    if not any(p["records"] for t in body["responses"]
                               for p in t["partitions"]):
                        time.sleep(b["max_wait_ms"] / 1000)  # nothing new will come
                else:
                    return  # not an API of this server: the client sees a closed socket
                parts = [memoryview(x) for x in codec.encode_response(
                    req.api_key, req.api_version, req.correlation_id, body)]
                while parts:  # scatter-gather: record chunks are never copied
                    sent = sock.sendmsg(parts)
                    while parts and sent >= parts[0].nbytes:
                        sent -= parts[0].nbytes
                        parts.pop(0)
                    if parts and sent:
                        parts[0] = parts[0][sent:]

        @staticmethod
        def _topic(t, version):
            head = {"topic_id": t["topic_id"]} if version >= 13 else {"topic": t["topic"]}
            rows = []
            for p in t["partitions"]:
                part, offset = p["partition"], p["fetch_offset"]
                i = bisect.bisect_right(starts.get(part, []), offset) - 1
                data = chunks[(part, starts[part][i])] if i >= 0 and offset < ends[part] else b""
                rows.append({"partition_index": p["partition"], "high_watermark":
                             ends[p["partition"]], "last_stable_offset": ends[p["partition"]],
                             "log_start_offset": 0, "records": data})
            return {**head, "partitions": rows}

    server = _Ceiling(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    state["endpoint"] = Endpoint(0, "127.0.0.1", port)
    print(port, flush=True)
    # SIGTERM ends it cleanly: the logs are closed (their active segments' indexes trimmed)
    # so the next process to open the log dirs finds them as a stopped broker leaves them
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.server_close()
        session.close()


# ------------------------------------------------------------------------ consumers

def consume(bootstrap: str, expected: int) -> None:
    """Says "ready" once started, waits for a line on stdin, then reads the topic from
    earliest with assign() until every partition's end (or `expected` records); prints
    records, bytes, its CPU seconds and the wall-clock (time.time) of its first record and
    of its end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                  "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                  "max.partition.fetch.bytes": PARTITION_MAX, "fetch.wait.max.ms": 100,
                  "fetch.queue.backoff.ms": 10, "queued.min.messages": 1_000_000,
                  "queued.max.messages.kbytes": 1 << 20, "enable.partition.eof": True})
    print("ready", flush=True)
    sys.stdin.readline()
    started = None
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    count = nbytes = 0
    at_end: set[int] = set()  # the whole topic is read: the server sent every byte counted
    deadline = time.monotonic() + 300
    while count < expected and len(at_end) < PARTITIONS and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            if started is None:
                started = time.time()
            if m.error() is None:
                count += 1
                nbytes += len(m.value() or b"") + len(m.key() or b"")
            elif m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
    ended = time.time()
    started = ended if started is None else started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    c.close()
    print(json.dumps({"records": count, "bytes": nbytes, "started": started, "ended": ended,
                      "cpu_seconds": usage.ru_utime + usage.ru_stime
                      - cpu.ru_utime - cpu.ru_stime}), flush=True)


def _consumers(bootstrap: str, expected: int, n: int) -> tuple[list[dict], float]:
    """Runs `n` consumer processes, started first and then set off together: (their
    reports, aggregate payload MiB/s from the first record any of them got to the last
    one's end)."""
    procs = [subprocess.Popen([sys.executable, __file__, "--consume", bootstrap,
                               str(expected)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
             for _ in range(n)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("a consumer process did not start")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    reports = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    span = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    return reports, sum(r["bytes"] for r in reports) / span / 2**20


# ------------------------------------------------------------------------- latency

def _fetch_latency(port: int, requests: list[tuple[int, int]]) -> list[float]:
    from engine.protocol import codec

    out = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
        for i, (p, offset) in enumerate(requests):
            frame = codec.encode_request(1, 12, i, "bench", {
                "max_wait_ms": 0, "min_bytes": 0, "max_bytes": PARTITION_MAX,
                "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
                    {"partition": p, "fetch_offset": offset,
                     "partition_max_bytes": PARTITION_MAX}]}]})
            started = time.perf_counter()
            s.sendall(frame)
            f.read(struct.unpack(">i", f.read(4))[0])
            out.append((time.perf_counter() - started) * 1000)
    return out


def _one_consumer(side: str, config: str, expected: int
                  ) -> tuple[float, float, float, int]:
    """(payload MiB/s of one consumer, the server's CPU seconds while it read, the cores
    the consumer's process kept busy, the payload bytes it got) against `serve` or the
    in-memory server."""
    from serve_support import ServeProcess

    if side == "serve":
        proc = ServeProcess(config)
        pid, bootstrap, stop = proc.proc.pid, proc.bootstrap, proc.stop
    else:
        ceiling = subprocess.Popen([sys.executable, __file__, "--ceiling", config],
                                   stdout=subprocess.PIPE, text=True, cwd=ROOT)
        port = int(ceiling.stdout.readline())
        pid, bootstrap = ceiling.pid, f"127.0.0.1:{port}"

        def stop():
            ceiling.terminate()
            ceiling.wait()
    try:
        before = process_cpu(pid)
        reports, rate = _consumers(bootstrap, expected, 1)
        used = process_cpu(pid) - before
    finally:
        stop()
    return rate, used, _cores(reports), reports[0]["bytes"]


def _cores(reports: list[dict]) -> float:
    """Mean cores each consumer process kept busy while it read."""
    return statistics.mean(r["cpu_seconds"] / max(1e-9, r["ended"] - r["started"])
                           for r in reports)


def print_cpu(cpu: CpuPerGiB, many: list[float], ours: str, theirs: str,
              target: float) -> None:
    """The server's CPU seconds per GiB of record payload delivered: one consumer against
    the baseline's, and eight consumers at once against one."""
    print("server CPU per GiB of record payload delivered (median (range)):")
    print("  one consumer: " + cpu.line(ours, theirs, target))
    if not many:
        return
    eight = statistics.median(many) / statistics.median(cpu.ours())
    print(f"  eight consumers: {ours} {spread(many)} CPU s/GiB, {eight:.2f}x one consumer's "
          f"(target <= 1.1x: {'met' if eight <= 1.1 else 'MISSED'})")


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--segment-bytes", type=int, default=SEGMENT_BYTES,
                    help="log.segment.bytes of the topic (default 256 KiB)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--many-rounds", type=int, default=3, help="rounds of eight consumers")
    ap.add_argument("--consume", nargs=2, metavar=("BOOTSTRAP", "EXPECTED"))
    ap.add_argument("--ceiling", metavar="CONFIG")
    args = ap.parse_args()
    if args.consume:
        consume(args.consume[0], int(args.consume[1]))
        return 0
    if args.ceiling:
        ceiling_server(args.ceiling)
        return 0
    from serve_support import ServeProcess

    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-serve-"))
    config = build(base, args.records, segment_bytes=args.segment_bytes)
    status = json.loads(subprocess.run(
        [sys.executable, "-m", "engine", "status", "--config", config, "--json"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    expected = sum(r["log_end_offset"] for r in status) - 2 * len(status)  # markers aside
    local_start = {r["partition"]: r["local_log_start_offset"] for r in status}
    print(f"topic: {args.records} records in {PARTITIONS} partitions, local from "
          f"{local_start}", file=sys.stderr)
    serve_rates, ceiling_rates = [], []
    cpu = CpuPerGiB()  # serve's against the in-memory server's, per round
    cores = []  # per one-consumer run: cores its process kept busy
    for i in range(args.rounds):
        got = {}
        for side in (("serve", "ceiling") if i % 2 else ("ceiling", "serve")):
            rate, seconds, busy, nbytes = _one_consumer(side, config, expected)
            cores.append(busy)
            (serve_rates if side == "serve" else ceiling_rates).append(rate)
            got[side] = (seconds, nbytes)
        cpu.add(got["serve"][0], got["ceiling"][0], got["serve"][1], got["ceiling"][1])
    many_cpu, aggregates, many = [], [], []
    for _ in range(args.many_rounds):
        proc = ServeProcess(config)
        try:
            before = process_cpu(proc.proc.pid)
            many, aggregate = _consumers(proc.bootstrap, expected, 8)
            many_cpu.append((process_cpu(proc.proc.pid) - before) * GiB
                            / sum(r["bytes"] for r in many))
            aggregates.append(aggregate)
        finally:
            proc.stop()
    proc = ServeProcess(config)
    try:
        lat_local = _fetch_latency(proc.port, [(p, local_start[p]) for p in range(PARTITIONS)]
                                   * 25)
        proc.stop()
        proc = ServeProcess(config)  # nothing remote read since start: cold
        remote = [(p, o) for p in range(PARTITIONS)
                  for o in range(0, local_start[p], max(1, local_start[p] // 25))]
        lat_cold = _fetch_latency(proc.port, remote)
        lat_warm = _fetch_latency(proc.port, remote)
    finally:
        proc.stop()
    one = statistics.median(serve_rates)
    print(f"one consumer, MiB/s of record payload (median of {args.rounds}; rounds "
          f"alternate which server goes first):")
    print(f"  ceiling (in-memory server) {statistics.median(ceiling_rates):8.1f}   rounds "
          + " ".join(f"{r:.0f}" for r in ceiling_rates))
    print(f"  serve                      {one:8.1f}   rounds "
          + " ".join(f"{r:.0f}" for r in serve_rates))
    print(f"  ratio {one / statistics.median(ceiling_rates):.2f}x (target >= 0.8x)")
    if aggregates:
        aggregate = statistics.median(aggregates)
        print(f"eight consumers, aggregate   {aggregate:8.1f}   rounds "
              + " ".join(f"{r:.0f}" for r in aggregates) + f"   ratio {aggregate / one:.2f}x "
              "(target >= 1.5x)")
    print_cpu(cpu, many_cpu, "serve", "in-memory server", 1.25)
    eight = (f"; each of the eight {sum(r['cpu_seconds'] for r in many) / 8:.2f} s of CPU"
             if many else "")
    print(f"consumer CPU: one consumer alone keeps {statistics.median(cores):.2f} "
          f"cores busy (median){eight}, {os.cpu_count()} cores in all")
    for name, lat in (("local", lat_local), ("remote warm", lat_warm),
                      ("remote cold", lat_cold)):
        print(f"fetch latency {name:12s} p50 {_pct(lat, 0.5):7.2f} ms  "
              f"p99 {_pct(lat, 0.99):7.2f} ms  ({len(lat)} requests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
