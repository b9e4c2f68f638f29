"""Byte ranges of remote segments whose batch CRCs a read checked in this process, so that a
read of those bytes again skips its CRC pass: a remote segment is immutable, and a consumer
re-reading it (or many consumers reading it) need not pay a second CRC pass over bytes
already checked.

**Keyed so that a verdict never outlives the bytes it vouches for.** Each range is kept under
(segment id, generation): the generation is the RSM's `read_generation`, a token naming the
bytes its ranges serve (the filesystem tier's file identity, the object store's chunk fetches
of the segment), which changes whenever bytes of the segment are read from storage again.
A reader takes it before its first byte is read and again after its last: only when the two
are equal did no byte come from storage in between, so the bytes read are the ones that
generation names; then, and only then, a verdict under it is used, or recorded.
An RSM whose generation is None never has a verdict used or recorded.

Thread-safety: every method may be called from any number of threads.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["VERIFIED", "VerifiedRanges"]


class VerifiedRanges:
    """Checked byte ranges per (segment id, generation), merged where they touch; at most
    `capacity` segment generations, the least recently used dropped first."""

    def __init__(self, capacity: int = 8192):
        self.capacity = capacity
        self._lock = threading.Lock()
        # (segment id, generation) -> (sorted starts, ends): disjoint, non-touching ranges
        self._ranges: OrderedDict[tuple[object, Hashable], tuple[list[int], list[int]]] = \
            OrderedDict()

    def covers(self, segment_id: object, generation: Hashable | None, start: int,
               end: int) -> bool:
        """Whether bytes [start, end) of the segment were checked under `generation`."""
        if generation is None:
            return False
        key = (segment_id, generation)
        with self._lock:
            found = self._ranges.get(key)
            if found is None:
                return False
            self._ranges.move_to_end(key)
            starts, ends = found
            i = bisect.bisect_right(starts, start) - 1
            return i >= 0 and ends[i] >= end

    def spans(self, segment_id: object, generation: Hashable | None, start: int,
              end: int) -> list[tuple[int, int, bool]]:
        """Bytes [start, end) of the segment cut where checked ranges under `generation`
        begin and end: consecutive (from, to, checked) pieces."""
        if start >= end:
            return []
        with self._lock:
            found = None if generation is None else self._ranges.get((segment_id, generation))
            if found is None:
                return [(start, end, False)]
            starts, ends = list(found[0]), list(found[1])
        out = []
        at = start
        for i in range(bisect.bisect_right(ends, start), len(starts)):
            if at >= end or starts[i] >= end:
                break
            if starts[i] > at:
                out.append((at, starts[i], False))
                at = starts[i]
            to = min(ends[i], end)
            out.append((at, to, True))
            at = to
        if at < end:
            out.append((at, end, False))
        return out

    def checked(self, segment_id: object, generation: Hashable | None, start: int,
                end: int) -> None:
        """Bytes [start, end) of the segment, as `generation` names them, were checked."""
        if generation is None or start >= end:
            return
        key = (segment_id, generation)
        with self._lock:
            found = self._ranges.get(key)
            if found is None:
                found = self._ranges[key] = ([], [])
                while len(self._ranges) > self.capacity:
                    self._ranges.popitem(last=False)
            else:
                self._ranges.move_to_end(key)
            _merge(found[0], found[1], start, end)

    def clear(self) -> None:
        with self._lock:
            self._ranges.clear()


def _merge(starts: list[int], ends: list[int], start: int, end: int) -> None:
    """Adds [start, end) to the disjoint ranges, joining those it overlaps or touches."""
    lo = bisect.bisect_left(ends, start)  # first range ending at or after start
    hi = bisect.bisect_right(starts, end)  # past the last range starting at or before end
    if lo < hi:
        start = min(start, starts[lo])
        end = max(end, ends[hi - 1])
    starts[lo:hi] = [start]
    ends[lo:hi] = [end]


#: the verdicts of every remote reader of this process
VERIFIED = VerifiedRanges()
