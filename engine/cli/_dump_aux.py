"""dump-log for index, snapshot and checkpoint files, each checked against its segment.

Verification follows kafka-dump-log.sh's: an offset-index entry must point at the start of a
batch whose last offset is the entry's offset; a time-index entry (T, O) must name the batch
where the segment's running max timestamp first reached T; a transaction-index entry must end
at an abort marker of the segment.

Producer state (files in a partition directory): the directory's batches are replayed
(`engine.log.producer_state.apply_batches`, from the latest snapshot at or below the first
segment when there is one, else from nothing when the log starts at 0). Every `.snapshot`
must then hold exactly the producers the replay has at its offset, and every `.txnindex`
exactly the aborted transactions (first offset, last offset, last stable offset) whose
markers are in its segment. When the history before the first segment is missing (the log
was trimmed and no snapshot covers it), these two checks are reported as not done.
"""

from __future__ import annotations

import os

import numpy as np

from engine.cli._dump_common import DumpContext, base_offset_of, partition_dir_files_of_kind
from engine.errors import KafkaEngineError
from engine.log import (
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    OffsetIndex,
    PartitionMetadataFile,
    TimeIndex,
    TransactionIndex,
    read_snapshot,
)
from engine.log.producer_state import (
    ProducerStateManager,
    apply_batches,
    list_snapshot_files,
    offset_from_snapshot_file,
)
from engine.records import MemoryRecords, parse_control_record

__all__ = ["AUX_DUMPERS"]


def _segment_scan(index_path: str, suffix: str, ctx: DumpContext):
    """The scan of the .log beside an index and its bytes, or (None, None)."""
    log_path = index_path[: -len(suffix)] + ".log"
    if not os.path.exists(log_path):
        if ctx.verify:
            ctx.problem(index_path, f"cannot verify: segment {os.path.basename(log_path)} "
                                    "is missing")
        return None, None
    with open(log_path, "rb") as f:
        data = f.read()
    return MemoryRecords(data, file=log_path).scan(), data


def _index_entries(cls, path: str, ctx: DumpContext) -> np.ndarray:
    """Entries of an offset or time index opened read-only (sanity-checked when verifying)."""
    index = cls(path, base_offset_of(path), writable=False)
    try:
        if ctx.verify:
            index.sanity_check()
        return index.entries_array()
    finally:
        index.close()


def dump_offset_index(path: str, ctx: DumpContext) -> None:
    entries = _index_entries(OffsetIndex, path, ctx)
    for e in entries:
        ctx.line(f"offset: {e['offset']} position: {e['position']}")
    if not ctx.verify:
        return
    headers, _ = _segment_scan(path, ".index", ctx)
    if headers is None:
        return
    positions = headers["position"]
    last = -1
    for i, e in enumerate(entries):
        offset, pos = int(e["offset"]), int(e["position"])
        if offset <= last:
            ctx.problem(path, f"entry {i}: offset {offset} does not increase (previous {last})")
            return
        last = offset
        slot = int(np.searchsorted(positions, pos))
        if slot >= len(positions) or positions[slot] != pos:
            ctx.problem(path, f"entry {i}: position {pos} (offset {offset}) is not the start "
                              "of a batch in the segment")
            return
        if int(headers["last_offset"][slot]) != offset:
            ctx.problem(path, f"entry {i}: index offset {offset} but the batch at position "
                              f"{pos} ends at offset {int(headers['last_offset'][slot])}")
            return


