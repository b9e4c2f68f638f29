"""UnifiedLog / LogManager tiering hooks and retention (Kafka's deleteOldSegments rules):
retention.ms / retention.bytes / log-start breach, local.retention.* with -2, the tiered
guard, RollAndOffloadActiveSegment, log start below local start across restarts, topic
config updates, partition deletion."""

import pytest

from engine.config import BrokerConfig, ConfigError, TopicConfig
from engine.errors import OffsetOutOfRangeError
from engine.log import EpochEntry, LogManager, UnifiedLog
from engine.log.checkpoint import OffsetCheckpointFile
from engine.records import RecordBatchBuilder

T0 = 1_700_000_000_000
DAY = 86_400_000
TIERED_BROKER = BrokerConfig({"remote.log.storage.system.enable": "true"})


def _batch(n=3, timestamp=T0):
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(b"value-%d" % i, key=b"k", timestamp=timestamp + i)
    return b.build()


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def _tiered(**overrides):
    return TopicConfig.resolve({"remote.storage.enable": "true", **overrides}, TIERED_BROKER)


def _log_with_segments(path, config, clock, count=5, epochs=None):
    """`count` closed segments of one 3-record batch each (timestamps a day apart, oldest
    first) and an active segment with one more batch; offsets 3 * i."""
    log = UnifiedLog.open(path, config=config, clock=clock)
    epoch = 0
    for i in range(count + 1):
        epoch = (epochs or {}).get(i, epoch)
        log.append_as_leader(_batch(timestamp=T0 + i * DAY), epoch)
        if i < count:
            log.roll()
    assert [s.base_offset for s in log.segments] == [3 * i for i in range(count + 1)]
    return log


def test_retention_ms_uses_each_segments_largest_timestamp(tmp_path):
    clock = Clock(T0 + 10 * DAY)
    config = TopicConfig.resolve({"retention.ms": str(7 * DAY)}, BrokerConfig({}))
    log = _log_with_segments(tmp_path / "t-0", config, clock)
    # Segments 0..2 end at T0 + {0,1,2} days + 2 ms: more than 7 days old.
    assert log.delete_old_segments() == 3
    assert [s.base_offset for s in log.segments] == [9, 12, 15]
    assert log.log_start_offset == 9 == log.local_log_start_offset
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert log.delete_old_segments() == 0
    clock.now = T0 + 100 * DAY  # everything breached: an empty active segment remains
    assert log.delete_old_segments() == 3
    assert [(s.base_offset, s.size_in_bytes) for s in log.segments] == [(18, 0)]
    assert log.log_start_offset == 18 == log.log_end_offset
    log.close()


def test_retention_bytes_deletes_the_oldest_until_within(tmp_path):
    log = _log_with_segments(tmp_path / "t-0", TopicConfig.resolve({}, BrokerConfig({})),
                             Clock(T0))
    size = log.segments[0].size_in_bytes
    # Kafka deletes whole segments while they fit in the excess (size - retention.bytes).
    log.update_config(TopicConfig.resolve({"retention.bytes": str(4 * size + 1)},
                                          BrokerConfig({})))
    assert log.delete_old_segments() == 1  # excess 2 * size - 1: one segment fits
    assert log.size_in_bytes == 5 * size and log.log_start_offset == 3
    log.update_config(TopicConfig.resolve({"retention.bytes": str(3 * size)},
                                          BrokerConfig({})))
    assert log.delete_old_segments() == 2
    assert log.size_in_bytes == 3 * size and log.log_start_offset == 9
    log.close()


def test_log_start_offset_breach_and_delete_records(tmp_path):
    log = _log_with_segments(tmp_path / "t-0", TopicConfig.resolve(
        {"cleanup.policy": "compact"}, BrokerConfig({})), Clock(T0 + 100 * DAY))
    assert log.delete_records(7) == 7
    assert log.delete_old_segments() == 2  # compact: only the log start breach applies
    assert [s.base_offset for s in log.segments][:1] == [6]
    assert log.log_start_offset == 7 == log.local_log_start_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 1000)
    assert not log.maybe_increment_log_start_offset(5, "test")
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.maybe_increment_log_start_offset(log.high_watermark + 1, "test")
    log.close()


