"""A follower's partition built from the remote tier (Kafka's TierStateMachine,
ReplicaFetcherTierStateMachine) and the KIP-405 follower scenarios that apply to one engine.

A leader and a follower run in one process: each has its own LogManager over two log dirs
and its own RemoteLogManager; they share one filesystem tier and one RLMM directory (the
leader writes it, the follower reads it, as a follower consumes Kafka's metadata topic:
what the leader stored reaches the follower on `refresh()`). The follower fetches batches
from the leader's local log and appends them as a follower; when its fetch offset is below
the leader's local log start offset (Kafka's OFFSET_MOVED_TO_TIERED_STORAGE) it builds its
partition from the tier with `RemoteLogManager.build_remote_log_aux_state`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from test_rlm_helpers import TOPIC, Env, batch, marker, read_all, txn_batch

from engine.cli.fetch import ConsumerView
from engine.config import BrokerConfig
from engine.errors import (
    CorruptCheckpointError,
    CorruptSnapshotError,
    OffsetOutOfRangeError,
    RemoteLogAuxStateError,
    UnknownTopicOrPartitionError,
)
from engine.log import LogManager
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile
from engine.log.log_manager import LOG_START_OFFSET_CHECKPOINT_FILE
from engine.log.producer_state import (
    ProducerSnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
)
from engine.log.unified_log import UnifiedLog
from engine.records import build_end_txn_marker
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.storage import IndexType
from engine.rlm import RemoteLogManager, follower

TP = (TOPIC, 0)
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "follower_crash_driver.py")


class Follower:
    """A second engine over its own two log dirs, sharing the leader's tier (its own RSM
    instance) and reading the leader's RLMM directory."""

    def __init__(self, tmp_path, leader: Env, name: str = "follower"):
        self.leader = leader
        self.dirs = [tmp_path / f"{name}{i}" for i in range(2)]
        self.config = BrokerConfig({"log.dirs": ",".join(map(str, self.dirs)),
                                    "remote.log.storage.system.enable": "true",
                                    "rsm.config.dirs": str(leader.remote_dir),
                                    "broker.id": "1"})
        self.lm = LogManager(self.dirs, broker_config=self.config, clock=leader.clock,
                             topic_defaults=leader.topic_config)
        self.rsm = FileSystemRemoteStorageManager([leader.remote_dir], fsync=False)
        self.rlmm = EmbeddedRemoteLogMetadataManager.open_read_only(
            leader.log_dirs[0] / "__remote_log_metadata")
        self.rlm = RemoteLogManager(self.config, self.lm, self.rsm, self.rlmm, broker_id=1,
                                    clock=leader.clock)

    def create(self, epoch: int = 0) -> UnifiedLog:
        """The empty replica: a log with the topic's id, made a follower of `epoch`."""
        self.leader.rlm.initialise_partitions(TOPIC, 0)  # the leader's topic id is written
        topic_id = self.leader.log().partition_metadata.read().topic_id
        unified = self.lm.get_or_create_log(TOPIC, 0, topic_id=topic_id,
                                            topic_config=self.leader.topic_config)
        self.rlm.on_leadership_change({}, followers={TP: epoch})
        return unified

    @property
    def log(self) -> UnifiedLog:
        return self.lm.get_log(TOPIC, 0)

    def build(self, **leader) -> int:
        return self.rlm.build_remote_log_aux_state(TOPIC, 0, **(leader or leader_offsets(
            self.leader.log())))

    def fetch(self) -> int:
        """Appends what the leader has past the follower's log end; returns the batches
        fetched. OffsetOutOfRangeError when the leader no longer holds that offset locally
        (Kafka's OFFSET_MOVED_TO_TIERED_STORAGE)."""
        source, target = self.leader.log(), self.log
        fetched = 0
        while target.log_end_offset < source.log_end_offset:
            data, _ = source.read(target.log_end_offset, 1 << 20)
            target.append_as_follower(bytes(data))
            fetched += 1
        return fetched

    def close(self):
        self.rlm.close()
        self.rlmm.close()
        self.rsm.close()
        self.lm.shutdown()


def leader_offsets(leader_log: UnifiedLog) -> dict:
    """What the follower learns from the leader: ListOffsets EARLIEST_LOCAL and EARLIEST,
    and the epoch of the offset before the local start (OffsetsForLeaderEpoch)."""
    local = leader_log.local_log_start_offset
    return {"leader_log_start_offset": leader_log.log_start_offset,
            "leader_local_log_start_offset": local,
            "target_epoch": leader_log.leader_epoch_cache.epoch_for_offset(local - 1)}


