"""kill -9 inside the remote expiration window, then restart: what remains in the tier is
what retention asks for, never less.

The window: an expiration pass publishes (and checkpoints) the new log start offset L,
then deletes the remote segments below L one by one. A process killed there leaves L in
`log-start-offset-checkpoint` and segments below it in the tier; the restart must delete
those and only what retention still asks for (the size breach is over what remains).

One broker (two partitions, 4 KiB segments, every segment tiered, `local.retention.bytes=1`)
is prepared once; each kill point runs on a copy of it. A point is a retention setting
(`log.retention.bytes`, or `log.retention.ms` over data whose first half is 30 days old),
a kind and K, drawn with a fixed seed from the deletes an uninterrupted run makes:
tests/tiered_crash_driver.py kills `run --until-idle` (SIGKILL) before its K-th segment
delete starts (`expire`) or after its K-th DELETE_SEGMENT_STARTED, before the RSM removes
the files (`expire-rsm`). After the kill, read offline: the checkpointed log start offset
lies above a segment still in the tier (the kill landed in the window) and nothing
retention keeps is gone. Then `python -m engine run --until-idle` must finish (exit 0)
leaving exactly what the uninterrupted run left: with retention.bytes, local-only plus
remote bytes within one segment above the limit (Kafka's rule); with retention.ms, every
segment holding a recent record and none older.

ENGINE_EXPIRATION_CRASH_POINTS=N (default 22) sets the number of kill points;
ENGINE_EXPIRATION_CRASH_SEED picks them.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from broker_support import FS_TIERED, broker_template
from suite_counts import count_at_least

from engine.common import TopicPartition, Uuid
from engine.config import load_broker_config
from engine.log.checkpoint import OffsetCheckpointFile
from engine.log.log_manager import LogManager
from engine.records import RecordBatchBuilder
from engine.remote.embedded_rlmm import METADATA_DIR_NAME, EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import RemoteLogSegmentState

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "tests", "tiered_crash_driver.py")
POINTS = count_at_least("ENGINE_EXPIRATION_CRASH_POINTS", 22)
SEED = int(os.environ.get("ENGINE_EXPIRATION_CRASH_SEED", "405"))
TOPIC = "expire"
PARTITIONS = 2
BATCHES = 60
DAY_MS = 86_400_000
RETENTION_BYTES = 9000
RETENTION_MS = 7 * DAY_MS
_S = RemoteLogSegmentState

PROPERTIES = broker_template({**FS_TIERED, "log.retention.bytes": "{retention_bytes}",
                                "log.retention.ms": "{retention_ms}"})

SETTINGS = {"bytes": (RETENTION_BYTES, -1), "ms": (-1, RETENTION_MS), "none": (-1, -1)}


def _write_properties(root, setting) -> str:
    retention_bytes, retention_ms = SETTINGS[setting]
    path = root / "server.properties"
    path.write_text(PROPERTIES.format(d1=root / "d1", d2=root / "d2", tier=root / "tier",
                                      retention_bytes=retention_bytes,
                                      retention_ms=retention_ms))
    return str(path)


def _run(path, *driver_args) -> subprocess.CompletedProcess:
    argv = ([DRIVER, path, *driver_args] if driver_args
            else ["-m", "engine", "run", "--config", path, "--until-idle"])
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def _prepare(root, now_ms) -> None:
    """Two partitions of BATCHES batches (the first half 30 days old), all tiered."""
    for d in ("d1", "d2", "tier"):
        (root / d).mkdir(parents=True)
    path = _write_properties(root, "none")
    broker = load_broker_config(path)
    topic_id = Uuid.random()
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p in range(PARTITIONS):
            manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
            for i in range(BATCHES):
                stamp = now_ms - 30 * DAY_MS if i < BATCHES // 2 else now_ms
                builder = RecordBatchBuilder()
                for _ in range(5):
                    builder.append(b"%d-%d-" % (p, i) + b"x" * 60, timestamp=stamp)
                manager.append_as_leader(TOPIC, p, builder.build(), 0)
    done = _run(path)
    assert done.returncode == 0, done.stderr


def _state(root) -> dict:
    """Offline, per partition: checkpointed log start offset, FINISHED and
    DELETE_SEGMENT_STARTED segments, local-only bytes."""
    starts = {}
    for d in ("d1", "d2"):
        checkpoint = root / d / "log-start-offset-checkpoint"
        if checkpoint.exists():
            starts.update(OffsetCheckpointFile(checkpoint).read())
    rlmm = EmbeddedRemoteLogMetadataManager.open_read_only(root / "d1" / METADATA_DIR_NAME)
    out = {}
    try:
        tips = {t.partition: t for t in rlmm.list_partitions() if t.topic == TOPIC}
        for p in range(PARTITIONS):
            segments = list(rlmm.list_remote_log_segments(tips[p]))
            finished = sorted((m for m in segments if m.state is _S.COPY_SEGMENT_FINISHED),
                              key=lambda m: m.start_offset)
            deleting = [m for m in segments if m.state is _S.DELETE_SEGMENT_STARTED]
            pdir = next(root / d / f"{TOPIC}-{p}" for d in ("d1", "d2")
                        if (root / d / f"{TOPIC}-{p}").is_dir())
            highest = max((m.end_offset for m in finished), default=-1)
            only_local = sum(f.stat().st_size for f in pdir.glob("*.log")
                             if int(f.name[:-4]) > highest)
            out[p] = {"start": starts[TopicPartition(TOPIC, p)], "finished": finished,
                      "deleting": deleting, "only_local": only_local}
    finally:
        rlmm.close()
    return out


def _kept(part) -> list[tuple[int, int, int]]:
    return [(m.start_offset, m.end_offset, m.segment_size_in_bytes) for m in part["finished"]]


def _check_retention(setting, state, reference, now_ms) -> None:
    for p, part in state.items():
        kept = _kept(part)
        assert kept == _kept(reference[p]), (
            f"{TOPIC}-{p} ({setting}): kept {kept}, an uninterrupted run kept "
            f"{_kept(reference[p])}")
        assert not part["deleting"]
        assert part["start"] == (kept[0][0] if kept else reference[p]["start"])
        if setting == "bytes":
            total = part["only_local"] + sum(size for _, _, size in kept)
            biggest = max(size for _, _, size in kept)
            assert 0 <= total - RETENTION_BYTES < biggest, (p, total, kept)
        else:
            cutoff = now_ms - RETENTION_MS
            assert all(m.max_timestamp_ms > cutoff for m in part["finished"])
            # and every recent record is kept (offset BATCHES // 2 * 5 is the first)
            assert part["finished"][0].start_offset <= (BATCHES // 2) * 5


@pytest.mark.slow
def test_kill_nine_inside_the_expiration_window_then_restart(tmp_path):
    now_ms = int(time.time() * 1000)
    base = tmp_path / "base"
    _prepare(base, now_ms)
    tiered = _state(base)
    assert all(len(part["finished"]) >= 6 for part in tiered.values()), tiered

    references, deletes = {}, {}
    for setting in ("bytes", "ms"):
        root = tmp_path / f"reference-{setting}"
        shutil.copytree(base, root)
        done = _run(_write_properties(root, setting))
        assert done.returncode == 0, done.stderr
        references[setting] = _state(root)
        deletes[setting] = sum(len(tiered[p]["finished"]) - len(part["finished"])
                               for p, part in references[setting].items())
        assert deletes[setting] >= 6, (setting, deletes[setting])
        _check_retention(setting, references[setting], references[setting], now_ms)

    rng = random.Random(SEED)
    candidates = [(setting, kind, k) for setting in ("bytes", "ms")
                  for kind in ("expire", "expire-rsm")
                  for k in range(1, deletes[setting] + 1)]
    points = rng.sample(candidates, min(POINTS, len(candidates)))
    assert len(points) >= min(POINTS, 20)
    for i, (setting, kind, k) in enumerate(points):
        root = tmp_path / f"point-{i}"
        shutil.copytree(base, root)
        path = _write_properties(root, setting)
        killed = _run(path, kind, str(k))
        assert killed.returncode == -signal.SIGKILL, (setting, kind, k, killed.stderr)
        reference = references[setting]
        state = _state(root)
        in_window = False
        for p, part in state.items():
            left = part["finished"] + part["deleting"]
            in_window |= any(m.end_offset < part["start"] for m in left)
            # nothing retention keeps is gone
            assert set(_kept(reference[p])) <= set(_kept(part)), (setting, kind, k, p)
        assert in_window, (
            f"kill {setting}/{kind}/{k} missed the expiration window: checkpointed starts "
            f"{[part['start'] for part in state.values()]}, first remote offsets "
            f"{[part['finished'][0].start_offset for part in state.values()]}")
        restarted = _run(path)
        assert restarted.returncode == 0, (setting, kind, k, restarted.stderr)
        _check_retention(setting, _state(root), reference, now_ms)
        shutil.rmtree(root)