def test_tiered_log_deletes_only_tiered_segments_and_moves_local_start(tmp_path):
    clock = Clock(T0 + 100 * DAY)  # every segment breaches retention.ms (7 days)
    log = _log_with_segments(tmp_path / "t-0", _tiered(), clock,
                             epochs={0: 0, 2: 1, 4: 2})
    assert log.remote_log_enabled and not log.remote_log_copy_disabled
    assert log.highest_offset_in_remote_storage == -1
    assert log.delete_old_segments() == 0  # nothing is tiered yet: nothing may go
    assert len(log.segments) == 6
    log.update_highest_offset_in_remote_storage(7)  # segments [0,2] and [3,5] tiered; [6,8] half
    log.update_highest_offset_in_remote_storage(4)  # never lowered
    assert log.highest_offset_in_remote_storage == 7
    assert log.delete_old_segments() == 2
    assert log.local_log_start_offset == 6 and log.log_start_offset == 0
    assert log.leader_epoch_cache.entries[0] == EpochEntry(0, 0)  # remote epochs kept
    with pytest.raises(OffsetOutOfRangeError, match="remote tier") as err:
        log.read(3, 1000)
    assert err.value.log_start_offset == 6
    assert log.fetch_offset_by_timestamp(-2) == (0, -1, 0)
    assert log.fetch_offset_by_timestamp(-4) == (6, -1, 1)
    assert log.fetch_offset_by_timestamp(-5) == (7, -1, 1)
    assert log.fetch_offset_by_timestamp(-1) == (18, -1, 2)
    assert log.fetch_offset_by_timestamp(T0 + 3 * DAY) == (9, T0 + 3 * DAY, 1)
    assert log.fetch_offset_by_timestamp(T0) == (6, T0 + 2 * DAY, 1)  # from the local start
    assert log.fetch_offset_by_timestamp(-3) == (17, T0 + 5 * DAY + 2, 2)  # MAX_TIMESTAMP
    assert log.fetch_offset_by_timestamp(T0 + 6 * DAY) is None
    log.close()


def test_local_retention_minus_two_means_the_total_retention(tmp_path):
    clock = Clock(T0 + 10 * DAY)
    config = _tiered(**{"retention.ms": str(7 * DAY)})
    assert config["local.retention.ms"] == -2 and config.local_retention_ms == 7 * DAY
    log = _log_with_segments(tmp_path / "t-0", config, clock)
    log.update_highest_offset_in_remote_storage(14)  # every closed segment is tiered
    assert log.delete_old_segments() == 3  # the 7-day total retention, locally
    # local.retention.ms of one day: the two tiered segments left go, and the active one,
    # breached too, is rolled so that it can be tiered.
    log.update_config(_tiered(**{"retention.ms": str(7 * DAY), "local.retention.ms": str(DAY)}))
    log.remote_log_enabled = True
    assert log.delete_old_segments() == 2
    assert log.local_log_start_offset == 15 and log.log_start_offset == 0
    assert [s.base_offset for s in log.segments] == [15, 18]
    size = log.segments[0].size_in_bytes
    log.update_config(_tiered(**{"retention.bytes": str(10 * size)}))
    assert log.config.local_retention_bytes == 10 * size
    assert log.delete_old_segments() == 0
    log.close()


def test_active_segment_breaching_local_retention_is_rolled_then_deleted_once_tiered(tmp_path):
    clock = Clock(T0)
    log = UnifiedLog.open(tmp_path / "t-0", config=_tiered(**{"local.retention.ms": "1"}),
                          clock=clock)
    for i in range(4):
        log.append_as_leader(_batch(1, timestamp=T0 + i), 0)
    assert len(log.segments) == 1
    clock.now = T0 + 10
    assert log.delete_old_segments() == 0
    assert [s.base_offset for s in log.segments] == [0, 4]  # rolled, waiting for the copy
    assert log.producer_snapshot_file(4) is not None  # the copy needs it
    log.update_highest_offset_in_remote_storage(3)
    assert log.delete_old_segments() == 1
    assert log.local_log_start_offset == 4 and log.log_start_offset == 0
    assert log.delete_old_segments() == 0  # the empty active segment stays
    log.close()


def test_copy_disabled_falls_back_to_total_retention_and_moves_the_log_start(tmp_path):
    clock = Clock(T0 + 100 * DAY)
    config = _tiered(**{"remote.log.copy.disable": "true"})
    log = _log_with_segments(tmp_path / "t-0", config, clock)
    assert log.remote_log_copy_disabled
    assert log.delete_old_segments() == 6  # untiered segments go: copying is off
    assert log.log_start_offset == log.local_log_start_offset == 18
    log.close()


def test_remote_log_enabled_rules(tmp_path):
    config = _tiered()
    assert UnifiedLog.is_remote_log_enabled(True, config, "orders")
    assert not UnifiedLog.is_remote_log_enabled(False, config, "orders")
    for internal in ("__consumer_offsets", "__transaction_state", "__remote_log_metadata"):
        assert not UnifiedLog.is_remote_log_enabled(True, config, internal)
    plain = TopicConfig.resolve({}, TIERED_BROKER)
    assert not UnifiedLog.is_remote_log_enabled(True, plain, "orders")
    log = UnifiedLog.open(tmp_path / "__consumer_offsets-0", config=config)
    assert not log.remote_log_enabled
    log.close()


