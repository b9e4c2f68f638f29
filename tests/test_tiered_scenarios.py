"""Kafka's tiered-storage integration scenarios (TieredStorageTestHarness's tests) that apply to one
engine, driven through the RemoteLogManager API over a real broker file, real log dirs and
each tier (`tier`): the filesystem tier, and the object-store tier on a real S3 server
(SeaweedFS, tests/s3_server.py) configured as a broker file for the Aiven plugin would be; a
few also through the CLI in a subprocess.

Each test follows the harness's shape: small segments (a few batches each), tiering on,
`local.retention.bytes=1` where the scenario wants local copies gone as soon as they are
tiered, then produce / tier (run_once until idle) / check offload, local start, remote
metadata / consume (with how many reads came from the tier) / restart.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import subprocess
import sys

import pytest
from broker_support import broker_dirs, broker_properties

from engine.cli._broker import open_broker
from engine.cli.dump_log import RECORD_JSON_KEYS
from engine.cli.fetch import ConsumerView
from engine.common import Uuid
from engine.config import ConfigError, TopicConfigStore, load_broker_config
from engine.errors import OffsetOutOfRangeError
from engine.log.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
)
from engine.records import RecordBatchBuilder, build_end_txn_marker
from engine.remote.metadata import RemoteLogSegmentState, TopicIdPartition

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_TS = 1_600_000_000_000  # 2020: beyond any time retention of a few days
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED

SCENARIOS = {"log.segment.bytes": 300, "log.retention.ms": -1,
             "remote.log.manager.task.interval.ms": 100}


def _s3_rsm(s3_server, prefix: str) -> dict[str, str]:
    """The object-store tier under the Aiven plugin's class and config names."""
    return {"remote.log.storage.manager.class.name":
            "io.aiven.kafka.tieredstorage.RemoteStorageManager",
            "rsm.config.storage.backend.class":
            "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
            "rsm.config.key.prefix": prefix, "rsm.config.chunk.size": "100",
            **{f"rsm.config.{k}": v for k, v in s3_server.config().items()}}


def value_of(topic: str, partition: int, offset: int) -> bytes:
    return b"%s-%d-%d" % (topic.encode(), partition, offset)


