"""RemoteLogManager on real logs, the filesystem RSM and the embedded RLMM: copy order and
eligibility, local deletion after FINISHED, remote reads equal to local ones, ListOffsets,
remote retention, lineage, partition deletion, metrics."""

from __future__ import annotations

import itertools

import pytest
from test_rlm_helpers import T0, TOPIC, Env, read_all, records_of

from engine.remote.metadata import RemoteLogSegmentState

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.close()


def _remote(env, topic=TOPIC, partition=0):
    unified = env.log(topic, partition)
    tip = env.rlm._partitions[(topic, partition)].tip
    return unified, sorted(env.rlmm.list_remote_log_segments(tip), key=lambda m: m.start_offset)


def test_copies_inactive_segments_in_order_then_deletes_locally(env):
    env.produce(20)
    unified = env.log()
    bases = [s.base_offset for s in unified.segments]
    assert len(bases) > 3
    summary = env.rlm.run_once()
    assert summary.errors == []
    unified, remote = _remote(env)
    # every inactive segment, in offset order; the active one never
    assert [m.start_offset for m in remote] == bases[:-1]
    assert all(m.state == FINISHED for m in remote)
    assert [m.end_offset + 1 for m in remote] == bases[1:]
    assert summary.copied_segments == len(bases) - 1
    assert unified.highest_offset_in_remote_storage == bases[-1] - 1
    assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == env.acked[(TOPIC, 0)]


def _local_reads(unified, offsets, max_bytes_list, min_one):
    out = {}
    for o in offsets:
        for mb in max_bytes_list:
            view, nxt = unified.read(o, mb, min_one)
            out[(o, mb)] = (bytes(view), nxt)
    return out


@pytest.mark.parametrize("min_one", [True, False])
def test_remote_read_equals_local_read_byte_for_byte(tmp_path, min_one):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(24, per_batch=2, size=120)
        unified = env.log()
        end = unified.segments[-1].base_offset  # everything below it gets tiered
        sizes = [0, 1, 100, 300, 301, 700, 5000]
        before = _local_reads(unified, range(end), sizes, min_one)
        env.rlm.run_once()
        assert unified.local_log_start_offset == end
        assert unified.log_start_offset == 0
        for (o, mb), (data, nxt) in before.items():
            got = env.rlm.read(TOPIC, 0, o, mb, min_one_message=min_one)
            assert got.from_remote
            # Kafka's local rule within one segment: whole batches from the one holding o
            assert bytes(got.records) == data, (o, mb)
            assert got.next_offset == nxt
    finally:
        env.close()


def test_local_segments_deleted_only_after_finished(tmp_path):
    from engine.remote.filesystem import FileSystemRemoteStorageManager

    class FailingCopy(FileSystemRemoteStorageManager):
        fail = True

        def copy_log_segment_data(self, metadata, segment_data):
            if self.fail and metadata.start_offset > 0:
                raise OSError("injected copy failure")
            return super().copy_log_segment_data(metadata, segment_data)

    rsm = FailingCopy([tmp_path / "remote"], fsync=False)
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1}, rsm=rsm)
    try:
        env.produce(12)
        unified = env.log()
        second = unified.segments[1].base_offset
        summary = env.rlm.run_once()
        assert summary.copied_segments == 1 and summary.errors
        # only the FINISHED first segment went locally
        assert unified.local_log_start_offset == second
        assert unified.highest_offset_in_remote_storage == second - 1
        rsm.fail = False
        env.clock.advance(60_000)  # past the retry backoff
        env.rlm.run_once()
        assert len(unified.segments) == 1
        assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == env.acked[(TOPIC, 0)]
    finally:
        env.close()


def test_lso_and_active_segment_bound_copying(env):
    from test_rlm_helpers import marker, txn_batch

    unified = env.log()
    env.produce(4)
    txn_start = unified.log_end_offset
    unified.append_as_leader(txn_batch([b"a" * 200], producer_id=7), 0)
    env.produce(10)
    assert unified.last_stable_offset == txn_start
    env.rlm.run_once()
    _, remote = _remote(env)
    assert remote and all(m.end_offset < txn_start for m in remote)
    unified.append_as_leader(marker(False, producer_id=7), 0)  # abort: LSO moves on
    env.produce(6)
    env.rlm.run_once()
    _, remote = _remote(env)
    assert remote[-1].end_offset + 1 == unified.segments[-1].base_offset
    assert env.rlm.is_idle()


