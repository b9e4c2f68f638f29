"""Crash tests: a real writer process (tests/crash_writer.py) killed with SIGKILL at random
points during appends, index updates and rolls, then the log reopened and checked.

Each case is a chain on one partition directory: the writer is started, killed after a
seeded random delay (sometimes before it has finished opening, i.e. during its own
recovery; mostly while it appends and rolls small segments), and the log is then reopened
here unclean (`UnifiedLog.open(clean_shutdown=False)`, recovery point from the writer's
last checkpoint, else 0) and checked:

- every acknowledged offset (flushed by the writer's flush policy, then recorded with
  fsync in STATE/acked) is present, and every surviving record has exactly the key, value
  and timestamp the writer derives from its offset, offsets contiguous from 0;
- the tail is clean: every `.log` ends on a batch boundary, every CRC is valid, segments
  follow each other without gaps;
- indexes agree with the log right after recovery (each offset-index entry is the start of
  a batch ending at its offset; time-index entries rise and point into batches), the leader
  epoch cache matches the batches' epochs, and after the log is closed
  `python -m engine dump-log --verify` passes over every file of the partition directory;
- the producer state survives: the last stable offset matches the transaction the batches
  leave open, and dump-log --verify replays the log against every `.snapshot` and
  `.txnindex` (the writer's batches are idempotent or transactional, with markers);
- appending after recovery works (and is read back).

Every other kill point is checked on a copy of the directory, so the next writer has to
recover the crashed state itself (recovery on top of recovery); the others are checked in
place. The default run is 5 chains x 11 kills = 55 kill points (about 30 s). A longer run:

    ENGINE_CRASH_KILLS=250 ENGINE_CRASH_SEED=7 /work/venv/bin/python -m pytest -q -s \\
        -p no:cacheprovider tests/test_crash_recovery.py

(ENGINE_CRASH_KILLS is the total number of kill points, spread over the 5 chains;
ENGINE_CRASH_SEED changes the base seed; -s prints per-chain counts. 250 kills took
about 4 minutes on 2 CPUs: the logs grow with every kill and each check reads them all.)
"""

from __future__ import annotations

import math
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import crash_writer  # tests/ is on sys.path (conftest.py)
import numpy as np
import pytest
from broker_support import engine_in_process
from crash_writer import build_batch, expected_record, read_acked, read_recovery_point
from suite_counts import count_at_least

from engine.log import UnifiedLog
from engine.records import MemoryRecords, scan_batches

ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "crash_writer.py"
CHAINS = 5
DEFAULT_KILLS = 55
BASE_SEED = int(os.environ.get("ENGINE_CRASH_SEED", "20261122"))
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Chain:
    flush_every: int
    segment_bytes: int
    index_interval_bytes: int
    segment_index_bytes: int
    checkpoint_every: int


#: flush policies and segment shapes: every batch flushed; every few; rarely; rolls on a
#: full (tiny) index; batches often larger than half a segment.
CHAIN_CONFIGS = [
    Chain(flush_every=1, segment_bytes=16 * 1024, index_interval_bytes=512,
          segment_index_bytes=4096, checkpoint_every=3),
    Chain(flush_every=5, segment_bytes=32 * 1024, index_interval_bytes=1024,
          segment_index_bytes=4096, checkpoint_every=2),
    Chain(flush_every=20, segment_bytes=64 * 1024, index_interval_bytes=256,
          segment_index_bytes=96, checkpoint_every=1),
    Chain(flush_every=1, segment_bytes=48 * 1024, index_interval_bytes=4096,
          segment_index_bytes=1024, checkpoint_every=1),
    Chain(flush_every=3, segment_bytes=8 * 1024, index_interval_bytes=0,
          segment_index_bytes=4096, checkpoint_every=5),
]


def kills_per_chain() -> int:
    total = count_at_least("ENGINE_CRASH_KILLS", DEFAULT_KILLS)
    return max(1, math.ceil(total / CHAINS))


def open_log(directory: Path, cfg: Chain, recovery_point: int) -> UnifiedLog:
    return UnifiedLog.open(directory, segment_bytes=cfg.segment_bytes,
                           index_interval_bytes=cfg.index_interval_bytes,
                           segment_index_bytes=cfg.segment_index_bytes,
                           recovery_point=recovery_point, clean_shutdown=False)


# ---- the writer process ------------------------------------------------------------------