class Broker:
    """One engine for a test: a broker file over two log dirs and a tier (the filesystem
    tier, or with `s3_server` the object-store tier under a fresh key prefix), opened as the
    commands open it (validated config, stored overrides, LogManager, RLM)."""

    def __init__(self, tmp_path, extra: str = "", s3_server=None) -> None:
        self.dirs = broker_dirs(tmp_path)
        self.path = str(tmp_path / "server.properties")
        self.s3_server = s3_server
        self.prefix = f"scenarios-{Uuid.random()}/"
        rsm = None if s3_server is None else _s3_rsm(s3_server, self.prefix)
        with open(self.path, "w") as f:
            f.write(broker_properties(self.dirs, SCENARIOS, rsm, extra))
        self.topic_ids: dict[str, Uuid] = {}
        self.session = None
        self.open()

    def open(self) -> None:
        self.session = open_broker(self.path)
        self.manager = self.session.log_manager
        self.rlm = self.session.remote_log_manager()

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def restart(self) -> None:
        self.close()
        self.open()

    def alter(self, topic: str, **overrides) -> None:
        """configs --alter: the store, then applied to the open logs (as `run` does)."""
        add = {k.replace("_", "."): str(v).lower() if isinstance(v, bool) else str(v)
               for k, v in overrides.items()}
        self.session.store.alter(topic, self.session.broker, add=add)
        self.manager.update_topic_config(topic, self.session.store.overrides(topic))

    def create(self, topic: str, partitions: int = 1, **overrides) -> None:
        self.topic_ids[topic] = Uuid.random()
        if overrides:
            add = {k.replace("_", "."): str(v).lower() if isinstance(v, bool) else str(v)
                   for k, v in overrides.items()}
            self.session.store.alter(topic, self.session.broker, add=add)
        for p in range(partitions):
            self.manager.get_or_create_log(topic, p, topic_id=self.topic_ids[topic],
                                           topic_config=self.session.store.overrides(topic))

    def log(self, topic: str, partition: int = 0):
        return self.manager.get_log(topic, partition)

    def tiered_objects(self) -> list[str]:
        """Every file (filesystem tier) or object (object-store tier) the tier holds."""
        if self.s3_server is None:
            return _tiered_files(self.dirs["tier"])
        import obstore
        return sorted(m["path"] for page in obstore.list(self.s3_server.raw_store(),
                                                         prefix=self.prefix) for m in page)

    def produce(self, topic: str, partition: int = 0, batches: int = 1, records: int = 3,
                epoch: int = 0, ts: int = OLD_TS) -> list[int]:
        """Appends `batches` batches of `records` records whose values name their offsets.
        Returns the base offsets."""
        bases = []
        for _ in range(batches):
            base = self.log(topic, partition).log_end_offset
            builder = RecordBatchBuilder()
            for i in range(records):
                builder.append(value_of(topic, partition, base + i), key=b"k%d" % (base + i),
                               timestamp=ts + base + i)
            self.manager.append_as_leader(topic, partition, builder.build(), epoch)
            bases.append(base)
        return bases

    def produce_txn(self, topic: str, partition: int, producer_id: int, commit: bool,
                    batches: int = 2, records: int = 3, epoch: int = 0) -> list[int]:
        """A transaction of `batches` batches then its COMMIT/ABORT marker. Returns the data
        offsets."""
        offsets = []
        seq = 0
        for _ in range(batches):
            base = self.log(topic, partition).log_end_offset
            builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=0,
                                         base_sequence=seq, is_transactional=True)
            for i in range(records):
                builder.append(value_of(topic, partition, base + i), timestamp=OLD_TS + base)
            self.manager.append_as_leader(topic, partition, builder.build(), epoch)
            offsets += range(base, base + records)
            seq += records
        marker = build_end_txn_marker(commit, base_offset=0, producer_id=producer_id,
                                      producer_epoch=0, timestamp=OLD_TS)
        self.manager.append_as_leader(topic, partition, marker, epoch)
        return offsets

    def tier(self, max_passes: int = 50):
        """run_once until idle; returns the summed summary counts."""
        totals = {"copied": 0, "deleted_remote": 0, "deleted_local": 0}
        for _ in range(max_passes):
            summary = self.rlm.run_once()
            assert not summary.errors, summary.errors
            totals["copied"] += summary.copied_segments
            totals["deleted_remote"] += summary.deleted_remote_segments
            totals["deleted_local"] += summary.deleted_local_segments
            if self.rlm.is_idle():
                return totals
        raise AssertionError(f"not idle after {max_passes} passes: {self.rlm.status()}")

    def tip(self, topic: str, partition: int = 0) -> TopicIdPartition:
        return TopicIdPartition(self.topic_ids[topic], topic, partition)

    def remote_segments(self, topic: str, partition: int = 0, states=(FINISHED,)):
        return sorted((md for md in self.rlm.rlmm.list_remote_log_segments(
            self.tip(topic, partition)) if md.state in states),
            key=lambda md: md.start_offset)

    def consume(self, topic: str, partition: int = 0, offset: int | None = None,
                isolation: str = "read_uncommitted", max_bytes: int = 256):
        """Every record from `offset` (default: log start) to the end, as a consumer sees
        them. Returns ([(offset, value)], reads served remotely)."""
        unified = self.log(topic, partition)
        committed = isolation == "read_committed"
        end = unified.last_stable_offset if committed else unified.high_watermark
        view = ConsumerView(unified.log_start_offset if offset is None else offset, end,
                            committed)
        out, remote = [], 0
        while view.position < end:
            before = view.position
            result = self.rlm.read(topic, partition, view.position, max_bytes,
                                   isolation=isolation)
            remote += bool(result.from_remote)
            out += [(r.offset, r.value) for _, r in view.records(
                result.records, result.aborted_transactions)]
            assert view.position > before, f"no progress at {before}"
        return out, remote


def expected(topic, partition, start, end, skip=()):
    return [(o, value_of(topic, partition, o)) for o in range(start, end) if o not in skip]


