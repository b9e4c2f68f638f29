"""Which segment uploads had every record batch CRC checked in this process, over the very
chunk bytes the chunk cache serves: the object-store tier's `verifies_batch_crcs`.

The filesystem tier checks a segment's batch CRCs once, when it first opens the file, and
readers then skip their own CRC pass over its ranges. Here the bytes come chunk by chunk,
so the check runs in the background once a sequential reader has reached a segment's last
chunk (by then a warm or read-ahead reader has every chunk cached): it walks the cached
chunks in order, batches that straddle a chunk boundary joined, and records a verdict only
when every batch frames and its CRC holds, up to the segment's last byte. Until then, and
for a segment whose check failed, readers CRC every read themselves, as before.

**Sound only for the bytes it checked.** Cached chunks are immutable objects (memory) or
entry files checked whole before use (disk); the only way other bytes reach a reader is a
fetch from the store, and the range reader reports every fetch of a segment
(`fetched`) before it hands the chunks to anyone: that drops the segment's verdict, and
marks a check running over it as stale, so it records nothing. A reader asks for the
verdict after its bytes were read, so bytes that came from a fetch are never taken as
checked.

Thread-safety: every method may be called from any number of threads.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict

from engine._native import records as _records
from engine.errors import KafkaEngineError
from engine.remote.objectstore.chunk_cache import ChunkCache
from engine.remote.objectstore.reads import ChunkRanges, SegmentObject

__all__ = ["BatchCrcVerdicts"]

log = logging.getLogger(__name__)

_VERDICTS_KEPT = 4096
_INSTANCES = itertools.count()


class BatchCrcVerdicts:
    """Batch-CRC verdicts per segment upload (object key, identity); checks run on `pool`
    (a concurrent.futures executor)."""

    def __init__(self, cache: ChunkCache, pool):
        self._cache = cache
        self._pool = pool
        self._lock = threading.Lock()
        self._checked: OrderedDict[tuple[str, str], bool] = OrderedDict()
        # uploads being checked -> False once a fetch made the running check stale
        self._checking: dict[tuple[str, str], bool] = {}
        # read generations (read_generation): uploads -> the fetch count at their latest
        # fetch; an upload without one has `_floor`, at least every count dropped, so a
        # generation never comes back once a fetch moved past it
        self._instance = next(_INSTANCES)
        self._fetches = 0
        self._latest_fetch: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._floor = 0

    def generation(self, key: str, identity: str) -> tuple[int, str, str, int]:
        """The upload's read generation: it changes at every fetch of its chunks (before
        they are served, see `fetched`), and only then or when its record is dropped."""
        with self._lock:
            return (self._instance, key, identity,
                    self._latest_fetch.get((key, identity), self._floor))

    def holds(self, key: str, identity: str) -> bool:
        """Whether every batch CRC of the upload (`.log` object key, identity) checked out
        over the bytes the cache serves."""
        with self._lock:
            return (key, identity) in self._checked

    def fetched(self, seg: SegmentObject) -> None:
        """Chunks of `seg` came from the store: its verdict no longer covers them, and its
        read generation moves on."""
        k = (seg.key, seg.identity)
        with self._lock:
            self._checked.pop(k, None)
            if k in self._checking:
                self._checking[k] = False
            self._fetches += 1
            self._latest_fetch.pop(k, None)
            self._latest_fetch[k] = self._fetches
            if len(self._latest_fetch) > _VERDICTS_KEPT:
                self._floor = max(self._floor, self._latest_fetch.popitem(last=False)[1])

    def check_after(self, key: str, identity: str, index: ChunkRanges, end: int) -> None:
        """A read of the upload (`.log` key, identity; its chunk index) ended at original
        byte `end`: once reads reach the last chunk, queue the segment's check (once at a
        time; never blocks)."""
        n = index.chunk_count
        if n == 0 or end <= index.original_range(n - 1)[0]:
            return
        k = (key, identity)
        with self._lock:
            if k in self._checked or k in self._checking:
                return
            self._checking[k] = True
        try:  # the chunks are read from the cache, detransformed already
            self._pool.submit(self._check, SegmentObject(key, index, identity))
        except RuntimeError:  # closing
            with self._lock:
                self._checking.pop(k, None)

    def _check(self, seg: SegmentObject) -> None:
        k = (seg.key, seg.identity)
        try:
            good = self._batches_check_out(seg)
        except KafkaEngineError as e:  # framing the native scan refuses: readers will say
            log.debug("batch check of %s: %s", seg.key, e)
            good = False
        with self._lock:
            fresh = self._checking.pop(k, False)
            if good and fresh:
                self._checked[k] = True
                while len(self._checked) > _VERDICTS_KEPT:
                    self._checked.popitem(last=False)

    def _batches_check_out(self, seg: SegmentObject) -> bool:
        """Every chunk cached, every batch framed with a valid CRC, the last one ending at
        the segment's end. Chunks are scanned where they lie; only a batch that straddles
        a chunk boundary is copied (joined from the chunks that hold it)."""
        carry = b""  # the start of a batch that the previous chunk ended inside
        for i in range(seg.index.chunk_count):
            data = self._cache.get(seg.chunk_key(i), background=True)
            if data is None:
                return False  # not all cached: a later read queues the check again
            view = memoryview(data).cast("B")
            if carry:
                need = _rest_of_entry(carry, view)
                if need is None:  # a size field that frames no entry
                    return False
                if need > len(view):  # the batch runs past this chunk too
                    carry = b"".join((carry, view))
                    continue
                whole = b"".join((carry, view[:need]))
                headers, valid = _records.scan(whole, True)
                if valid != len(whole) or not headers["crc_valid"].all():
                    return False
                view = view[need:]
            headers, valid = _records.scan(view, True)
            if not headers["crc_valid"].all():
                return False
            carry = bytes(view[valid:])
        return not carry


def _rest_of_entry(carry: bytes, view: memoryview) -> int | None:
    """How many bytes of `view` complete the log entry that `carry` starts (its size field
    is bytes 8-12); None when that size frames no entry longer than `carry`."""
    head = carry[:12] if len(carry) >= 12 else b"".join((carry, view[:12 - len(carry)]))
    if len(head) < 12:
        return len(view) + 1  # not even the size field yet: take the whole chunk
    need = 12 + int.from_bytes(head[8:12], "big", signed=True) - len(carry)
    return need if need > 0 else None