def log_state(unified: UnifiedLog) -> dict:
    """Everything the build decides, files included."""
    return {
        "offsets": (unified.log_start_offset, unified.local_log_start_offset,
                    unified.log_end_offset, unified.recovery_point,
                    unified.highest_offset_in_remote_storage),
        "epochs": unified.leader_epoch_cache.entries,
        "epoch_file": (unified.dir / "leader-epoch-checkpoint").read_bytes(),
        "snapshots": {p.name: p.read_bytes() for p in sorted(unified.dir.glob("*.snapshot"))},
        "segments": sorted(p.name for p in unified.dir.iterdir()
                           if p.suffix in (".log", ".index", ".timeindex", ".txnindex")),
        "producers": unified.producer_state.snapshot_entries(),
        "ongoing": unified.producer_state.ongoing_transactions(),
    }


def consume(rlm: RemoteLogManager, unified: UnifiedLog, isolation="read_uncommitted",
            start=None, end=None):
    """Every record a consumer gets from `start` (the log start) to `end` (the high
    watermark, or the last stable offset for read_committed). Returns ([(offset, value)],
    reads served remotely)."""
    committed = isolation == "read_committed"
    if end is None:
        end = unified.last_stable_offset if committed else unified.high_watermark
    view = ConsumerView(unified.log_start_offset if start is None else start, end, committed)
    out, remote = [], 0
    while view.position < end:
        before = view.position
        result = rlm.read(TOPIC, 0, view.position, 100_000, isolation=isolation)
        remote += bool(result.from_remote)
        out += [(r.offset, r.value) for _, r in view.records(result.records,
                                                              result.aborted_transactions)]
        assert view.position > before, f"no progress at {before}"
    return out, remote


def remote_segment_before(env: Env, offset: int):
    st = env.rlm._partitions[TP]
    return next(md for md in env.rlmm.list_remote_log_segments(st.tip)
                if md.start_offset <= offset - 1 <= md.end_offset
                and md.state.name == "COPY_SEGMENT_FINISHED")


@pytest.fixture
def leader(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1}, log_dirs=2)
    yield env
    env.close()


@pytest.fixture
def replica(tmp_path, leader):
    f = Follower(tmp_path, leader)
    yield f
    f.close()


# ---------------------------------------------------------------------------- scenarios


def test_empty_follower_catches_up_from_a_leader_whose_local_log_starts_above_its_start(
        tmp_path, leader):
    """ReassignReplicaExpandTest / LocalLogStartOffsetTest: a new, empty replica of a
    partition whose early segments live only in the tier builds its state from the tier,
    fetches the rest from the leader, and serves every offset: below its local start from
    the tier through its own RemoteLogManager."""
    leader.produce(20)
    leader.rlm.run_once()
    source = leader.log()
    local_start = source.local_log_start_offset
    assert source.log_start_offset == 0 < local_start
    replica = Follower(tmp_path, leader)
    try:
        unified = replica.create()
        with pytest.raises(OffsetOutOfRangeError):
            replica.fetch()  # offset 0 moved to tiered storage
        assert unified.log_end_offset == 0

        next_offset = replica.build()

        md = remote_segment_before(leader, local_start)
        assert next_offset == md.end_offset + 1 == local_start
        assert (unified.log_start_offset, unified.local_log_start_offset,
                unified.log_end_offset) == (0, local_start, local_start)
        assert unified.leader_epoch_cache.entries == [
            e for e in source.leader_epoch_cache.entries if e.start_offset < local_start]
        fetched = leader.rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT).read()
        assert (unified.dir / f"{local_start:020d}.snapshot").read_bytes() == fetched
        assert unified.highest_offset_in_remote_storage == local_start - 1
        # the moved log start is checkpointed at once (a crash must not forget it)
        checkpoint = OffsetCheckpointFile(unified.dir.parent / LOG_START_OFFSET_CHECKPOINT_FILE)
        assert checkpoint.read()[TP] == 0
        assert replica.rlm.metrics.value("BuildRemoteLogAuxStateRequestsPerSec",
                                         topic=TOPIC) == 1
        assert replica.rlm.metrics.value("BuildRemoteLogAuxStateErrorsPerSec",
                                         topic=TOPIC) is None

        assert replica.fetch() > 0
        assert unified.log_end_offset == source.log_end_offset
        records, remote = consume(replica.rlm, unified)
        assert records == leader.acked[TP]
        assert remote > 0
        assert replica.rlm.read(TOPIC, 0, 0, 100).from_remote
        assert replica.rlm.list_offsets(TOPIC, 0, "earliest")[0] == 0
        assert replica.rlm.list_offsets(TOPIC, 0, "earliest-local")[0] == local_start

        # the follower task keeps its highest tiered offset; a restart keeps the state
        leader.produce(6)
        replica.fetch()
        leader.rlm.run_once()
        replica.rlmm.refresh()  # the leader's new metadata reaches the follower
        assert not replica.rlm.run_once().errors
        assert unified.highest_offset_in_remote_storage == \
            source.highest_offset_in_remote_storage > local_start - 1
        before = log_state(unified)
        replica.close()
        replica = Follower(tmp_path, leader)
        replica.rlm.on_leadership_change({}, followers={TP: 0})
        reopened = replica.log
        assert (reopened.log_start_offset, reopened.local_log_start_offset,
                reopened.log_end_offset) == before["offsets"][:3]
        assert reopened.leader_epoch_cache.entries == before["epochs"]
        assert read_all(replica.rlm, TOPIC, 0, 0, reopened.log_end_offset) == leader.acked[TP]
    finally:
        replica.close()