@pytest.fixture(params=["filesystem", "s3"])
def tier(request) -> dict:
    """Broker keyword arguments selecting the tier (the S3 server starts only when asked)."""
    if request.param == "filesystem":
        return {}
    return {"s3_server": request.getfixturevalue("s3_server")}


@pytest.fixture
def broker(tmp_path, tier):
    b = Broker(tmp_path, "log.local.retention.bytes=1\n", **tier)
    yield b
    b.close()


def _tiered_files(tier) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, f), tier)
                  for r, _, files in os.walk(tier) for f in files if not f.endswith(".tmp"))


# ------------------------------------------------------------------------------ scenarios


def test_offload_and_consume_from_leader(broker):
    """OffloadAndConsumeFromLeaderTest: segments offloaded and deleted locally; after a
    bounce, consuming from an offset reads the expected records from the tier."""
    broker.create("topicA", remote_storage_enable=True)
    broker.produce("topicA", batches=9, records=3)
    totals = broker.tier()
    segments = broker.remote_segments("topicA")
    unified = broker.log("topicA")
    assert totals["copied"] == len(segments) >= 3
    assert next(md.start_offset for md in segments) == 0
    for a, b in itertools.pairwise(segments):  # contiguous, no overlap
        assert b.start_offset == a.end_offset + 1
    # local.retention.bytes=1: only the active segment stays locally
    assert unified.local_log_start_offset == segments[-1].end_offset + 1
    assert unified.segments[0].base_offset == unified.local_log_start_offset
    assert unified.highest_offset_in_remote_storage == segments[-1].end_offset
    assert unified.log_start_offset == 0

    broker.restart()  # the bounce: metadata, log start and local start reload
    unified = broker.log("topicA")
    assert unified.log_start_offset == 0
    records, remote_reads = broker.consume("topicA", offset=4)
    assert records == expected("topicA", 0, 4, 27)
    assert remote_reads >= len(segments) - 1
    first = broker.rlm.read("topicA", 0, 4, 1 << 20)
    assert first.from_remote
    assert broker.rlm.read("topicA", 0, unified.local_log_start_offset, 1 << 20).from_remote \
        is False


def test_delete_segments_by_retention_size(tmp_path, tier):
    """DeleteSegmentsByRetentionSizeTest: retention.bytes=1 deletes the remote segments,
    the epoch checkpoint starts at the new log start, consuming from 0 fetches nothing
    remotely."""
    broker = Broker(tmp_path, "log.local.retention.bytes=1\n", **tier)
    try:
        broker.create("t", remote_storage_enable=True)
        broker.produce("t", batches=8, records=3)
        broker.tier()
        assert len(broker.remote_segments("t")) >= 3
        broker.alter("t", remote_storage_enable=True, retention_bytes=1,
                     local_retention_bytes=1)
        totals = broker.tier()
        assert totals["deleted_remote"] >= 3
        assert broker.remote_segments("t") == []
        unified = broker.log("t")
        assert unified.log_start_offset == unified.local_log_start_offset
        entries = unified.leader_epoch_cache.entries
        assert entries[0].start_offset == unified.log_start_offset
        with pytest.raises(OffsetOutOfRangeError):
            broker.rlm.read("t", 0, 0, 1 << 20)
        records, remote_reads = broker.consume("t")
        assert remote_reads == 0
        assert records == expected("t", 0, unified.log_start_offset, 24)
    finally:
        broker.close()


def test_delete_segments_by_retention_time(broker):
    """DeleteSegmentsByRetentionTimeTest: with retention.ms=1 every tiered segment (their
    timestamps are old) goes from the tier; the log start moves past them."""
    broker.create("t", remote_storage_enable=True)
    broker.produce("t", batches=8, records=3)
    broker.tier()
    tiered_end = broker.remote_segments("t")[-1].end_offset
    broker.alter("t", remote_storage_enable=True, retention_ms=1)
    totals = broker.tier()
    assert totals["deleted_remote"] >= 3
    assert broker.remote_segments("t") == []
    assert broker.log("t").log_start_offset > tiered_end
    assert broker.log("t").leader_epoch_cache.entries[0].start_offset == \
        broker.log("t").log_start_offset
    records, remote_reads = broker.consume("t")
    assert remote_reads == 0
    assert records == expected("t", 0, broker.log("t").log_start_offset, 24)


