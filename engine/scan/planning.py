"""Driver-side planning as pure functions over RemoteLogSegmentMetadata lists.

A partition's remote history is the chain of COPY_SEGMENT_FINISHED segments of its latest
leader-epoch lineage (several segments may hold the same offsets after a leader change: the
newest lineage wins, as a consumer of the new leader would see). A scan of [start, end) is
cut into byte ranges of whole record batches using the segment's offset index, then packed
into Spark input partitions of about `max_bytes`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import OffsetOutOfRangeError
from engine.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState

__all__ = [
    "ChainLink",
    "SegmentRange",
    "end_position_for_offset",
    "lineage",
    "pack_ranges",
    "plan_partition",
    "position_for_offset",
    "tier_bounds",
]


@dataclass(frozen=True, slots=True)
class ChainLink:
    """A segment of the lineage and the offsets it is trusted for: [start_offset, end)."""

    segment: RemoteLogSegmentMetadata
    end: int  # exclusive; below segment.end_offset + 1 when a newer lineage overrides the tail

    @property
    def start_offset(self) -> int:
        return self.segment.start_offset


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """What one task reads of one segment: bytes [start_position, end_position) (whole
    batches), records with offsets in [min_offset, max_offset). Picklable."""

    topic: str
    partition: int
    segment: RemoteLogSegmentMetadata
    start_position: int
    end_position: int
    min_offset: int
    max_offset: int
    min_timestamp: int | None = None      # batches whose max timestamp is below are skipped
    aborted: tuple[tuple[int, int, int], ...] | None = None  # (producer id, first, last)

    @property
    def size(self) -> int:
        return self.end_position - self.start_position


def lineage(segments: Iterable[RemoteLogSegmentMetadata]) -> list[ChainLink]:
    """The FINISHED segments of the newest leader-epoch lineage, in offset order.

    Walking back from the tip (highest last epoch, then highest end offset): before the
    current segment's start, the next one is the segment of the highest last epoch not above
    the current first epoch (ties: the higher end offset, then the later event). Offsets a
    chosen segment shares with a later chosen one belong to the later one.
    """
    done = [s for s in segments if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    if not done:
        return []

    def rank(s):
        return (s.last_epoch, s.end_offset, s.event_timestamp_ms)

    current = max(done, key=rank)
    chain = [ChainLink(current, current.end_offset + 1)]
    while True:
        cursor = current.start_offset
        candidates = [s for s in done if s.start_offset < cursor
                      and s.last_epoch <= current.first_epoch]
        if not candidates:
            break
        current = max(candidates, key=rank)
        chain.append(ChainLink(current, min(current.end_offset + 1, cursor)))
    chain.reverse()
    return chain


def tier_bounds(chain: Sequence[ChainLink]) -> tuple[int, int] | None:
    """[earliest, latest) offsets of the remote tier, or None when nothing is tiered."""
    if not chain:
        return None
    return chain[0].start_offset, chain[-1].end


def position_for_offset(entries: np.ndarray, offset: int) -> int:
    """Where to start reading for `offset`: the position of the largest offset-index entry
    at or below it (an entry maps the last offset of the batches written at its position),
    else 0."""
    if len(entries) == 0:
        return 0
    i = int(np.searchsorted(entries["offset"], offset, side="right")) - 1
    return 0 if i < 0 else int(entries["position"][i])


def end_position_for_offset(entries: np.ndarray, end: int, size: int) -> int:
    """Where the batches holding offsets below `end` (exclusive) surely end: the entry after
    the first one at or above `end` (batches from there all start above it), else `size`."""
    if len(entries) == 0:
        return size
    i = int(np.searchsorted(entries["offset"], end, side="left"))
    if i + 1 < len(entries):
        return int(entries["position"][i + 1])
    return size


def _cuts(entries: np.ndarray, start: int, stop: int, max_bytes: int) -> list[int]:
    """Byte positions in (start, stop) at offset-index entries (batch starts) making pieces
    of at most `max_bytes`, except where no entry falls inside a longer stretch."""
    if stop - start <= max_bytes or len(entries) == 0:
        return []
    positions = entries["position"].astype(np.int64)
    positions = positions[(positions > start) & (positions < stop)]
    cuts, last, prev = [], start, start
    for p in (*map(int, positions), stop):
        if p - last > max_bytes and prev > last:
            cuts.append(prev)
            last = prev
        prev = p
    return cuts


def plan_partition(topic: str, partition: int, chain: Sequence[ChainLink], start: int,
                   end: int, max_bytes: int,
                   offset_index: Callable[[RemoteLogSegmentMetadata], np.ndarray], *,
                   min_timestamp: int | None = None,
                   aborted: Sequence[tuple[int, int, int]] | None = None
                   ) -> list[SegmentRange]:
    """Byte ranges reading offsets [start, end) of one partition (start == end: none).

    `offset_index(segment)` returns the segment's offset index entries (OFFSET_ENTRY_DTYPE,
    absolute offsets); it is called only for segments that must be cut or entered in the
    middle. Segments whose max timestamp is below `min_timestamp` are left out.

    Raises:
        OffsetOutOfRangeError: the range is not inside the tier.
    """
    if end < start:
        raise OffsetOutOfRangeError(
            f"{topic}-{partition}: ending offset {end} is before starting offset {start}",
            offset=end)
    if start == end:
        return []
    bounds = tier_bounds(chain)
    if bounds is None or start < bounds[0] or end > bounds[1]:
        span = "nothing is tiered" if bounds is None else \
            f"the remote tier holds offsets [{bounds[0]}, {bounds[1]})"
        lo, hi = (None, None) if bounds is None else bounds
        raise OffsetOutOfRangeError(
            f"{topic}-{partition}: offsets [{start}, {end}) are outside the remote tier: "
            f"{span}", offset=start if bounds is None or start < bounds[0] else end,
            log_start_offset=lo, log_end_offset=hi)
    txns = None if aborted is None else tuple(
        sorted((int(p), int(f), int(last)) for p, f, last in aborted))
    out: list[SegmentRange] = []
    for link in chain:
        seg = link.segment
        lo, hi = max(start, link.start_offset), min(end, link.end)
        if lo >= hi:
            continue
        if min_timestamp is not None and seg.max_timestamp_ms < min_timestamp:
            continue
        size = seg.segment_size_in_bytes
        whole = lo == seg.start_offset and hi > seg.end_offset
        entries = None
        if whole and size <= max_bytes:
            first, last = 0, size
        else:
            entries = offset_index(seg)
            first = 0 if lo == seg.start_offset else position_for_offset(entries, lo)
            last = size if hi > seg.end_offset else end_position_for_offset(entries, hi, size)
        seg_txns = None if txns is None else tuple(
            t for t in txns if t[2] >= lo and t[1] < hi)
        edges = [first, *_cuts(entries, first, last, max_bytes), last] \
            if entries is not None else [first, last]
        for a, b in itertools.pairwise(edges):
            out.append(SegmentRange(topic, partition, seg, a, b, lo, hi, min_timestamp,
                                    seg_txns))
    return out


def pack_ranges(ranges: Sequence[SegmentRange], max_bytes: int) -> list[list[SegmentRange]]:
    """Groups consecutive ranges into tasks of at most about `max_bytes` (a range larger
    than that is a task of its own)."""
    tasks: list[list[SegmentRange]] = []
    current: list[SegmentRange] = []
    size = 0
    for r in ranges:
        if current and size + r.size > max_bytes:
            tasks.append(current)
            current, size = [], 0
        current.append(r)
        size += r.size
    if current:
        tasks.append(current)
    return tasks
