"""The batches of remote segments that reads in this process checked, as rows (byte position,
end, base and last offset), so that a read within them again cuts its answer from the rows:
no header walk, no scan of the bytes for the cut, no second check of the offsets.

Kept under the same key as the CRC verdicts (engine.remote.read_verdicts): the segment id
and the RSM's `read_generation`, taken before a read's first byte and after its last. Rows
are recorded only for a read whose generation stayed as it was, whose batches passed every
consumer check (CRC, by the reader or the RSM, framing, offsets in the segment and
continuing), and served only to a read whose generation, asked before and after, is the
one they were recorded under. One generation per segment id: a read under another one
drops the segment's rows.

A segment's rows form runs: each run is byte-contiguous (every batch starts where the one
before it ends) and offset-contiguous (every batch's base offset follows the last offset
before it). Rows that would break either rule within a run are not kept (a read of them is
checked as any other read is). A read is answered from a run only when the run decides it:
the batch holding the fetch offset is in the run, and the run goes on past the answer (a
batch that does not fit, or starts at the upper bound), or ends where the segment does.

Thread-safety: every method may be called from any number of threads.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections import OrderedDict
from collections.abc import Hashable
from typing import NamedTuple

import numpy as np

__all__ = ["CHECKED_BATCHES", "CheckedAnswer", "CheckedBatches"]


class CheckedAnswer(NamedTuple):
    """A read decided by checked rows: bytes [position, end) of the segment, the offset
    after them, and whether they end the run (the next read is past the checked rows)."""

    position: int
    end: int
    next_offset: int
    run_ends: bool


class _Run:
    """Rows of byte- and offset-contiguous checked batches, in position order: each batch's
    position and last offset; the ends and base offsets follow (a batch ends where the next
    starts, and its base offset follows the last offset before it), but for the first base
    offset and the last end."""

    __slots__ = ("end", "first_base", "lasts", "positions")

    def __init__(self, positions, ends, bases, lasts):
        self.positions = array("q", positions)
        self.lasts = array("q", lasts)
        self.first_base = int(bases[0])
        self.end = int(ends[-1])

    def __len__(self) -> int:
        return len(self.positions)

    def end_of(self, i: int) -> int:
        return self.positions[i + 1] if i + 1 < len(self.positions) else self.end

    def base_of(self, i: int) -> int:
        return self.lasts[i - 1] + 1 if i else self.first_base

    def extend(self, positions, lasts, end: int) -> None:
        """Rows continuing the run: lists, or int64 numpy columns (their bytes copied)."""
        if isinstance(positions, np.ndarray):
            self.positions.frombytes(positions.tobytes())
            self.lasts.frombytes(lasts.astype(np.int64, copy=False).tobytes())
        else:
            self.positions.extend(positions)
            self.lasts.extend(lasts)
        self.end = end

    def columns(self) -> tuple[list[int], ...]:
        """(positions, ends, bases, lasts) of every row."""
        positions, lasts = self.positions.tolist(), self.lasts.tolist()
        return (positions, positions[1:] + [self.end],
                [self.first_base] + [last + 1 for last in lasts[:-1]], lasts)


class _Segment:
    """A segment's runs under one generation, in position (and so offset) order."""

    __slots__ = ("firsts", "generation", "runs")

    def __init__(self, generation: Hashable):
        self.generation = generation
        self.runs: list[_Run] = []
        self.firsts: list[int] = []  # each run's first base offset

    def rows(self) -> int:
        return sum(len(r) for r in self.runs)

    def cost(self) -> int:
        """What the segment's rows hold, in rows of 16 bytes: the objects of the segment and
        of each run too, so that many small runs or segments count for what they take."""
        return self.rows() + _RUN_COST * len(self.runs) + _SEGMENT_COST

    def firsts_positions(self) -> list[int]:
        return [r.positions[0] for r in self.runs]


#: a run's and a segment's own objects, in rows of 16 bytes (measured: about 300 and 600
#: bytes)
_RUN_COST = 20
_SEGMENT_COST = 40
#: runs kept per segment: rows that would add a run to a segment holding this many are
#: not kept (a read of them is checked as any other read is), so adding rows stays cheap
_MAX_RUNS = 64