def test_delete_segments_due_to_log_start_offset_breach(broker):
    """DeleteSegmentsDueToLogStartOffsetBreachTest: DeleteRecords moves the log start;
    remote segments wholly below it go; after a leader epoch change a second DeleteRecords
    deletes more; consumption starts at the new log start."""
    broker.create("t", remote_storage_enable=True)
    broker.produce("t", batches=6, records=3, epoch=0)
    broker.tier()
    before = broker.remote_segments("t")
    assert len(before) >= 2
    cut = before[0].end_offset + 1
    broker.log("t").delete_records(cut)
    totals = broker.tier()
    assert totals["deleted_remote"] == 1
    assert [md.start_offset for md in broker.remote_segments("t")] == [
        md.start_offset for md in before[1:]]
    records, _ = broker.consume("t")
    assert records[0][0] == cut and records == expected("t", 0, cut, 18)

    broker.rlm.on_leadership_change({("t", 0): 1})
    broker.produce("t", batches=6, records=3, epoch=1)
    broker.tier()
    remote = broker.remote_segments("t")
    cut2 = remote[2].end_offset + 1
    broker.log("t").delete_records(cut2)
    totals = broker.tier()
    assert totals["deleted_remote"] == 3
    assert all(md.start_offset >= cut2 for md in broker.remote_segments("t"))
    assert broker.log("t").leader_epoch_cache.entries[0].start_offset == cut2
    records, _ = broker.consume("t")
    assert records == expected("t", 0, cut2, 36)
    broker.restart()
    assert broker.log("t").log_start_offset == cut2
    assert broker.consume("t")[0] == expected("t", 0, cut2, 36)


def test_delete_topic(broker):
    """DeleteTopicTest: deleting a 2-partition tiered topic removes every remote segment
    and leaves the tier empty."""
    broker.create("t", partitions=2, remote_storage_enable=True)
    for p in (0, 1):
        broker.produce("t", p, batches=6)
    broker.tier()
    assert all(broker.remote_segments("t", p) for p in (0, 1))
    assert any(f.endswith(".log") for f in broker.tiered_objects())
    for p in (0, 1):
        broker.rlm.delete_partition("t", p)
        broker.manager.delete_partition("t", p)
    broker.session.store.remove_topic("t")
    for p in (0, 1):
        assert broker.remote_segments("t", p, states=tuple(RemoteLogSegmentState)) == [] or \
            all(md.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
                for md in broker.remote_segments("t", p, tuple(RemoteLogSegmentState)))
    assert broker.tiered_objects() == []
    assert not any(n.startswith("t-") for d in ("d1", "d2")
                   for n in os.listdir(broker.dirs[d]))
    broker.restart()
    assert broker.manager.partitions() == []


def test_enable_remote_log_on_topic(broker):
    """EnableRemoteLogOnTopicTest: tiering turned on for a local-only topic offloads the
    old segments and the new ones; consumption spans both tiers."""
    broker.create("t")
    broker.produce("t", batches=6)
    broker.tier()
    assert broker.remote_segments("t") == [] and broker.log("t").log_start_offset == 0
    local_segments = len(broker.log("t").segments)
    broker.alter("t", remote_storage_enable=True)
    broker.produce("t", batches=3)
    broker.tier()
    segments = broker.remote_segments("t")
    assert segments[0].start_offset == 0 and len(segments) >= local_segments
    records, remote_reads = broker.consume("t")
    assert records == expected("t", 0, 0, 27) and remote_reads > 0


