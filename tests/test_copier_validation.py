"""The copier checks each local segment before tiering it (framing, batch CRCs, offset
continuity): a segment damaged on disk is not copied, nothing of it reaches the tier or the
remote metadata, the partition's copying stops there (status, metric, log line) while
other partitions keep tiering, and a repaired segment is copied on the next run."""

from __future__ import annotations

import logging
import struct

import pytest
from test_rlm_helpers import TOPIC, Env, read_all

from engine._native import records as native_records
from engine.errors import CorruptRecordError
from engine.remote.metadata import RemoteLogSegmentState

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def _batches(path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of each batch of a .log file."""
    headers, _ = native_records.scan(path.read_bytes(), False)
    return [(int(h["position"]), int(h["size"]), int(h["base_offset"])) for h in headers]


def _remote_bases(env, partition) -> list[int]:
    st = next(s for s in env.rlm._sync_partitions() if s.partition == partition)
    return sorted(m.start_offset for m in env.rlmm.list_remote_log_segments(st.tip))


def _damage_value_byte(path, batch):
    position, size, _ = batch
    return position + size - 7, None  # inside the last record's value: CRC mismatch


def _damage_base_offset(path, batch):
    position, _, base = batch  # outside the CRC: only the continuity check sees it
    return position, struct.pack(">q", base + 1000)


def _flip(path, at: int, replacement: bytes | None) -> bytes:
    data = bytearray(path.read_bytes())
    original = bytes(data)
    if replacement is None:
        data[at] ^= 0x20
    else:
        data[at:at + len(replacement)] = replacement
    with open(path, "r+b") as f:  # in place: the segment's mapping sees it, as with disk rot
        f.write(data)
    return original


@pytest.mark.parametrize("damage, which", [
    (_damage_value_byte, 1), (_damage_base_offset, 1), (_damage_base_offset, 0)])
def test_damaged_segment_is_not_tiered_and_stops_its_partition_only(tmp_path, caplog,
                                                                    damage, which):
    env = Env(tmp_path)
    try:
        for p in (0, 1):
            env.log(partition=p)
            env.produce(12, partition=p)
        unified = env.log(partition=0)
        segments = unified.segments
        assert len(segments) >= 4
        victim = segments[1]
        batch = _batches(victim.log_file)[which]
        at, replacement = damage(victim.log_file, batch)
        original = _flip(victim.log_file, at, replacement)
        expected_offset = batch[2]

        with caplog.at_level(logging.ERROR, logger="engine.rlm.copier"):
            summary = env.rlm.run_once()
        # partition 1 tiers everything; partition 0 stops before the damaged segment
        assert _remote_bases(env, 1) == [s.base_offset for s in env.log(partition=1).segments[:-1]]
        assert _remote_bases(env, 0) == [segments[0].base_offset]
        assert unified.highest_offset_in_remote_storage == victim.base_offset - 1
        assert not list((tmp_path / "remote").glob(f"*/{TOPIC}-0-*/{victim.base_offset:020d}*"))
        [error] = summary.errors
        assert error.startswith(f"{TOPIC}-0: copy: CorruptRecordError: segment "
                                f"{victim.log_file}: entry at byte {batch[0]} "
                                f"(offset {expected_offset} expected there)"), error
        [line] = [r.getMessage() for r in caplog.records if "Not tiering" in r.getMessage()]
        assert str(victim.log_file) in line and f"byte {batch[0]}" in line and \
            f"offset {expected_offset}" in line
        rows = {r["partition"]: r for r in env.rlm.status()}
        assert rows[0]["corrupt_segment"] == {
            "file": str(victim.log_file), "position": batch[0], "offset": expected_offset,
            "error": rows[0]["corrupt_segment"]["error"]}
        assert "CorruptRecordError" in rows[0]["last_copy_error"]
        assert rows[1]["corrupt_segment"] is None and rows[1]["last_copy_error"] is None
        metrics = env.rlm.metrics
        assert metrics.value("RemoteCopyCorruptSegments", topic=TOPIC, partition=0) == 1
        assert metrics.value("RemoteCopyCorruptSegments", topic=TOPIC, partition=1) is None
        assert env.rlm.is_idle()  # stopped until an operator acts: nothing to wait for

        # later runs stay stopped (the same file); new data of partition 1 still tiers
        env.produce(6, partition=1)
        env.clock.advance(60_000)
        summary = env.rlm.run_once()
        assert summary.copied_segments >= 1 and len(summary.errors) == 1
        assert _remote_bases(env, 0) == [segments[0].base_offset]

        # the operator puts back good bytes: the next run checks again and copies on
        with open(victim.log_file, "r+b") as f:
            f.write(original)
        env.clock.advance(60_000)
        summary = env.rlm.run_once()
        assert not summary.errors, summary.errors
        assert _remote_bases(env, 0) == [s.base_offset for s in segments[:-1]]
        assert list((tmp_path / "remote").glob(f"*/{TOPIC}-0-*/{victim.base_offset:020d}*"))
        assert metrics.value("RemoteCopyCorruptSegments", topic=TOPIC, partition=0) == 0
        assert env.rlm.status()[0]["corrupt_segment"] is None
        assert read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset) == env.acked[(TOPIC, 0)]
    finally:
        env.close()


def test_delete_records_past_a_damaged_segment_resumes_copying(tmp_path):
    env = Env(tmp_path)
    try:
        env.produce(12)
        unified = env.log()
        victim, following = unified.segments[1], unified.segments[2]
        position, size, _ = _batches(victim.log_file)[0]
        _flip(victim.log_file, position + size - 7, None)
        assert env.rlm.run_once().errors
        assert env.rlm.status()[0]["corrupt_segment"]["file"] == str(victim.log_file)
        env.lm.delete_records(TOPIC, 0, following.base_offset)  # its records given up
        env.clock.advance(60_000)
        summary = env.rlm.run_once()
        assert not summary.errors, summary.errors
        assert env.rlm.status()[0]["corrupt_segment"] is None
        # the copy goes on from the new log start; the remote segment below it expires
        assert _remote_bases(env, 0) == [s.base_offset for s in unified.segments[:-1]
                                         if s.base_offset >= following.base_offset]
        assert env.rlm.metrics.value("RemoteCopyCorruptSegments", topic=TOPIC,
                                     partition=0) == 0
    finally:
        env.close()


def test_verify_batches_edges(tmp_path):
    env = Env(tmp_path)
    try:
        env.produce(12)
        unified = env.log()
        segment, following = unified.segments[1], unified.segments[2]
        assert segment.verify_batches(following.base_offset) == len(_batches(segment.log_file))
        with pytest.raises(CorruptRecordError, match="do not continue"):
            segment.verify_batches(following.base_offset - 1)  # past the next segment
        # a partial entry at the end (a torn tail in a closed segment)
        size = segment.log_file.stat().st_size
        with open(segment.log_file, "ab") as f:
            f.write(b"\0\0\0\0\0\0\0\0\0\0\0\x40")
        segment._size = size + 12  # as if the bytes had been appended
        with pytest.raises(CorruptRecordError) as info:
            segment.verify_batches(following.base_offset)
        assert info.value.position == size and info.value.offset == following.base_offset
    finally:
        env.close()


def test_damaged_segment_through_the_commands(tmp_path):
    """Subprocesses: `run --until-idle` tiers the healthy partition, refuses the damaged
    segment (exit 1, the error names file, position and offset); a fresh `status` shows
    it; the repaired file is tiered by the next run (exit 0)."""
    import json
    import subprocess
    import sys

    from broker_support import orders_broker
    from test_cli_tiered import ROOT, _fill

    from engine.cli import main

    path, dirs = orders_broker(tmp_path)
    assert main(["configs", "--config", path, "--entity-name", "orders", "--alter",
                 "--add-config", "remote.storage.enable=true"]) == 0
    _fill(path)
    [pdir] = [d / "orders-0" for d in (dirs["d1"], dirs["d2"]) if (d / "orders-0").is_dir()]
    victim = sorted(pdir.glob("*.log"))[2]
    position, size, base = _batches(victim)[1]
    original = _flip(victim, position + size - 7, None)

    def engine(*argv):
        return subprocess.run([sys.executable, "-m", "engine", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)

    run = engine("run", "--config", path, "--until-idle")
    assert run.returncode == 1, run.stderr
    assert f"CorruptRecordError: segment {victim}: entry at byte {position} (offset {base} " \
           f"expected there): bad CRC" in run.stderr, run.stderr
    rows = {r["partition"]: r for r in json.loads(
        engine("status", "--config", path, "--json").stdout)}
    assert rows[0]["corrupt_segment"]["file"] == str(victim)
    assert (rows[0]["corrupt_segment"]["position"], rows[0]["corrupt_segment"]["offset"]) == \
        (position, base)
    assert rows[0]["highest_offset_in_remote_storage"] == int(victim.name[:-4]) - 1
    assert rows[1]["corrupt_segment"] is None and rows[1]["copy_lag_segments"] == 0

    with open(victim, "r+b") as f:
        f.write(original)
    run = engine("run", "--config", path, "--until-idle")
    assert run.returncode == 0, run.stderr
    rows = json.loads(engine("status", "--config", path, "--json").stdout)
    assert all(r["corrupt_segment"] is None and r["copy_lag_segments"] == 0 for r in rows)
