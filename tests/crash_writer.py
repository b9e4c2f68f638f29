"""The writer that tests/test_crash_recovery.py kills with SIGKILL (not a test module).

    python tests/crash_writer.py PARTITION_DIR STATE_DIR --seed S --epoch E \
        --flush-every K [--segment-bytes N] [--index-interval-bytes N] \
        [--segment-index-bytes N] [--checkpoint-every M]

Opens the partition directory with `UnifiedLog.open` (unclean: recovery from the recovery
point in STATE_DIR/recovery-point, else 0), prints "ready <log end offset>" on stdout, then
appends batches as leader with leader epoch E forever, until killed. Every K batches it
calls `flush()` and only then acknowledges: it appends "<last flushed offset>\\n" to
STATE_DIR/acked and fsyncs it. Every M flushes it also writes STATE_DIR/recovery-point
(temp file, fsync, rename, directory fsync), the way a broker checkpoints recovery points.

Record contents are a pure function of the offset (see `expected_record`), so the parent
can check every surviving record without knowing what the writer did. Batches hold
1..24 records of 10..400-byte values, drawn from the seed. Data batches come from an
idempotent producer (id 1, sequence = base offset) or from transactions of other producers
(one open at a time), which end with a COMMIT or ABORT marker (a control batch taking one
offset), so the producer state, its snapshots and the .txnindex are crashed too; at start
the writer aborts the transactions a killed predecessor left open.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.log import UnifiedLog
from engine.records import RecordBatchBuilder, build_end_txn_marker

BASE_TIMESTAMP = 1_700_000_000_000
ACKED_FILE = "acked"
RECOVERY_POINT_FILE = "recovery-point"


def expected_record(offset: int) -> tuple[bytes, bytes, int]:
    """(key, value, timestamp) of the record at `offset`."""
    size = 10 + (offset * 7919) % 391
    stem = b"value-%d|" % offset
    value = (stem * (size // len(stem) + 1))[:size]
    # timestamps rise with offsets, with small dips, so the time index sees both
    ts = BASE_TIMESTAMP + offset * 3 - (offset % 5)
    return b"key-%d" % offset, value, ts


IDEMPOTENT_PRODUCER = 1


def build_batch(base_offset: int, count: int, producer_id: int = IDEMPOTENT_PRODUCER,
                transactional: bool = False) -> bytes:
    builder = RecordBatchBuilder(base_offset=base_offset, producer_id=producer_id,
                                 producer_epoch=0, base_sequence=base_offset % 2**31,
                                 is_transactional=transactional)
    for offset in range(base_offset, base_offset + count):
        key, value, ts = expected_record(offset)
        builder.append(value, key=key, timestamp=ts)
    return builder.build()


def read_acked(state_dir: str) -> int:
    """The last acknowledged offset (-1 when none): the last complete line of `acked`."""
    try:
        with open(os.path.join(state_dir, ACKED_FILE), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return -1
    lines = [line for line in data.split(b"\n")[:-1] if line]  # a torn last line is no ack
    return int(lines[-1]) if lines else -1


def read_recovery_point(state_dir: str) -> int:
    try:
        with open(os.path.join(state_dir, RECOVERY_POINT_FILE), "rb") as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0


def write_recovery_point(state_dir: str, offset: int) -> None:
    path = os.path.join(state_dir, RECOVERY_POINT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"%d\n" % offset)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Acker:
    def __init__(self, state_dir: str):
        self.fd = os.open(os.path.join(state_dir, ACKED_FILE),
                          os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def ack(self, offset: int) -> None:
        os.write(self.fd, b"%d\n" % offset)
        os.fsync(self.fd)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("partition_dir")
    p.add_argument("state_dir")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--flush-every", type=int, default=1)
    p.add_argument("--checkpoint-every", type=int, default=4)
    p.add_argument("--segment-bytes", type=int, default=32 * 1024)
    p.add_argument("--index-interval-bytes", type=int, default=1024)
    p.add_argument("--segment-index-bytes", type=int, default=4096)
    p.add_argument("--max-batches", type=int, default=0, help="stop after N (0: never)")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    log = UnifiedLog.open(args.partition_dir, segment_bytes=args.segment_bytes,
                          index_interval_bytes=args.index_interval_bytes,
                          segment_index_bytes=args.segment_index_bytes,
                          recovery_point=read_recovery_point(args.state_dir),
                          clean_shutdown=False)
    acker = Acker(args.state_dir)
    print(f"ready {log.log_end_offset}", flush=True)
    batches = flushes = 0
    # Transactions a killed writer left open are aborted first, as a transaction
    # coordinator completes them after a restart.
    for _, producer_id in log.producer_state.ongoing_transactions():
        base = log.log_end_offset
        log.append_as_leader(build_end_txn_marker(
            False, base_offset=base, producer_id=producer_id, producer_epoch=0,
            timestamp=expected_record(base)[2], coordinator_epoch=args.epoch), args.epoch)
    open_txn = None  # producer id of this writer's open transaction
    while not args.max_batches or batches < args.max_batches:
        base = log.log_end_offset
        r = rng.random()
        if open_txn is not None and r < 0.3:
            commit = rng.random() < 0.5
            log.append_as_leader(build_end_txn_marker(
                commit, base_offset=base, producer_id=open_txn, producer_epoch=0,
                timestamp=expected_record(base)[2], coordinator_epoch=args.epoch), args.epoch)
            open_txn = None
        elif open_txn is not None and r < 0.6:
            log.append_as_leader(build_batch(base, rng.randint(1, 24), open_txn, True),
                                 args.epoch)
        elif open_txn is None and r < 0.15:
            open_txn = 100 + base
            log.append_as_leader(build_batch(base, rng.randint(1, 24), open_txn, True),
                                 args.epoch)
        else:
            log.append_as_leader(build_batch(base, rng.randint(1, 24)), args.epoch)
        batches += 1
        if batches % args.flush_every == 0:
            log.flush()
            end = log.log_end_offset
            acker.ack(end - 1)
            flushes += 1
            if flushes % args.checkpoint_every == 0:
                write_recovery_point(args.state_dir, end)
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