def test_follower_built_from_the_tier_becomes_leader_and_tiers_on(leader, replica):
    """ReassignReplicaMoveTest: the replica built from the tier takes over (the old leader
    stops; the new one writes the same metadata directory), serves the tiered offsets and
    tiers its own new segments after the old leader's, without uploading any offset
    twice."""
    leader.produce(12)
    leader.rlm.run_once()
    unified = replica.create()
    replica.build()
    replica.fetch()
    tiered_before = leader.log().highest_offset_in_remote_storage
    leader.rlm.close()
    leader.rlmm.close()
    replica.rlm.close()
    replica.rlmm.close()
    replica.rlmm = EmbeddedRemoteLogMetadataManager(leader.log_dirs[0] / "__remote_log_metadata")
    replica.rlm = RemoteLogManager(replica.config, replica.lm, replica.rsm, replica.rlmm,
                                   broker_id=1, clock=leader.clock)
    replica.rlm.on_leadership_change({TP: 1})
    values = [(unified.append_as_leader(batch([b"new-%d" % i]), 1)[0], b"new-%d" % i)
              for i in range(30)]
    summary = replica.rlm.run_once()
    assert not summary.errors and summary.copied_segments > 0
    segments = sorted((md.start_offset, md.end_offset) for md in
                      replica.rlmm.list_remote_log_segments(replica.rlm._partitions[TP].tip))
    # contiguous: nothing uploaded twice, nothing skipped
    assert segments[0][0] == 0
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(segments))
    assert unified.highest_offset_in_remote_storage == segments[-1][1] > tiered_before
    records, remote = consume(replica.rlm, unified)
    assert records == leader.acked[TP] + values and remote > 0


def test_producer_state_of_open_and_aborted_transactions_carried_over(leader, replica):
    """TransactionsWithTieredStoreTest on a follower: a transaction aborted within the tier
    and one still open where the follower starts (its ABORT marker not fetched yet) come
    over with the producer snapshot: the follower's last stable offset stays at the open
    transaction, read_committed hides both, and the marker fetched later closes it."""
    source = leader.log()
    leader.produce(2)
    aborted_first = source.log_end_offset
    source.append_as_leader(txn_batch([b"a" * 300, b"b" * 300], producer_id=11), 0)
    leader.produce(2)
    source.append_as_leader(marker(False, producer_id=11), 0)
    leader.produce(2)
    open_first = source.log_end_offset
    source.append_as_leader(txn_batch([b"c" * 300], producer_id=12, sequence=0), 0)
    leader.produce(4)
    source.append_as_leader(txn_batch([b"d" * 300], producer_id=12, sequence=1), 0)
    leader.produce(4)
    # the marker ends the log: its segment is rolled by local retention, not yet tiered
    source.append_as_leader(marker(False, producer_id=12), 0)
    leader.rlm.run_once()
    local_start = source.local_log_start_offset
    assert open_first < local_start  # the open transaction began in the tier
    replica.create()

    next_offset = replica.build()

    unified = replica.log
    assert next_offset == local_start
    md = remote_segment_before(leader, local_start)
    tiered = read_snapshot(unified.dir / f"{local_start:020d}.snapshot")
    assert tiered == decode_snapshot(leader.rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT)
                                     .read())
    assert {e.producer_id for e in tiered} == {11, 12}
    assert unified.producer_state.ongoing_transactions() == [(open_first, 12)]
    assert unified.last_stable_offset == open_first < unified.log_end_offset
    committed, _ = consume(replica.rlm, unified, "read_committed")
    assert committed and committed[-1][0] < open_first
    offsets = {o for o, _ in committed}
    assert not offsets & {aborted_first, aborted_first + 1}  # aborted within the tier
    expected = [(o, v) for o, v in leader.acked[TP] if o < open_first]
    assert committed == expected

    replica.fetch()  # brings the ABORT marker of producer 12
    assert unified.producer_state.ongoing_transactions() == []
    assert unified.last_stable_offset == unified.high_watermark
    local_aborts = [t for s in unified.segments for t in s.txn_index.all_aborted_txns()]
    assert [(t.producer_id, t.first_offset) for t in local_aborts] == [(12, open_first)]
    mine, _ = consume(replica.rlm, unified, "read_committed")
    theirs, _ = consume(leader.rlm, source, "read_committed")
    assert mine == theirs