class CheckedBatches:
    """Checked batch rows per segment id, under one generation each; at most `max_rows`
    rows in all (16 bytes a row, each run and segment counted for its own objects too),
    the least recently used segments dropped first."""

    def __init__(self, max_rows: int = 1 << 19):
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._segments: OrderedDict[object, _Segment] = OrderedDict()
        self._rows = 0

    def answer(self, segment_id: object, generation: Hashable | None, offset: int,
               max_bytes: int, upto: int, size: int) -> CheckedAnswer | int | None:
        """The read of `offset` (at most `max_bytes`, batches starting below `upto`, the
        first batch whole even when larger) from checked rows of a segment of `size` bytes:
        a CheckedAnswer when the rows decide it, else the byte position of the batch
        holding `offset` when a run has it (a read may start there without a walk), else
        None. The first batch's size is the caller's to weigh against `max_bytes`."""
        if generation is None:
            return None
        with self._lock:
            seg = self._segments.get(segment_id)
            if seg is None:
                return None
            if seg.generation != generation:  # other bytes now: their rows are not these
                self._drop(segment_id)
                return None
            self._segments.move_to_end(segment_id)
            k = bisect.bisect_right(seg.firsts, offset) - 1 if len(seg.runs) > 1 else 0
            run = seg.runs[k]
            if offset < run.first_base:
                return None
            return _answer(run, offset, max_bytes, upto, size)

    def checked(self, segment_id: object, generation: Hashable | None, position: int,
                headers: np.ndarray) -> None:
        """The batches of `headers` (scan rows, positions relative to byte `position`), read
        under `generation` (the same before and after the read), passed every check of
        check_batches (offsets continuing between v2 batches among them)."""
        if generation is None or not len(headers):
            return
        # a scan frames each batch where the one before it ends; offsets may have gaps
        # around batches older than v2: such rows are not kept
        if int(headers["magic"].min()) < 2:
            return
        positions = headers["position"] + position
        lasts = headers["last_offset"]
        first, base = int(positions[0]), int(headers["base_offset"][0])
        end = int(positions[-1]) + int(headers["size"][-1])
        with self._lock:
            seg = self._segments.get(segment_id)
            if seg is None or seg.generation != generation:
                self._drop(segment_id)
                seg = self._segments[segment_id] = _Segment(generation)
                self._rows += seg.cost()
            else:
                self._segments.move_to_end(segment_id)
            run = seg.runs[-1] if seg.runs else None
            if run is not None and run.end == first and run.lasts[-1] + 1 == base:
                run.extend(positions, lasts, end)  # a sequential reader going on
                self._rows += len(positions)
            elif len(seg.runs) >= _MAX_RUNS:
                return
            else:
                self._rows -= seg.cost()
                cols = positions.tolist()
                _merge(seg, cols, cols[1:] + [end],
                       [base] + [last + 1 for last in lasts[:-1].tolist()], lasts.tolist())
                self._rows += seg.cost()
            if self._rows <= self.max_rows:
                return
            while self._rows > self.max_rows and len(self._segments) > 1:
                self._drop(next(iter(self._segments)))
            if self._rows > self.max_rows:  # one segment of more rows than all may have
                self._drop(segment_id)

    def drop(self, segment_id: object) -> None:
        """Forgets the rows of a segment (its bytes are gone)."""
        with self._lock:
            self._drop(segment_id)

    def rows(self, segment_id: object, generation: Hashable) -> int:
        """How many rows the segment holds under `generation`."""
        with self._lock:
            seg = self._segments.get(segment_id)
            return 0 if seg is None or seg.generation != generation else seg.rows()

    def clear(self) -> None:
        with self._lock:
            self._segments.clear()
            self._rows = 0

    def _drop(self, segment_id: object) -> None:
        seg = self._segments.pop(segment_id, None)
        if seg is not None:
            self._rows -= seg.cost()