def test_disable_copy_then_reenable(broker):
    """DisableRemoteLogOnTopicTest: remote.log.copy.disable keeps the tier readable and
    copies nothing new; DeleteRecords still expires remote data; re-enabling copies the
    new segments; disabling tiering needs remote.log.delete.on.disable."""
    broker.create("t", remote_storage_enable=True, local_retention_bytes=1,
                  retention_bytes=-1)
    broker.produce("t", batches=6)
    broker.tier()
    tiered = broker.remote_segments("t")
    # copy disabled needs local == total retention (Kafka's rule)
    broker.alter("t", remote_log_copy_disable=True, local_retention_bytes=-2)
    broker.produce("t", batches=6)
    totals = broker.tier()
    assert totals["copied"] == 0
    assert [md.remote_log_segment_id for md in broker.remote_segments("t")] == [
        md.remote_log_segment_id for md in tiered]
    assert broker.consume("t")[0] == expected("t", 0, 0, 36)
    broker.log("t").delete_records(tiered[0].end_offset + 1)
    assert broker.tier()["deleted_remote"] == 1
    broker.alter("t", remote_log_copy_disable=False, local_retention_bytes=1)
    totals = broker.tier()
    assert totals["copied"] >= 2
    assert broker.remote_segments("t")[-1].end_offset > tiered[-1].end_offset
    start = tiered[0].end_offset + 1
    assert broker.consume("t")[0] == expected("t", 0, start, 36)
    with pytest.raises(ConfigError, match="remote.log.delete.on.disable"):
        broker.alter("t", remote_storage_enable=False)


def test_list_offsets(broker):
    """ListOffsetsTest: earliest, earliest-local, latest-tiered, latest and by timestamp,
    with their epochs, across tiers and an epoch change, before and after DeleteRecords."""
    broker.create("t", remote_storage_enable=True)
    assert broker.rlm.list_offsets("t", 0, "latest-tiered") == (-1, -1)
    broker.produce("t", batches=4, epoch=0)
    broker.rlm.on_leadership_change({("t", 0): 1})
    broker.produce("t", batches=4, epoch=1)
    broker.tier()
    unified = broker.log("t")
    top = broker.remote_segments("t")[-1].end_offset
    assert broker.rlm.list_offsets("t", 0, "earliest") == (0, 0)
    assert broker.rlm.list_offsets("t", 0, -2) == (0, 0)
    assert broker.rlm.list_offsets("t", 0, "latest")[0] == unified.log_end_offset == 24
    assert broker.rlm.list_offsets("t", 0, "earliest-local")[0] == \
        unified.local_log_start_offset > 0
    assert broker.rlm.list_offsets("t", 0, "latest-tiered") == (
        top, unified.leader_epoch_cache.epoch_for_offset(top))
    assert broker.rlm.list_offsets("t", 0, -5)[0] == top
    # by timestamp: record o has timestamp OLD_TS + o; remote and local both answer
    assert broker.rlm.list_offsets("t", 0, OLD_TS + 4) == (4, 0)
    assert broker.rlm.list_offsets("t", 0, OLD_TS + 13) == (13, 1)
    assert broker.rlm.list_offsets("t", 0, OLD_TS + 23)[0] == 23
    assert broker.rlm.list_offsets("t", 0, OLD_TS + 10_000)[0] == -1
    broker.log("t").delete_records(7)
    broker.tier()
    assert broker.rlm.list_offsets("t", 0, "earliest")[0] == 7
    assert broker.rlm.list_offsets("t", 0, OLD_TS + 2)[0] == 7
    broker.log("t").delete_records(top + 1)
    broker.tier()
    assert broker.remote_segments("t") == []
    assert broker.rlm.list_offsets("t", 0, "earliest")[0] == top + 1
    assert broker.rlm.list_offsets("t", 0, "latest-tiered")[0] == top


def test_roll_and_offload_active_segment(broker):
    """RollAndOffloadActiveSegmentTest: local.retention.ms=1 makes the log roll the active
    segment so that every batch gets offloaded."""
    broker.create("t", remote_storage_enable=True, local_retention_ms=1,
                  segment_bytes=1 << 20)
    broker.produce("t", batches=4)
    assert len(broker.log("t").segments) == 1  # everything in the active segment
    broker.tier()
    segments = broker.remote_segments("t")
    assert segments and segments[-1].end_offset == 11
    unified = broker.log("t")
    assert unified.local_log_start_offset == 12 == unified.log_end_offset
    assert broker.consume("t", offset=0)[0] == expected("t", 0, 0, 12)


