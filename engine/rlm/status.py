"""`RemoteLogManager.status()`: one dict per tiered partition."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.remote.metadata import RemoteLogSegmentState
from engine.rlm.copier import copy_lag
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.remote.metadata_manager import RemoteLogMetadataManager

__all__ = ["partition_status"]


def partition_status(st: PartitionState, *, rlmm: RemoteLogMetadataManager, now_ms: int,
                     retention_error: Callable[[str, int], str | None]) -> dict:
    """Offsets of both tiers, sizes, copy lag, the copy in progress (and for how long), the
    last errors of one partition, and whether it is offline (its remote log metadata cannot
    be served: `offline_error` says why, the remote fields are None).

    Args:
        st: the partition's state.
        rlmm: lists the partition's remote segments.
        now_ms: the time the running copy and the retry delays are measured to.
        retention_error: (topic, partition) -> the LogManager's last local retention
            error of the partition, if any.
    """
    unified = st.log
    offline = st.offline_error
    segments = [] if offline is not None else list(rlmm.list_remote_log_segments(st.tip))
    finished = [m for m in segments if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    lag_bytes, lag_segments = copy_lag(unified)
    in_progress = st.copy.copy_in_progress
    row = {
        "topic": st.topic, "partition": st.partition, "topic_id": str(st.tip.topic_id),
        "role": "leader" if st.is_leader else "follower",
        "leader_epoch": st.leader_epoch,
        "log_start_offset": unified.log_start_offset,
        "local_log_start_offset": unified.local_log_start_offset,
        "log_end_offset": unified.log_end_offset,
        "highest_offset_in_remote_storage": unified.highest_offset_in_remote_storage,
        "remote_log_start_offset": finished[0].start_offset if finished else -1,
        "remote_log_end_offset": max((m.end_offset for m in finished), default=-1),
        "remote_segments": len(finished),
        "remote_metadata_entries": len(segments),
        "remote_size_bytes": sum(m.segment_size_in_bytes for m in finished),
        "local_segments": len(unified.segments),
        "local_size_bytes": unified.size_in_bytes,
        "copy_lag_bytes": lag_bytes, "copy_lag_segments": lag_segments,
        "copy_disabled": bool(unified.remote_log_copy_disabled),
        "copy_cancelled": st.copy.copy_cancelled,
        # set: the log start offset lies in a gap of the remote metadata; nothing is
        # tiered or expired and reads below the local start fail until an operator acts
        "remote_metadata_gap": st.copy.metadata_gap,
        # set: copying stopped at this damaged local segment (engine.rlm.copier)
        "corrupt_segment": None if st.copy.corrupt_segment is None else {
            k: v for k, v in st.copy.corrupt_segment.items() if k != "identity"},
        "copy_in_progress": None if in_progress is None else {
            "base_offset": in_progress[0], "running_ms": now_ms - in_progress[1]},
        "copy_failures": st.copy.copy_failures,
        "next_copy_retry_ms": max(0, st.copy.next_copy_attempt_ms - now_ms),
        "last_copy_error": st.copy.last_copy_error,
        "last_expiration_error": st.last_expiration_error,
        "expiration_failures": st.expiration_failures,
        "next_expiration_retry_ms": max(0, st.next_expiration_attempt_ms - now_ms),
        "last_fetch_error": st.last_fetch_error,
        "last_local_retention_error": (st.last_local_retention_error or
                                       retention_error(st.topic, st.partition)),
        "offline": offline is not None,
        "offline_error": None if offline is None else f"{type(offline).__name__}: {offline}",
    }
    if offline is not None:  # what the remote metadata would say is unknown
        row.update(dict.fromkeys(_FROM_REMOTE_METADATA))
    return row


#: the fields computed from the RLMM's segment list: None for an offline partition
_FROM_REMOTE_METADATA = ("remote_log_start_offset", "remote_log_end_offset",
                         "remote_segments", "remote_metadata_entries", "remote_size_bytes")