def dump_time_index(path: str, ctx: DumpContext) -> None:
    entries = _index_entries(TimeIndex, path, ctx)
    for e in entries:
        ctx.line(f"timestamp: {e['timestamp']} offset: {e['offset']}")
    if not ctx.verify:
        return
    headers, _ = _segment_scan(path, ".timeindex", ctx)
    if headers is None:
        return
    running_max = (np.maximum.accumulate(headers["max_timestamp"]) if len(headers)
                   else headers["max_timestamp"])
    last_ts = None
    for i, e in enumerate(entries):
        ts, offset = int(e["timestamp"]), int(e["offset"])
        if last_ts is not None and ts <= last_ts:
            ctx.problem(path, f"entry {i}: timestamp {ts} does not increase (previous {last_ts})")
            return
        last_ts = ts
        # the batch holding the offset (Kafka stores the batch's last offset; older brokers
        # stored the record's own offset, which lies inside the same batch)
        slot = int(np.searchsorted(headers["last_offset"], offset))
        if slot >= len(headers) or int(headers["base_offset"][slot]) > offset:
            ctx.problem(path, f"entry {i}: offset {offset} is in no batch of the segment")
            return
        before = int(running_max[slot - 1]) if slot else -1
        if not (before < ts <= int(running_max[slot])):
            ctx.problem(path, f"entry {i}: timestamp {ts} at offset {offset}, but the "
                              f"segment's max timestamp reaches {int(running_max[slot])} "
                              f"there (and was {before} before that batch)")
            return


def dump_txn_index(path: str, ctx: DumpContext) -> None:
    base = base_offset_of(path)
    index = TransactionIndex(base, path)
    try:
        if ctx.verify:
            index.sanity_check()
        entries = index.all_aborted_txns()
    finally:
        index.close()
    for t in entries:
        ctx.line(f"version: {t.version} producerId: {t.producer_id} firstOffset: "
                 f"{t.first_offset} lastOffset: {t.last_offset} lastStableOffset: "
                 f"{t.last_stable_offset}")
    if not ctx.verify or not entries:
        return
    headers, data = _segment_scan(path, ".txnindex", ctx)
    if headers is None:
        return
    batches = {int(h["last_offset"]): h for h in headers[headers["is_control"]]}
    mr = MemoryRecords(data)
    for i, t in enumerate(entries):
        h = batches.get(t.last_offset)
        if h is None:
            ctx.problem(path, f"entry {i}: no control batch ends at offset {t.last_offset}")
            return
        batch = next(b for b in mr.batches() if b.position == int(h["position"]))
        (marker,) = batch.records()[:1] or [None]
        control = parse_control_record(marker.key, marker.value) if marker else None
        if control is None or control.type.name != "ABORT" or batch.producer_id != t.producer_id:
            ctx.problem(path, f"entry {i}: the control batch at offset {t.last_offset} is "
                              f"not an ABORT of producer {t.producer_id}")
            return
    replay = _replay(os.path.dirname(path) or ".", ctx)
    if replay is None:
        return
    expected = [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                for t in replay.aborted.get(base_offset_of(path), [])]
    got = [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
           for t in entries]
    if got != expected:
        ctx.problem(path, f"aborted transactions (producer id, first offset, last offset, "
                          f"last stable offset) {got} differ from those the segment's markers "
                          f"give {expected}")


def dump_snapshot(path: str, ctx: DumpContext) -> None:
    entries = read_snapshot(path)  # CRC and layout are checked on every read
    for e in entries:
        ctx.line(f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                 f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                 f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp} "
                 f"coordinatorEpoch: {e.coordinator_epoch} "
                 f"currentTxnFirstOffset: {e.current_txn_first_offset}")
    if not ctx.verify:
        return
    replay = _replay(os.path.dirname(path) or ".", ctx)
    if replay is None:
        return
    offset = offset_from_snapshot_file(path)
    if offset < replay.start_offset:
        ctx.line(f"{path}: not verified: below the replay's start at offset "
                 f"{replay.start_offset}")
        return
    if offset not in replay.snapshots:
        ctx.problem(path, f"snapshot offset {offset} is beyond the log end offset "
                          f"{replay.log_end_offset}")
        return
    expected = {e.producer_id: e for e in replay.snapshots[offset]}
    got = {e.producer_id: e for e in entries}
    for producer_id in sorted(set(expected) | set(got)):
        if expected.get(producer_id) != got.get(producer_id):
            ctx.problem(path, f"producer {producer_id}: snapshot has {got.get(producer_id)}, "
                              f"the log up to offset {offset} gives "
                              f"{expected.get(producer_id)}")
            return


