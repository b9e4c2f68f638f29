"""A consumer-facing read never serves a wrong record: aborted transactions are found
wherever their marker is, a transaction index the metadata says exists is present and
verified (cached or not), damaged batches (CRC, framing, base offsets the CRC does not
cover) are errors naming the segment and position, and no read ends early or loops below
the high watermark. RemoteLogManager reads, ListOffsets, the Spark tasks and the `fetch`
command (as a subprocess) alike."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from test_rlm_helpers import T0, TOPIC, Env, batch, marker, read_all, txn_batch

from engine._native import records as _records
from engine.errors import CorruptRecordError, RemoteStorageError
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.index_cache import DIR_NAME as INDEX_CACHE_DIR
from engine.remote.metadata import RemoteLogSegmentState

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PID = 4242


def _finished(env, topic=TOPIC, partition=0):
    st = env.rlm._partitions[(topic, partition)]
    return sorted((m for m in env.rlmm.list_remote_log_segments(st.tip)
                   if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
                  key=lambda m: m.start_offset)


def _aborted_then_many(env, unified, later_batches=12):
    """Offsets 0-5 plain, a transactional batch of PID at 6-8, `later_batches` plain
    batches (several segment rolls), then PID's ABORT marker. Returns the txn's offsets."""
    env.produce(2)
    first, last = unified.append_as_leader(txn_batch([b"aborted-0", b"aborted-1",
                                                      b"aborted-2"], producer_id=PID), 0)
    env.produce(later_batches)
    unified.append_as_leader(marker(False, producer_id=PID), 0)
    env.produce(1)
    return first, last


def _broker_file(env, tmp_path, **extra) -> str:
    """A broker file over the Env's dirs, for the CLI."""
    props = {"log.dirs": ",".join(map(str, env.log_dirs)),
             "remote.log.storage.system.enable": "true",
             "rsm.config.dirs": str(env.remote_dir), "remote.storage.enable": "true",
             "log.retention.ms": "-1", "log.segment.bytes": "1200",
             "log.index.interval.bytes": "1", **extra}
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def _engine(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT, check=False)


def _values(stdout: str) -> list[str]:
    import base64
    import json

    return [base64.b64decode(json.loads(line)["value"]).decode()
            for line in stdout.splitlines() if line.strip()]


# -- 1. aborted transactions whose marker is segments later ------------------------------

@pytest.mark.parametrize("tiered", [False, True])
def test_read_committed_finds_an_abort_marker_several_segments_later(tmp_path, tiered):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1 if tiered else -2})
    try:
        unified = env.log()
        first, _ = _aborted_then_many(env, unified)
        marker_segment = unified.segments[-1].base_offset
        assert len(unified.segments) > 4 and marker_segment > first + 20
        if tiered:
            env.rlm.run_once()
            assert unified.local_log_start_offset > first + 20  # the txn is remote only
        result = env.rlm.read(TOPIC, 0, first, 400, isolation="read_committed")
        assert result.from_remote == tiered and result.next_offset > first
        assert [(a.producer_id, a.first_offset) for a in result.aborted_transactions] == \
            [(PID, first)]
    finally:
        env.close()