def test_second_call_is_a_no_op_and_a_lagging_follower_is_built_again(tmp_path, leader,
                                                                        replica):
    """Calling again with the same leader offsets, or after fetching more, changes
    nothing; once the leader tiered and deleted past the follower's log end, a call builds
    it again at the new start, exactly as a fresh follower is built there."""
    leader.produce(12)
    leader.rlm.run_once()
    unified = replica.create()
    first = replica.build()
    state = log_state(unified)
    assert replica.build() == first
    assert log_state(unified) == state
    assert replica.rlm.metrics.value("BuildRemoteLogAuxStateRequestsPerSec",
                                     topic=TOPIC) == 1

    # more data, fetched before the leader tiers it: the follower holds it locally
    leader.produce(6)
    replica.fetch()
    leader.rlm.run_once()
    assert leader.log().local_log_start_offset > first
    fetched = log_state(unified)
    assert replica.build() == unified.log_end_offset == leader.log().log_end_offset
    assert log_state(unified) == fetched
    assert consume(replica.rlm, unified)[0] == leader.acked[TP]

    # a lagging follower: built, then the leader tiers and deletes past its log end
    lagging = Follower(tmp_path, leader, "lagging")
    fresh = None
    try:
        lagging.create()
        built = lagging.build()
        assert built == leader.log().local_log_start_offset > first
        leader.produce(8)
        leader.rlm.run_once()
        new_start = leader.log().local_log_start_offset
        assert new_start > built
        lagging.rlmm.refresh()
        assert lagging.build() == new_start
        fresh = Follower(tmp_path, leader, "fresh")
        fresh.create()
        assert fresh.build() == new_start
        assert log_state(lagging.log) == log_state(fresh.log)
        assert sorted(p.name for p in lagging.log.dir.glob("*.snapshot")) == \
            [f"{new_start:020d}.snapshot"]
        lagging.fetch()
        assert consume(lagging.rlm, lagging.log)[0] == leader.acked[TP]
    finally:
        lagging.close()
        if fresh is not None:
            fresh.close()


def test_leader_epoch_change_in_between(leader, replica):
    """A follower built in epoch 0; the leader's epoch changes and it tiers past the
    follower: the epoch of epoch 0 no longer finds the segment (a typed error, the log
    untouched), the leader's new epoch does, and the follower's epoch cache then carries
    both epochs, so it reads each epoch's tiered segments."""
    leader.produce(10, epoch=0)
    leader.rlm.run_once()
    unified = replica.create(epoch=0)
    first = replica.build()
    assert unified.leader_epoch_cache.entries == [EpochEntry(0, 0)]

    leader.rlm.on_leadership_change({TP: 1})
    epoch1_start = leader.log().log_end_offset
    leader.produce(10, epoch=1)
    leader.rlm.run_once()
    offsets = leader_offsets(leader.log())
    assert offsets["target_epoch"] == 1
    assert offsets["leader_local_log_start_offset"] > epoch1_start
    replica.rlm.on_leadership_change({}, followers={TP: 1})
    replica.rlmm.refresh()
    before = log_state(unified)

    with pytest.raises(RemoteLogAuxStateError) as stale:
        replica.build(**{**offsets, "target_epoch": 0})
    prev = offsets["leader_local_log_start_offset"] - 1
    assert f"{TOPIC}-0" in str(stale.value) and f"offset {prev} in epoch 0" in str(stale.value)
    assert stale.value.partition == TP and stale.value.offset == prev
    assert log_state(unified) == before
    assert unified.log_end_offset == first
    assert replica.rlm.metrics.value("BuildRemoteLogAuxStateErrorsPerSec", topic=TOPIC) == 1

    assert replica.build(**offsets) == offsets["leader_local_log_start_offset"]
    assert unified.leader_epoch_cache.entries == [EpochEntry(0, 0),
                                                  EpochEntry(1, epoch1_start)]
    replica.fetch()
    records, remote = consume(replica.rlm, unified)
    assert records == leader.acked[TP] and remote > 0
    assert replica.rlm.read(TOPIC, 0, 0, 100).from_remote
    assert replica.rlm.read(TOPIC, 0, epoch1_start, 100).from_remote