def run_and_kill(pdir: Path, state: Path, cfg: Chain, seed: int, epoch: int,
                 rng: random.Random) -> str:
    """Starts the writer and SIGKILLs it; returns where the kill was aimed ("open" or
    "append")."""
    cmd = [sys.executable, str(WRITER), str(pdir), str(state), "--seed", str(seed),
           "--epoch", str(epoch), "--flush-every", str(cfg.flush_every),
           "--checkpoint-every", str(cfg.checkpoint_every),
           "--segment-bytes", str(cfg.segment_bytes),
           "--index-interval-bytes", str(cfg.index_interval_bytes),
           "--segment-index-bytes", str(cfg.segment_index_bytes)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        if rng.random() < 0.15:
            # while it imports, opens and recovers the log
            time.sleep(rng.uniform(0.0, 0.25))
            where = "open"
        else:
            line = _ready_line(proc)
            if not line.startswith(b"ready "):
                proc.kill()
                _, err = proc.communicate()
                raise AssertionError(f"writer (seed {seed}) did not start: {line!r}\n"
                                     f"{err.decode(errors='replace')}")
            r = rng.random()
            # some kills right after the first appends, most after a while
            time.sleep(rng.uniform(0.0, 0.003) if r < 0.2 else rng.uniform(0.0, 0.2))
            where = "append"
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"writer (seed {seed}) exited on its own with "
                                 f"{proc.returncode}:\n{err.decode(errors='replace')}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        return where
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def _ready_line(proc: subprocess.Popen) -> bytes:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(READY_TIMEOUT_S):
            return b"<no ready line within %d s>" % READY_TIMEOUT_S
        return proc.stdout.readline()
    finally:
        sel.close()


# ---- checks ------------------------------------------------------------------------------


def check_files(pdir: Path) -> np.ndarray:
    """Every .log ends on a batch boundary with valid CRCs, and segments are contiguous.
    Returns the headers of every batch, in order."""
    all_headers = []
    expected_next = None
    for path in sorted(pdir.glob("*.log")):
        base = int(path.name[:20])
        data = path.read_bytes()
        scan = scan_batches(data, verify_crc=True)
        assert scan.partial_bytes == 0, (
            f"{path.name}: {scan.partial_bytes} bytes of a partial batch at position "
            f"{scan.valid_bytes} after recovery")
        h = scan.headers
        assert h["crc_valid"].all(), f"{path.name}: a bad CRC after recovery"
        if expected_next is not None:
            assert base == expected_next, (
                f"{path.name}: segment starts at {base}, previous ends before {expected_next}")
        if len(h):
            assert int(h["base_offset"][0]) == base, f"{path.name}: first batch not at base"
            assert (h["base_offset"][1:] == h["last_offset"][:-1] + 1).all(), \
                f"{path.name}: offsets not contiguous"
            expected_next = int(h["last_offset"][-1]) + 1
        else:
            expected_next = base
        all_headers.append(h.copy())
    return np.concatenate(all_headers) if all_headers else np.empty(0)


def check_indexes(log: UnifiedLog) -> None:
    """The in-memory indexes of every segment (rebuilt or loaded) agree with its .log."""
    for segment in log.segments:
        h = scan_batches(segment.log_file.read_bytes(), verify_crc=False).headers
        positions = h["position"]
        last = -1
        for e in segment.offset_index.entries_array():
            offset, pos = int(e["offset"]), int(e["position"])
            assert offset > last, f"{segment}: offset index does not increase at {offset}"
            last = offset
            slot = int(np.searchsorted(positions, pos))
            assert slot < len(h) and int(positions[slot]) == pos, (
                f"{segment}: offset index entry ({offset}, {pos}) not at a batch start")
            assert int(h["last_offset"][slot]) == offset, (
                f"{segment}: offset index entry ({offset}, {pos}) but the batch there ends "
                f"at {int(h['last_offset'][slot])}")
        running = np.maximum.accumulate(h["max_timestamp"]) if len(h) else None
        last_ts = None
        for e in segment.time_index.entries_array():
            ts, offset = int(e["timestamp"]), int(e["offset"])
            assert last_ts is None or ts > last_ts, f"{segment}: time index not increasing"
            last_ts = ts
            slot = int(np.searchsorted(h["last_offset"], offset))
            assert slot < len(h) and int(h["base_offset"][slot]) <= offset, (
                f"{segment}: time index offset {offset} in no batch")
            assert ts <= int(running[slot]), (
                f"{segment}: time index ({ts}, {offset}) above the max timestamp there")


def check_records(log: UnifiedLog, end: int) -> None:
    """Reads the whole log in chunks; every record is the one the writer derives."""
    offset = log.log_start_offset
    assert offset == 0
    while offset < end:
        view, nxt = log.read(offset, 64 * 1024)
        assert nxt > offset, f"read at {offset} made no progress (log end {end})"
        for batch in MemoryRecords(bytes(view)).batches():
            if batch.is_control:  # a transaction marker takes one offset
                assert batch.base_offset == offset == batch.last_offset
                offset += 1
                continue
            for r in batch.records():
                key, value, ts = expected_record(r.offset)
                assert r.offset == offset, f"offset {r.offset} where {offset} was expected"
                assert (r.key, r.value, r.timestamp) == (key, value, ts), (
                    f"record at offset {r.offset} has different content")
                offset += 1
        assert offset == nxt


def check_last_stable_offset(log: UnifiedLog, headers: np.ndarray) -> None:
    """The LSO after recovery is the first offset of the earliest transaction the batches
    leave open (a marker closes its producer's), else the log end: an independent reading
    of the batch headers."""
    open_first: dict[int, int] = {}
    for row in headers:
        producer = int(row["producer_id"])
        if row["is_control"]:
            open_first.pop(producer, None)
        elif row["is_transactional"]:
            open_first.setdefault(producer, int(row["base_offset"]))
    expected = min(open_first.values(), default=log.log_end_offset)
    assert log.last_stable_offset == expected, (
        f"last stable offset {log.last_stable_offset}, the batches say {expected}")


def check_epochs(log: UnifiedLog, headers: np.ndarray) -> None:
    expected, latest = [], None
    for row in headers:
        epoch = int(row["partition_leader_epoch"])
        if latest is None or epoch > latest:
            expected.append((epoch, int(row["base_offset"])))
            latest = epoch
    got = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries]
    assert got == expected, f"leader epoch cache {got}, batches say {expected}"


