"""ListOffsets with tiered storage (Kafka's UnifiedLog.fetchOffsetByTimestamp and
RemoteLogManager.findOffsetByTimestamp).

Specs: -2 earliest (the log start offset, possibly in the remote tier), -1 latest (the log
end offset), -3 max-timestamp (the first record carrying the largest timestamp of the local
log, which is where Kafka answers it from), -4 earliest-local (the local log start offset),
-5 latest-tiered (the highest offset in remote storage; (-1, -1) when nothing is tiered or
tiering is off), or a timestamp in ms: the first record at or after it, searched in the remote tier
first (the
first copied segment of the lineage from the log start whose max timestamp reaches it, using
its cached time index) and then in the local segments. Every answer is
(offset, leader epoch); a timestamp beyond every record answers (-1, -1).
"""

from __future__ import annotations

from engine.remote.metadata import RemoteLogSegmentState
from engine.remote.remote_log import SegmentSpan
from engine.rlm.lineage import (
    NO_PARTITION_LEADER_EPOCH,
    epochs_with_offsets,
    is_remote_segment_within_leader_epochs,
)
from engine.rlm.reader import read_local, remote_log

__all__ = [
    "EARLIEST",
    "EARLIEST_LOCAL",
    "LATEST",
    "LATEST_TIERED",
    "MAX_TIMESTAMP",
    "SPECS",
    "list_offsets",
    "parse_spec",
]

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
SPECS = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP,
         "earliest-local": EARLIEST_LOCAL, "latest-tiered": LATEST_TIERED}
_NOT_FOUND = (-1, -1)


def parse_spec(spec) -> int:
    """-1/-2/-3/-4/-5, a name of SPECS, or a timestamp >= 0 (an int or its digits).
    ValueError for anything else."""
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text in SPECS:
            return SPECS[text]
        try:
            spec = int(text)
        except ValueError:
            raise ValueError(f"offset spec {spec!r} is not one of {sorted(SPECS)} nor a "
                             "timestamp in ms") from None
    if isinstance(spec, bool) or not isinstance(spec, int):
        # every caller takes a bad spec, of any type, as the ValueError documented above
        raise ValueError(
            f"offset spec {spec!r} must be an int or one of {sorted(SPECS)}")
    if spec < 0 and spec not in SPECS.values():
        raise ValueError(f"offset spec {spec} is not supported: use -1 (latest), -2 "
                         "(earliest), -3 (max-timestamp), -4 (earliest-local), -5 "
                         "(latest-tiered) or a timestamp")
    return spec


def _epoch(cache, offset: int) -> int:
    epoch = cache.epoch_for_offset(offset)
    return NO_PARTITION_LEADER_EPOCH if epoch is None else epoch


def list_offsets(log_reader, unified, st, spec) -> tuple[int, int]:
    """(offset, leader epoch) for `spec` on `unified`; `st` is the RLM's partition state
    (None when the partition is not tiered) and `log_reader` its RemoteLogReader
    (engine.rlm.fetch: the RLMM, RSM and index cache of a remote timestamp search)."""
    spec = parse_spec(spec)
    cache = unified.leader_epoch_cache
    if spec == LATEST:
        latest = cache.latest_epoch
        return unified.log_end_offset, NO_PARTITION_LEADER_EPOCH if latest is None else latest
    if spec == EARLIEST:
        start = unified.log_start_offset
        entries = cache.entries
        epoch = entries[0].epoch if entries and entries[0].start_offset <= start else -1
        return start, epoch
    if spec == MAX_TIMESTAMP:
        found = unified.fetch_offset_by_timestamp(MAX_TIMESTAMP)
        if found is None:
            return _NOT_FOUND
        offset, _, epoch = found
        return offset, NO_PARTITION_LEADER_EPOCH if epoch is None else epoch
    if spec == EARLIEST_LOCAL:
        local = unified.local_log_start_offset
        return local, _epoch(cache, local)
    if spec == LATEST_TIERED:
        if st is None or not unified.remote_log_enabled:
            return _NOT_FOUND
        highest = unified.highest_offset_in_remote_storage
        if highest < 0:
            return _NOT_FOUND
        return highest, _epoch(cache, highest)
    found = None
    if st is not None and unified.remote_log_enabled:
        found = find_remote_offset_by_timestamp(log_reader, st, spec, unified.log_start_offset)
    if found is None:
        found = find_local_offset_by_timestamp(unified, spec)
    return found if found is not None else _NOT_FOUND


def _target_segment(log_reader, st, timestamp: int, starting_offset: int):
    unified = st.log
    cache = unified.leader_epoch_cache
    entries = cache.entries
    lineage = epochs_with_offsets(entries)
    epoch = cache.epoch_for_offset(starting_offset)
    if epoch is None:
        return None
    leo = unified.log_end_offset
    for entry in entries:
        if entry.epoch < epoch:
            continue
        for md in log_reader.rlmm.list_remote_log_segments(st.tip, entry.epoch):
            if (md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                    and md.max_timestamp_ms >= timestamp and md.end_offset >= starting_offset
                    and is_remote_segment_within_leader_epochs(md, leo, lineage)):
                return md
    return None


def find_remote_offset_by_timestamp(log_reader, st, timestamp: int,
                                    starting_offset: int) -> tuple[int, int] | None:
    """Kafka's RemoteLogManager.findOffsetByTimestamp: None when the answer is not in a
    remote segment below the first local segment."""
    md = _target_segment(log_reader, st, timestamp, starting_offset)
    if md is None:
        return None
    segments = st.log.segments
    if segments and md.start_offset >= segments[0].base_offset:
        return None  # held locally too: the local search answers
    # Kafka searches that segment alone: None when the records reaching the timestamp lie
    # below starting_offset, and the local search answers then
    return remote_log(log_reader, st).offset_for_timestamp(
        timestamp, [SegmentSpan(md, md.end_offset + 1)], starting_offset)


def find_local_offset_by_timestamp(unified, timestamp: int) -> tuple[int, int] | None:
    """The first local segment whose largest timestamp reaches `timestamp` answers (Kafka's
    rule), from the log start offset on."""
    start = unified.log_start_offset
    for segment in unified.segments:
        if segment.size_in_bytes and segment.largest_timestamp >= timestamp:
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is None:
                return None
            # the answer is where a consumer seeks: the batch holding it is checked as a
            # fetch of it checks it (a damaged base offset would move every offset in it)
            read_local(unified, "", 0, found.offset, 1, True, "read_uncommitted")
            return found.offset, -1 if found.leader_epoch is None else found.leader_epoch
    return None