def test_log_start_follows_the_leader_and_never_precedes_the_tier(leader, replica):
    """DeleteSegmentsDueToLogStartOffsetBreachTest seen from a new follower: after
    DeleteRecords and remote expiration its log starts at the leader's log start; a leader
    log start below where the tier begins (the leader had not raised it yet) is raised to
    the first copied segment, so the follower never offers offsets nobody holds."""
    leader.produce(16)
    leader.rlm.run_once()
    leader.log().delete_records(12)
    leader.rlm.run_once()
    remaining = [md.start_offset for md in leader.rlmm.list_remote_log_segments(
        leader.rlm._partitions[TP].tip) if md.state.name == "COPY_SEGMENT_FINISHED"]
    tier_start = min(remaining)
    assert 0 < tier_start < 12 == leader.log().log_start_offset
    unified = replica.create()
    offsets = leader_offsets(leader.log())

    replica.build(**{**offsets, "leader_log_start_offset": 0})
    assert unified.log_start_offset == tier_start
    assert unified.leader_epoch_cache.entries == [EpochEntry(0, tier_start)]
    replica.fetch()
    assert consume(replica.rlm, unified)[0] == leader.acked[TP][tier_start:]

    unified.truncate_fully_and_start_at(0)  # an empty replica again
    replica.build(**offsets)
    assert unified.log_start_offset == 12
    assert unified.leader_epoch_cache.entries == [EpochEntry(0, 12)]
    replica.fetch()
    assert consume(replica.rlm, unified)[0] == leader.acked[TP][12:]


def test_metadata_not_yet_here_is_retriable_and_leaves_the_log(leader, replica):
    """KAFKA-19523: the follower asks before the leader's segment metadata reached it: a
    RemoteLogAuxStateError naming the partition and the offsets, nothing changed; the same
    call succeeds once the metadata is there."""
    leader.produce(1)
    unified = replica.create()  # its RLMM loads the partition before anything is tiered
    leader.produce(11)
    leader.rlm.run_once()
    offsets = leader_offsets(leader.log())
    before = log_state(unified)

    with pytest.raises(RemoteLogAuxStateError) as missing:
        replica.build(**offsets)
    text = str(missing.value)
    prev = offsets["leader_local_log_start_offset"] - 1
    assert f"partition {TOPIC}-0" in text and f"offset {prev}" in text
    assert f"local log start offset {prev + 1}" in text and "build again later" in text
    assert log_state(unified) == before

    replica.rlmm.refresh()
    assert replica.build(**offsets) == prev + 1
    assert unified.log_end_offset == prev + 1


def test_damaged_remote_log_metadata_is_not_ready_and_leaves_the_log(tmp_path, leader):
    """KAFKA-19523: the partition's remote log metadata cannot be loaded (a bit flipped in
    the middle of its metadata log): a retriable RemoteLogAuxStateError, nothing changed."""
    leader.produce(12)
    leader.rlm.run_once()
    leader.rlm.initialise_partitions(TOPIC, 0)
    files = [p for p in (leader.log_dirs[0] / "__remote_log_metadata").rglob("*")
             if p.is_file() and not p.name.startswith(".")]
    damaged = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x40
    damaged.write_bytes(bytes(data))
    replica = Follower(tmp_path, leader)
    try:
        unified = replica.create()
        before = log_state(unified)
        with pytest.raises(RemoteLogAuxStateError, match="metadata is not ready") as err:
            replica.build()
        assert f"partition {TOPIC}-0" in str(err.value)
        assert log_state(unified) == before
        assert replica.rlm.metrics.value("BuildRemoteLogAuxStateErrorsPerSec",
                                         topic=TOPIC) == 1
    finally:
        replica.close()