class _Replay:
    """Producer state of a partition directory replayed from its segments."""

    def __init__(self):
        self.snapshots: dict[int, list] = {}   # snapshot offset -> expected entries
        self.aborted: dict[int, list] = {}     # segment base -> expected AbortedTxns
        self.log_end_offset = 0
        self.start_offset = 0


def _replay(directory: str, ctx: DumpContext) -> _Replay | None:
    """The replay of `directory` (cached per directory), None when it cannot be complete."""
    cache = ctx.__dict__.setdefault("_producer_replays", {})
    key = os.path.abspath(directory)
    if key in cache:
        return cache[key]
    logs = partition_dir_files_of_kind(directory, ".log")
    first = base_offset_of(logs[0]) if logs else 0
    state = ProducerStateManager(directory)
    snapshots = list_snapshot_files(directory)
    start = [path for offset, path in snapshots if offset <= first]
    replay: _Replay | None = _Replay()
    if start:
        try:
            state.load_snapshot(start[-1])
        except KafkaEngineError:
            start = []  # reported by its own dump
    if not start and first > 0:
        ctx.line(f"{directory}: producer state not verified: the log starts at offset "
                 f"{first} and no snapshot covers what came before")
        replay = None
    if replay is not None:
        replay.start_offset = state.map_end_offset
    pending = [offset for offset, _ in snapshots if offset >= state.map_end_offset]
    for path in logs:
        if replay is None:
            break
        base = base_offset_of(path)
        with open(path, "rb") as f:
            data = f.read()
        headers = MemoryRecords(data, file=path).scan()
        headers = headers[headers["base_offset"] >= state.map_end_offset]
        aborted = replay.aborted.setdefault(base, [])
        done = 0
        while pending and done <= len(headers):
            cut = done + int(np.searchsorted(headers["base_offset"][done:], pending[0]))
            apply_batches(state, data, headers[done:cut], aborted.append)
            done = cut
            if cut == len(headers):
                break
            replay.snapshots[pending.pop(0)] = state.snapshot_entries()
        apply_batches(state, data, headers[done:], aborted.append)
    if replay is not None:
        replay.log_end_offset = state.map_end_offset
        while pending and pending[0] <= state.map_end_offset:
            replay.snapshots[pending.pop(0)] = state.snapshot_entries()
    cache[key] = replay
    return replay


def dump_leader_epoch_checkpoint(path: str, ctx: DumpContext) -> None:
    entries = LeaderEpochCheckpointFile(path, create=False).read()
    last = None
    for epoch, start in entries:
        ctx.line(f"epoch: {epoch} startOffset: {start}")
        if ctx.verify and last is not None and (epoch <= last[0] or start < last[1]):
            ctx.problem(path, f"epoch {epoch} at {start} does not follow epoch {last[0]} "
                              f"at {last[1]}")
        last = (epoch, start)


def dump_partition_metadata(path: str, ctx: DumpContext) -> None:
    meta = PartitionMetadataFile(path).read()
    ctx.line(f"version: {meta.version} topic_id: {meta.topic_id}")


def dump_offset_checkpoint(path: str, ctx: DumpContext) -> None:
    for tp, offset in sorted(OffsetCheckpointFile(path, create=False).read().items()):
        ctx.line(f"{tp[0]} {tp[1]} {offset}")


def _checked(fn):
    """Errors of the file's own format become verify problems naming the file."""
    def run(path: str, ctx: DumpContext) -> None:
        try:
            fn(path, ctx)
        except KafkaEngineError as exc:
            ctx.problem(path, str(exc.with_file(path)))
            if not ctx.verify:
                raise
    return run


AUX_DUMPERS = [
    (".index", _checked(dump_offset_index)),
    (".timeindex", _checked(dump_time_index)),
    (".txnindex", _checked(dump_txn_index)),
    (".snapshot", _checked(dump_snapshot)),
    ("leader-epoch-checkpoint", _checked(dump_leader_epoch_checkpoint)),
    ("partition.metadata", _checked(dump_partition_metadata)),
    ("offset-checkpoint", _checked(dump_offset_checkpoint)),
]