def test_epoch_helpers(tmp_path):
    log = _log_with_segments(tmp_path / "t-0", TopicConfig.resolve({}, BrokerConfig({})),
                             Clock(T0), epochs={0: 0, 2: 3, 4: 5})
    assert log.epoch_entries_in_range(4, 12) == [EpochEntry(0, 4), EpochEntry(3, 6)]
    assert log.leader_epoch_checkpoint_text(12) == b"0\n2\n0 0\n3 6\n"
    assert log.leader_epoch_cache.epoch_for_offset(13) == 5
    assert log.high_watermark == log.log_end_offset == log.last_stable_offset == 18
    log.close()


def _tiered_manager(dirs, clock):
    return LogManager(dirs, broker_config={"remote.log.storage.system.enable": "true"},
                      topic_overrides={"tiered": {"remote.storage.enable": "true"}},
                      clock=clock)


def test_log_start_below_local_start_survives_restart(tmp_path):
    dirs = [tmp_path / "d1"]
    clock = Clock(T0 + 100 * DAY)
    manager = _tiered_manager(dirs, clock)
    tiered = manager.get_or_create_log("tiered", 0)
    plain = manager.get_or_create_log("plain", 0)
    assert tiered.remote_log_enabled and not plain.remote_log_enabled
    for unified in (tiered, plain):
        for i in range(4):
            unified.append_as_leader(_batch(timestamp=T0 + i * DAY), 0)
            unified.roll()
    tiered.update_highest_offset_in_remote_storage(5)
    assert manager.cleanup_logs() == 2 + 4
    assert (tiered.log_start_offset, tiered.local_log_start_offset) == (0, 6)
    assert plain.log_start_offset == 12
    manager.shutdown()
    checkpoint = OffsetCheckpointFile(dirs[0] / "log-start-offset-checkpoint").read()
    assert checkpoint == {("tiered", 0): 0}  # plain's start is its first segment's base
    manager = _tiered_manager(dirs, clock)
    tiered = manager.get_or_create_log("tiered", 0)
    assert tiered.remote_log_enabled
    assert (tiered.log_start_offset, tiered.local_log_start_offset) == (0, 6)
    assert manager.get_log("plain", 0).log_start_offset == 12
    tiered.maybe_increment_log_start_offset(3, "remote segment deleted")
    manager.shutdown()
    manager = _tiered_manager(dirs, clock)
    assert manager.get_log("tiered", 0).log_start_offset == 3
    manager.shutdown()


def test_update_topic_config_applies_to_open_logs(tmp_path):
    manager = LogManager([tmp_path / "d1"],
                         broker_config={"remote.log.storage.system.enable": "true"})
    logs = [manager.get_or_create_log("t", p) for p in range(2)]
    other = manager.get_or_create_log("u", 0)
    assert not any(u.remote_log_enabled for u in logs)
    config = manager.update_topic_config("t", {"remote.storage.enable": "true",
                                               "local.retention.bytes": "1000",
                                               "segment.bytes": "4096"})
    assert all(u.remote_log_enabled and u.config is config for u in logs)
    assert logs[0].segment_bytes == 4096 and manager.topic_config("t", 1) is config
    assert not other.remote_log_enabled
    assert manager.get_or_create_log("t", 5).remote_log_enabled  # new partitions too
    with pytest.raises(ConfigError):
        manager.update_topic_config("t", {"remote.storage.enable": "true",
                                          "cleanup.policy": "compact"})
    assert all(u.config is config for u in logs)
    manager.shutdown()
    plain = LogManager([tmp_path / "d2"])
    with pytest.raises(ConfigError, match="remote.log.storage.system.enable"):
        plain.update_topic_config("t", {"remote.storage.enable": "true"})
    plain.shutdown()


def test_delete_partition(tmp_path):
    d = tmp_path / "d1"
    manager = LogManager([d])
    doomed = manager.get_or_create_log("t", 0)
    manager.get_or_create_log("t", 1).append_as_leader(_batch(), 0)
    doomed.append_as_leader(_batch(), 0)
    manager.flush_all()
    assert manager.delete_partition("t", 0) == d / "t-0"
    assert manager.delete_partition("t", 0) is None
    assert not (d / "t-0").exists() and manager.partitions() == [("t", 1)]
    assert ("t", 0) not in OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").read()
    manager.shutdown()
    leftover = d / ("t-7." + "ab" * 16 + "-delete")
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"")
    manager = LogManager([d])
    assert not leftover.exists() and manager.partitions() == [("t", 1)]
    manager.shutdown()