def test_damaged_remote_producer_snapshot_is_refused_and_leaves_the_log(leader, replica):
    leader.produce(12)
    leader.rlm.run_once()
    unified = replica.create()
    md = remote_segment_before(leader, leader.log().local_log_start_offset)
    path = leader.rsm.segment_path(md, ".snapshot")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    before = log_state(unified)
    with pytest.raises(RemoteLogAuxStateError) as damaged:
        replica.build()
    assert str(path) in str(damaged.value) and f"partition {TOPIC}-0" in str(damaged.value)
    assert log_state(unified) == before


def test_fetched_files_that_contradict_the_segment_are_refused(leader, replica):
    """The checks on what the RSM returns, for files whose checksums are not recorded (an
    RSM without custom metadata): a leader-epoch checkpoint that gives the segment's offsets
    another epoch, one whose epochs do not increase, and a producer snapshot recording an
    offset at or past where it was taken."""
    leader.produce(4, epoch=0)
    leader.rlm.on_leadership_change({TP: 3})
    leader.produce(8, epoch=3)
    leader.rlm.run_once()
    replica.create()
    md = remote_segment_before(leader, leader.log().local_log_start_offset)
    unchecked = dataclasses.replace(md, custom_metadata=None)
    rsm, next_offset = replica.rlm.rsm, md.end_offset + 1
    epoch_path = leader.rsm.segment_path(md, ".leader_epoch_checkpoint")
    assert follower._leader_epochs(rsm, unchecked, TP, next_offset)[-1].epoch == 3

    epoch_path.write_bytes(LeaderEpochCheckpointFile.encode_entries([EpochEntry(0, 0)]))
    with pytest.raises(CorruptCheckpointError, match="segment's metadata says epoch 3"):
        follower._leader_epochs(rsm, unchecked, TP, next_offset)
    epoch_path.write_bytes(b"0\n2\n3 0\n1 5\n")
    with pytest.raises(CorruptCheckpointError, match="must increase") as bad:
        follower._leader_epochs(rsm, unchecked, TP, next_offset)
    assert f"partition {TOPIC}-0" in str(bad.value)
    epoch_path.write_bytes(b"1\n0\n")
    with pytest.raises(CorruptCheckpointError, match="version"):
        follower._leader_epochs(rsm, unchecked, TP, next_offset)

    snapshot_path = leader.rsm.segment_path(md, ".snapshot")
    snapshot_path.write_bytes(encode_snapshot([ProducerSnapshotEntry(
        7, 0, 4, next_offset, 0, 0, 0, -1)]))
    with pytest.raises(CorruptSnapshotError, match=f"not below {next_offset}"):
        follower._producer_snapshot(rsm, unchecked, TP, next_offset)
    snapshot_path.write_bytes(b"")
    assert follower._producer_snapshot(rsm, unchecked, TP, next_offset) is None


def test_leader_without_producer_snapshots_gives_an_empty_producer_state(leader, replica,
                                                                           caplog):
    """A leader log that kept no producer snapshots (older logs: the tier stores an empty
    one): the follower starts with no producer state and says so."""
    leader.produce(12)
    for path in leader.log().dir.glob("*.snapshot"):
        path.unlink()
    leader.rlm.run_once()
    unified = replica.create()
    with caplog.at_level("WARNING", logger="engine.rlm.follower"):
        next_offset = replica.build()
    assert "starts with no producer state" in caplog.text
    assert next_offset == leader.log().local_log_start_offset
    assert list(unified.dir.glob("*.snapshot")) == []
    assert unified.producer_state.producers == {}
    replica.fetch()
    assert consume(replica.rlm, unified)[0] == leader.acked[TP]