def test_offload_and_txn_consume_from_leader(tmp_path, tier):
    """OffloadAndTxnConsumeFromLeaderTest / TransactionsWithTieredStoreTest: read_committed
    over remote segments with aborted transactions and a 1-byte index cache (every lookup
    evicts); read_uncommitted sees the aborted records too."""
    broker = Broker(tmp_path, "log.local.retention.bytes=1\n"
                              "remote.log.index.file.cache.total.size.bytes=1\n", **tier)
    try:
        broker.create("t", remote_storage_enable=True)
        aborted = []
        broker.produce("t", batches=2)
        aborted += broker.produce_txn("t", 0, producer_id=11, commit=False)
        broker.produce("t", batches=1)
        broker.produce_txn("t", 0, producer_id=12, commit=True)
        aborted += broker.produce_txn("t", 0, producer_id=13, commit=False, batches=3)
        broker.produce("t", batches=3)
        end = broker.log("t").log_end_offset
        broker.tier()
        assert len(broker.remote_segments("t")) >= 5
        committed, remote_reads = broker.consume("t", isolation="read_committed")
        markers = {o for o in range(end)
                   if o not in {x for x, _ in broker.consume("t")[0]}}
        assert remote_reads >= 5
        assert committed == expected("t", 0, 0, end, skip=set(aborted) | markers)
        everything, _ = broker.consume("t")
        assert set(aborted) <= {o for o, _ in everything}
        broker.restart()
        again, _ = broker.consume("t", isolation="read_committed", max_bytes=4096)
        assert again == committed
    finally:
        broker.close()


def test_leadership_change_resumes_without_duplicates(broker):
    """A new leader epoch (and a new RLM after a restart) resumes copying after the
    highest tiered offset: no segment is copied twice, the epochs are recorded."""
    broker.create("t", remote_storage_enable=True)
    broker.produce("t", batches=5, epoch=0)
    broker.tier()
    first = broker.remote_segments("t")
    broker.rlm.on_leadership_change({("t", 0): 1})
    broker.produce("t", batches=5, epoch=1)
    broker.tier()
    broker.restart()
    broker.rlm.on_leadership_change({("t", 0): 2})
    broker.produce("t", batches=5, epoch=2)
    broker.tier()
    segments = broker.remote_segments("t")
    assert [md.remote_log_segment_id for md in segments[:len(first)]] == [
        md.remote_log_segment_id for md in first]
    for a, b in itertools.pairwise(segments):
        assert b.start_offset == a.end_offset + 1
    epochs = set()
    for md in segments:
        epochs |= set(md.segment_leader_epochs)
    assert epochs == {0, 1, 2}
    assert broker.consume("t")[0] == expected("t", 0, 0, 45)


def test_fetch_from_leader_with_corrupted_checkpoint(broker):
    """FetchFromLeaderWithCorruptedCheckpointTest: with the recovery-point and log-start
    checkpoints and .kafka_cleanshutdown erased, a restart recovers; tiering and remote
    reads still work and no segment is copied twice."""
    broker.create("t", partitions=2, remote_storage_enable=True)
    for p in (0, 1):
        broker.produce("t", p, batches=6)
    broker.tier()
    # DeleteRecords at a segment boundary: the first remote segment of t-1 expires, so the
    # log start survives the loss of its checkpoint (the RLM takes it from the tier)
    cut = broker.remote_segments("t", 1)[1].start_offset
    broker.log("t", 1).delete_records(cut)
    assert broker.tier()["deleted_remote"] == 1
    tiered = {p: broker.remote_segments("t", p) for p in (0, 1)}
    broker.close()
    for d in ("d1", "d2"):
        for name in (RECOVERY_POINT_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
                     CLEAN_SHUTDOWN_FILE):
            path = broker.dirs[d] / name
            if path.exists():
                path.unlink()
    broker.open()
    for p in (0, 1):
        broker.produce("t", p, batches=4)
    broker.tier()
    for p in (0, 1):
        segments = broker.remote_segments("t", p)
        assert segments[:len(tiered[p])] == tiered[p] or [
            md.remote_log_segment_id for md in segments[:len(tiered[p])]] == [
            md.remote_log_segment_id for md in tiered[p]]
        assert len(segments) > len(tiered[p])
    assert broker.log("t", 0).log_start_offset == 0
    assert broker.log("t", 1).log_start_offset == cut
    assert broker.consume("t", 0)[0] == expected("t", 0, 0, 30)
    assert broker.consume("t", 1)[0] == expected("t", 1, cut, 30)
    assert broker.rlm.read("t", 0, 0, 1 << 20).from_remote