def dump_log_verify(pdir: Path) -> None:
    files = sorted(str(p) for p in pdir.iterdir())
    proc = engine_in_process("dump-log", "--verify", *files, check=False)
    assert proc.returncode == 0, f"dump-log --verify failed:\n{proc.stderr[-3000:]}"


def verify_after_kill(pdir: Path, state: Path, cfg: Chain, epoch: int, rng: random.Random,
                      in_place: bool, context: str) -> dict:
    acked = read_acked(str(state))
    recovery_point = read_recovery_point(str(state))
    target = pdir
    if not in_place:
        target = pdir.parent / (pdir.name + "-copy")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(pdir, target)
    sizes_before = sum(p.stat().st_size for p in target.glob("*.log"))
    log = open_log(target, cfg, recovery_point)
    try:
        end = log.log_end_offset
        assert end >= acked + 1, (
            f"{context}: acknowledged offsets lost: acked up to {acked}, log end after "
            f"recovery {end} (recovery point {recovery_point}); {acked + 1 - end} offsets lost")
        headers = check_files(target)
        assert (int(headers["last_offset"][-1]) + 1 if len(headers) else 0) == end
        check_indexes(log)
        check_records(log, end)
        check_epochs(log, headers)
        check_last_stable_offset(log, headers)
        sizes_after = sum(p.stat().st_size for p in target.glob("*.log"))
        # appending after recovery works, and is read back
        count = rng.randint(1, 24)
        first, last = log.append_as_leader(build_batch(end, count), epoch)
        assert (first, last) == (end, end + count - 1)
        log.flush()
        view, nxt = log.read(end, 1 << 20)
        got = [(r.offset, r.key, r.value) for r in MemoryRecords(bytes(view)).records()]
        assert got == [(o, *expected_record(o)[:2]) for o in range(end, end + count)]
        assert nxt == end + count
        if in_place:
            crash_writer.Acker(str(state)).ack(last)
            crash_writer.write_recovery_point(str(state), last + 1)
    finally:
        log.close()
    dump_log_verify(target)
    if not in_place:
        shutil.rmtree(target)
    return {"acked": acked, "end": end, "truncated_bytes": sizes_before - sizes_after,
            "segments": len(list(pdir.glob("*.log")))}


# ---- the test ----------------------------------------------------------------------------


@pytest.mark.parametrize("chain", range(CHAINS))
def test_sigkill_during_appends_and_rolls(tmp_path, chain):
    cfg = CHAIN_CONFIGS[chain]
    seed = BASE_SEED + 1000 * chain
    rng = random.Random(seed)
    pdir = tmp_path / "topic-0"
    state = tmp_path / "state"
    state.mkdir()
    kills = kills_per_chain()
    stats = {"open": 0, "append": 0, "torn": 0, "max_end": 0, "roll": 0}
    for k in range(kills):
        epoch = k + 1
        context = f"chain {chain} (seed {seed}, {cfg}), kill {k}"
        where = run_and_kill(pdir, state, cfg, seed + k, epoch, rng)
        stats[where] += 1
        if not pdir.exists():
            continue  # killed before the directory was made
        logs = sorted(pdir.glob("*.log"))
        stats["roll"] += len(logs) > 1 and logs[-1].stat().st_size == 0
        info = verify_after_kill(pdir, state, cfg, epoch, rng, in_place=k % 2 == 1,
                                 context=context)
        stats["torn"] += info["truncated_bytes"] > 0
        stats["max_end"] = max(stats["max_end"], info["end"])
    # a last clean pass over what the chain left
    log = open_log(pdir, cfg, read_recovery_point(str(state)))
    try:
        assert log.log_end_offset >= read_acked(str(state)) + 1
        check_records(log, log.log_end_offset)
    finally:
        log.close()
    dump_log_verify(pdir)
    print(f"\nchain {chain}: {kills} kills ({stats['open']} while opening, "
          f"{stats['append']} while appending), {stats['torn']} torn tails truncated, "
          f"{stats['roll']} right after a roll (empty new segment), "
          f"log end up to {stats['max_end']}, "
          f"{len(list(pdir.glob('*.log')))} segments")
    assert stats["append"] > 0
