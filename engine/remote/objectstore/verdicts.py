"""Which segment uploads had every record batch CRC checked in this process, over the very
chunk bytes the chunk cache serves: the object-store tier's `verifies_batch_crcs`.

The filesystem tier checks a segment's batch CRCs once, when it first opens the file, and
readers then skip their own CRC pass over its ranges. Here the bytes come chunk by chunk,
so the check runs in the background once a sequential reader has reached a segment's end
(by then a warm or read-ahead reader has every chunk cached): it walks the cached
chunks in order, batches that straddle a chunk boundary joined, and records a verdict only
when every batch frames and its CRC holds, up to the segment's last byte. Byte ranges that
readers already checked under the same read generation (engine.remote.read_verdicts: a
cold sequential reader checks every batch it serves) are not checked again: the pass frames
its own batches up to where such a range starts, and goes on from where it ends. Until the
verdict, and for a segment whose check failed, readers CRC every read themselves.

**The read generation** (`generation`) names the bytes the upload's chunks serve: it
changes when a chunk comes from the store *again* (a chunk fetched before in this process,
evicted and refetched, may differ from what was checked), not at a chunk's first fetch,
whose bytes nobody can have read before; so a cold reader's checks, made while read-ahead
fetches the segment's next chunks, count. A first fetch counts as "again" whenever this
process cannot tell: the upload's first recorded fetch (readers of it until then had no
generation), and every fetch of an upload whose chunks were in the cache before that (a
disk cache kept across a restart) or whose record was dropped to bound memory.

**Sound only for the bytes it checked.** Cached chunks are immutable objects (memory) or
entry files checked whole before use (disk); the only way other bytes reach a reader is a
fetch from the store, and the range reader reports every fetch of a segment
(`fetched`) before it hands the chunks to anyone: a fetch of a chunk again drops the
segment's verdict and marks a check running over it as stale, so it records nothing. A
reader asks for the verdict after its bytes were read, so bytes that came from such a fetch
are never taken as checked.

Thread-safety: every method may be called from any number of threads.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from engine._native import records as _records
from engine.errors import KafkaEngineError
from engine.remote.objectstore.chunk_cache import ChunkCache
from engine.remote.objectstore.reads import ChunkRanges, SegmentObject
from engine.remote.read_verdicts import VERIFIED

__all__ = ["BatchCrcVerdicts"]

log = logging.getLogger(__name__)

_VERDICTS_KEPT = 4096
_DROPPED_SLOTS = 1 << 16
_INSTANCES = itertools.count()


class _Upload:
    """What this process fetched of one upload: its read generation, the chunks fetched
    under its record, and whether a fetch of a chunk not among them may still replace
    bytes a reader saw (then every fetch moves the generation on)."""

    __slots__ = ("generation", "fetched", "blind")

    def __init__(self, generation: int, blind: bool):
        self.generation = generation
        # a bit per chunk (a set of ints took about 55 bytes a chunk: 56 KiB for an upload
        # of 1024 chunks, of which thousands are kept)
        self.fetched = bytearray()
        self.blind = blind

    def fetch(self, chunks: Sequence[int]) -> bool:
        """Records a fetch of `chunks`; whether any of them was fetched before."""
        bits, again = self.fetched, False
        for c in chunks:
            byte, bit = c >> 3, 1 << (c & 7)
            if byte >= len(bits):
                bits.extend(bytes(byte + 1 - len(bits)))
            elif bits[byte] & bit:
                again = True
            bits[byte] |= bit
        return again


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
        # read generations: an upload without a record has `_floor`, at least every
        # generation dropped, so a generation never comes back once a fetch moved past it
        self._instance = next(_INSTANCES)
        self._fetches = 0
        self._uploads: OrderedDict[tuple[str, str], _Upload] = OrderedDict()
        self._floor = 0
        # uploads whose record was dropped, by hash (a collision only costs the saving)
        self._dropped = bytearray(_DROPPED_SLOTS)

    def generation(self, key: str, identity: str) -> tuple[int, str, str, int]:
        """The upload's read generation: it changes when a chunk of it comes from the store
        again (before it is served, see `fetched`), and only then or when its record is
        dropped."""
        with self._lock:
            return self._generation_locked((key, identity))

    def _generation_locked(self, k: tuple[str, str]) -> tuple[int, str, str, int]:
        upload = self._uploads.get(k)
        return (self._instance, k[0], k[1], self._floor if upload is None
                else upload.generation)

    def holds(self, key: str, identity: str) -> bool:
        """Whether every batch CRC of the upload (`.log` object key, identity) checked out
        over the bytes the cache serves."""
        with self._lock:
            return (key, identity) in self._checked

    def fetched(self, seg: SegmentObject, chunks: Sequence[int]) -> None:
        """`chunks` of `seg` came from the store: a chunk fetched again (or one this
        process cannot tell was not) moves the read generation on, and ends the verdict."""
        k = (seg.key, seg.identity)
        with self._lock:
            upload = self._uploads.get(k)
            if upload is None:
                upload = self._uploads[k] = _Upload(0, self._blind_locked(seg))
                again = True
                upload.fetch(chunks)
                if len(self._uploads) > _VERDICTS_KEPT:
                    gone_key, gone = self._uploads.popitem(last=False)
                    self._floor = max(self._floor, gone.generation)
                    self._dropped[hash(gone_key) % _DROPPED_SLOTS] = 1
            else:
                self._uploads.move_to_end(k)
                again = upload.fetch(chunks) or upload.blind
            if again:
                self._checked.pop(k, None)
                if k in self._checking:
                    self._checking[k] = False
                self._fetches += 1
                upload.generation = self._fetches

    def _blind_locked(self, seg: SegmentObject) -> bool:
        """Whether a first fetch of a chunk of a newly recorded upload may replace bytes a
        reader saw: its record was dropped before, or chunks of it are cached already (a
        disk cache's entries from before a restart), so some may have been served."""
        if self._dropped[hash((seg.key, seg.identity)) % _DROPPED_SLOTS]:
            return True
        return any(self._cache.contains(seg.chunk_key(i))
                   for i in range(seg.index.chunk_count))

    def check_after(self, key: str, identity: str, index: ChunkRanges, end: int,
                    segment_id: object = None) -> None:
        """A read of the upload (`.log` key, identity; its chunk index) ended at original
        byte `end`: once a read reaches the segment's end (not merely its last chunk, so
        that the reads of that chunk have made their checks), queue the segment's check
        (one at a time; never blocks). `segment_id` (the remote segment id's uuid): where
        readers keep the ranges they checked (engine.remote.read_verdicts), which the
        check skips."""
        n = index.chunk_count
        if n == 0 or end < index.original_range(n - 1)[1]:
            return
        k = (key, identity)
        with self._lock:
            if k in self._checked or k in self._checking:
                return
            self._checking[k] = True
        try:  # the chunks are read from the cache, detransformed already
            self._pool.submit(self._check, SegmentObject(key, index, identity), segment_id)
        except RuntimeError:  # closing
            with self._lock:
                self._checking.pop(k, None)

    def _check(self, seg: SegmentObject, segment_id: object = None) -> None:
        k = (seg.key, seg.identity)
        generation = self.generation(seg.key, seg.identity)  # before any byte is looked at
        # one snapshot: a range a reader adds meanwhile may start before where the pass is
        spans = VERIFIED.spans(segment_id, generation, 0, seg.size)
        starts = [a for a, _, _ in spans]

        def checked(start: int, end: int) -> list[tuple[int, int, bool]]:
            i = bisect.bisect_right(starts, start) - 1
            out = []
            while i < len(spans) and spans[i][0] < end:
                out.append((max(spans[i][0], start), min(spans[i][1], end), spans[i][2]))
                i += 1
            return out

        try:
            good = self._batches_check_out(seg, None if segment_id is None else checked)
        except KafkaEngineError as e:  # framing the native scan refuses: readers will say
            log.debug("batch check of %s: %s", seg.key, e)
            good = False
        with self._lock:
            fresh = self._checking.pop(k, False)
            if good and fresh and self._generation_locked(k) == generation:
                self._checked[k] = True
                while len(self._checked) > _VERDICTS_KEPT:
                    self._checked.popitem(last=False)

    def _batches_check_out(self, seg: SegmentObject, checked: Callable[
            [int, int], list[tuple[int, int, bool]]] | None = None) -> bool:
        """Every chunk cached, every batch framed with a valid CRC, the last one ending at
        the segment's end. Chunks are scanned where they lie; only a batch that straddles
        a chunk boundary is copied (joined from the chunks that hold it). `checked(start,
        end)` cuts a chunk's bytes into pieces readers checked or not: a checked piece is
        whole batches, so the pass's own batches must end where it starts, and the pass
        goes on from its end (a chunk checked whole is not even looked up)."""
        carry: bytes | None = b""  # the start of a batch that the bytes before ended inside
        for i in range(seg.index.chunk_count):
            lo, hi = seg.index.original_range(i)
            pieces = [(lo, hi, False)] if checked is None else checked(lo, hi)
            if all(done for _, _, done in pieces):
                if carry:  # a batch of the pass runs into a checked piece: framed otherwise
                    return False
                continue
            data = self._cache.get(seg.chunk_key(i), background=True)
            if data is None:
                return False  # not all cached: a later read queues the check again
            view = memoryview(data).cast("B")
            for start, end, done in pieces:
                if done:
                    if carry:
                        return False
                    continue
                carry = _checked_piece(carry, view[start - lo:end - lo])
                if carry is None:
                    return False
        return not carry


def _checked_piece(carry: bytes, view: memoryview) -> bytes | None:
    """Checks the batches of `view`, which follows `carry` (the start of a batch the bytes
    before ended inside): the start of a batch `view` ends inside (b"" for none), or None
    when a batch frames wrong or fails its CRC."""
    if carry:
        need = _rest_of_entry(carry, view)
        if need is None:  # a size field that frames no entry
            return None
        if need > len(view):  # the batch runs past this piece too
            return b"".join((carry, view))
        whole = b"".join((carry, view[:need]))
        headers, valid = _records.scan(whole, True)
        if valid != len(whole) or not headers["crc_valid"].all():
            return None
        view = view[need:]
    headers, valid = _records.scan(view, True)
    if not headers["crc_valid"].all():
        return None
    return bytes(view[valid:])


def _rest_of_entry(carry: bytes, view: memoryview) -> int | None:
    """How many bytes of `view` complete the log entry that `carry` starts (its size field
    is bytes 8-12); None when that size frames no entry longer than `carry`."""
    head = carry[:12] if len(carry) >= 12 else b"".join((carry, view[:12 - len(carry)]))
    if len(head) < 12:
        return len(view) + 1  # not even the size field yet: take the whole chunk
    need = 12 + int.from_bytes(head[8:12], "big", signed=True) - len(carry)
    return need if need > 0 else None
