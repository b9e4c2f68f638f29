"""Real Apache Kafka brokers with the engine as their RemoteStorageManager (the plugin jar
that scripts/setup.sh installs into the venv) against the test S3 server: the broker
properties an operator would write (README, "Use it in an Apache Kafka broker"), the topic
configs that make segments tier at once, and the waits and comparisons the scenarios share.

Kafka's own TopicBasedRemoteLogMetadataManager keeps the metadata in
`__remote_log_metadata`; the bucket is the Aiven plugin's format."""

from __future__ import annotations

import uuid
from pathlib import Path

import obstore
from kafka_cluster import KafkaCluster, wait_until
from kafka_plugin_support import INSTALLED_JAR, RSM_CLASS

from engine.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from engine.remote.metadata_topic import RemoteLogMetadataTopic, is_metadata_partition_dir

S3_BACKEND = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"
SEGMENT_BYTES = 1 << 20  # Kafka 4's smallest segment.bytes
#: a topic whose closed segments tier at once and leave the broker's disk at once
TIERED_TOPIC = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": "1"}


def broker_properties(s3_configs: dict, key_prefix: str, **extra) -> dict[str, str]:
    """A broker tiering through the plugin: Kafka's `remote.log.*` keys, the plugin's
    `rsm.config.*` (the Aiven plugin's names), Kafka's topic-based RLMM, and short task
    intervals so a test sees copies and deletions within seconds."""
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": RSM_CLASS,
        "remote.log.storage.manager.class.path": str(INSTALLED_JAR),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
        "log.initial.task.delay.ms": "0",
        "rsm.config.storage.backend.class": S3_BACKEND,
        "rsm.config.chunk.size": str(256 * 1024),
        "rsm.config.key.prefix": key_prefix,
        "rsm.config.fetch.chunk.cache.class":
            "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache",
        "rsm.config.fetch.chunk.cache.size": str(64 << 20),
        "rsm.config.fetch.chunk.cache.prefetch.max.size": str(1 << 20),
    }
    props.update({f"rsm.config.{k}": v for k, v in s3_configs.items()})
    props.update(extra)
    return props


def tiered_cluster(base: Path, s3_server, brokers: int = 1, **extra) -> KafkaCluster:
    """A (not yet started) cluster tiering into its own prefix of the test bucket; the prefix
    is `cluster.key_prefix`."""
    prefix = f"broker-{uuid.uuid4().hex[:8]}/"
    cluster = KafkaCluster(base, brokers=brokers,
                           server_properties=broker_properties(s3_server.config(), prefix,
                                                               **extra))
    cluster.key_prefix = prefix  # type: ignore[attr-defined]
    return cluster


def offsets(cluster: KafkaCluster, topic: str, partitions, *specs: str,
            isolation: str = "read_uncommitted") -> dict[tuple[str, int], int]:
    """ListOffsets through the Java admin client: (spec, partition) -> offset."""
    args = ["list-offsets", "--topic", topic, "--partitions",
            ",".join(map(str, partitions)), "--isolation", isolation]
    for spec in specs:
        args += ["--spec", spec]
    return {(o["spec"], o["partition"]): o["offset"]
            for o in cluster.run_client(args, timeout=90)}


def wait_tiered(cluster: KafkaCluster, topic: str, partitions, below: dict[int, int],
                timeout: float = 180) -> None:
    """Waits until every partition's local log starts at or above `below[p]` (the segments
    below it were copied, and then deleted from the broker's disk)."""
    def done():
        got = offsets(cluster, topic, partitions, "earliest-local")
        return all(got[("earliest-local", p)] >= below[p] for p in partitions) and got
    wait_until(f"{topic} to leave local disk below {below}", done, timeout)


def consume(cluster: KafkaCluster, topic: str, partitions, *args: str,
            timeout: float = 240) -> list[dict]:
    """Every record from `--from` (earliest by default) to the end, Java consumer, assign."""
    lines = cluster.run_client(
        ["consume", "--topic", topic, "--partitions", ",".join(map(str, partitions)),
         "--idle-ms", "4000", "--timeout-ms", str(int(timeout * 1000) - 20000), *args],
        timeout=timeout)
    assert lines[-1]["type"] == "end" and not lines[-1]["timed_out"], lines[-1]
    return [r for r in lines if r["type"] == "record"]


def record_view(records) -> list[tuple]:
    """What a consumer compares: partition, offset, timestamp, key, value, headers."""
    return sorted((r["partition"], r["offset"], r["timestamp"], r["key"], r["value"],
                   tuple(tuple(h) for h in r["headers"])) for r in records)


def produced_view(produced, isolation: str = "read_uncommitted") -> list[tuple]:
    return record_view(r for r in produced
                       if isolation == "read_uncommitted" or r["committed"])