def test_bad_arguments_and_roles(leader, replica, tmp_path):
    leader.produce(12)
    leader.rlm.run_once()
    offsets = leader_offsets(leader.log())
    with pytest.raises(UnknownTopicOrPartitionError):
        replica.build(**offsets)
    unified = replica.create()
    with pytest.raises(ValueError, match="log start <= local log start"):
        replica.build(**{**offsets, "leader_log_start_offset": 10**6})
    with pytest.raises(ValueError, match="negative"):
        replica.build(**{**offsets, "target_epoch": -1})
    with pytest.raises(ValueError, match="no offset below it is tiered"):
        replica.build(**{**offsets, "leader_log_start_offset":
                         offsets["leader_local_log_start_offset"]})
    # the leader itself is not built from the tier
    with pytest.raises(ValueError, match="a leader on this engine"):
        leader.rlm.build_remote_log_aux_state(TOPIC, 0, **{
            **offsets, "leader_local_log_start_offset": leader.log().log_end_offset + 5})
    assert unified.log_end_offset == 0
    # nothing to build: the follower is at the leader's local start already
    assert replica.build(**{**offsets, "leader_local_log_start_offset": 0,
                            "leader_log_start_offset": 0}) == 0


def test_untiered_follower_log_is_refused(tmp_path, leader, replica):
    leader.produce(12)
    leader.rlm.run_once()
    topic_id = leader.log().partition_metadata.read().topic_id
    unified = replica.lm.get_or_create_log(TOPIC, 0, topic_id=topic_id, topic_config={
        **leader.topic_config, "remote.storage.enable": "false"})
    with pytest.raises(RemoteLogAuxStateError, match="remote storage is not enabled"):
        replica.build()
    assert unified.log_end_offset == 0


def _state_after_build(unified: UnifiedLog) -> dict:
    state = log_state(unified)
    del state["offsets"]  # the recovery point depends on how the log was last closed
    return {**state, "starts": (unified.log_start_offset, unified.local_log_start_offset,
                                unified.log_end_offset)}


def test_sigkill_during_the_build_leaves_a_log_built_or_built_again(tmp_path, leader):
    """A real SIGKILL just before each change the build makes to a lagging follower's
    files (segments deleted, snapshots deleted, epoch checkpoint, producer snapshot, new
    segment, log start checkpoint): the log loads either built (at the new start, with
    its producer state: the open transaction keeps the last stable offset down) or still
    below the leader's local start, so the next call builds it; never at the new start
    without its producer state. Building again then gives exactly the uncrashed result."""
    source = leader.log()
    replica = Follower(tmp_path, leader)
    replica.create()
    leader.produce(6)
    replica.fetch()  # the follower holds segments of its own
    replica.close()
    leader.produce(2)
    open_first = source.log_end_offset
    source.append_as_leader(txn_batch([b"c" * 300], producer_id=12), 0)
    leader.produce(6)
    source.append_as_leader(marker(False, producer_id=12), 0)
    leader.rlm.run_once()
    offsets = leader_offsets(source)
    local_start = offsets["leader_local_log_start_offset"]
    assert open_first < local_start

    def copy(name: str) -> Follower:
        for i in range(2):
            shutil.copytree(tmp_path / f"follower{i}", tmp_path / f"{name}{i}")
        f = Follower(tmp_path, leader, name)
        f.rlm.on_leadership_change({}, followers={TP: 0})
        return f

    reference = copy("reference")
    try:
        assert len(reference.log.segments) > 1
        assert reference.build(**offsets) == local_start
        expected = _state_after_build(reference.log)
        assert expected["ongoing"] == [(open_first, 12)]
    finally:
        reference.close()

    everything, _ = consume(leader.rlm, source)
    outcomes = set()
    for k in range(1, 40):
        name = f"k{k}_"
        for i in range(2):
            shutil.copytree(tmp_path / f"follower{i}", tmp_path / f"{name}{i}")
        spec = tmp_path / f"{name}spec.json"
        spec.write_text(json.dumps({
            "dirs": [str(tmp_path / f"{name}{i}") for i in range(2)],
            "tier": str(leader.remote_dir),
            "metadata_dir": str(leader.log_dirs[0] / "__remote_log_metadata"),
            "topic_config": leader.topic_config, "topic": TOPIC, "partition": 0,
            "epoch": 0, "leader": offsets}))
        child = subprocess.run([sys.executable, DRIVER, str(spec), str(k)],
                               check=False, capture_output=True, text=True, timeout=120)
        done = child.returncode == 0
        assert done or child.returncode == -signal.SIGKILL, child.stderr
        f = Follower(tmp_path, leader, name)
        try:
            f.rlm.on_leadership_change({}, followers={TP: 0})
            unified = f.log
            if unified.log_end_offset >= local_start:
                outcomes.add("built")
                assert _state_after_build(unified) == expected, k
            else:
                outcomes.add("not built")
                assert f.build(**offsets) == local_start
                assert _state_after_build(unified) == expected, k
            assert unified.last_stable_offset == open_first
            f.fetch()
            assert consume(f.rlm, unified)[0] == everything
        finally:
            f.close()
        if done:
            assert child.stdout.strip() == f"done {local_start}"
            break
    else:
        raise AssertionError("the build never completed within 39 kill points")
    assert outcomes == {"built", "not built"} and k > 5, k