def test_read_committed_returns_aborted_transactions_from_remote_and_local(tmp_path):
    from test_rlm_helpers import marker, txn_batch

    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        unified = env.log()
        env.produce(2)
        first = unified.log_end_offset
        unified.append_as_leader(txn_batch([b"x" * 300], producer_id=11), 0)
        env.produce(3)
        unified.append_as_leader(marker(False, producer_id=11), 0)
        env.produce(12)
        env.rlm.run_once()
        assert unified.local_log_start_offset > first
        got = env.rlm.read(TOPIC, 0, first, 200, isolation="read_committed")
        assert got.from_remote
        assert [(a.producer_id, a.first_offset) for a in got.aborted_transactions] == \
            [(11, first)]
        plain = env.rlm.read(TOPIC, 0, first, 200)
        assert plain.aborted_transactions == []
        assert bytes(plain.records) == bytes(got.records)
    finally:
        env.close()


def test_out_of_range_below_log_start_and_above_leo(env):
    from engine.errors import OffsetOutOfRangeError

    env.produce(5)
    leo = env.log().log_end_offset
    with pytest.raises(OffsetOutOfRangeError):
        env.rlm.read(TOPIC, 0, leo + 1, 100)
    env.rlm.run_once()
    env.log().maybe_increment_log_start_offset(4)
    with pytest.raises(OffsetOutOfRangeError) as info:
        env.rlm.read(TOPIC, 0, 3, 100)
    assert info.value.log_start_offset == 4
    at_end = env.rlm.read(TOPIC, 0, leo, 100)
    assert at_end.size_in_bytes == 0 and at_end.next_offset == leo