def bucket_keys(s3_server, prefix: str) -> list[str]:
    return sorted(m["path"] for page in obstore.list(s3_server.raw_store(), prefix=prefix)
                  for m in page)


_TOPIC_ID_CHARS = 22  # a Kafka Uuid as text: 16 bytes, URL-safe base64 unpadded


def topic_objects(s3_server, prefix: str, topic: str) -> dict[str, int]:
    """The topic's objects, `<partition>/<file name>` -> size. The topic's directory is
    `<topic>-<topic id>`, and a topic id (22 characters of URL-safe base64) may itself hold
    a `-`, so the name is what precedes the id."""
    out = {}
    for page in obstore.list(s3_server.raw_store(), prefix=prefix):
        for meta in page:
            topic_dir, _, tail = meta["path"][len(prefix):].partition("/")
            if (topic_dir[:-_TOPIC_ID_CHARS - 1] == topic
                    and topic_dir[-_TOPIC_ID_CHARS - 1:-_TOPIC_ID_CHARS] == "-"):
                out[tail] = meta["size"]
    return out


def segment_keys(s3_server, prefix: str, topic: str) -> dict[str, set[str]]:
    """The topic's objects by segment (`<partition>/<offset>-<segment id>`) -> suffixes."""
    out: dict[str, set[str]] = {}
    for tail in topic_objects(s3_server, prefix, topic):
        stem, _, suffix = tail.rpartition(".")
        out.setdefault(stem, set()).add(suffix)
    return out


def tiered_segments(s3_server, prefix: str, topic: str) -> dict[tuple[int, int], set[str]]:
    """`segment_keys` by (partition, start offset) -> suffixes."""
    out: dict[tuple[int, int], set[str]] = {}
    for stem, suffixes in segment_keys(s3_server, prefix, topic).items():
        partition, _, name = stem.partition("/")
        key = (int(partition), int(name.split("-", 1)[0]))
        assert key not in out, f"two tiered segments start at {key}: {stem}"
        out[key] = suffixes
    return out


def local_segments(cluster: KafkaCluster, topic: str, partition: int, node: int = 1
                   ) -> list[int]:
    """The base offsets of the partition's segments on the node's disk (files renamed
    `.deleted` are gone already)."""
    path = cluster.node(node).data_dir / f"{topic}-{partition}"
    return sorted(int(f.name.split(".")[0]) for f in path.glob("*.log"))


def wait_all_tiered(cluster: KafkaCluster, topic: str, partitions, node: int = 1,
                    timeout: float = 180) -> dict[int, int]:
    """Waits until every closed segment of the partitions is tiered and gone from the node's
    disk (a topic with local.retention.bytes=1 that nobody writes to): one local segment,
    the active one, where the local log starts, right after the last tiered offset. Returns
    the active segment's base offset by partition."""
    def done():
        got = offsets(cluster, topic, partitions, "earliest-local", "latest-tiered")
        bases = {}
        for p in partitions:
            local = local_segments(cluster, topic, p, node)
            if (len(local) != 1 or got[("earliest-local", p)] != local[0]
                    or got[("latest-tiered", p)] != local[0] - 1):
                return None
            bases[p] = local[0]
        return bases
    return wait_until(f"every closed segment of {topic} to be tiered", done, timeout)


def rlmm_segments(cluster: KafkaCluster, topic: str, node: int = 1
                  ) -> dict[int, list[RemoteLogSegmentMetadata]]:
    """What Kafka's own RLMM holds for the topic's partitions, read from the node's
    `__remote_log_metadata` partitions (committed records: up to the high watermark the
    broker last checkpointed): partition -> segments not deleted, by start offset."""
    dirs = sorted(d for d in cluster.node(node).data_dir.iterdir()
                  if is_metadata_partition_dir(d))
    state = RemoteLogMetadataTopic(dirs).load()
    return {tip.partition: cache.list_all_remote_log_segments()
            for tip, cache in state.caches.items() if tip.topic == topic}


def wait_rlmm_finished(cluster: KafkaCluster, topic: str, below: dict[int, int],
                       node: int = 1, timeout: float = 60) -> dict[int, list]:
    """Waits until the RLMM's COPY_SEGMENT_FINISHED segments of each partition cover the
    offsets [0, below[p]) without a gap; returns them by partition."""
    def done():
        finished = {}
        for p, segments in rlmm_segments(cluster, topic, node).items():
            finished[p] = [m for m in segments
                           if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        for p, end in below.items():
            nxt = 0
            for m in finished.get(p, []):
                if m.start_offset <= nxt:
                    nxt = max(nxt, m.end_offset + 1)
            if nxt < end:
                return None
        return finished
    return wait_until(f"the RLMM of {topic} to hold finished copies below {below}", done,
                      timeout)