def test_retention_renames_to_deleted_then_unlinks_after_the_delay(tmp_path):
    clock = Clock(T0 + 100 * DAY)
    d = tmp_path / "t-0"
    log = _log_with_segments(d, TopicConfig.resolve({"file.delete.delay.ms": "60000"},
                                                    BrokerConfig({})), clock)
    log.delete_records(6)
    log.update_config(TopicConfig.resolve({"retention.ms": "-1",
                                           "file.delete.delay.ms": "60000"}, BrokerConfig({})))
    assert log.delete_old_segments() == 2
    pending = sorted(p.name for p in d.glob("*.deleted"))
    assert pending == ["00000000000000000000.index.deleted", "00000000000000000000.log.deleted",
                       "00000000000000000000.timeindex.deleted",
                       "00000000000000000003.index.deleted", "00000000000000000003.log.deleted",
                       "00000000000000000003.snapshot.deleted",
                       "00000000000000000003.timeindex.deleted"]
    clock.now += 59_999
    log.delete_old_segments()
    assert len(list(d.glob("*.deleted"))) == 7
    clock.now += 1
    log.delete_old_segments()
    assert not list(d.glob("*.deleted"))
    # A crash before the unlink leaves `.deleted` files: the next load removes them.
    log.delete_records(9)
    assert log.delete_old_segments() == 1 and list(d.glob("*.deleted"))
    log.close()  # a close unlinks what is pending
    assert not list(d.glob("*.deleted"))
    (d / "00000000000000000006.log.deleted").write_bytes(b"left by a crash")
    log = UnifiedLog.open(d, clock=clock)
    assert not list(d.glob("*.deleted")) and log.log_start_offset == 9
    log.close()


def test_truncation_lowers_the_highest_offset_in_remote_storage(tmp_path):
    # Offsets appended after a truncation are new data: the remote tier's copy of the old
    # offsets must never let them be deleted locally as "tiered".
    log = _log_with_segments(tmp_path / "tiered-0", _tiered(**{"local.retention.bytes": "1"}),
                             Clock(T0))
    log.update_highest_offset_in_remote_storage(14)  # segments [0, 14] tiered
    epoch = log.truncation_epoch
    assert log.truncate_to(8)  # mid batch [6, 8]: the log ends at 6
    assert log.log_end_offset == 6 and log.highest_offset_in_remote_storage == 5
    assert log.truncation_epoch == epoch + 1
    assert not log.truncate_to(100)  # nothing dropped: nothing changes
    assert log.truncation_epoch == epoch + 1
    log.append_as_leader(_batch(), 1)  # offsets 6..8 again, untiered
    log.roll()
    log.append_as_leader(_batch(), 1)
    assert log.delete_old_segments() == 2  # [0, 2] and [3, 5]: really tiered
    assert [s.base_offset for s in log.segments] == [6, 9]
    assert log.local_log_start_offset == 6 and log.log_start_offset == 0
    # A full truncation (below the first local segment) starts over untiered too.
    assert log.truncate_to(2)
    assert log.highest_offset_in_remote_storage == 1
    assert log.truncation_epoch == epoch + 2
    log.append_as_leader(_batch(), 2)
    log.roll()
    assert log.delete_old_segments() == 0
    assert log.read(2, 1000)[1] == 5
    log.close()


def test_tiered_log_opened_with_tiering_off_keeps_its_log_start_offset(tmp_path):
    # A tiered log (start 0 in the remote tier, local segments from 6) opened by a broker
    # without remote.log.storage.system.enable, shut down, then opened tiered again.
    dirs = [tmp_path / "d1"]
    manager = _tiered_manager(dirs, Clock(T0 + 100 * DAY))
    tiered = manager.get_or_create_log("tiered", 0)
    for i in range(4):
        tiered.append_as_leader(_batch(timestamp=T0 + i * DAY), 0)
        tiered.roll()
    tiered.update_highest_offset_in_remote_storage(5)
    assert manager.cleanup_logs() == 2
    manager.shutdown()
    plain = LogManager(dirs, topic_overrides={"tiered": {"remote.storage.enable": "false"}})
    unified = plain.get_log("tiered", 0)
    assert not unified.remote_log_enabled
    assert (unified.log_start_offset, unified.local_log_start_offset) == (0, 6)
    assert unified.fetch_offset_by_timestamp(-2)[0] == 6  # what it can serve
    with pytest.raises(OffsetOutOfRangeError):
        unified.read(0, 1000)
    plain.shutdown()
    manager = _tiered_manager(dirs, Clock(T0 + 100 * DAY))
    tiered = manager.get_log("tiered", 0)
    assert (tiered.log_start_offset, tiered.local_log_start_offset) == (0, 6)
    assert tiered.leader_epoch_cache.entries[0] == EpochEntry(0, 0)
    # Turning tiering off and on in the same process keeps it too.
    manager.update_topic_config("tiered", {"remote.storage.enable": "false"})
    manager.update_topic_config("tiered", {"remote.storage.enable": "true"})
    assert tiered.log_start_offset == 0
    manager.shutdown()