def test_read_many_parallel_partitions(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        for p in range(4):
            env.produce(10, partition=p)
        env.rlm.run_once()
        requests = [(TOPIC, p, o, 500) for p in range(4) for o in (0, 5, 17)]
        results = env.rlm.read_many(requests)
        for (topic, p, o, mb), res in zip(requests, results):
            assert res.error is None
            assert res.from_remote
            single = env.rlm.read(topic, p, o, mb)
            assert bytes(res.records) == bytes(single.records)
            assert records_of(res.records)[0][0] <= o
        bad = env.rlm.read_many([(TOPIC, 0, 10_000, 100), (TOPIC, 1, 0, 100)])
        assert type(bad[0].error).__name__ == "OffsetOutOfRangeError"
        assert bad[1].error is None and bad[1].size_in_bytes > 0
    finally:
        env.close()


def _ts(env, offset, topic=TOPIC, partition=0):
    """The timestamp `produce` gave record `offset` (batches start at T0 + first*1000)."""
    from test_rlm_helpers import T0

    first = (offset // 3) * 3  # produce() writes 3 records a batch
    return T0 + first * 1000 + (offset - first)


def test_list_offsets_every_spec_across_tiers_and_delete_records(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(20)
        unified = env.log()
        leo = unified.log_end_offset
        rlm = env.rlm
        assert rlm.list_offsets(TOPIC, 0, "earliest") == (0, 0)
        assert rlm.list_offsets(TOPIC, 0, -1) == (leo, 0)
        assert rlm.list_offsets(TOPIC, 0, "earliest-local") == (0, 0)
        assert rlm.list_offsets(TOPIC, 0, "latest-tiered") == (-1, -1)
        rlm.run_once()
        highest = unified.highest_offset_in_remote_storage
        local = unified.local_log_start_offset
        assert highest == local - 1 > 0
        assert rlm.list_offsets(TOPIC, 0, -2) == (0, 0)
        assert rlm.list_offsets(TOPIC, 0, -4) == (local, 0)
        assert rlm.list_offsets(TOPIC, 0, -5) == (highest, 0)
        # by timestamp: remote and local records, exact and between timestamps
        for o in (0, 1, 4, highest, local, leo - 1):
            assert rlm.list_offsets(TOPIC, 0, _ts(env, o)) == (o, 0), o
        assert rlm.list_offsets(TOPIC, 0, _ts(env, 2) + 1) == (3, 0)
        assert rlm.list_offsets(TOPIC, 0, _ts(env, leo - 1) + 1) == (-1, -1)
        # a new leader epoch
        rlm.on_leadership_change({(TOPIC, 0): 1})
        first, _ = env.produce(2, epoch=1)
        assert rlm.list_offsets(TOPIC, 0, "latest") == (unified.log_end_offset, 1)
        assert rlm.list_offsets(TOPIC, 0, _ts(env, first)) == (first, 1)
        # DeleteRecords into the remote tier: earliest moves, expiration drops segments
        unified.maybe_increment_log_start_offset(7)
        assert rlm.list_offsets(TOPIC, 0, "earliest") == (7, 0)
        assert rlm.list_offsets(TOPIC, 0, _ts(env, 2)) == (7, 0)
        rlm.run_once()
        _, remote = _remote(env)
        assert remote[0].start_offset <= 7 <= remote[0].end_offset
        # MAX_TIMESTAMP is answered from the local log, as Kafka does
        assert rlm.list_offsets(TOPIC, 0, -3) == (unified.log_end_offset - 1, 1)
        with pytest.raises(ValueError):
            rlm.list_offsets(TOPIC, 0, -6)
    finally:
        env.close()


def test_list_offsets_max_timestamp_is_the_first_record_carrying_it(tmp_path):
    """Kafka answers MAX_TIMESTAMP (-3) with the offset of the first record carrying the
    largest timestamp, not the last offset of its batch; tiered data does not change it."""
    from engine.records import RecordBatchBuilder

    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(6)
        unified = env.log()
        b = RecordBatchBuilder(base_offset=0)
        for ts in (T0 + 10**6 + 5, T0 + 10**6 + 9, T0 + 10**6 + 2, T0 + 10**6 + 9):
            b.append(b"v", timestamp=ts)
        first, _last = unified.append_as_leader(b.build(), 0)
        env.produce(2)  # later batches, earlier timestamps
        env.rlm.run_once()
        assert unified.local_log_start_offset > 0
        assert env.rlm.list_offsets(TOPIC, 0, "max-timestamp") == (first + 1, 0)
        assert unified.fetch_offset_by_timestamp(-3) == (first + 1, T0 + 10**6 + 9, 0)
    finally:
        env.close()


def _run_until_idle(env, rounds=10):
    for _ in range(rounds):
        env.rlm.run_once()
        if env.rlm.is_idle():
            return
    raise AssertionError(f"not idle after {rounds} runs: {env.rlm.status()}")


def test_remote_retention_by_time(tmp_path):
    env = Env(tmp_path, topic_config={"retention.ms": 3_600_000})
    try:
        env.produce(12)
        unified = env.log()
        env.rlm.run_once()  # everything is older than an hour: copied, then expired
        _run_until_idle(env)
        _, remote = _remote(env)
        assert remote == []
        assert unified.log_start_offset == unified.highest_offset_in_remote_storage + 1
        assert not list((tmp_path / "remote").rglob("*.log"))
        assert env.rlm.metrics.value("RemoteDeleteRequestsPerSec", topic=TOPIC) > 0
        assert env.rlm.list_offsets(TOPIC, 0, "earliest")[0] == unified.log_start_offset
    finally:
        env.close()


def test_remote_retention_by_size_counts_local_only_bytes(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1, "retention.bytes": 3000})
    try:
        env.produce(24)
        unified = env.log()
        _run_until_idle(env)
        _, remote = _remote(env)
        highest = unified.highest_offset_in_remote_storage
        only_local = sum(s.size_in_bytes for s in unified.segments if s.base_offset >= highest)
        remote_size = sum(m.segment_size_in_bytes for m in remote)
        # Kafka's rule: delete the oldest while the breach stays >= 0 after the deletion,
        # so what is left breaches by less than the next segment's size
        assert remote and env.rlm.metrics.value("RemoteDeleteRequestsPerSec", topic=TOPIC) > 0
        assert 0 <= only_local + remote_size - 3000 < remote[0].segment_size_in_bytes
        assert unified.log_start_offset == remote[0].start_offset
        assert read_all(env.rlm, TOPIC, 0, unified.log_start_offset, unified.log_end_offset) \
            == [a for a in env.acked[(TOPIC, 0)] if a[0] >= unified.log_start_offset]
    finally:
        env.close()


def test_leader_change_resumes_without_duplicate_uploads(tmp_path):
    env = Env(tmp_path)
    try:
        env.produce(10)
        env.rlm.run_once()
        _, before = _remote(env)
        # a new RLM (restart), then this broker becomes leader again with epoch 1
        env.rlm.close()
        from engine.rlm import RemoteLogManager
        env.rlm = RemoteLogManager(env.config, env.lm, env.rsm, env.rlmm, clock=env.clock)
        env.rlm.on_leadership_change({(TOPIC, 0): 1})
        env.produce(10, epoch=1)
        env.rlm.run_once()
        unified, after = _remote(env)
        assert [m.remote_log_segment_id for m in after[:len(before)]] == \
            [m.remote_log_segment_id for m in before]
        for a, b in itertools.pairwise(after):
            assert a.end_offset + 1 == b.start_offset  # no overlap, no gap
        assert after[-1].end_offset + 1 == unified.segments[-1].base_offset
        assert {e for m in after for e in m.segment_leader_epochs} == {0, 1}
    finally:
        env.close()


def test_unclean_leader_epoch_segments_are_swept(tmp_path):
    env = Env(tmp_path)
    try:
        env.produce(10, epoch=3)
        env.rlm.run_once()
        _, old = _remote(env)
        assert old and all(m.segment_leader_epochs.keys() == {3} for m in old)
        # an unclean election: the new leader has none of those records and epoch 5
        unified = env.log()
        unified.truncate_to(0)
        env.produce(8, epoch=5)
        env.rlm.on_leadership_change({(TOPIC, 0): 5})
        _run_until_idle(env)
        _, now = _remote(env)
        assert now and all(m.segment_leader_epochs.keys() == {5} for m in now)
        old_ids = {m.remote_log_segment_id for m in old}
        assert not old_ids & {m.remote_log_segment_id for m in now}
        # the new leader's records, from the tier and the local log
        assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == \
            env.acked[(TOPIC, 0)][30:]
    finally:
        env.close()


def test_delete_partition_removes_remote_and_local_data(tmp_path):
    from engine.remote.metadata import RemotePartitionDeleteState

    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(10, partition=0)
        env.produce(10, partition=1)
        env.rlm.run_once()
        tip = env.rlm._partitions[(TOPIC, 0)].tip
        part_dir = env.log(TOPIC, 0).dir
        assert env.rlm.delete_partition(TOPIC, 0) > 0
        assert list(env.rlmm.list_remote_log_segments(tip)) == []
        assert env.rlmm.partition_delete_state(tip) == \
            RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        assert not part_dir.exists()
        assert env.lm.get_log(TOPIC, 0) is None
        assert [s["partition"] for s in env.rlm.status()] == [1]
        assert read_all(env.rlm, TOPIC, 1, 0, env.log(TOPIC, 1).log_end_offset) == \
            env.acked[(TOPIC, 1)]
    finally:
        env.close()


def test_copy_disabled_keeps_remote_readable(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(10)
        env.rlm.run_once()
        _, remote = _remote(env)
        env.lm.update_topic_config(TOPIC, {**env.topic_config, "remote.log.copy.disable": "true",
                                           "local.retention.bytes": "-2"})
        env.produce(10)
        env.rlm.run_once()
        _, after = _remote(env)
        assert after == remote
        assert env.rlm.is_idle()
        assert env.rlm.read(TOPIC, 0, 0, 100).from_remote
    finally:
        env.close()


def test_metrics_after_a_run_and_served_on_a_port(tmp_path):
    import urllib.request

    env = Env(tmp_path, topic_config={"local.retention.bytes": 1},
              broker={"engine.metrics.port": 0})
    try:
        env.produce(10)
        summary = env.rlm.run_once()
        m = env.rlm.metrics
        _, remote = _remote(env)
        size = sum(r.segment_size_in_bytes for r in remote)
        assert m.value("RemoteCopyBytesPerSec", topic=TOPIC) == size == summary.copied_bytes
        assert m.value("RemoteCopyRequestsPerSec", topic=TOPIC) == len(remote)
        assert m.value("RemoteCopyLagSegments", topic=TOPIC, partition=0) == 0
        assert m.value("RemoteLogMetadataCount", topic=TOPIC, partition=0) == len(remote)
        assert m.value("RemoteLogSizeBytes", topic=TOPIC, partition=0) == size
        got = env.rlm.read(TOPIC, 0, 0, 1000)
        assert m.value("RemoteFetchRequestsPerSec", topic=TOPIC) == 1
        assert m.value("RemoteFetchBytesPerSec", topic=TOPIC) == got.size_in_bytes
        assert m.value("RemoteLogReaderTaskQueueSize") == 0
        env.rlm.start()
        body = urllib.request.urlopen(
            f"http://127.0.0.1:{env.rlm.metrics_port}/metrics", timeout=10).read().decode()
        assert f'RemoteCopyBytesPerSec_total{{topic="{TOPIC}"}} {float(size)}' in body
        assert "RemoteLogReaderAvgIdlePercent" in body
    finally:
        env.close()


def test_copy_waits_while_over_the_copy_quota(tmp_path):
    env = Env(tmp_path, broker={"remote.log.manager.copy.max.bytes.per.second": 1000,
                                "remote.log.manager.copy.quota.window.num": 2,
                                "remote.log.manager.copy.quota.window.size.seconds": 1})
    try:
        env.produce(12)
        start = env.clock()
        summary = env.rlm.run_once()
        assert summary.copied_segments >= 3
        # the clock only moves while a copier waits for the quota: ~1 s per segment after
        # the first (segments are ~1.1 KB, the quota 1000 B/s)
        waited = env.clock() - start
        assert waited >= 1000 * (summary.copied_segments - 1)
        assert env.rlm.metrics.value("remote_copy_throttle_time_max") > 0
    finally:
        env.close()


def test_fetch_over_quota_returns_empty_records_with_throttle_time(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1},
              broker={"remote.log.manager.fetch.max.bytes.per.second": 100,
                      "remote.log.manager.fetch.quota.window.num": 2,
                      "remote.log.manager.fetch.quota.window.size.seconds": 1})
    try:
        env.produce(10)
        env.rlm.run_once()
        first = env.rlm.read(TOPIC, 0, 0, 5000)
        assert first.size_in_bytes > 200 and first.throttle_time_ms == 0
        throttled = env.rlm.read(TOPIC, 0, 0, 5000)
        assert throttled.size_in_bytes == 0 and throttled.throttle_time_ms > 0
        assert throttled.next_offset == 0 and throttled.from_remote
        assert env.rlm.metrics.value("remote_fetch_throttle_time_max") > 0
        local = env.log().local_log_start_offset
        assert env.rlm.read(TOPIC, 0, local, 5000).size_in_bytes > 0  # local: no quota
        env.clock.advance(60_000)
        assert env.rlm.read(TOPIC, 0, 0, 5000).size_in_bytes == first.size_in_bytes
    finally:
        env.close()


def test_partition_tiers_under_the_topic_id_written_at_its_creation(env):
    """(Partitions without one get their topic's: tests/test_topic_id.py.)"""
    unified = env.log()
    written = unified.partition_metadata.read().topic_id
    env.produce(6)
    env.rlm.run_once()
    assert unified.partition_metadata.read().topic_id == written
    assert env.rlm.status()[0]["topic_id"] == str(written)
    _, remote = _remote(env)
    assert remote and all(m.topic_id_partition.topic_id == written for m in remote)


def test_follower_tracks_the_highest_remote_offset_without_copying(tmp_path):
    env = Env(tmp_path)
    try:
        env.produce(10)
        env.rlm.run_once()
        highest = env.log().highest_offset_in_remote_storage
        env.produce(10)
        # a second RLM over the same logs and metadata acts as a follower
        from engine.rlm import RemoteLogManager
        env.rlm.close()
        env.log().update_highest_offset_in_remote_storage(-1)  # no-op: never lowered
        follower = RemoteLogManager(env.config, env.lm, env.rsm, env.rlmm, clock=env.clock)
        env.rlm = follower
        follower.on_leadership_change({}, followers={(TOPIC, 0): 0})
        follower.run_once()
        _, remote = _remote(env)
        assert remote[-1].end_offset == highest  # nothing copied by a follower
        assert follower.status()[0]["role"] == "follower"
    finally:
        env.close()


def test_a_follower_applies_local_retention_to_tiered_segments_only(tmp_path):
    """Kafka's followers delete local segments by local.retention.* once the leader has
    tiered them (the highest remote offset from the RLMM), never one not yet tiered."""
    env = Env(tmp_path)
    try:
        env.produce(10)
        env.rlm.run_once()  # the leader tiers; no local retention yet (local.retention: total)
        unified = env.log()
        highest = unified.highest_offset_in_remote_storage
        env.produce(10)  # not tiered: the leader is gone before it copies them
        segments_before = len(unified.segments)
        from engine.rlm import RemoteLogManager
        env.rlm.close()
        follower = RemoteLogManager(env.config, env.lm, env.rsm, env.rlmm, clock=env.clock)
        env.rlm = follower
        follower.on_leadership_change({}, followers={(TOPIC, 0): 0})
        env.lm.update_topic_config(TOPIC, {**env.topic_config, "local.retention.bytes": "1"})
        summary = follower.run_once()
        assert summary.deleted_local_segments > 0 and not summary.errors
        assert len(unified.segments) < segments_before
        # everything tiered may go, nothing above the tier did
        assert unified.local_log_start_offset == highest + 1
        assert all(s.base_offset > highest for s in unified.segments)
        _, remote = _remote(env)
        assert remote[-1].end_offset == highest  # and the follower copied nothing
    finally:
        env.close()


def test_from_config_builds_the_configured_plugins_and_closes_them(tmp_path):
    from engine.config import BrokerConfig
    from engine.log import LogManager
    from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
    from engine.remote.filesystem import FileSystemRemoteStorageManager
    from engine.rlm import RemoteLogManager

    config = BrokerConfig({"log.dirs": str(tmp_path / "logs"),
                           "remote.log.storage.system.enable": "true",
                           "rsm.config.dirs": str(tmp_path / "tier")})
    lm = LogManager([tmp_path / "logs"], broker_config=config,
                    topic_defaults={"remote.storage.enable": "true", "segment.bytes": "1200",
                                    "retention.ms": "-1"})
    try:
        rlm = RemoteLogManager.from_config(config, lm)
        assert isinstance(rlm.rsm, FileSystemRemoteStorageManager)
        assert isinstance(rlm.rlmm, EmbeddedRemoteLogMetadataManager)
        unified = lm.get_or_create_log(TOPIC, 0)
        from test_rlm_helpers import batch
        for _i in range(8):
            unified.append_as_leader(batch([b"v" * 300] * 2), 0)
        assert rlm.run_once().copied_segments > 0
        assert (tmp_path / "logs" / "__remote_log_metadata").is_dir()
        rlm.close()
        # the plugins it built are closed with it: a second RLM can take the metadata dir
        again = RemoteLogManager.from_config(config, lm)
        assert again.status()[0]["remote_segments"] > 0
        again.close()
    finally:
        lm.shutdown()


def test_scheduled_tasks_pick_up_partitions_created_after_start(env):
    import time

    env.produce(6, partition=0)
    env.rlm.start()
    env.produce(6, partition=3)
    deadline = time.monotonic() + 60
    while not all(s["highest_offset_in_remote_storage"] >= 0 for s in env.rlm.status()) \
            or len(env.rlm.status()) < 2:
        assert time.monotonic() < deadline, env.rlm.status()
        time.sleep(0.01)
    assert sorted(s["partition"] for s in env.rlm.status()) == [0, 3]


def test_local_read_committed_stops_at_the_last_stable_offset(env):
    from test_rlm_helpers import txn_batch

    unified = env.log(**{"segment.bytes": 1_000_000})
    env.produce(2)
    lso = unified.log_end_offset
    unified.append_as_leader(txn_batch([b"open"], producer_id=5), 0)
    env.produce(2)
    committed = env.rlm.read(TOPIC, 0, 0, 100_000, isolation="read_committed")
    assert committed.next_offset == lso
    assert [o for o, _ in records_of(committed.records)] == list(range(lso))
    uncommitted = env.rlm.read(TOPIC, 0, 0, 100_000)
    assert uncommitted.next_offset == unified.log_end_offset


def test_read_committed_over_many_remote_segments_with_a_one_byte_index_cache(tmp_path):
    from test_rlm_helpers import marker, txn_batch

    env = Env(tmp_path, topic_config={"local.retention.bytes": 1},
              broker={"remote.log.index.file.cache.total.size.bytes": 1})
    try:
        unified = env.log()
        aborted = []
        for pid in (21, 22, 23):
            env.produce(2)
            aborted.append((pid, unified.log_end_offset))
            unified.append_as_leader(txn_batch([b"a" * 400], producer_id=pid), 0)
            env.produce(2)
            unified.append_as_leader(marker(False, producer_id=pid), 0)
        env.produce(4)
        env.rlm.run_once()
        assert unified.local_log_start_offset > aborted[-1][1]
        found, offset = set(), 0
        while offset < unified.local_log_start_offset:
            got = env.rlm.read(TOPIC, 0, offset, 400, isolation="read_committed")
            assert got.from_remote
            found |= {(a.producer_id, a.first_offset) for a in got.aborted_transactions}
            offset = got.next_offset
        assert found == set(aborted)
        assert env.rlm.index_cache.size_bytes <= 1  # nothing kept: every lookup re-fetched
    finally:
        env.close()


def test_local_retention_failure_reaches_status_a_metric_and_the_run_summary(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        env.produce(10)
        unified = env.log()
        oldest = unified.segments[0].log_file
        # a non-empty directory where the segment's `.deleted` name goes: the rename fails
        blocker = oldest.with_name(oldest.name + ".deleted")
        blocker.mkdir()
        (blocker / "x").write_bytes(b"x")
        summary = env.rlm.run_once()
        assert [e for e in summary.errors
                if e.startswith(f"{TOPIC}-0: local retention: ") and oldest.name in e]
        row = next(r for r in env.rlm.status() if r["partition"] == 0)
        assert row["last_local_retention_error"] is not None
        assert oldest.name in row["last_local_retention_error"]
        assert env.rlm.metrics.value("LocalRetentionErrorsPerSec", topic=TOPIC) == 1
    finally:
        env.close()


def test_failed_local_retention_of_an_untiered_partition_reaches_status_and_metrics(tmp_path):
    from test_rlm_helpers import batch

    from engine.cli.run import _status_line
    from engine.cli.status import error_fields, local_status

    env = Env(tmp_path, log_dirs=2)
    try:
        plain = env.lm.get_or_create_log("plain", 0, topic_config={
            "remote.storage.enable": "false", "retention.bytes": "1", "segment.bytes": "1200"})
        for i in range(3):
            plain.append_as_leader(batch([b"v%d" % i]), 0)
            plain.roll()
        oldest = plain.segments[0].log_file
        # a non-empty directory where the segment's `.deleted` name goes: the rename fails
        blocker = oldest.with_name(oldest.name + ".deleted")
        blocker.mkdir()
        (blocker / "x").write_bytes(b"x")
        assert env.rlm.metrics.value("OfflineLogDirectoryCount") == 0
        env.lm.cleanup_logs()
        why = env.lm.retention_error("plain", 0)
        assert why is not None and oldest.name in why
        assert env.rlm.metrics.value("OfflineLogDirectoryCount") == 1
        row = local_status("plain", 0, plain, env.lm.retention_error("plain", 0))
        assert ("last_local_retention_error", why) in error_fields(row)
        assert "offline" in _status_line(env.rlm)
    finally:
        env.close()