# ------------------------------------------------------------------------- through the CLI


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT,
                          capture_output=True, check=False, text=True, timeout=timeout)


def test_cli_enable_tiering_run_fetch_list_offsets_status(tmp_path, tier):
    """The operator's path: a local-only topic gets remote.storage.enable with `configs`,
    `run --until-idle` tiers it, `fetch` reads it back from the tier (dump-log's JSON
    keys), `list-offsets` and `status` report the tiers."""
    broker = Broker(tmp_path, "log.local.retention.bytes=1\n", **tier)
    broker.create("orders")
    broker.produce("orders", batches=8)
    broker.close()
    path = broker.path
    proc = _cli("configs", "--config", path, "--entity-name", "orders", "--alter",
                "--add-config", "remote.storage.enable=true")
    assert proc.returncode == 0, proc.stderr
    proc = _cli("run", "--config", path, "--until-idle")
    assert proc.returncode == 0, proc.stderr
    assert "copied" in proc.stderr and "stopped cleanly" in proc.stderr
    if broker.s3_server is not None:  # nor does run's log
        assert broker.s3_server.secret_key not in proc.stdout + proc.stderr
    proc = _cli("fetch", "--config", path, "--topic", "orders", "--partition", "0",
                "--offset", "2", "--to-end", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all(tuple(row) == RECORD_JSON_KEYS for row in rows)
    assert [(r["offset"], base64.b64decode(r["value"])) for r in rows] == expected(
        "orders", 0, 2, 24)
    assert "from the remote tier" in proc.stderr and " 0 from the remote" not in proc.stderr
    proc = _cli("list-offsets", "--config", path, "--topic", "orders", "--partition", "0",
                "--time", "earliest-local")
    assert proc.returncode == 0, proc.stderr
    local_start = int(proc.stdout.strip().split(":")[2])
    assert 0 < local_start < 24
    proc = _cli("list-offsets", "--config", path, "--topic", "orders", "--partition", "0",
                "--time", "latest-tiered", "--json")
    assert json.loads(proc.stdout)["offset"] == local_start - 1
    proc = _cli("list-offsets", "--config", path, "--topic", "orders", "--partition", "0",
                "--time", "earliest", "--json")
    assert json.loads(proc.stdout)["offset"] == 0
    proc = _cli("status", "--config", path, "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["topic"] == "orders" and row["partition"] == 0
    assert row["highest_offset_in_remote_storage"] == local_start - 1
    assert row["copy_lag_segments"] == 0 and row["local_log_start_offset"] == local_start
    proc = _cli("status", "--config", path)
    assert proc.stdout.splitlines()[0].split()[:2] == ["partition", "log-start"]
    if broker.s3_server is not None:  # the store's secret is never shown
        assert broker.s3_server.secret_key not in proc.stdout + proc.stderr
    assert TopicConfigStore.of(load_broker_config(path)).overrides("orders") == {
        "remote.storage.enable": "true"}



def test_disable_remote_log_with_delete_on_disable(broker):
    """DisableRemoteLogOnTopicTest, last part: remote.storage.enable=false with
    remote.log.delete.on.disable=true empties the tier (Kafka's stopPartitions with
    deleteRemoteLog), while the local data stays consumable from the new log start."""
    broker.create("t", remote_storage_enable=True)
    broker.produce("t", batches=6)
    broker.tier()
    assert broker.remote_segments("t")
    local_start = broker.log("t").local_log_start_offset
    broker.alter("t", remote_storage_enable=False, remote_log_delete_on_disable=True)
    broker.rlm.run_once()
    assert broker.tiered_objects() == []
    assert broker.remote_segments("t") == []
    unified = broker.log("t")
    assert not unified.remote_log_enabled
    assert unified.log_start_offset == local_start
    assert broker.consume("t")[0] == expected("t", 0, local_start, 18)
