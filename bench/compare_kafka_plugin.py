"""Side by side: a real Apache Kafka 4.1.1 broker with the engine as its RemoteStorageManager
(the kafka-plugin jar, jep, the object-store tier on SeaweedFS on loopback), against the same
broker without tiering, and the plugin's calls against the same engine calls from Python.

    .venv/bin/python bench/compare_kafka_plugin.py                  # every section
    .venv/bin/python bench/compare_kafka_plugin.py --sections c --mb 256

Needs `bash scripts/setup.sh test` (the plugin, and Kafka's jars in tests/kafka/target/lib).
Contenders alternate (A B A B ...), medians reported. CPU is user + system time of each
process (/proc/<pid>/stat) over the measured span: the broker JVM (which hosts the engine),
SeaweedFS, the client, each on its own line, per GiB moved.
  (a) produce: Kafka's ProducerPerformance (1000-byte records, acks=all) into a topic with
      remote.storage.enable=true (segments of 16 MiB uploaded by the plugin as they close,
      local.retention.bytes=1) vs a topic without tiering, same broker. Target >= 0.9x.
  (b) catch-up: Kafka's ConsumerPerformance from offset 0 of a tiered topic whose segments
      left the broker's disk, vs the same records of a topic on local segments. Cold: the
      chunk cache was emptied by a broker restart before the read (both topics read after
      the same restart); warm: read again, --rounds times (local and tiered alternating,
      the median ratio). Targets >= 0.5x cold, >= 0.8x warm. Beside the wall ratio, the CPU
      per GiB of the broker and of every process (broker, client, SeaweedFS): where the
      cores run out, as on a 2-core machine with the client on it, the wall ratio follows
      the ratio of those totals. The broker's peak RSS (VmHWM) over the tiered reads is
      reported beside the configured caches.
  (c) crossing: the plugin jar (tests' PluginDriver) against the engine's RSM called from
      Python over the same bucket: fetchLogSegment of 1 MiB ranges over a segment, each range
      read whole into a byte[] (warm: chunks in the cache; the best of 5 passes after the one
      that fills it) vs the same call from Python, fetch_log_segment of each range read whole
      with readinto, and vs the engine's cheapest path, read_forward + read_range_into of the
      same ranges into a bytearray (one copy fewer than any stream); copyLogSegmentData of a
      --mb segment vs copy_log_segment_data. Target: <= 1.10x.
  (d) threads: N Java threads fetching the whole segment at once through the plugin; the
      overlap (sum of the calls' times / wall time) says how many fetches ran at once.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from kafka_cluster import BROKER_HEAP, KafkaCluster, java, kafka_classpath
from kafka_plugin_support import PLUGIN_JAR, VENV, copy_words, metadata_words, run_driver
from kafka_tiered_support import broker_properties, wait_until
from s3_server import S3Server, free_ports

from bench.cpu import process_cpu
from engine.common import Uuid
from engine.remote.metadata import TopicIdPartition

GiB = 1 << 30
MiB = 1 << 20
RECORD = 1000
#: the broker's chunk cache by default (--cache-mb)
CACHE = 512 * MiB
#: passes over a segment's ranges in (c): the first fills the chunk cache, the best of the
#: others is the steady warm figure (the JVM's JIT and the page cache settle over them)
WARM_PASSES = 6


def peak_rss_mib(pid: int, field: str = "VmHWM") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


#: the broker's JMX beans read around each catch-up: Kafka's remote reader's timing and its
#: remote-fetch counters
FETCH_BEANS = ("kafka.log.remote:type=RemoteLogManager,name=RemoteLogReaderFetchRateAndTimeMs",
               "kafka.server:type=BrokerTopicMetrics,name=RemoteFetch*PerSec")


def jmx_options(port: int) -> tuple[str, ...]:
    return (BROKER_HEAP, f"-Dcom.sun.management.jmxremote.port={port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={port}",
            "-Dcom.sun.management.jmxremote.host=127.0.0.1",
            "-Djava.rmi.server.hostname=127.0.0.1",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false")


def jmx(port: int) -> dict[str, float]:
    """The FETCH_BEANS' numeric attributes now, as {"bean name:attribute": value}."""
    args = [java(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", kafka_classpath(),
            "org.apache.kafka.tools.JmxTool", "--one-time", "true", "--report-format",
            "properties", "--jmx-url",
            f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"]
    for bean in FETCH_BEANS:
        args += ["--object-name", bean]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    values = {}
    for line in out.splitlines():
        key, _, value = line.rpartition("=")  # "<bean name>:<attribute>=<value>"
        try:
            values[key.strip()] = float(value)
        except ValueError:
            pass
    return values


def fetch_breakdown(before: dict, after: dict) -> str:
    """Kafka's remote reads over a span: how many, their size, and the mean time of each in
    its remote-log-reader thread (index lookup, fetchLogSegment, reading the stream into the
    response's buffer: the plugin's calls are part of it)."""
    def delta(bean: str, attr: str) -> float:
        return after.get(f"{bean}:{attr}", 0.0) - before.get(f"{bean}:{attr}", 0.0)

    reader = "kafka.log.remote:type=RemoteLogManager,name=RemoteLogReaderFetchRateAndTimeMs"
    remote = "kafka.server:type=BrokerTopicMetrics,name=RemoteFetch{}PerSec"
    n = delta(reader, "Count")
    total = (after.get(f"{reader}:Mean", 0) * after.get(f"{reader}:Count", 0)
             - before.get(f"{reader}:Mean", 0) * before.get(f"{reader}:Count", 0))
    reads = delta(remote.format("Requests"), "Count")
    read_bytes = delta(remote.format("Bytes"), "Count")
    return (f"    broker: {reads:.0f} remote reads of {read_bytes / max(reads, 1) / 1024:.0f} KiB, "
            f"{total / n if n else float('nan'):.2f} ms each in Kafka's reader thread")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name (Linux keeps 15 characters; numbered pools summed)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = re.sub(r"[-#]?\d+$", "", name)
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def top_threads(before: dict, after: dict, gib: float, n: int = 6) -> str:
    spent = {k: v - before.get(k, 0.0) for k, v in after.items()}
    top = sorted(spent.items(), key=lambda kv: -kv[1])[:n]
    return "    broker CPU s/GiB by thread: " + ", ".join(f"{k} {v / gib:.1f}" for k, v in top)


def tool(cluster: KafkaCluster, main: str, *args: str, timeout: float = 900) -> tuple[str, float]:
    """Runs one of Kafka's perf tools; returns its stdout and its own CPU seconds."""
    start = time.monotonic()
    proc = subprocess.Popen([java(), "-Xmx512m", "-cp", kafka_classpath(), main, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{main} failed ({proc.returncode}): {err[-2000:]}")
    return out, time.monotonic() - start


def children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Meter:
    """Wall time and the CPU of the broker, SeaweedFS and the client tools over a span."""

    def __init__(self, broker_pid: int, s3_pid: int):
        self.pids = {"broker": broker_pid, "s3": s3_pid}

    def __enter__(self):
        self.t0 = time.monotonic()
        self.cpu0 = {k: process_cpu(p) for k, p in self.pids.items()}
        self.client0 = children_cpu()
        return self

    def __exit__(self, *exc):
        self.wall = time.monotonic() - self.t0
        self.cpu = {k: process_cpu(p) - self.cpu0[k] for k, p in self.pids.items()}
        self.cpu["client"] = children_cpu() - self.client0


def create(cluster, topic: str, **configs) -> None:
    args = ["create-topic", "--topic", topic]
    for k, v in configs.items():
        args += ["--config", f"{k}={v}"]
    cluster.run_client(args, timeout=120)


def produce(cluster, topic: str, records: int) -> float:
    out, _ = tool(cluster, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                  "--num-records", str(records), "--record-size", str(RECORD),
                  "--throughput", "-1", "--producer-props",
                  f"bootstrap.servers={cluster.bootstrap}", "acks=all", "linger.ms=5",
                  "batch.size=262144")
    m = re.findall(r"records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\)", out)
    return float(m[-1])


#: the consumer's own per-fetch figures (ConsumerPerformance --print-metrics)
FETCH_METRICS = ("fetch-latency-avg", "fetch-size-avg", "fetch-total")


def consume(cluster, topic: str, records: int) -> tuple[float, dict[str, float]]:
    """MB/s, and the consumer's FETCH_METRICS."""
    out, _ = tool(cluster, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                  cluster.bootstrap, "--topic", topic, "--messages", str(records),
                  "--timeout", "120000", "--group", f"perf-{uuid.uuid4().hex[:6]}",
                  "--consumer.config", "/dev/null", "--print-metrics")
    row = [line for line in out.splitlines() if re.match(r"\d{4}-", line)][-1].split(",")
    metrics = {}
    for name in FETCH_METRICS:
        m = re.search(rf"consumer-fetch-manager-metrics:{name}:\{{client-id=[^}}]*}}\s*:\s*"
                      rf"([\d.]+)", out)
        metrics[name] = float(m.group(1)) if m else float("nan")
    # the group join before the first fetch (its rebalance time) is not the catch-up's
    metrics["rebalance-ms"], metrics["fetch-mb-per-s"] = float(row[6]), float(row[8])
    return float(row[3]), metrics  # MB.sec


def offsets(cluster, topic: str, spec: str) -> int:
    [o] = cluster.run_client(["list-offsets", "--topic", topic, "--partitions", "0",
                              "--spec", spec], timeout=90)
    return o["offset"]


def line(label: str, meter: Meter, gib: float, mbps: float) -> str:
    per = {k: v / gib for k, v in meter.cpu.items()}
    return (f"  {label:<28} {mbps:8.1f} MB/s  wall {meter.wall:6.1f} s  CPU s/GiB: broker "
            f"{per['broker']:6.1f}  s3 {per['s3']:5.1f}  client {per['client']:5.1f}")


def section_a(cluster, s3, mb: int, rounds: int) -> None:
    print(f"(a) produce {mb} MiB of {RECORD}-byte records, tiered topic vs plain topic")
    records = mb * MiB // RECORD
    ratios = []
    for r in range(rounds):
        results = {}
        for kind in ("plain", "tiered"):
            topic = f"produce-{kind}-{r}"
            extra = {"remote.storage.enable": "true", "local.retention.bytes": "1"} \
                if kind == "tiered" else {}
            create(cluster, topic, **{"segment.bytes": str(16 * MiB), **extra})
            with Meter(cluster.node(1).proc.pid, s3.proc.pid) as m:
                results[kind] = produce(cluster, topic, records)
            print(line(f"round {r} {kind}", m, mb / 1024, results[kind]))
        ratios.append(results["tiered"] / results["plain"])
    print(f"  tiered/plain: {', '.join(f'{x:.2f}' for x in ratios)}  median "
          f"{statistics.median(ratios):.2f}x (target >= 0.9x)\n")


def section_b(cluster, s3, mb: int, jmx_port: int, cache: int, rounds: int) -> None:
    print(f"(b) catch-up from offset 0 of {mb} MiB: tiered (segments gone from disk) vs local")
    records = mb * MiB // RECORD
    create(cluster, "catchup-local", **{"segment.bytes": str(16 * MiB)})
    create(cluster, "catchup-tiered", **{"segment.bytes": str(16 * MiB),
                                         "remote.storage.enable": "true",
                                         "local.retention.bytes": "1"})
    for topic in ("catchup-local", "catchup-tiered"):
        produce(cluster, topic, records)
    end = offsets(cluster, "catchup-tiered", "latest")
    wait_until("the tiered topic to leave the broker's disk",
               lambda: offsets(cluster, "catchup-tiered", "earliest-local") > end * 0.9,
               timeout=600, interval=2)
    cluster.restart(1)  # empties the chunk cache (memory) and the page cache's relevance
    pid = cluster.node(1).proc.pid
    offsets(cluster, "catchup-tiered", "earliest")  # the broker serves: started, plugin loaded
    idle = peak_rss_mib(pid, "VmRSS")
    ratios: dict[str, list[float]] = {"cold": [], "warm": []}
    cpu: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
    for phase in ("cold",) + ("warm",) * rounds:
        results, fetch_mbps, per_gib = {}, {}, {}
        for topic in ("catchup-local", "catchup-tiered"):
            beans, threads = jmx(jmx_port), thread_cpu(pid)
            with Meter(pid, s3.proc.pid) as m:
                results[topic], fetch = consume(cluster, topic, records)
            print(line(f"{phase} {topic}", m, mb / 1024, results[topic]))
            fetch_mbps[topic] = fetch["fetch-mb-per-s"]
            per_gib[topic] = (m.cpu["broker"] / (mb / 1024),
                              sum(m.cpu.values()) / (mb / 1024))
            print(f"    consumer: fetch {fetch['fetch-mb-per-s']:.1f} MB/s after a "
                  f"{fetch['rebalance-ms'] / 1000:.1f} s group join; "
                  f"{fetch['fetch-total']:.0f} fetches of "
                  f"{fetch['fetch-size-avg'] / 1024:.0f} KiB, {fetch['fetch-latency-avg']:.2f} "
                  f"ms each (request sent to response read)")
            print(fetch_breakdown(beans, jmx(jmx_port)))
            print(top_threads(threads, thread_cpu(pid), mb / 1024))
        ratio = results["catchup-tiered"] / results["catchup-local"]
        fetch_ratio = fetch_mbps["catchup-tiered"] / fetch_mbps["catchup-local"]
        ratios[phase].append(ratio)
        cpu[phase].append((per_gib["catchup-local"], per_gib["catchup-tiered"]))
        print(f"  {phase}: tiered/local {ratio:.2f}x, fetching alone {fetch_ratio:.2f}x")
    for phase, target in (("cold", 0.5), ("warm", 0.8)):
        (b_local, all_local), (b_tiered, all_tiered) = (
            [statistics.median(x[i][j] for x in cpu[phase]) for j in range(2)]
            for i in range(2))
        print(f"  {phase}: tiered/local {', '.join(f'{r:.2f}' for r in ratios[phase])}, "
              f"median {statistics.median(ratios[phase]):.2f}x (target >= {target}x); CPU "
              f"s/GiB local / tiered: broker {b_local:.2f} / {b_tiered:.2f}, every process "
              f"{all_local:.2f} / {all_tiered:.2f} (where the cores run out, the wall ratio "
              f"tends to {all_local / all_tiered:.2f}x)")
    peak = peak_rss_mib(pid)
    print(f"  broker RSS: {idle:.0f} MiB after the restart, peak (VmHWM) {peak:.0f} MiB over the "
          f"reads = idle + chunk cache {cache // MiB} MiB + {peak - idle - cache / MiB:.0f} MiB "
          f"(JVM heap {BROKER_HEAP}, read-ahead window 16 MiB)\n")


def section_c(s3, base: Path, mb: int, rounds: int) -> None:
    from rsm_crash_writer import segment_metadata

    from bench.compare_remote_copy import make_source
    from bench.segment import segment
    from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

    print(f"(c) crossing cost: the plugin jar vs the engine from Python, {mb} MiB segment")
    data, last = make_source(base / "segment", segment("none", mb * MiB))
    size = data.log_segment.stat().st_size
    tip = TopicIdPartition(Uuid.random(), "crossing", 0)
    configs = dict(s3.config())
    configs.update({"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3."
                                             "S3Storage",
                    "key.prefix": f"crossing-{uuid.uuid4().hex[:6]}/",
                    "fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache."
                                               "MemoryChunkCache",
                    "fetch.chunk.cache.size": str(2 * mb * MiB)})
    py_fetch, py_stream, jar_fetch, py_copy, jar_copy = [], [], [], [], []
    jar_cpu: list[float] = []
    py_cpu: list[float] = []
    for r in range(rounds):
        md = segment_metadata(tip, 0, last, size)
        words = metadata_words(md)
        out = run_driver(base / f"drv-{r}", {**configs, "engine.venv": str(VENV)},
                         [f"copy {words} {copy_words(data)}"]
                         + [f"ranges {words}"] * WARM_PASSES + [f"delete {words}"],
                         timeout=900)
        assert all("error" not in o for o in out), out
        jar_copy.append(out[1]["elapsed_ns"] / 1e9)
        # warm and steady: the best of the passes after the first (which fills the cache)
        jar_fetch.append(min(o["elapsed_ns"] for o in out[3:-1]) / 1e9)
        jar_cpu.append(min(o["cpu_ns"] for o in out[3:-1]) / 1e9)
        rsm = ObjectStorageRemoteStorageManager()
        rsm.configure(configs)
        try:
            md = segment_metadata(tip, 0, last, size)
            t = time.perf_counter()
            rsm.copy_log_segment_data(md, data)
            py_copy.append(time.perf_counter() - t)
            buf = bytearray(MiB)
            passes = []
            for _ in range(WARM_PASSES):  # as the jar's: the first fills the cache
                t = time.perf_counter()
                for pos in range(0, size, MiB):
                    n = min(MiB, size - pos)
                    rsm.read_forward(md, None)  # the plugin's stream says so once per range
                    rsm.read_range_into(md, pos, memoryview(buf)[:n])
                passes.append(time.perf_counter() - t)
            py_fetch.append(min(passes[1:]))
            passes, cpus = [], []
            for _ in range(WARM_PASSES):  # the same call as the jar's: a stream per range
                t, c = time.perf_counter(), time.thread_time()
                for pos in range(0, size, MiB):
                    with rsm.fetch_log_segment(md, pos, min(size, pos + MiB) - 1) as stream:
                        while stream.readinto(buf):
                            pass
                passes.append(time.perf_counter() - t)
                cpus.append(time.thread_time() - c)
            py_stream.append(min(passes[1:]))
            py_cpu.append(min(cpus[1:]))
            rsm.delete_log_segment_data(md)
        finally:
            rsm.close()
    for label, jar, py in (("fetchLogSegment 1 MiB ranges (warm)", jar_fetch, py_stream),
                           ("  the same, CPU of the calling thread", jar_cpu, py_cpu),
                           ("  against read_range_into", jar_fetch, py_fetch),
                           ("copyLogSegmentData", jar_copy, py_copy)):
        ratio = statistics.median(jar) / statistics.median(py)
        print(f"  {label:<38} jar {statistics.median(jar) * 1e3:8.1f} ms  python "
              f"{statistics.median(py) * 1e3:8.1f} ms  jar/python {ratio:.2f}x "
              f"(target <= 1.10x)")
    print()


def section_d(s3, base: Path, mb: int, threads: tuple[int, ...]) -> None:
    from rsm_crash_writer import make_segment, segment_metadata

    print("(d) concurrent fetches through the plugin: overlap = sum of call times / wall")
    data, last, size = make_segment(base / "conc", 0, batches=max(1, mb * MiB // 21_000),
                                    records=100, value_size=200, seed=1)
    tip = TopicIdPartition(Uuid.random(), "threads", 0)
    md = segment_metadata(tip, 0, last, size)
    words = metadata_words(md)
    configs = dict(s3.config())
    configs.update({"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3."
                                             "S3Storage",
                    "key.prefix": f"threads-{uuid.uuid4().hex[:6]}/", "engine.venv": str(VENV)})
    script = [f"copy {words} {copy_words(data)}"]
    script += [f"parallel {words} threads={n} rounds=2" for n in threads]
    out = run_driver(base / "drv-threads", configs, script, timeout=900)
    for n, o in zip(threads, out[2:]):
        print(f"  {n} threads: {o['bytes'] / o['wall_ns'] * 1e3:7.1f} MB/s  overlap "
              f"{o['busy_ns'] / o['wall_ns']:.2f} (cold chunks: every fetch GETs)")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="abcd")
    ap.add_argument("--mb", type=int, default=256, help="MiB per produce/catch-up/segment")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cache-mb", type=int, default=CACHE // MiB,
                    help="the broker's chunk cache (memory), MiB")
    ap.add_argument("--broker-jvm", default="", help="extra JVM options of the broker, e.g. "
                    "-XX:G1HeapRegionSize=4m (both sides of (a) and (b) share the broker)")
    args = ap.parse_args()
    model = Path("/proc/cpuinfo").read_text().split("model name")[1].split(":")[1]
    print(f"machine: {os.cpu_count()} cores; {model.splitlines()[0].strip()}; load "
          f"{os.getloadavg()[0]:.1f}; broker JVM {BROKER_HEAP} {args.broker_jvm}")
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as tmp:
        base = Path(tmp)
        s3 = S3Server(base / "weed").start()
        try:
            if set(args.sections) & set("ab"):
                # the jar this tree built (not the venv's installed one), with its venv
                props = broker_properties(s3.config(), f"bench-{uuid.uuid4().hex[:6]}/",
                                          **{"remote.log.storage.manager.class.path":
                                                 str(PLUGIN_JAR),
                                             "rsm.config.engine.venv": str(VENV),
                                             "rsm.config.fetch.chunk.cache.size":
                                                 str(args.cache_mb * MiB),
                                             "rsm.config.chunk.size": str(4 * MiB),
                                             "rsm.config.fetch.chunk.cache.prefetch.max.size":
                                                 str(16 * MiB)})
                [jmx_port] = free_ports(1)
                with KafkaCluster(base / "kafka", brokers=1, server_properties=props,
                                  jvm_options=jmx_options(jmx_port)
                                  + tuple(args.broker_jvm.split())) as c:
                    if "a" in args.sections:
                        section_a(c, s3, args.mb, args.rounds)
                    if "b" in args.sections:
                        section_b(c, s3, args.mb, jmx_port, args.cache_mb * MiB, args.rounds)
            if "c" in args.sections:
                section_c(s3, base / "c", args.mb, args.rounds)
            if "d" in args.sections:
                section_d(s3, base / "d", min(args.mb, 64), (1, 2, 4, 8))
        finally:
            s3.stop()


if __name__ == "__main__":
    main()
