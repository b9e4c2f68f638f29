"""`dump-log`: print and verify Kafka log files (kafka-dump-log.sh's job).

`--json` writes one object per record with exactly the keys of RECORD_JSON_KEYS; this is a
contract other tools read. Problems found by `--verify` go to stderr as
`<file>: <problem>` and make the exit status 1; an unreadable or unknown file gives 2.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable

from engine.cli._dump_aux import AUX_DUMPERS
from engine.cli._dump_common import DumpContext, base_offset_of, partition_dir_files_of_kind
from engine.errors import KafkaEngineError
from engine.records import MemoryRecords, codec_name

__all__ = ["RECORD_JSON_KEYS", "DumpContext", "base_offset_of", "dump_file",
           "partition_dir_files", "run"]

RECORD_JSON_KEYS = (
    "offset", "timestamp", "timestamp_type", "key", "value", "headers", "batch_base_offset",
    "magic", "compression", "is_transactional", "is_control", "producer_id", "producer_epoch",
    "base_sequence", "partition_leader_epoch",
)
_TS_TYPE_NAMES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _bool(v) -> str:
    return "true" if v else "false"


def dump_segment(path: str, ctx: DumpContext) -> None:
    with open(path, "rb") as f:
        data = f.read()
    records = MemoryRecords(data, file=path, max_decompressed_bytes=ctx.max_decompressed_bytes)
    ctx.line(f"Log starting offset: {base_offset_of(path)}")
    headers = records.scan(verify_crc=True)
    last_offset = -1
    for batch in records.batches():
        _dump_batch(path, batch, ctx)
        if batch.magic == 2 and batch.last_offset < batch.base_offset:
            ctx.problem(path, f"batch at position {batch.position} has last offset "
                              f"{batch.last_offset} below its base offset {batch.base_offset}")
        if batch.last_offset <= last_offset and ctx.verify:
            ctx.problem(path, f"out of order offsets: batch at position {batch.position} ends "
                              f"at {batch.last_offset} after {last_offset}")
        last_offset = max(last_offset, batch.last_offset)
    if records.partial_bytes:
        ctx.line(f"Found {records.partial_bytes} invalid bytes at the end of "
                 f"{os.path.basename(path)}")
        ctx.problem(path, f"{records.partial_bytes} bytes of a partial batch at position "
                          f"{records.valid_bytes}")
    ctx.line(f"Batches: {len(headers)}, records valid up to position {records.valid_bytes}")


def _dump_batch(path: str, batch, ctx: DumpContext) -> None:
    valid = batch.is_valid()
    if not valid:
        ctx.problem(path, f"CRC mismatch in batch at position {batch.position} (offset "
                          f"{batch.last_offset}, stored crc {batch.crc})")
    need_records = ctx.print_data_log or ctx.as_json or ctx.verify
    records = []
    if need_records:
        try:
            records = batch.records()
        except KafkaEngineError as exc:
            ctx.problem(path, str(exc.with_file(path)))
    if not ctx.as_json:
        ctx.line(_batch_line(batch, valid))
        if ctx.print_data_log:
            for r in records:
                ctx.line(_record_line(batch, r))
        return
    base = records[0].offset if (batch.magic < 2 and records) else batch.base_offset
    for r in records:
        ctx.out.write(json.dumps(_record_json(batch, r, base), separators=(",", ":")) + "\n")


def _batch_line(batch, valid: bool) -> str:
    ts_name = _TS_TYPE_NAMES[int(batch.timestamp_type)]
    if batch.magic < 2:
        return (f"offset: {batch.last_offset} position: {batch.position} {ts_name}: "
                f"{batch.max_timestamp} size: {batch.size_in_bytes} magic: {batch.magic} "
                f"compresscodec: {codec_name(int(batch.compression_type))} crc: {batch.crc} "
                f"isvalid: {_bool(valid)}")
    horizon = batch.delete_horizon_ms
    return (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.record_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {_bool(batch.is_transactional)} "
            f"isControl: {_bool(batch.is_control)} "
            f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else horizon} "
            f"position: {batch.position} {ts_name}: {batch.max_timestamp} "
            f"size: {batch.size_in_bytes} magic: {batch.magic} "
            f"compresscodec: {codec_name(int(batch.compression_type))} crc: {batch.crc} "
            f"isvalid: {_bool(valid)}")


def _payload(value: bytes | None) -> str:
    if value is None:
        return "null"
    return value.decode("utf-8", "replace")


def _record_line(batch, r) -> str:
    ts_name = _TS_TYPE_NAMES[int(r.timestamp_type)]
    parts = [f"| offset: {r.offset} {ts_name}: {r.timestamp}",
             f"keySize: {-1 if r.key is None else len(r.key)}",
             f"valueSize: {-1 if r.value is None else len(r.value)}"]
    if batch.magic == 2:
        parts.append(f"sequence: {r.sequence}")
        parts.append("headerKeys: [" + ",".join(k for k, _ in r.headers) + "]")
    if batch.is_control and r.key is not None:
        from engine.records import parse_control_record
        try:
            control = parse_control_record(r.key, r.value)
            extra = (f" coordinatorEpoch: {control.coordinator_epoch}"
                     if control.coordinator_epoch is not None else "")
            parts.append(f"endTxnMarker: {control.type.name}{extra}"
                         if control.coordinator_epoch is not None
                         else f"controlType: {control.type.name}({control.type_id})")
        except KafkaEngineError as exc:
            parts.append(f"controlRecord: invalid ({exc.reason})")
    else:
        if r.key is not None:
            parts.append(f"key: {_payload(r.key)}")
        parts.append(f"payload: {_payload(r.value)}")
    return " ".join(parts)


def _record_json(batch, r, batch_base_offset: int) -> dict:
    v2 = batch.magic == 2
    return {
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestamp_type": _TS_TYPE_NAMES[int(r.timestamp_type)],
        "key": _b64(r.key),
        "value": _b64(r.value),
        "headers": [[k, _b64(v)] for k, v in r.headers],
        "batch_base_offset": batch_base_offset,
        "magic": batch.magic,
        "compression": codec_name(int(batch.compression_type)),
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence if v2 else -1,
        "partition_leader_epoch": batch.partition_leader_epoch if v2 else None,
    }


def _dumper_for(path: str) -> Callable[[str, DumpContext], None] | None:
    name = os.path.basename(path)
    if name.endswith(".log") or name.endswith(".checkpoint"):
        return dump_segment  # KRaft snapshots (<offset>-<epoch>.checkpoint) hold batches too
    for key, fn in AUX_DUMPERS:
        if name.endswith(key) or name == key:
            return fn
    return None


def dump_file(path: str, ctx: DumpContext) -> None:
    fn = _dumper_for(path)
    if fn is None:
        raise ValueError(f"{path}: unknown file type (expected .log, .index, .timeindex, "
                         ".txnindex, .snapshot, .checkpoint, leader-epoch-checkpoint, "
                         "partition.metadata or an offset checkpoint)")
    ctx.line(f"Dumping {path}")
    fn(path, ctx)


_SEGMENT_SUFFIX_ORDER = {".log": 0, ".index": 1, ".timeindex": 2, ".txnindex": 3,
                         ".snapshot": 4}


def partition_dir_files(directory: str) -> list[str]:
    """A partition directory's files dump-log knows, in order: per base offset the .log,
    .index, .timeindex, .txnindex and .snapshot, then the other known files by name. Files
    it does not know are skipped (named on stderr)."""
    segment_files, others = [], []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        stem, _, suffix = name.partition(".")
        if stem.isdigit() and len(stem) == 20 and "." + suffix in _SEGMENT_SUFFIX_ORDER:
            segment_files.append((int(stem), _SEGMENT_SUFFIX_ORDER["." + suffix], path))
        elif _dumper_for(path) is not None:
            others.append(path)
        else:
            print(f"skipping {path}: not a file dump-log knows", file=sys.stderr)
    return [p for _, _, p in sorted(segment_files)] + others


def verify_segment_chain(directory: str, ctx: DumpContext) -> None:
    """End to end over a partition directory: each segment's batches start at or after its
    base offset, and no segment overlaps the offsets of the one before it."""
    previous_last, previous_name = None, None
    for path in partition_dir_files_of_kind(directory, ".log"):
        base = base_offset_of(path)
        with open(path, "rb") as f:
            data = f.read()
        headers = MemoryRecords(data, file=path).scan(verify_crc=False)
        if previous_last is not None and base <= previous_last:
            ctx.problem(path, f"segment base offset {base} overlaps {previous_name}, which "
                              f"ends at offset {previous_last}")
        if len(headers):
            first = int(headers["base_offset"][0])
            if first < base:
                ctx.problem(path, f"first batch at offset {first} is below the segment's "
                                  f"base offset {base}")
            previous_last = int(headers["last_offset"].max())
            previous_name = os.path.basename(path)


def run(args) -> int:
    ctx = DumpContext(out=sys.stdout, print_data_log=args.print_data_log, verify=args.verify,
                      as_json=args.json, max_decompressed_bytes=args.max_decompressed_bytes)
    status = 0
    done = 0
    for arg in args.files:
        is_dir = os.path.isdir(arg)
        try:
            paths = partition_dir_files(arg) if is_dir else [arg]
        except OSError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        for path in paths:
            try:
                dump_file(path, ctx)
                done += 1
            except BrokenPipeError:
                raise
            except (OSError, ValueError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                status = 2
        if is_dir and ctx.verify:
            try:
                verify_segment_chain(arg, ctx)
            except (OSError, KafkaEngineError) as exc:
                ctx.problem(arg, str(exc))
    if ctx.verify and ctx.problems:
        for p in ctx.problems:
            print(p, file=sys.stderr)
        print(f"verify: {len(ctx.problems)} problem(s); first: {ctx.problems[0]}", file=sys.stderr)
        return 1
    if ctx.verify and status == 0:
        print(f"verify: OK ({done} file(s))", file=sys.stderr)
    return status

