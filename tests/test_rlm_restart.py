"""RemoteLogManager state after a restart: nothing remote is deleted before the leader's
state is known, a lost leader-epoch-checkpoint does not make live remote segments look
unreferenced, and the log start offset falls back to the local one when the remote tier
holds nothing of the lineage, and a log start offset the remote metadata does not cover
(the metadata lost) is kept and the partition refused until an operator acts."""

from __future__ import annotations

import shutil

import pytest
from test_rlm_helpers import TOPIC, Env, read_all

from engine.remote.metadata import RemoteLogSegmentState

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def _finished(env) -> list[tuple[int, int]]:
    st = env.rlm._sync_partitions()[0]
    return sorted((m.start_offset, m.end_offset)
                  for m in env.rlmm.list_remote_log_segments(st.tip) if m.state == FINISHED)


def test_expiration_before_the_first_copy_run_keeps_in_retention_data(tmp_path):
    config = {"retention.bytes": "6000"}
    env = Env(tmp_path, topic_config=config)
    env.log()
    env.produce(12)
    summary = env.rlm.run_once()
    assert summary.copied_segments == 3 and summary.deleted_remote_segments == 0
    copied = _finished(env)
    env.close()

    env = Env(tmp_path, topic_config=config)
    unified = env.log()
    st = env.rlm._sync_partitions()[0]
    assert not st.copy.initialised
    # the scheduler may run expiration before the copy task: it must not count the tiered
    # local segments as local-only and see retention.bytes breached
    deleted, errors = env.rlm.expiration.expire_once(st)
    assert (deleted, errors) == (0, [])
    assert _finished(env) == copied
    assert unified.log_start_offset == 0
    env.close()


