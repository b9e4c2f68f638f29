"""Ranged reads of a segment's original bytes out of its chunked `.log` object.

A read of original bytes [start, end) becomes the chunks that cover it (from the segment's
chunk index, which the format side decodes from the manifest). Chunks already in the chunk
cache are served from it. The missing ones are fetched with ranged GETs: runs of adjacent
chunks are coalesced into one GET each (their transformed ranges are contiguous in the
object), and the runs are sized so that the read keeps up to `max_in_flight` GETs in flight
at once (each run at most `max_request_bytes`, at least one chunk). The plugin, by contrast,
issues one GET per chunk, one after another.

Each fetched chunk is detransformed by the callable the RSM gives (`detransform(i, raw)`:
GCM-decrypt then zstd-decompress, or None in plain mode), checked against its original
size, and put in the cache; then the requested slice is cut out. A failed or timed-out
fetch caches nothing.

**Single-flight.** Concurrent readers of one chunk share one request: the first reader
registers a future per chunk it fetches; the others wait on it (within their own deadline)
instead of fetching again. Prefetches register the same way, so a reader that catches up
with read-ahead waits for it rather than duplicating it.

**Deadline.** Every read is bounded by `timeout_s` (the RLM's `remote.fetch.max.wait.ms`):
past it, outstanding GETs are cancelled and `RemoteFetchTimeoutError` names the object and
the range. Each GET is also bounded by the store's own timeouts and retries.

**Read-ahead.** With a chunk cache and `prefetch_max_bytes` > 0
(`fetch.chunk.cache.prefetch.max.size`), a sequential read (one that starts in a segment's
first chunk or where the reader's previous read of the segment ended, or one the caller
flags) schedules the chunks that follow it, up to that many original bytes, in the
background, queued before the read's own GETs so that both are in flight together; random
reads (index probes, timestamp searches) fetch only what they ask. When the read-ahead
reaches the segment's end and the caller names the segments that come next in the lineage
(`next_segments`), the read-ahead continues into their chunks, segment after segment, so
that a reader of segments smaller than the window keeps the whole window in flight (the
plugin stops at the segment's end). While more than twice the window is queued, a new
read-ahead waits (the latest per segment) and is queued as soon as queued read-ahead finishes,
so a slow store delays a reader's window but never loses it. A window is scanned once per
chunk the reader reaches: reads that end in the same chunk as the last scan (a reader of
1 MiB ranges of 8 MiB chunks makes eight) find it queued or cached and skip the scan; a
chunk of the window that failed or was evicted is asked for again when the reader reaches
the next chunk, and the read itself fetches it if it gets there first.

**Reads made once.** `read_once` serves bytes a caller reads once (a segment's tail while
planning a bucket): in plain mode an exact ranged GET, never cached (a cache entry is always
a whole, checked chunk); with transforms the covering chunks only. No read-ahead follows it.

The interface the RSM builds on: a `SegmentObject` (object key, `ChunkRanges`, cache identity,
detransform) per segment, and `RangeReader.read` / `read_into` / `read_once`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.errors import (
    CorruptRemoteObjectError,
    KafkaEngineError,
    RemoteFetchTimeoutError,
    RemoteStorageError,
)
from engine.remote.objectstore.chunk_cache import ChunkCache, ChunkKey
from engine.remote.objectstore.store import ObjectStore

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_REQUEST_BYTES",
    "ChunkRanges",
    "Detransform",
    "RangeReader",
    "RangeStream",
    "SegmentObject",
    "cut_chunks",
]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
# chosen by bench/compare_objectstore.py's sweep (bench/RESULTS.md): 8 MiB chunks were within
# noise of the best in both 8 MiB fetches and 1 MiB sequential reads with read-ahead, in every
# run (1 MiB chunks were the slowest in both; 16 MiB the slowest for 8 MiB fetches); 2-4 GETs
# in flight per read were best, 8 worse
DEFAULT_CHUNK_SIZE = 8 * MiB
DEFAULT_MAX_IN_FLIGHT = 4
DEFAULT_MAX_REQUEST_BYTES = 16 * MiB
_PREFETCH_WORKERS = 2
_POSITIONS_KEPT = 4096
_DEFERRED_KEPT = 256


@runtime_checkable
class ChunkRanges(Protocol):
    """What a reader needs of a segment's chunk index (the manifest's fixed or variable
    chunk index, decoded by the format side). Ranges are half-open [start, end) byte
    positions:

    - `chunk_count`: the number of chunks (>= 1; an empty segment has one empty chunk).
    - `original_range(i)`: chunk i's bytes in the original segment file.
    - `transformed_range(i)`: chunk i's bytes in the `.log` object (after zstd/GCM).
    - `chunks_for(original_start, original_end)`: the indices of the chunks that cover
      original bytes [original_start, original_end), as a `range` (empty if the range is).
    """

    @property
    def chunk_count(self) -> int: ...

    def original_range(self, i: int) -> tuple[int, int]: ...

    def transformed_range(self, i: int) -> tuple[int, int]: ...

    def chunks_for(self, original_start: int, original_end: int) -> range: ...


Detransform = Callable[[int, memoryview], object]
"""(chunk index, raw transformed bytes) -> the chunk's original bytes (any bytes-like).
Raises a typed error for a damaged chunk (bad GCM tag, zstd error)."""


@dataclass(frozen=True)
class SegmentObject:
    """One segment's `.log` object as a reader needs it.

    `key`: the object key. `index`: its chunk index. `identity`: a string that changes
    whenever the uploaded bytes under `key` could (segment id plus a manifest digest), so
    cached chunks never alias across uploads. `detransform`: None in plain mode."""

    key: str
    index: ChunkRanges
    identity: str
    detransform: Detransform | None = None

    @property
    def size(self) -> int:
        n = self.index.chunk_count
        return self.index.original_range(n - 1)[1] if n else 0

    def chunk_key(self, i: int) -> ChunkKey:
        return ChunkKey(self.key, self.identity, i)


def chunk_pieces(index: ChunkRanges, parts: Sequence[tuple[int, object]], start: int,
                 end: int) -> list[memoryview]:
    """Views of original bytes [start, end) in `parts`, the plain chunks (index, bytes)
    that cover them in order: one view a chunk."""
    pieces = []
    for i, data in parts:
        lo, hi = index.original_range(i)
        pieces.append(memoryview(data)[max(start, lo) - lo:min(end, hi) - lo])
    return pieces


def cut_chunks(index: ChunkRanges, parts: Sequence[tuple[int, object]], start: int,
               end: int) -> bytes | memoryview:
    """Original bytes [start, end) out of `parts` (as chunk_pieces): a view of the one
    chunk, or one join of several (one copy, no zero-fill first)."""
    pieces = chunk_pieces(index, parts, start, end)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class RangeReader:
    """Chunk-aligned, coalesced, parallel, single-flight ranged reads through a chunk cache.

    `store`: the ObjectStore. `cache`: a ChunkCache or None. `max_in_flight`: GETs in flight
    per read (the reader pool's thread count bounds how many reads run at once).
    `max_request_bytes`: the largest coalesced GET. `fetch_max_wait_ms`: the default bound
    of a read (`remote.fetch.max.wait.ms`). `prefetch_max_bytes`: read-ahead after each
    read (0 = none; needs a cache). `on_fetched(seg, chunks)` is called whenever chunks of
    `seg` came from the store, before any reader is handed them (a check of cached bytes
    learns that they may have changed)."""

    def __init__(self, store: ObjectStore, cache: ChunkCache | None = None, *,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 fetch_max_wait_ms: int = 500, prefetch_max_bytes: int = 0,
                 on_fetched: Callable[[SegmentObject, list[int]], None] | None = None):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.store = store
        self.cache = cache
        self.max_in_flight = max_in_flight
        self.max_request_bytes = max(1, max_request_bytes)
        self.fetch_max_wait_s = fetch_max_wait_ms / 1000.0
        self.prefetch_max_bytes = prefetch_max_bytes if cache is not None else 0
        self._on_fetched = on_fetched
        self._lock = threading.Lock()
        self._inflight: dict[ChunkKey, concurrent.futures.Future] = {}
        self._prefetch_pool = None
        self._prefetch_pending = 0
        # read-ahead asked for while the queue was full, per segment (the latest ask wins):
        # queued again as queued read-ahead finishes, so no reader's window is dropped
        self._deferred: OrderedDict[tuple[str, str], tuple] = OrderedDict()
        self._queued: set[ChunkKey] = set()  # chunks of read-ahead not yet done
        # where this reader's last read of each segment ended, for sequential detection
        self._positions: OrderedDict[tuple[str, str], int] = OrderedDict()
        # the last window scanned through per segment: (its last chunk, the next segments)
        self._scanned: OrderedDict[tuple[str, str], tuple] = OrderedDict()
        if self.prefetch_max_bytes > 0:
            # a task holds its thread while its GETs run: as many as a read keeps in flight
            self._prefetch_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(_PREFETCH_WORKERS, max_in_flight),
                thread_name_prefix="chunk-prefetch")

    # -- public reads --------------------------------------------------------------------
    def read(self, seg: SegmentObject, start: int, end: int, *,
             timeout_s: float | None = None, next_segments: Sequence[SegmentObject] = (),
             sequential: bool | None = None):
        """Original bytes [start, end) of the segment (clamped to its size), as bytes or a
        read-only memoryview (a read within one chunk is a view of the cached or fetched
        chunk, without a copy).

        Read-ahead follows a sequential read: `sequential` True or False says whether this
        one is; None (the default) takes it as sequential when it starts in the segment's
        first chunk or in the chunk where this reader's previous read of the segment ended.
        `next_segments` (in lineage order) are where read-ahead continues past its end.

        Raises RemoteFetchTimeoutError past the deadline,
        RemoteStorageError / RemoteResourceNotFoundError for store failures, and the
        detransform's typed errors for damaged chunks."""
        parts, end = self._parts(seg, start, end, timeout_s, next_segments, sequential)
        return cut_chunks(seg.index, parts, start, end) if parts else b""

    def read_into(self, seg: SegmentObject, start: int, buffer, *,
                  timeout_s: float | None = None,
                  next_segments: Sequence[SegmentObject] = (),
                  sequential: bool | None = None) -> int:
        """Fill `buffer` with original bytes from `start`; returns the bytes written
        (fewer at the segment's end). As `read`, but each chunk's bytes are copied into
        `buffer` once (no join of the chunks first)."""
        view = memoryview(buffer).cast("B")
        parts, end = self._parts(seg, start, start + len(view), timeout_s, next_segments,
                                 sequential)
        at = 0
        for piece in chunk_pieces(seg.index, parts, start, end):
            view[at:at + len(piece)] = piece
            at += len(piece)
        return at

    def _parts(self, seg: SegmentObject, start: int, end: int, timeout_s: float | None,
               next_segments: Sequence[SegmentObject], sequential: bool | None
               ) -> tuple[list[tuple[int, object]], int]:
        """(the plain chunks (index, bytes) covering original bytes [start, end), in order;
        `end` clamped to the segment's size); read-ahead queued as `read` says."""
        deadline = time.monotonic() + (self.fetch_max_wait_s if timeout_s is None
                                       else timeout_s)
        if start < 0 or end < start:
            raise ValueError(f"bad range [{start}, {end}) of {self.store.url(seg.key)}")
        end = min(end, seg.size)
        if start >= end:
            return [], end
        chunks = seg.index.chunks_for(start, end)
        if self._follows(seg, chunks, end, sequential):
            # queued before this read's own GETs, so they run alongside it: a cold reader's
            # next chunks are in flight while it waits for this one, as a raw reader keeps
            # its GETs in flight back to back
            self._prefetch_after(seg, chunks[-1], next_segments)
        plain = self._fetch(seg, list(chunks), deadline, what=f"bytes [{start}, {end})")
        self.store.metrics.requested(end - start)
        return [(i, plain[i]) for i in chunks], end

    def read_once(self, seg: SegmentObject, start: int, end: int, *,
                  timeout_s: float | None = None):
        """Original bytes [start, end) (clamped to the segment's size) that the caller reads
        once (a segment's tail while planning): chunks already cached serve it; otherwise,
        in plain mode one exact ranged GET of those bytes, cached nowhere (the cache holds
        whole chunks only); with transforms the covering chunks, fetched and cached as
        `read` does. Neither schedules read-ahead nor counts as this reader's position in
        the segment. Raises as `read`."""
        deadline = time.monotonic() + (self.fetch_max_wait_s if timeout_s is None
                                       else timeout_s)
        if start < 0 or end < start:
            raise ValueError(f"bad range [{start}, {end}) of {self.store.url(seg.key)}")
        end = min(end, seg.size)
        if start >= end:
            return b""
        chunks = seg.index.chunks_for(start, end)
        self.store.metrics.requested(end - start)
        cached = self._cached(seg, chunks)
        if cached is None and seg.detransform is None:
            # plain mode: each chunk's object bytes are its original bytes
            shift = (seg.index.transformed_range(chunks[0])[0]
                     - seg.index.original_range(chunks[0])[0])
            return memoryview(self.store.run(self._get_by(
                seg, start + shift, end + shift, deadline, chunks,
                what=f"bytes [{start}, {end})")))
        plain = cached or self._fetch(seg, list(chunks), deadline,
                                      what=f"bytes [{start}, {end})")
        return cut_chunks(seg.index, [(i, plain[i]) for i in chunks], start, end)

    async def _get_by(self, seg: SegmentObject, start: int, end: int, deadline: float,
                      chunks: range, *, what: str):
        """Object bytes [start, end) in one GET, bounded by the read's deadline."""
        try:
            return await asyncio.wait_for(self.store.get_range_async(seg.key, start, end),
                                          max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise self._timeout(seg, what, list(chunks)) from None
        except RemoteStorageError as e:
            self._raise_if_cut_short(seg, list(chunks), e)
            raise

    def _cached(self, seg: SegmentObject, chunks: range) -> dict[int, object] | None:
        """The chunks from the cache when it holds them all, else None (no miss counted)."""
        if self.cache is None or not all(self.cache.contains(seg.chunk_key(i))
                                         for i in chunks):
            return None
        plain = {}
        for i in chunks:
            data = self.cache.get(seg.chunk_key(i))
            if data is None:  # evicted meanwhile
                return None
            plain[i] = data
        return plain

    def note_read(self, seg: SegmentObject, start: int, end: int, *,
                  next_segments: Sequence[SegmentObject] = (),
                  sequential: bool | None = None) -> None:
        """Lets read-ahead follow a read of original bytes [start, end) that the caller
        served itself from the cache's memory, as it follows `read` (same arguments). Only
        queues prefetches: never blocks on I/O."""
        end = min(end, seg.size)
        if self.prefetch_max_bytes <= 0 or start >= end:
            return
        chunks = seg.index.chunks_for(start, end)
        if self._follows(seg, chunks, end, sequential):
            self._prefetch_after(seg, chunks[-1], next_segments)

    def read_ahead_from(self, seg: SegmentObject, end: int,
                        next_segments: Sequence[SegmentObject] = ()) -> None:
        """Queues the read-ahead that a sequential read ending at original byte `end` of
        `seg` gets (continuing into `next_segments`), without a read: for a caller that
        learns the next segments after the read; when this reader has read further in
        `seg` since, the read-ahead starts from there. Never blocks on I/O."""
        with self._lock:
            end = min(max(end, self._positions.get((seg.key, seg.identity), 0)), seg.size)
        if self.prefetch_max_bytes <= 0 or end <= 0:
            return
        self._prefetch_after(seg, seg.index.chunks_for(end - 1, end)[-1], next_segments)

    @property
    def prefetch_pending_bytes(self) -> int:
        """Original bytes of read-ahead queued or running."""
        with self._lock:
            return self._prefetch_pending

    def close(self) -> None:
        """Stop read-ahead: queued prefetches are dropped, running ones finish."""
        if self._prefetch_pool is not None:
            self._prefetch_pool.shutdown(wait=True, cancel_futures=True)

    # -- the fetch -----------------------------------------------------------------------
    def _fetch(self, seg: SegmentObject, indices: list[int], deadline: float, *,
               what: str) -> dict[int, object]:
        """The plain bytes of chunks `indices` of `seg`, from the cache, from fetches other
        readers already have in flight, or from new coalesced GETs."""
        plain: dict[int, object] = {}
        waits: dict[int, concurrent.futures.Future] = {}
        owned: dict[int, concurrent.futures.Future] = {}
        for i in indices:
            key = seg.chunk_key(i)
            if self.cache is not None:
                data = self.cache.get(key)
                if data is not None:
                    plain[i] = data
                    continue
            with self._lock:
                fut = self._inflight.get(key)
                if fut is None:
                    fut = self._inflight[key] = concurrent.futures.Future()
                    owned[i] = fut
                else:
                    waits[i] = fut
        if owned and self.cache is not None:
            # a fetch that finished between this reader's cache miss and its registration
            # has cached the chunk already: take it rather than fetching it again
            for i in list(owned):
                key = seg.chunk_key(i)
                data = self.cache.get(key) if self.cache.contains(key) else None
                if data is not None:
                    plain[i] = data
                    self._resolve(seg, i, owned.pop(i), result=data)
        if owned:
            self._fetch_owned(seg, owned, deadline, what)
            for i, fut in owned.items():
                plain[i] = fut.result()
        for i, fut in waits.items():
            remaining = deadline - time.monotonic()
            try:
                plain[i] = fut.result(timeout=max(0.0, remaining))
            except concurrent.futures.TimeoutError:
                raise self._timeout(seg, what, [i]) from None
        return plain

    def _fetch_owned(self, seg: SegmentObject, owned: dict[int, concurrent.futures.Future],
                     deadline: float, what: str) -> None:
        """Fetch the chunks this reader registered; every owned future ends resolved (with
        the chunk or the error) and unregistered, whatever happens."""
        try:
            self.store.run(self._fetch_runs(seg, owned, deadline, what))
        except BaseException as e:
            for i, fut in owned.items():
                if not fut.done():
                    if self.cache is not None:
                        self.cache.load_failed()
                    self._resolve(seg, i, fut, error=e)
            raise

    async def _fetch_runs(self, seg: SegmentObject,
                          owned: dict[int, concurrent.futures.Future], deadline: float,
                          what: str) -> None:
        """The GETs of one read, at most max_in_flight at once, each chunk detransformed,
        cached and handed to its waiters as soon as its GET is done."""
        runs = self._plan_runs(seg, sorted(owned))
        gate = asyncio.Semaphore(self.max_in_flight)
        pending = {}
        for run in runs:
            t0 = seg.index.transformed_range(run[0])[0]
            t1 = seg.index.transformed_range(run[-1])[1]
            task = asyncio.ensure_future(self._get(gate, seg.key, t0, t1))
            pending[task] = (run, t0)
        try:
            for _ in range(len(runs)):
                if not pending:
                    break
                remaining = deadline - time.monotonic()
                done, _ = await asyncio.wait(pending, timeout=max(0.0, remaining),
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    left = sorted(i for run, _ in pending.values() for i in run)
                    raise self._timeout(seg, what, left)
                for task in done:
                    run, t0 = pending.pop(task)
                    try:
                        raw = memoryview(task.result())
                    except RemoteStorageError as e:
                        self._raise_if_cut_short(seg, run, e)
                        raise
                    if self._on_fetched is not None:
                        self._on_fetched(seg, run)
                    for i in run:
                        a, b = seg.index.transformed_range(i)
                        data = self._detransform(seg, i, raw[a - t0:b - t0])
                        if self.cache is not None:
                            self.cache.put(seg.chunk_key(i), data)
                        self._resolve(seg, i, owned[i], result=data)
        finally:
            if pending:  # a failure or the deadline: the other GETs are abandoned
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

    @staticmethod
    def _raise_if_cut_short(seg: SegmentObject, run: list[int], error: RemoteStorageError
                            ) -> None:
        """For a GET of chunks `run` whose answer was short (the object ends at
        `error.position`, before the manifest's chunk index says): raises the damage of the
        chunk it cuts, naming the object and that chunk. Returns for any other failure."""
        if error.position is None or isinstance(error, CorruptRemoteObjectError):
            return
        cut = next((i for i in run if seg.index.transformed_range(i)[1] > error.position),
                   run[-1])
        a, b = seg.index.transformed_range(cut)
        raise CorruptRemoteObjectError(
            f"{seg.key} chunk {cut}: the object ends at byte {error.position}, inside the "
            f"chunk's bytes [{a}, {b}) in the manifest's chunk index",
            object_key=seg.key, chunk=cut, position=error.position) from error

    def _resolve(self, seg, i, fut, *, result=None, error=None) -> None:
        with self._lock:
            self._inflight.pop(seg.chunk_key(i), None)
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def _plan_runs(self, seg: SegmentObject, indices: list[int]) -> list[list[int]]:
        """Adjacent chunks grouped into GETs of about total / max_in_flight bytes each (so
        the read uses its parallelism), at most max_request_bytes, at least one chunk."""
        ranges = [seg.index.transformed_range(i) for i in indices]
        total = sum(b - a for a, b in ranges)
        target = min(self.max_request_bytes, -(-total // self.max_in_flight))
        runs: list[list[int]] = []
        size = 0
        for i, (a, b) in zip(indices, ranges):
            contiguous = runs and runs[-1][-1] == i - 1
            if contiguous and size + (b - a) <= max(target, 1):
                runs[-1].append(i)
                size += b - a
            else:
                runs.append([i])
                size = b - a
        return runs

    async def _get(self, gate: asyncio.Semaphore, key: str, start: int, end: int):
        async with gate:
            if end == start:
                return b""
            return await self.store.get_range_async(key, start, end)

    def _detransform(self, seg: SegmentObject, i: int, raw: memoryview):
        lo, hi = seg.index.original_range(i)
        if seg.detransform is None:
            data = raw  # plain mode: the fetched buffer itself, no copy
        else:
            try:
                data = seg.detransform(i, raw)
            except KafkaEngineError as e:
                if e.position is None:  # where the damaged chunk starts in the object
                    e.position = seg.index.transformed_range(i)[0]
                raise e.with_file(self.store.url(seg.key)) from None
            except Exception as e:  # a codec's own error type (zlib.error, InvalidTag ...)
                raise RemoteStorageError(
                    f"chunk {i} cannot be decoded: {type(e).__name__}: {e}",
                    file=self.store.url(seg.key), position=seg.index.transformed_range(i)[0]
                ) from e
        if len(data) != hi - lo:
            raise RemoteStorageError(
                f"chunk {i} decodes to {len(data)} bytes, its index says {hi - lo}",
                file=self.store.url(seg.key), position=seg.index.transformed_range(i)[0])
        return data

    def _timeout(self, seg: SegmentObject, what: str, chunks: list[int]):
        return RemoteFetchTimeoutError(
            f"read of {what} did not finish within the fetch deadline "
            f"(remote.fetch.max.wait.ms); chunks {chunks[0]}..{chunks[-1]} still pending",
            file=self.store.url(seg.key))

    # -- read-ahead ----------------------------------------------------------------------
    def _follows(self, seg: SegmentObject, chunks: range, end: int,
                 sequential: bool | None) -> bool:
        """Whether this read is sequential (see `read`); records where it ends."""
        if self.prefetch_max_bytes <= 0:
            return False
        k = (seg.key, seg.identity)
        with self._lock:
            last = self._positions.pop(k, None)
            self._positions[k] = end
            if len(self._positions) > _POSITIONS_KEPT:
                self._positions.popitem(last=False)
        if sequential is not None:
            return sequential
        if chunks[0] == 0:
            return True
        return last is not None and seg.index.original_range(chunks[0])[0] <= last <= end

    def _prefetch_after(self, seg: SegmentObject, last: int,
                        next_segments: Sequence[SegmentObject]) -> None:
        """Queues the chunks after chunk `last` of `seg`, then those of `next_segments`
        from their first, up to `prefetch_max_bytes` of original bytes (the window: chunks
        already cached, queued or in flight count against it, so it slides with the
        reader; each chunk is queued once)."""
        if self.prefetch_max_bytes <= 0:
            return
        k = (seg.key, seg.identity)
        scan = (last, tuple((s.key, s.identity) for s in next_segments))
        with self._lock:
            if self._scanned.get(k) == scan:
                return
        for s, picked in self._window(seg, last, next_segments):
            with self._lock:
                picked = [i for i in picked if s.chunk_key(i) not in self._queued]
                if not picked:
                    continue
                nbytes = sum(s.index.original_range(i)[1] - s.index.original_range(i)[0]
                             for i in picked)
                if self._prefetch_pending + nbytes > 2 * self.prefetch_max_bytes:
                    # read-ahead is behind: queue no more now, ask again once some is done
                    self._deferred.pop(k, None)
                    self._deferred[k] = (seg, last, tuple(next_segments))
                    if len(self._deferred) > _DEFERRED_KEPT:
                        self._deferred.popitem(last=False)
                    return
                self._prefetch_pending += nbytes
                keys = [s.chunk_key(i) for i in picked]
                self._queued.update(keys)
            try:
                self._prefetch_pool.submit(self._prefetch, s, picked, nbytes, keys)
            except RuntimeError:  # shut down
                with self._lock:
                    self._prefetch_pending -= nbytes
                    self._queued.difference_update(keys)
                return
        with self._lock:  # the whole window is cached, queued or in flight
            self._scanned.pop(k, None)
            self._scanned[k] = scan
            if len(self._scanned) > _POSITIONS_KEPT:
                self._scanned.popitem(last=False)

    def _window(self, seg: SegmentObject, last: int, next_segments: Sequence[SegmentObject]
                ) -> list[tuple[SegmentObject, list[int]]]:
        """The read-ahead window after chunk `last` of `seg`: (segment, chunks neither
        cached nor queued nor in flight) in order."""
        plan: list[tuple[SegmentObject, list[int]]] = []
        budget = self.prefetch_max_bytes
        for s, first in ((seg, last + 1), *((n, 0) for n in next_segments)):
            picked = []
            for i in range(first, s.index.chunk_count):
                if budget <= 0:
                    break
                lo, hi = s.index.original_range(i)
                budget -= hi - lo
                key = s.chunk_key(i)
                with self._lock:
                    busy = key in self._inflight or key in self._queued
                if not busy and not self.cache.contains(key):
                    picked.append(i)
            if picked:
                plan.append((s, picked))
            if budget <= 0:
                break
        return plan

    def _prefetch(self, seg: SegmentObject, indices: list[int], nbytes: int,
                  keys: list[ChunkKey]) -> None:
        try:
            deadline = time.monotonic() + self.store.config.call_timeout_ms / 1000.0
            self._fetch(seg, indices, deadline, what=f"read-ahead of chunks {indices[0]}..")
        except (KafkaEngineError, OSError) as e:
            # read-ahead is an optimisation: its failure is counted (cache_load_failure,
            # the store's error counters) and the foreground read will fetch again
            log.debug("read-ahead of %s failed: %s", self.store.url(seg.key), e)
        finally:
            with self._lock:
                self._prefetch_pending -= nbytes
                self._queued.difference_update(keys)
                deferred = list(self._deferred.values())
                self._deferred.clear()
            for args in deferred:
                self._prefetch_after(*args)


class RangeStream(io.RawIOBase):
    """`.log` bytes [pos, end) read `window` bytes at a time through the range reader."""

    def __init__(self, reader: RangeReader, seg: SegmentObject, pos: int, end: int,
                 window: int):
        self._reader, self._seg, self._pos, self._end = reader, seg, pos, end
        self._window = window
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self._buf:
            if self._pos >= self._end:
                return 0
            hi = min(self._end, self._pos + self._window)
            self._buf = memoryview(self._reader.read(self._seg, self._pos, hi))
            self._pos = hi
        n = min(len(buffer), len(self._buf))
        memoryview(buffer).cast("B")[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