# ------------------------------------------------------------ UnifiedLog.truncate_fully...


def _txn_log(tmp_path) -> UnifiedLog:
    unified = UnifiedLog.open(tmp_path / "t-0", segment_bytes=300, remote_log_enabled=True)
    for i in range(4):
        unified.append_as_leader(txn_batch([b"v" * 200], producer_id=5, sequence=i), 2)
    return unified


def test_truncate_fully_and_start_at_has_kafkas_semantics(tmp_path):
    unified = _txn_log(tmp_path)
    assert len(unified.segments) > 1 and unified.producer_state.ongoing_transactions()
    moved = []
    unified.log_start_offset_listener = moved.append
    unified.truncate_fully_and_start_at(100, 40)
    assert (unified.log_start_offset, unified.local_log_start_offset,
            unified.log_end_offset, unified.recovery_point) == (40, 100, 100, 100)
    assert [s.base_offset for s in unified.segments] == [100]
    assert unified.leader_epoch_cache.entries == []
    assert list(unified.dir.glob("*.snapshot")) == []
    assert unified.producer_state.producers == {}
    assert unified.last_stable_offset == 100
    assert moved == [unified]
    unified.truncate_fully_and_start_at(120)  # the log start follows by default
    assert (unified.log_start_offset, unified.local_log_start_offset) == (120, 120)
    with pytest.raises(ValueError, match="log start <= new offset"):
        unified.truncate_fully_and_start_at(100, 101)
    unified.close()


def test_truncate_fully_and_start_at_installs_epochs_and_producer_snapshot(tmp_path):
    unified = _txn_log(tmp_path)
    snapshot = encode_snapshot([ProducerSnapshotEntry(9, 1, 3, 95, 0, 1234, 0, 90)])
    epochs = [EpochEntry(0, 0), EpochEntry(1, 30), EpochEntry(4, 70), EpochEntry(5, 100)]
    unified.truncate_fully_and_start_at(100, 40, leader_epochs=epochs,
                                        producer_snapshot=snapshot)
    assert unified.leader_epoch_cache.entries == [EpochEntry(1, 40), EpochEntry(4, 70)]
    assert (unified.dir / f"{100:020d}.snapshot").read_bytes() == snapshot
    assert unified.producer_state.ongoing_transactions() == [(90, 9)]
    assert unified.last_stable_offset == 90
    unified.append_as_follower(build_end_txn_marker(False, base_offset=100, producer_id=9,
                                                    producer_epoch=1, timestamp=1))
    assert unified.last_stable_offset == unified.log_end_offset == 101
    assert [(t.producer_id, t.first_offset, t.last_offset)
            for t in unified.segments[0].txn_index.all_aborted_txns()] == [(9, 90, 100)]
    unified.close()

    reopened = UnifiedLog.open(tmp_path / "t-0", segment_bytes=300, remote_log_enabled=True,
                               log_start_offset=40)
    try:
        assert (reopened.log_start_offset, reopened.local_log_start_offset,
                reopened.log_end_offset) == (40, 100, 101)
        assert reopened.leader_epoch_cache.entries == [EpochEntry(1, 40), EpochEntry(4, 70)]
        assert 9 in reopened.producer_state.producers
    finally:
        reopened.close()


def test_truncate_fully_and_start_at_refuses_a_bad_snapshot_before_changing_anything(
        tmp_path):
    unified = _txn_log(tmp_path)
    end, segments = unified.log_end_offset, [s.base_offset for s in unified.segments]
    bad = bytearray(encode_snapshot([ProducerSnapshotEntry(9, 1, 3, 95, 0, 1234, 0, 90)]))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptSnapshotError, match="CRC") as err:
        unified.truncate_fully_and_start_at(100, 40, producer_snapshot=bytes(bad))
    assert err.value.file.endswith(f"{100:020d}.snapshot")
    assert unified.log_end_offset == end
    assert [s.base_offset for s in unified.segments] == segments
    assert not os.path.exists(unified.dir / f"{100:020d}.snapshot")
    unified.close()