def _tiered_over_two_epochs(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    env.log()
    env.produce(12)
    env.rlm.run_once()
    env.rlm.on_leadership_change({(TOPIC, 0): 1})
    env.produce(6, epoch=1)
    env.rlm.run_once()
    return env


def test_lost_leader_epoch_checkpoint_keeps_live_remote_segments(tmp_path):
    env = _tiered_over_two_epochs(tmp_path)
    copied = _finished(env)
    assert copied[0] == (0, 8) and len(copied) == 5
    expected = env.acked[(TOPIC, 0)]
    env.close()
    # an unclean stop that also lost the leader-epoch-checkpoint: the cache is rebuilt from
    # the local segments and starts at epoch 1, after the log start offset
    for name in ("recovery-point-offset-checkpoint", ".kafka_cleanshutdown",
                 f"{TOPIC}-0/leader-epoch-checkpoint"):
        (tmp_path / "logs0" / name).unlink(missing_ok=True)

    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    unified = env.log()
    assert unified.leader_epoch_cache.entries[0].start_offset > unified.log_start_offset == 0
    summary = env.rlm.run_once()
    assert summary.deleted_remote_segments == 0, summary
    assert _finished(env) == copied
    assert unified.log_start_offset == 0
    assert env.rlm.list_offsets(TOPIC, 0, "earliest")[0] == 0
    local = [(o, v) for o, v in expected if o >= 45]
    assert read_all(env.rlm, TOPIC, 0, 45, unified.log_end_offset) == local
    env.close()


def test_lost_remote_metadata_keeps_the_log_start_and_refuses_the_partition(tmp_path):
    """The tier and its metadata gone (a wiped bucket, a lost metadata directory): the log
    start offset below the local one is no longer covered. It is kept (raising it to the
    local start, Kafka's fallback, would lose the tier's segments for good once the
    metadata is back); copy, expiration and reads below the local start are refused and
    status says why; the local offsets still read. Restoring the metadata and the tier
    makes everything work again; DeleteRecords to the local start accepts the loss."""
    from engine.errors import RemoteLogMetadataGapError

    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    unified = env.log()
    env.produce(12)
    env.rlm.run_once()
    assert unified.local_log_start_offset > 0 == unified.log_start_offset
    local_start = unified.local_log_start_offset
    expected = env.acked[(TOPIC, 0)]
    env.close()
    shutil.move(tmp_path / "remote", tmp_path / "remote.saved")
    shutil.move(tmp_path / "logs0" / "__remote_log_metadata", tmp_path / "metadata.saved")

    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    unified = env.log()
    env.produce(3)  # a segment to copy
    unified.roll()
    summary = env.rlm.run_once()
    assert summary.copied_segments == 0 and summary.deleted_remote_segments == 0
    assert any("RemoteLogMetadataGapError" in e for e in summary.errors), summary.errors
    assert env.rlm.is_idle()  # nothing to wait for: the partition waits for an operator
    assert unified.log_start_offset == 0
    [row] = env.rlm.status()
    assert f"offsets [0, {local_start - 1}] are in neither tier" in row["remote_metadata_gap"]
    assert "RemoteLogMetadataGapError" in row["last_copy_error"]
    assert "RemoteLogMetadataGapError" in row["last_expiration_error"]
    with pytest.raises(RemoteLogMetadataGapError) as info:
        env.rlm.list_offsets(TOPIC, 0, "earliest")
    assert info.value.offset == 0
    with pytest.raises(RemoteLogMetadataGapError):
        env.rlm.list_offsets(TOPIC, 0, 0)
    assert env.rlm.list_offsets(TOPIC, 0, "latest")[0] == unified.log_end_offset
    with pytest.raises(RemoteLogMetadataGapError) as info:
        env.rlm.read(TOPIC, 0, 3, 10_000)
    assert info.value.offset == 3 and info.value.partition == (TOPIC, 0)
    expected += env.acked[(TOPIC, 0)]  # this Env's acks (its values count from 0)
    assert read_all(env.rlm, TOPIC, 0, local_start, unified.log_end_offset) == \
        [a for a in expected if a[0] >= local_start]
    assert not (tmp_path / "remote").exists() or not list((tmp_path / "remote").rglob("*.log"))
    env.close()
    # restored: tiering resumes from where the metadata says, nothing was lost
    shutil.rmtree(tmp_path / "remote", ignore_errors=True)
    shutil.rmtree(tmp_path / "logs0" / "__remote_log_metadata", ignore_errors=True)
    shutil.move(tmp_path / "remote.saved", tmp_path / "remote")
    shutil.move(tmp_path / "metadata.saved", tmp_path / "logs0" / "__remote_log_metadata")
    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    unified = env.log()
    summary = env.rlm.run_once()
    assert not summary.errors and summary.copied_segments >= 1
    [row] = env.rlm.status()
    assert row["remote_metadata_gap"] is None
    assert env.rlm.list_offsets(TOPIC, 0, "earliest")[0] == 0
    assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == expected
    env.close()


def test_delete_records_to_the_local_start_accepts_lost_remote_metadata(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    unified = env.log()
    env.produce(12)
    env.rlm.run_once()
    local_start = unified.local_log_start_offset
    env.close()
    shutil.rmtree(tmp_path / "remote")
    shutil.rmtree(tmp_path / "logs0" / "__remote_log_metadata")
    env = Env(tmp_path, topic_config={"local.retention.bytes": "1"})
    unified = env.log()
    assert env.rlm.run_once().errors
    env.lm.delete_records(TOPIC, 0, local_start)  # the operator accepts the loss
    env.produce(3)
    unified.roll()
    env.clock.advance(60_000)  # past the copy task's retry backoff
    summary = env.rlm.run_once()
    assert not summary.errors and summary.copied_segments >= 1
    assert env.rlm.list_offsets(TOPIC, 0, "earliest")[0] == local_start
    assert env.rlm.status()[0]["remote_metadata_gap"] is None
    env.close()


def test_fresh_manager_answers_offsets_and_status_from_the_tier(tmp_path):
    """A fresh RLM (a one-shot command in a new process) initialises a partition's state
    when asked for offsets or status: latest-tiered and the copy lag come from the tier."""
    env = Env(tmp_path)
    unified = env.log()
    env.produce(12)
    env.rlm.run_once()
    tiered = unified.highest_offset_in_remote_storage
    assert tiered > 0
    env.close()

    env = Env(tmp_path)
    unified = env.log()
    assert unified.highest_offset_in_remote_storage == -1
    assert env.rlm.list_offsets(TOPIC, 0, "latest-tiered")[0] == tiered
    env.close()

    env = Env(tmp_path)
    [row] = env.rlm.status()
    assert row["highest_offset_in_remote_storage"] == tiered
    assert row["copy_lag_segments"] == 0
    env.rlm.initialise_partitions(TOPIC, 0)  # done already: no-op
    assert env.rlm.is_idle()
    env.close()


def test_truncation_makes_the_copied_offset_stale_and_the_new_offsets_get_copied(tmp_path):
    """Offsets dropped by truncation and written again (here in a new epoch, before any
    leadership call reaches the RLM) are copied by the next run: the state is initialised
    again from the truncated log, not left at the old copied offset."""
    env = Env(tmp_path)
    unified = env.log()
    env.produce(12)
    env.rlm.run_once()
    copied_before = max(end for _, end in _finished(env))
    assert copied_before >= 20
    unified.truncate_to(20)
    end = unified.log_end_offset
    assert end <= 20 and unified.highest_offset_in_remote_storage == end - 1
    env.produce(2, epoch=1)  # a segment wholly below the old copied offset
    unified.roll()
    env.produce(2, epoch=1)
    unified.roll()
    rewritten = (unified.segments[-3].base_offset, unified.segments[-2].base_offset - 1)
    assert rewritten[0] == end and rewritten[1] < copied_before
    env.rlm.run_once()
    # the new epoch-1 segment wholly below the old copied offset is copied too
    assert rewritten in _finished(env)
    assert unified.highest_offset_in_remote_storage == unified.log_end_offset - 1
    # once only the remote tier has them, reads serve the new records, not the dropped ones
    env.lm.update_topic_config(TOPIC, {"local.retention.bytes": "1"})
    env.rlm.run_once()
    assert unified.local_log_start_offset > rewritten[1]
    latest = dict(env.acked[(TOPIC, 0)])  # the records written again replace the dropped
    expected = sorted((o, v) for o, v in latest.items()
                      if end <= o < unified.log_end_offset)
    got = read_all(env.rlm, TOPIC, 0, end, unified.log_end_offset)
    assert got == expected
    env.close()