def test_fetch_hides_records_aborted_segments_later(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        unified = env.log()
        first, _ = _aborted_then_many(env, unified)
        env.rlm.run_once()
    finally:
        env.close()
    path = _broker_file(env, tmp_path, **{"log.local.retention.bytes": "1"})
    out = _engine("fetch", "--config", path, "--topic", TOPIC, "--partition", "0",
                  "--offset", "0", "--to-end", "--json", "--isolation-level",
                  "read_committed")
    assert out.returncode == 0, out.stderr
    values = _values(out.stdout)
    assert values and not any(v.startswith("aborted") for v in values)
    out = _engine("fetch", "--config", path, "--topic", TOPIC, "--partition", "0",
                  "--offset", str(first), "--max-bytes", "300", "--json")
    assert out.returncode == 0 and _values(out.stdout)[0] == "aborted-0"


# -- 2. transaction indexes: present and verified, in the tier and in the cache ---------

def _tier_an_abort(tmp_path):
    env = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    unified = env.log()
    first, _ = _aborted_then_many(env, unified, later_batches=1)
    env.produce(12)
    env.rlm.run_once()
    holder = next(m for m in _finished(env) if not m.txn_idx_empty)
    return env, first, holder


def test_a_missing_transaction_index_the_checksums_list_is_an_error(tmp_path):
    env, first, holder = _tier_an_abort(tmp_path)
    try:
        os.unlink(env.rsm.segment_path(holder, ".txnindex"))
        with pytest.raises(RemoteStorageError, match="txnindex"):
            env.rlm.read(TOPIC, 0, first, 100_000, isolation="read_committed")
    finally:
        env.close()
    path = _broker_file(env, tmp_path, **{"log.local.retention.bytes": "1"})
    out = _engine("fetch", "--config", path, "--topic", TOPIC, "--partition", "0",
                  "--offset", "0", "--to-end", "--isolation-level", "read_committed")
    assert out.returncode == 1 and "txnindex" in out.stderr, out.stderr
    assert "aborted-" not in out.stdout


@pytest.mark.parametrize("damage", ["flip", "truncate", "drop-record"])
def test_a_changed_cached_transaction_index_is_never_used(tmp_path, damage):
    env, first, holder = _tier_an_abort(tmp_path)
    cache_dir = env.log_dirs[0] / INDEX_CACHE_DIR
    try:
        result = env.rlm.read(TOPIC, 0, first, 100_000, isolation="read_committed")
        assert [a.producer_id for a in result.aborted_transactions] == [PID]
    finally:
        env.close()
    cached = next(cache_dir.glob(f"*{holder.remote_log_segment_id.id}.txnindex"))
    original = cached.read_bytes()
    data = bytearray(original)
    if damage == "flip":
        data[9] ^= 0xFF  # inside the first offset of the entry
        cached.write_bytes(bytes(data))
    elif damage == "truncate":
        cached.write_bytes(bytes(data[:0]))
    else:
        next(cache_dir.glob(f"*{holder.remote_log_segment_id.id}.checksums")).unlink()
    again = Env(tmp_path, topic_config={"local.retention.bytes": 1})
    try:
        result = again.rlm.read(TOPIC, 0, first, 100_000, isolation="read_committed")
        assert [(a.producer_id, a.first_offset) for a in result.aborted_transactions] == \
            [(PID, first)]
        assert cached.read_bytes() == original  # downloaded again
    finally:
        again.close()


# -- 3. damaged batches ------------------------------------------------------------------

def _tiered_env(tmp_path, verification="size", batches=30):
    rsm = FileSystemRemoteStorageManager([tmp_path / "remote"], fsync=False,
                                         log_read_verification=verification)
    env = Env(tmp_path, rsm=rsm, topic_config={"local.retention.bytes": 1})
    env.produce(batches)
    env.rlm.run_once()
    return env


def _rows(path) -> np.ndarray:
    headers, _ = _records.scan(path.read_bytes(), False)
    return headers


def _patch(path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def _remote_log(env, i=0):
    md = _finished(env)[i]
    return md, env.rsm.segment_path(md, ".log")


def test_a_flipped_value_byte_in_the_tier_is_a_crc_error(tmp_path):
    env = _tiered_env(tmp_path)
    try:
        md, path = _remote_log(env)
        row = _rows(path)[1]
        at = int(row["position"] + row["size"]) - 3
        _patch(path, at, bytes([path.read_bytes()[at] ^ 0x01]))
        with pytest.raises(CorruptRecordError, match="CRC") as info:
            read_all(env.rlm, TOPIC, 0, 0, md.end_offset + 1, max_bytes=200)
        assert info.value.offset == int(row["base_offset"])
        assert str(md.remote_log_segment_id.id) in str(info.value)
    finally:
        env.close()


def test_a_flipped_value_byte_in_the_local_log_is_a_crc_error(tmp_path):
    env = Env(tmp_path)
    try:
        env.produce(3)
        segment = env.log().segments[0]
        row = _rows(segment.log_file)[1]
        at = int(row["position"] + row["size"]) - 3
        _patch(segment.log_file, at, b"\xee")
        with pytest.raises(CorruptRecordError, match="CRC"):
            env.rlm.read(TOPIC, 0, int(row["base_offset"]), 10_000)
    finally:
        env.close()


@pytest.mark.parametrize("delta", [1, 1 << 40, -1])
def test_a_damaged_base_offset_is_never_served_at_wrong_offsets(tmp_path, delta):
    env = _tiered_env(tmp_path)
    try:
        md, path = _remote_log(env)
        row = _rows(path)[2]
        base = int(row["base_offset"]) + delta
        _patch(path, int(row["position"]), base.to_bytes(8, "big", signed=True))
        with pytest.raises(CorruptRecordError, match="do not continue the log"):
            read_all(env.rlm, TOPIC, 0, 0, md.end_offset + 1, max_bytes=10_000)
        with pytest.raises(CorruptRecordError, match="do not continue the log"):
            env.rlm.read(TOPIC, 0, int(row["base_offset"]), 10)  # that batch alone
    finally:
        env.close()


@pytest.mark.parametrize("delta", [1, -1, 1 << 40])
def test_list_offsets_by_timestamp_never_answers_from_a_damaged_base_offset(tmp_path, delta):
    """The timestamp search walks the same headers a fetch does and checks them alike."""
    env = _tiered_env(tmp_path)
    try:
        _, path = _remote_log(env)
        row = _rows(path)[2]
        timestamp = T0 + int(row["base_offset"]) * 1000
        assert env.rlm.list_offsets(TOPIC, 0, timestamp)[0] == int(row["base_offset"])
        base = int(row["base_offset"]) + delta
        _patch(path, int(row["position"]), base.to_bytes(8, "big", signed=True))
        with pytest.raises(CorruptRecordError, match="do not continue the log") as info:
            env.rlm.list_offsets(TOPIC, 0, timestamp)
        assert info.value.position == int(row["position"])
    finally:
        env.close()


def test_list_offsets_by_timestamp_checks_the_crc_of_the_batch_it_answers_from(tmp_path):
    env = _tiered_env(tmp_path)
    try:
        _, path = _remote_log(env)
        row = _rows(path)[2]
        at = int(row["position"] + row["size"]) - 3
        _patch(path, at, bytes([path.read_bytes()[at] ^ 0x01]))
        with pytest.raises(CorruptRecordError, match="CRC"):
            env.rlm.list_offsets(TOPIC, 0, T0 + int(row["base_offset"]) * 1000)
    finally:
        env.close()


@pytest.mark.parametrize("length", [-12, 0, 5, 0x7FFFFF00])
def test_an_impossible_batch_length_in_the_tier_is_an_error_not_an_end_or_a_loop(
        tmp_path, length):
    env = _tiered_env(tmp_path)
    try:
        md, path = _remote_log(env)
        row = _rows(path)[2]
        _patch(path, int(row["position"]) + 8, length.to_bytes(4, "big", signed=True))
        outcome = {}

        def read():
            try:
                read_all(env.rlm, TOPIC, 0, 0, md.end_offset + 1, max_bytes=150)
            except Exception as exc:  # noqa: BLE001 - the outcome is asserted below
                outcome["error"] = exc

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "the read never ended"
        assert isinstance(outcome.get("error"), CorruptRecordError), outcome
        assert outcome["error"].position == int(row["position"])
        # ListOffsets by timestamp walks the same headers
        with pytest.raises(CorruptRecordError):
            env.rlm.list_offsets(TOPIC, 0, T0 + int(row["base_offset"]) * 1000)
    finally:
        env.close()


def test_fetch_to_end_fails_on_damage_below_the_high_watermark(tmp_path):
    env = _tiered_env(tmp_path)
    try:
        _md, path = _remote_log(env)
        hw = env.log().high_watermark
    finally:
        env.close()
    row = _rows(path)[1]
    _patch(path, int(row["position"]) + 8, (0x7FFFFF00).to_bytes(4, "big"))
    config = _broker_file(env, tmp_path, **{"log.local.retention.bytes": "1",
                                            "rsm.config.log.read.verification": "size"})
    out = _engine("fetch", "--config", config, "--topic", TOPIC, "--partition", "0",
                  "--offset", "0", "--to-end", "--json")
    assert out.returncode == 1, out.stderr
    assert "CorruptRecordError" in out.stderr and str(int(row["position"])) in out.stderr
    assert len(_values(out.stdout)) == int(row["base_offset"])  # everything before it
    assert int(row["base_offset"]) < hw


def test_spark_tasks_refuse_a_damaged_base_offset(tmp_path):
    from engine.scan.decode import scan_range
    from engine.scan.planning import SegmentRange
    from engine.scan.schema import arrow_schema

    env = _tiered_env(tmp_path)
    try:
        md, path = _remote_log(env)
        row = _rows(path)[2]
        _patch(path, int(row["position"]), (int(row["base_offset"]) + 7).to_bytes(8, "big"))
        data = path.read_bytes()
        r = SegmentRange(TOPIC, 0, md, 0, len(data), md.start_offset, md.end_offset + 1)
        with pytest.raises(CorruptRecordError, match="do not continue the log"):
            list(scan_range(data, r, arrow_schema(False)))
    finally:
        env.close()


def test_a_range_names_damage_once_at_its_byte_in_the_segment(tmp_path):
    """The decoding both scan faces share (a Spark task, engine.arrow) names the range once
    and the damaged batch's byte in the segment, also for a range starting mid-segment."""
    from engine.scan.decode import describe_range, scan_range
    from engine.scan.planning import SegmentRange
    from engine.scan.schema import arrow_schema

    env = _tiered_env(tmp_path)
    try:
        md, path = _remote_log(env)
        rows = _rows(path)
        damaged = int(rows[2]["position"])
        _patch(path, damaged, (int(rows[2]["base_offset"]) + 7).to_bytes(8, "big"))
        start = int(rows[1]["position"])
        data = path.read_bytes()
        r = SegmentRange(TOPIC, 0, md, start, len(data), int(rows[1]["base_offset"]),
                         md.end_offset + 1)
        with pytest.raises(CorruptRecordError, match="do not continue the log") as err:
            list(scan_range(data[start:], r, arrow_schema(False)))
        assert str(err.value).count(describe_range(r)) == 1
        assert err.value.position == damaged
        assert f"at byte {damaged} " in str(err.value)
    finally:
        env.close()


def test_read_many_keeps_batch_checks(tmp_path):
    """One damaged partition's read fails alone."""
    env = _tiered_env(tmp_path)
    try:
        env.produce(3, partition=1)
        _md, path = _remote_log(env)
        row = _rows(path)[0]
        _patch(path, int(row["position"]) + int(row["size"]) - 2, b"\x00\x01")
        good, bad = env.rlm.read_many([(TOPIC, 1, 0, 10_000), (TOPIC, 0, 0, 10_000)])
        assert good.error is None and good.size_in_bytes
        assert isinstance(bad.error, CorruptRecordError)
    finally:
        env.close()


def test_local_batches_of_a_plain_batch_function(tmp_path):
    """Local reads still return whole, contiguous batches (the checks pass on good data)."""
    env = Env(tmp_path)
    try:
        unified = env.log()
        for i in range(5):
            unified.append_as_leader(batch([b"x" * 10] * 3, timestamp=T0 + i), 0)
        got = read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset, max_bytes=100)
        assert [o for o, _ in got] == list(range(15))
    finally:
        env.close()


def test_check_batches_whole_array_tests_refuse_exactly_what_the_first_damage_search_does():
    """check_batches tests good reads as whole arrays and searches for the first damaged
    batch only when a test fails: both must draw the same line, for every rule."""
    from engine.remote.segment_access import _all_good, _raise_first_damage


    data = b"".join(batch([b"v"] * 3) for _ in range(6))
    template, _ = _records.scan(data, True)
    rng = np.random.default_rng(7)
    for case in range(3000):
        rows = template[:int(rng.integers(1, 7))].copy()
        counts = rng.integers(0, 3, len(rows))
        base = 10 + np.concatenate(([0], np.cumsum(counts[:-1] + 1)))
        rows["base_offset"], rows["last_offset"] = base, base + counts
        for _ in range(int(rng.integers(0, 3))):  # damage: an offset, a CRC or a magic
            i = int(rng.integers(len(rows)))
            field = ("base_offset", "last_offset", "crc_valid", "magic")[case % 4]
            if field == "crc_valid":
                rows[field][i] = False
            elif field == "magic":
                rows[field][i] = 1
            else:
                rows[field][i] += int(rng.integers(-3, 4))
        kw = {"first_offset": [None, 9, 10, 11, 12][int(rng.integers(5))],
              "contiguous": bool(rng.integers(2)),
              "min_offset": [None, 10, 11][int(rng.integers(3))],
              "max_offset": [None, 15, 30][int(rng.integers(3))],
              "crc": bool(rng.integers(2))}
        try:
            _raise_first_damage(rows, "where", position=0, **kw)
            refused = False
        except CorruptRecordError:
            refused = True
        assert _all_good(rows, kw["first_offset"], kw["contiguous"], kw["min_offset"],
                         kw["max_offset"], kw["crc"]) is not refused, (rows, kw)


def test_remote_reads_leave_batch_crcs_to_an_rsm_that_declares_it_checked_them(tmp_path):
    """verifies_batch_crcs is how a reader learns its CRC pass would repeat the RSM's: the
    same damaged batch is refused when the RSM does not declare it, and served as the RSM
    answers for it when it does (the filesystem tier declares it only with `full`, where
    it checks every batch before serving a byte: see test_remote_storage)."""
    class Declaring(FileSystemRemoteStorageManager):
        def verifies_batch_crcs(self, metadata):
            return True

    for rsm_class, refused in ((FileSystemRemoteStorageManager, True), (Declaring, False)):
        rsm = rsm_class([tmp_path / rsm_class.__name__ / "remote"], fsync=False,
                        log_read_verification="size")
        env = Env(tmp_path / rsm_class.__name__, rsm=rsm,
                  topic_config={"local.retention.bytes": 1})
        try:
            env.produce(30)
            env.rlm.run_once()
            _, path = _remote_log(env)
            row = _rows(path)[1]
            at = int(row["position"] + row["size"]) - 3
            _patch(path, at, bytes([path.read_bytes()[at] ^ 0x01]))
            if refused:
                with pytest.raises(CorruptRecordError, match="CRC"):
                    env.rlm.read(TOPIC, 0, int(row["base_offset"]), 10_000)
            else:
                result = env.rlm.read(TOPIC, 0, int(row["base_offset"]), 10_000)
                assert result.from_remote and result.next_offset > int(row["base_offset"])
        finally:
            env.close()


def _local_env_with_a_shifted_base(tmp_path, delta):
    """An untiered log of 8 batches whose 5th batch's base offset is moved by `delta` in
    the local `.log` (the CRC does not cover it). Returns (env, its true base offset)."""
    env = Env(tmp_path, topic_config={"remote.storage.enable": "false",
                                      "segment.bytes": str(1 << 20)})
    env.produce(8)
    segment = env.log().segments[0]
    row = _rows(segment.log_file)[4]
    base = int(row["base_offset"])
    _patch(segment.log_file, int(row["position"]), (base + delta).to_bytes(8, "big"))
    return env, base


@pytest.mark.parametrize("delta", [2, -2])
def test_a_local_batch_read_alone_with_a_damaged_base_offset_is_refused(tmp_path, delta):
    """A fetch starting at the damaged batch sees it alone: only the batch before it shows
    the offsets do not continue."""
    env, base = _local_env_with_a_shifted_base(tmp_path, delta)
    try:
        # the offsets a fetch finds in the damaged batch (with -2 it claims base-2..base,
        # and base-2, base-1 are still answered by the intact batch before it)
        for offset in (base + max(delta, 0), base + delta + 2):
            with pytest.raises(CorruptRecordError, match="do not continue the log") as info:
                env.rlm.read(TOPIC, 0, offset, 100)
            assert info.value.offset == base + delta
        assert env.rlm.read(TOPIC, 0, base - 3, 100).next_offset == base  # the batch before
    finally:
        env.close()


def test_local_list_offsets_by_timestamp_refuses_a_damaged_base_offset(tmp_path):
    env, base = _local_env_with_a_shifted_base(tmp_path, 2)
    try:
        with pytest.raises(CorruptRecordError, match="do not continue the log"):
            env.rlm.list_offsets(TOPIC, 0, T0 + base * 1000)
        assert env.rlm.list_offsets(TOPIC, 0, T0)[0] == 0
    finally:
        env.close()


def test_a_sequential_local_consumer_checks_each_batch_once_and_still_sees_later_damage(
        tmp_path):
    """Reads continuing a segment's verified prefix check only the bytes past it; damage
    past the prefix is found, and a truncation that cuts the prefix makes the rewritten
    bytes be checked again."""
    env = Env(tmp_path, topic_config={"segment.bytes": 1 << 20})
    try:
        env.produce(10)
        unified = env.log()
        segment = unified.segments[0]
        rows = _rows(segment.log_file)
        got = read_all(env.rlm, TOPIC, 0, 0, int(rows["last_offset"][5]) + 1, max_bytes=400)
        assert [o for o, _ in got] == list(range(int(rows["last_offset"][5]) + 1))
        assert segment.verified_prefix == (int(rows["position"][6]),
                                           int(rows["last_offset"][5]))
        row = rows[8]
        _patch(segment.log_file, int(row["position"] + row["size"]) - 3, b"\xee")
        with pytest.raises(CorruptRecordError, match="CRC"):
            read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset, max_bytes=400)
        assert segment.verified_prefix[0] <= int(row["position"])
        # a truncation below the prefix forgets it: offsets written again are checked
        unified.truncate_to(int(rows["base_offset"][3]))
        assert segment.verified_prefix == (0, segment.base_offset - 1)
        env.produce(4)
        rows = _rows(segment.log_file)
        _patch(segment.log_file, int(rows["position"][4]), (10**6).to_bytes(8, "big"))
        with pytest.raises(CorruptRecordError, match="do not continue the log"):
            read_all(env.rlm, TOPIC, 0, 0, unified.log_end_offset, max_bytes=400)
    finally:
        env.close()