def _answer(run: _Run, offset: int, max_bytes: int, upto: int,
            size: int) -> CheckedAnswer | int | None:
    """CheckedBatches.answer within one run holding offsets from `offset` on."""
    lasts, positions, n = run.lasts, run.positions, len(run)
    i = bisect.bisect_left(lasts, offset)  # the batch holding `offset`
    if i == n or run.base_of(i) >= upto:
        return None
    start = positions[i]
    window = start + max_bytes
    k = bisect.bisect_right(positions, window, i)  # batches starting in the window
    j = k - 1 if k == n and run.end <= window else k - 2  # the last one ending in it
    if upto <= lasts[-1]:  # batches from the first one at or past `upto` are left out
        j = min(j, bisect.bisect_left(lasts, upto - 1, i, n - 1))
    j = max(j, i)  # the first batch, whole
    end, next_offset = run.end_of(j), lasts[j] + 1
    if j == n - 1 and end < min(size, window) and next_offset < upto:
        return start  # a batch after the run's last may still belong to the read
    return CheckedAnswer(start, end, next_offset, j == n - 1)


def _contiguous(positions, ends, bases, lasts) -> bool:
    """Whether rows (lists, each batch's own offsets checked: base <= last) are one run:
    each batch starts where the one before ends, and its base offset follows the last
    offset before it."""
    return positions[1:] == ends[:-1] and bases[1:] == [last + 1 for last in lasts[:-1]]


def _merge(seg: _Segment, positions: list[int], ends: list[int], bases: list[int],
           lasts: list[int]) -> None:
    """Adds a run of rows to the segment's runs: rows continuing a run are appended to it;
    else the runs the rows overlap or touch are joined into one when the rows agree (a row
    at the same position is the same row, and the joined rows are one run). Rows that do
    not agree are left out."""
    start, end = positions[0], ends[-1]
    lo = bisect.bisect_left([r.end for r in seg.runs], start)
    hi = bisect.bisect_right(seg.firsts_positions(), end)
    if lo == hi:  # apart from every run
        seg.runs.insert(lo, _Run(positions, ends, bases, lasts))
        seg.firsts.insert(lo, bases[0])
        return
    if hi - lo == 1 and _extend(seg.runs[lo], positions, ends, bases, lasts):
        return
    cols = [np.concatenate(c) for c in zip(*(r.columns() for r in seg.runs[lo:hi]),
                                           (positions, ends, bases, lasts))]
    order = np.argsort(cols[0], kind="stable")
    cols = [c[order] for c in cols]
    same = np.flatnonzero(cols[0][1:] == cols[0][:-1])  # one row read twice
    if len(same) and not all((c[same] == c[same + 1]).all() for c in cols):
        return
    keep = np.ones(len(cols[0]), dtype=bool)
    keep[same + 1] = False
    rows = [c[keep].tolist() for c in cols]
    if not _contiguous(*rows):
        return
    run = _Run(*rows)
    seg.runs[lo:hi] = [run]
    seg.firsts[lo:hi] = [run.first_base]


def _extend(run: _Run, positions: list[int], ends: list[int], bases: list[int],
            lasts: list[int]) -> bool:
    """Whether the rows were added to `run` without a join: all of them in it already, or
    those past its end continuing it (the rows before its end being its own)."""
    i = bisect.bisect_left(run.positions, positions[0])
    tail = run.end
    if i == len(run) and positions[0] != tail:
        return False  # starts inside the run's last batch: the join decides (refuses)
    own = bisect.bisect_left(positions, tail)  # the rows up to the run's end
    if own > len(run) - i or (own and not (
            run.positions[i:i + own] == array("q", positions[:own])
            and run.lasts[i:i + own] == array("q", lasts[:own])
            and ends[own - 1] == run.end_of(i + own - 1) and bases[0] == run.base_of(i))):
        return False
    if own == len(positions):
        return True
    if positions[own] != tail or bases[own] != run.lasts[-1] + 1:
        return False
    run.extend(positions[own:], lasts[own:], ends[-1])
    return True


#: the checked batch rows of every remote reader of this process
CHECKED_BATCHES = CheckedBatches()
