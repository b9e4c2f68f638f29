"""Remote expiration resumed after a crash between publishing the new log start offset and
deleting the segments below it: the restart deletes those segments and only what retention
still asks for, never `retention.bytes` worth more (the size breach is over what remains).

The crash is reproduced deterministically: one broker is copied before an expiration pass,
the pass runs on the original, and the log start offset it published is restored into the
copy, whose remote segments are all still there."""

from __future__ import annotations

import shutil

import pytest
from test_rlm_helpers import T0, TOPIC, Env

from engine.common import TopicPartition
from engine.log.checkpoint import OffsetCheckpointFile
from engine.remote.metadata import RemoteLogSegmentState

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
CHECKPOINT = "log-start-offset-checkpoint"


def _kept(env) -> tuple[int, int, list]:
    """(remote bytes kept, local-only bytes, FINISHED segments by offset)."""
    unified = env.log()
    st = env.rlm._sync_partitions()[0]
    remote = sorted((m for m in env.rlmm.list_remote_log_segments(st.tip)
                     if m.state == FINISHED), key=lambda m: m.start_offset)
    highest = unified.highest_offset_in_remote_storage
    only_local = sum(s.size_in_bytes for s in unified.segments if s.base_offset > highest)
    return sum(m.segment_size_in_bytes for m in remote), only_local, remote


def _run_until_idle(env, rounds=20) -> None:
    for _ in range(rounds):
        summary = env.rlm.run_once()
        assert not summary.errors, summary.errors
        if env.rlm.is_idle():
            return
    raise AssertionError(f"not idle after {rounds} runs")


@pytest.mark.parametrize("retention", [
    {"retention.bytes": "6000"},
    # now is T0 + 10_000 s and batch k is stamped T0 + 3k s: about 13 batches expire
    {"retention.ms": "9960000"},
    {"retention.bytes": "4000", "retention.ms": "9960000"},
])
def test_restart_after_publishing_the_log_start_keeps_what_retention_allows(tmp_path,
                                                                           retention):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    env = Env(a)
    env.log()
    env.produce(30, timestamp=None)
    _run_until_idle(env)  # everything tiered, nothing expired (no retention yet)
    tiered_bytes, _, tiered = _kept(env)
    assert len(tiered) >= 8
    env.close()
    shutil.copytree(a, b)

    # the uninterrupted pass on `a`: what retention asks for
    env = Env(a, topic_config=retention)
    _run_until_idle(env)
    unified = env.log()
    published = unified.log_start_offset
    want_remote, want_local, want = _kept(env)
    assert published > 0 and len(want) < len(tiered)
    env.close()
    assert OffsetCheckpointFile(a / "logs0" / CHECKPOINT).read()[
        TopicPartition(TOPIC, 0)] == published

    # `b`: the same broker after a crash that left the published log start offset in the
    # checkpoint and every remote segment undeleted
    shutil.copy(a / "logs0" / CHECKPOINT, b / "logs0" / CHECKPOINT)
    env = Env(b, topic_config=retention)
    unified = env.log()
    assert unified.log_start_offset == published
    assert _kept(env)[0] == tiered_bytes
    _run_until_idle(env)
    got_remote, got_local, got = _kept(env)
    assert [(m.start_offset, m.end_offset) for m in got] == \
        [(m.start_offset, m.end_offset) for m in want]
    assert (got_remote, got_local) == (want_remote, want_local)
    assert unified.log_start_offset == published
    if "retention.bytes" in retention:
        limit = int(retention["retention.bytes"])
        assert 0 <= got_remote + got_local - limit < got[0].segment_size_in_bytes
    if "retention.ms" in retention:
        assert all(m.max_timestamp_ms > T0 + 10_000_000 - int(retention["retention.ms"])
                   for m in got)
    env.close()
