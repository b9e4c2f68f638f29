"""A partition's remote log: the copied segments that serve its offsets, and every answer a
reader takes from them, written once for every reader (the RemoteLogManager's remote reads,
`serve --bucket`, the Spark source and `engine.arrow`).

A `RemoteLog` is fed by a source of segments (`RemoteSegments`): the RLMM's metadata through
the leader-epoch lineage of a broker's log (`LineageSegments`, Kafka's RemoteLogManager
lookups), or a chain resolved once (`ChainSegments`: a bucket's listing, or the RLMM's
lineage as a scan plans it). Its indexes come from a `SegmentIndexes`: Kafka's
RemoteIndexCache on a broker (`CachedIndexes`), else the process's one in-memory cache of
parsed indexes over the RSM (`StoreIndexes`, `INDEXES`).

Answers, for one partition:
- `read`: whole batches from an offset, checked as a consumer with `check.crcs` checks them
  (engine.remote.segment_access.check_batches), cut where the next kept segment takes over and
  at an upper bound (the last stable offset for read_committed). Kafka's rules for the first
  batch: larger than `max_bytes`, it is returned whole with `min_one_message`, and nothing is
  returned without. A read ends at a whole batch (unlike Kafka, which may end on a partial
  one the client drops). A read within batches an earlier read in this process checked,
  under the same read generation of the RSM, is cut from their rows
  (engine.remote.checked_batches): no walk, no scan. Else the walk starts at the checked
  batch holding the offset, where the previous read of the segment ended (NextPositions),
  or at the offset index's position.
- `aborted_transactions`: those overlapping [fetch offset, upper bound), from a segment on
  until one search is complete (Kafka's collectAbortedTxns), with whether it completed;
  `all_aborted_transactions` for a scan's planning. The transaction index of the segment
  read, and of each later one whose entries are searched, is first checked against its
  segment (engine.remote.index_check, once per segment per process): a damaged or lying
  index is CorruptIndexError, never an aborted record shown or a committed one hidden.
- `last_stable_offset`: the end of the log, or the first offset of a transaction still open
  at the end of the last segment (its producer snapshot).
- `offset_for_timestamp` / `max_timestamp` / `timestamp_at`: ListOffsets by timestamp and
  max timestamp, positioned by the remote time and offset indexes, each checked against its
  segment before it answers.
- `list_offset`: Kafka's ListOffsets specs for a log with no local part (a bucket replica).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np

from engine._native import records as _records
from engine.errors import (
    CorruptIndexError,
    CorruptRecordError,
    KafkaEngineError,
    OffsetOutOfRangeError,
)
from engine.log.offset_index import OffsetIndex
from engine.log.producer_state import decode_snapshot
from engine.log.time_index import TimeIndex
from engine.log.transaction_index import ABORTED_TXN_DTYPE, ABORTED_TXN_VERSION, AbortedTxn
from engine.records import MemoryRecords
from engine.remote.checked_batches import CHECKED_BATCHES, CheckedAnswer
from engine.remote.index_check import OFFSET, TIME, TRANSACTION, VERDICTS
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.read_verdicts import VERIFIED
from engine.remote.segment_access import (
    WALK_WINDOW,
    NextPositions,
    RemoteSegmentReader,
    WouldBlock,
    aborted_txn_rows,
    check_batches,
    describe_segment,
    find_offset_for_timestamp,
    index_bytes,
)
from engine.remote.storage import IndexType

__all__ = ["INDEXES", "CachedIndexes", "ChainSegments", "LineageSegments", "RemoteLog",
           "RemoteRead", "RemoteSegments", "SegmentIndexes", "StoreIndexes", "increasing_prefix"]

#: bytes past the walk window that the first header probe may need
_HEADER_PROBE = 64
#: a batch's offset and length fields
_LOG_OVERHEAD = 12
#: segments named ahead of the one read, for read-ahead across several small segments
READ_FORWARD_LINKS = 3
#: a lineage that ended short of READ_FORWARD_LINKS links is asked again after this long
READ_FORWARD_RENEW_S = 1.0
#: ListOffsets specs (ListOffsetsRequest)
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
_NOT_FOUND = (-1, -1, -1)


class Link(Protocol):
    """A segment and the offsets it serves: [start_offset, end)."""

    @property
    def segment(self) -> RemoteLogSegmentMetadata: ...

    @property
    def end(self) -> int: ...

    @property
    def start_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """A segment serving all its offsets (a link of the RLMM's lineage)."""

    segment: RemoteLogSegmentMetadata
    end: int

    @property
    def start_offset(self) -> int:
        return self.segment.start_offset


class RemoteSegments(Protocol):
    """Where a partition's offsets are in the remote tier."""

    name: str

    def link_for(self, offset: int) -> Link | None:
        """The link serving `offset`, None when no segment does."""

    def next_link(self, link: Link) -> Link | None:
        """The link serving the offsets right after `link`'s."""

    def out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        """Kafka's answer for an offset no segment serves."""


class ChainSegments:
    """A chain of links resolved once, in offset order, with the offsets missing between
    them (`gaps`, inclusive pairs)."""

    def __init__(self, name: str, links: Sequence[Link], where: str = "the remote tier",
                 gaps: Sequence[tuple[int, int]] = ()):
        self.name = name
        self.links = tuple(links)
        self.gaps = tuple(gaps)
        self.where = where
        self._starts = [link.start_offset for link in self.links]

    def bounds(self) -> tuple[int, int] | None:
        """[earliest, latest) offsets served, None when none is."""
        return (self.links[0].start_offset, self.links[-1].end) if self.links else None

    def index_of(self, offset: int) -> int | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        return i if i >= 0 and offset < self.links[i].end else None

    def link_for(self, offset: int) -> Link | None:
        i = self.index_of(offset)
        return None if i is None else self.links[i]

    def next_link(self, link: Link) -> Link | None:
        i = self.index_of(link.end)
        return None if i is None else self.links[i]

    def links_from(self, offset: int) -> tuple[Link, ...]:
        i = bisect.bisect_right(self._starts, offset) - 1
        return self.links[max(i, 0):]

    def out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        start, end = self.bounds() or (0, 0)
        if start <= offset <= end:
            gap = next(((a, b) for a, b in self.gaps if a <= offset <= b), (offset, offset))
            return OffsetOutOfRangeError(
                f"fetch offset {offset} of partition {self.name} is in no segment of "
                f"{self.where}: offsets {gap[0]}-{gap[1]} are missing (a segment deleted, "
                "damaged or never uploaded)", offset=offset, log_start_offset=start,
                log_end_offset=end)
        return OffsetOutOfRangeError(
            f"fetch offset {offset} of partition {self.name} is out of range: valid offsets "
            f"are [{start}, {end}] ({self.where})", offset=offset, log_start_offset=start,
            log_end_offset=end)


class LineageSegments:
    """A broker's partition as Kafka's RemoteLogManager finds its segments: the epoch of an
    offset in the log's leader-epoch cache, then the RLMM's COPY_SEGMENT_FINISHED segment of
    that epoch holding the offset. `log` is the partition's UnifiedLog."""

    def __init__(self, rlmm, tip, log, name: str):
        self.rlmm = rlmm
        self.tip = tip
        self.log = log
        self.name = name
        self._last: SegmentSpan | None = None  # consecutive reads mostly hit one segment

    def link_for(self, offset: int) -> Link | None:
        epoch = self.log.leader_epoch_cache.epoch_for_offset(offset)
        if epoch is None:
            return None
        md = self.rlmm.remote_log_segment_metadata(self.tip, epoch, offset)
        if md is None:
            return None
        last = self._last
        if last is None or last.segment is not md:
            last = self._last = SegmentSpan(md, md.end_offset + 1)
        return last

    def next_link(self, link: Link) -> Link | None:
        return self.link_for(link.end)

    def out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        epoch = self.log.leader_epoch_cache.epoch_for_offset(offset)
        return OffsetOutOfRangeError(
            f"fetch offset {offset} of partition {self.name} does not exist in the remote "
            f"tier (leader epoch {epoch}): no copied segment holds it", offset=offset,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset)


@dataclass
class RemoteRead:
    """Whole batches read from `link`'s segment (a view of the bytes read) and the offset
    after them."""

    records: memoryview | bytes
    next_offset: int
    link: Link


class SegmentIndexes(Protocol):
    """A segment's remote indexes, as the reads use them."""

    def position(self, md: RemoteLogSegmentMetadata, offset: int,
                 nonblocking: bool = False) -> int:
        """The offset index's position for `offset` (the entry at or below it, byte 0
        below the first); with `nonblocking`, WouldBlock when that needs storage I/O."""

    def timestamp_position(self, md: RemoteLogSegmentMetadata, timestamp: int,
                           starting_offset: int) -> int:
        """Kafka's lookupTimestamp: the offset index's position for the larger of
        `starting_offset` and the time index's offset for `timestamp`."""

    def aborted_rows(self, md: RemoteLogSegmentMetadata) -> np.ndarray:
        """The transaction index's ABORTED_TXN_DTYPE rows (none when it was not copied)."""

    def offset_entries(self, md: RemoteLogSegmentMetadata) -> np.ndarray:
        """The offset index's entries (absolute offsets), its increasing prefix."""

    def open_transactions(self, md: RemoteLogSegmentMetadata) -> list[int]:
        """First offsets of the transactions still open at the end of `md` (its producer
        snapshot)."""


def increasing_prefix(entries: np.ndarray) -> np.ndarray:
    """The entries up to the first that does not increase: a zero-filled preallocated tail
    would read as offset == base, position 0."""
    bad = np.flatnonzero(np.diff(entries["offset"]) <= 0)
    return entries[: int(bad[0]) + 1] if len(bad) else entries


class _ParsedIndexes:
    """The process's one in-memory cache of parsed remote indexes, keyed by segment id and
    index type (a segment id names one upload: its indexes never change), least recently
    used dropped first past `max_bytes`."""

    def __init__(self, max_bytes: int = 128 << 20):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple, load: Callable[[], tuple[Any, int]]) -> Any:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
        value, size = load()
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, size)
                self._bytes += size
                while self._bytes > self.max_bytes and len(self._entries) > 1:
                    _, (_, dropped) = self._entries.popitem(last=False)
                    self._bytes -= dropped
        return value

    def holds(self, key: tuple) -> bool:
        with self._lock:
            return key in self._entries

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


#: parsed remote indexes of every reader of this process that has no RemoteIndexCache
INDEXES = _ParsedIndexes()


class StoreIndexes:
    """A segment's indexes fetched through the RSM (its own indexes cache, when it has one)
    and kept parsed in `INDEXES`."""

    def __init__(self, rsm, cache: _ParsedIndexes = INDEXES):
        self.rsm = rsm
        self.cache = cache

    def _key(self, md: RemoteLogSegmentMetadata, kind: str) -> tuple:
        return (id(self.rsm), md.remote_log_segment_id, kind)

    def _offset_index(self, md: RemoteLogSegmentMetadata) -> OffsetIndex:
        def load():
            data = index_bytes(self.rsm, md, IndexType.OFFSET)
            return OffsetIndex.from_buffer(data, md.start_offset), len(data)
        return self.cache.get(self._key(md, "offset"), load)

    def position(self, md: RemoteLogSegmentMetadata, offset: int,
                 nonblocking: bool = False) -> int:
        if nonblocking and not self.cache.holds(self._key(md, "offset")):
            raise WouldBlock
        return self._offset_index(md).lookup(offset).position

    def timestamp_position(self, md: RemoteLogSegmentMetadata, timestamp: int,
                           starting_offset: int) -> int:
        def load():
            data = index_bytes(self.rsm, md, IndexType.TIMESTAMP)
            return TimeIndex.from_buffer(data, md.start_offset), len(data)
        found = self.cache.get(self._key(md, "time"), load).lookup(timestamp).offset
        return self.position(md, max(starting_offset, found))

    def aborted_rows(self, md: RemoteLogSegmentMetadata) -> np.ndarray:
        def load():
            rows = aborted_txn_rows(self.rsm, md)
            return rows, rows.nbytes
        return self.cache.get(self._key(md, "txn"), load)

    def offset_entries(self, md: RemoteLogSegmentMetadata) -> np.ndarray:
        def load():
            entries = increasing_prefix(self._offset_index(md).entries_array())
            return entries, entries.nbytes
        return self.cache.get(self._key(md, "entries"), load)

    def open_transactions(self, md: RemoteLogSegmentMetadata) -> list[int]:
        def load():
            firsts = open_transactions(self.rsm, md)
            return firsts, 8 * len(firsts) + 64
        return self.cache.get(self._key(md, "snapshot"), load)


class CachedIndexes:
    """A segment's indexes from Kafka's RemoteIndexCache (a broker's: files under its log
    dir, bounded by remote.log.index.file.cache.total.size.bytes)."""

    def __init__(self, index_cache):
        self.index_cache = index_cache

    def position(self, md: RemoteLogSegmentMetadata, offset: int,
                 nonblocking: bool = False) -> int:
        if nonblocking:
            entry = self.index_cache.cached_entry(md)
            if entry is None:
                raise WouldBlock
            return entry.lookup_offset(offset)
        return self.index_cache.lookup_offset(md, offset)

    def timestamp_position(self, md: RemoteLogSegmentMetadata, timestamp: int,
                           starting_offset: int) -> int:
        return self.index_cache.lookup_timestamp(md, timestamp, starting_offset)

    def aborted_rows(self, md: RemoteLogSegmentMetadata) -> np.ndarray:
        if md.txn_idx_empty:
            return np.zeros(0, dtype=ABORTED_TXN_DTYPE)
        # the entry is held while its file is read: an evicted entry's files go with it
        entry = self.index_cache.get_index_entry(md)
        return entry.txn_index.entries_array()

    def offset_entries(self, md: RemoteLogSegmentMetadata) -> np.ndarray:
        entry = self.index_cache.get_index_entry(md)
        return increasing_prefix(entry.offset_index.entries_array())

    def open_transactions(self, md: RemoteLogSegmentMetadata) -> list[int]:
        # Kafka's RemoteIndexCache keeps no producer snapshot: it is fetched each time
        return open_transactions(self.index_cache.rsm, md)


def collect_aborted(rows: np.ndarray, md: RemoteLogSegmentMetadata, fetch_offset: int,
                    upper_bound: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's collectAbortedTxns over one transaction index: the entries overlapping
    [fetch_offset, upper_bound), and whether the search is complete (an entry whose last
    stable offset reaches the upper bound ends it)."""
    stops = np.flatnonzero(rows["last_stable_offset"] >= upper_bound)
    scanned = rows[: int(stops[0]) + 1] if len(stops) else rows
    version = (scanned["version"].astype(np.int32) >> 8).astype(np.int8)
    if len(scanned) and int(version.max()) > ABORTED_TXN_VERSION:
        raise CorruptIndexError(
            f"{describe_segment(md)}: its transaction index has an entry of version "
            f"{int(version.max())}; the current version is {ABORTED_TXN_VERSION}")
    hits = scanned[(scanned["last_offset"] >= fetch_offset)
                   & (scanned["first_offset"] < upper_bound)]
    return [AbortedTxn(int(r["producer_id"]), int(r["first_offset"]), int(r["last_offset"]),
                       int(r["last_stable_offset"])) for r in hits], bool(len(stops))


def _holds_first_batch(view) -> bool:
    """Whether `view` starts with a whole batch (its length field read, not trusted: the
    scan frames it)."""
    return len(view) >= _LOG_OVERHEAD and \
        _LOG_OVERHEAD + int.from_bytes(view[8:12], "big", signed=True) <= len(view)


class RemoteLog:
    """The remote part of one partition's log, read one way for every reader (see the
    module docstring). Thread-safe when its source and indexes are."""

    def __init__(self, rsm, segments: RemoteSegments, indexes: SegmentIndexes,
                 positions: NextPositions | None = None):
        self.rsm = rsm
        self.segments = segments
        self.indexes = indexes
        self.positions = positions if positions is not None else NextPositions()
        # (segment, until when) whose lineage was last named: its reads name none again
        # until then (for good when the lineage had READ_FORWARD_LINKS links)
        self._named: tuple[RemoteLogSegmentMetadata | None, float] = (None, 0.0)

    # -- Fetch ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one_message: bool = True,
             upto: int | None = None, nonblocking: bool = False) -> RemoteRead:
        """Whole batches from `offset`, of those starting below `upto` and the link's end.
        OffsetOutOfRangeError (the source's) when no segment serves `offset`; with
        `nonblocking`, WouldBlock when the read needs storage I/O."""
        link = self.segments.link_for(offset)
        if link is None:
            raise self.segments.out_of_range(offset)
        if self.rsm.reads_ahead:  # a consumer reads on: read-ahead may cross into next ones
            self._name_next_segments(link)
        limit = link.end if upto is None else min(link.end, upto)
        data, next_offset = self._read_segment(link.segment, offset, max_bytes,
                                               min_one_message, limit, nonblocking)
        return RemoteRead(data, next_offset, link)

    def _name_next_segments(self, link: Link) -> None:
        """Tells the RSM the lineage after `link`, one `read_forward` a link, up to
        READ_FORWARD_LINKS segments ahead: a read-ahead window larger than a segment keeps
        going past the next one instead of stalling at its end. Once per segment a reader
        enters (the lineage of a copied segment stays), but a lineage that ended short of
        that many links is asked again READ_FORWARD_RENEW_S later, and so names a segment
        copied meanwhile."""
        segment = link.segment
        named, until = self._named
        now = time.monotonic()
        if named is segment and now < until:
            return
        until = float("inf")
        for _ in range(READ_FORWARD_LINKS):
            nxt = self.segments.next_link(link)
            self.rsm.read_forward(link.segment, None if nxt is None else nxt.segment)
            if nxt is None:
                until = now + READ_FORWARD_RENEW_S
                break
            link = nxt
        self._named = (segment, until)

    def _read_segment(self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                      min_one_message: bool, upto: int, nonblocking: bool
                      ) -> tuple[memoryview | bytes, int]:
        # asked before any byte is read (the view may be a slice of the walk's window)
        before = self.rsm.read_generation(md)
        found = CHECKED_BATCHES.answer(md.remote_log_segment_id.id, before, offset,
                                       max_bytes, upto, md.segment_size_in_bytes)
        if isinstance(found, CheckedAnswer):
            if found.end - found.position > max_bytes and not min_one_message:
                return b"", offset
            served = self._read_checked(md, found, before, nonblocking)
            if served is not None:
                return served
            found = None
        # the header walk's window and the records after it in one mapping, where views are
        reader = RemoteSegmentReader(self.rsm, md, nonblocking, span=max_bytes + WALK_WINDOW)
        known = found if found is not None else self.positions.start(md, offset)
        view = None
        if known is not None:  # a batch start a checked read found: no walk
            position = known
            view = reader.read_exact(position, position + max_bytes)
            if not _holds_first_batch(view):  # larger than max_bytes: the walk frames it
                view = None
        if view is None:
            position, first_size = self._walk_to(reader, md, offset, max_bytes, nonblocking,
                                                 known)
            if first_size > max_bytes and not min_one_message:
                return b"", offset
            view = reader.read_exact(position, position + max(max_bytes, first_size))
        crc, generation = self._needs_crc(md, position, position + len(view), before)
        try:
            headers, valid = _records.scan(view, crc)
        except KafkaEngineError as exc:  # framing the scan refuses: at the segment's byte
            raise exc.with_context(describe_segment(md), position_base=position) from None
        check_batches(headers, partial(describe_segment, md), first_offset=offset, crc=crc,
                      min_offset=md.start_offset, max_offset=md.end_offset, position=position)
        if crc:  # every whole batch of the view checked out (a partial last one is not)
            VERIFIED.checked(md.remote_log_segment_id.id, generation, position,
                             position + valid)
        CHECKED_BATCHES.checked(md.remote_log_segment_id.id, generation, position, headers)
        n = int(np.count_nonzero(headers["base_offset"] < upto))
        if not n:  # find_batch framed it whole: the bytes changed under the read
            raise CorruptRecordError(f"{describe_segment(md)}: no whole batch at byte "
                                     f"{position} on the second read", position=position,
                                     offset=offset)
        cut = int(headers["position"][n - 1]) + int(headers["size"][n - 1])
        next_offset = int(headers["last_offset"][n - 1]) + 1
        self.positions.ended(md, next_offset, position + cut)
        return view[:cut], next_offset

    def _read_checked(self, md: RemoteLogSegmentMetadata, found: CheckedAnswer,
                      before: Hashable, nonblocking: bool
                      ) -> tuple[memoryview | bytes, int] | None:
        """The bytes of an answer decided by checked rows, when the generation they were
        checked under is still the one after the read (else None: the read is checked as
        any other is, since bytes may have come from storage meanwhile)."""
        if nonblocking:  # the reader's work, for the one range there is
            view = self.rsm.map_range_if_open(md, found.position, found.end)
            if view is None:
                raise WouldBlock
        else:
            view = RemoteSegmentReader(self.rsm, md).read_exact(found.position, found.end)
        if self.rsm.read_generation(md) != before or len(view) != found.end - found.position:
            return None
        if found.run_ends:  # the next read starts past the checked rows
            self.positions.ended(md, found.next_offset, found.end)
        return view, found.next_offset

    def _walk_to(self, reader: RemoteSegmentReader, md: RemoteLogSegmentMetadata,
                 offset: int, max_bytes: int, nonblocking: bool,
                 start: int | None) -> tuple[int, int]:
        """(position, size) of the batch holding `offset`: batch headers walked in a window
        of at most 64 KiB from `start`, else from the offset index's position (the target is
        within index.interval.bytes of it), checked as they are passed."""
        if start is None:
            start = self.indexes.position(md, offset, nonblocking)
        found = reader.find_batch(start, offset, min(max_bytes, WALK_WINDOW) + _HEADER_PROBE)
        if found is None:  # the source says the segment holds `offset`: its bytes end early
            raise CorruptRecordError(
                f"{describe_segment(md)}: no batch ends at or after offset {offset} before "
                f"the .log ends at byte {reader.size}", position=reader.size, offset=offset)
        return found[0], found[1]

    def _needs_crc(self, md: RemoteLogSegmentMetadata, start: int, end: int,
                   before: Hashable | None) -> tuple[bool, Hashable | None]:
        """(whether bytes [start, end) just read need the reader's CRC pass, the generation
        they were read under or None). A generation left as it was by the read (`before`,
        asked before it, equal to the one after) means no byte came from storage meanwhile
        (engine.remote.read_verdicts): the verdicts of the read are kept under it. No pass
        when the RSM checked every batch CRC before serving them (the contract's
        verifies_batch_crcs), nor when a read in this process checked them under that
        generation."""
        generation = before if before is not None and \
            before == self.rsm.read_generation(md) else None
        if self.rsm.verifies_batch_crcs(md):
            return False, generation
        if generation is None:
            return True, None
        return not VERIFIED.covers(md.remote_log_segment_id.id, generation, start, end), \
            generation

    # -- transactions -----------------------------------------------------------------

    def aborted_transactions(self, link: Link, fetch_offset: int, upper_bound: int
                             ) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from `link`'s
        segment on until one search is complete (Kafka's remote read), and whether one
        was: the caller goes on in the local log when not."""
        out: list[AbortedTxn] = []
        current: Link | None = link
        while current is not None:
            md = current.segment
            # the index that decides what the consumer sees is checked against its segment
            # first (once per segment): the segment read, and each later one with entries
            if current is link or not md.txn_idx_empty:
                VERDICTS.require(self.rsm, md, TRANSACTION)
            if not md.txn_idx_empty:
                found, complete = collect_aborted(self.indexes.aborted_rows(md), md,
                                                  fetch_offset, upper_bound)
                out.extend(found)
                if complete:
                    return out, True
            current = self.segments.next_link(current)
        return out, False

    def all_aborted_transactions(self, links: Iterable[Link]) -> list[tuple[int, int, int]]:
        """(producer id, first offset, last offset) of every aborted transaction the
        transaction indexes of `links`' segments record."""
        out: list[tuple[int, int, int]] = []
        for link in links:
            rows = self.indexes.aborted_rows(link.segment)
            out.extend((int(r["producer_id"]), int(r["first_offset"]), int(r["last_offset"]))
                       for r in rows)
        return out

    def last_stable_offset(self, links: Sequence[Link]) -> int | None:
        """The last stable offset of a log whose tail is `links`: its end, or the first
        offset of a transaction still open at the end of the last segment (its marker is
        not tiered yet, so whether it commits is not known here), from that segment's
        producer snapshot. An empty snapshot (a log that kept none) counts as no open
        transaction. None for no links."""
        if not links:
            return None
        start, end = links[0].start_offset, links[-1].end
        return max(start, min([end, *self.indexes.open_transactions(links[-1].segment)]))

    # -- ListOffsets ------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int, links: Iterable[Link],
                             starting_offset: int = 0) -> tuple[int, int] | None:
        """(offset, leader epoch or -1) of the first record of `links` at or above
        `starting_offset` whose timestamp is at or after `timestamp`, positioned by each
        segment's remote time and offset indexes; None when no record is that late."""
        for link in links:
            md = link.segment
            if md.max_timestamp_ms < timestamp:
                continue
            start = max(link.start_offset, starting_offset)
            VERDICTS.require(self.rsm, md, TIME, OFFSET)  # before they answer ListOffsets
            position = self.indexes.timestamp_position(md, timestamp, start)
            found = find_offset_for_timestamp(RemoteSegmentReader(self.rsm, md), position,
                                              timestamp, start, link.end)
            if found is not None:
                return found
        return None

    def max_timestamp(self, links: Sequence[Link]) -> tuple[int, int] | None:
        """(max timestamp, offset of the first record carrying it) of `links`."""
        top = max((link.segment.max_timestamp_ms for link in links), default=-1)
        if top < 0:
            return None
        found = self.offset_for_timestamp(
            top, (link for link in links if link.segment.max_timestamp_ms == top))
        return None if found is None else (top, found[0])

    def timestamp_at(self, offset: int) -> int:
        """The timestamp of the record at `offset` (-1 when none is there)."""
        result = self.read(offset, 1)
        for batch in MemoryRecords(bytes(result.records)).batches():
            for record in batch:
                if record.offset >= offset:
                    return record.timestamp
        return -1

    def list_offset(self, spec: int, links: Sequence[Link], last_stable_offset: int,
                    read_committed: bool, leader_epoch: int, epoch_for
                    ) -> tuple[int, int, int]:
        """(timestamp, offset, leader epoch) of one ListOffsets partition of a log with no
        local part (its local log starts where it ends); (-1, -1, -1) when no record
        answers a timestamp. `leader_epoch` is the log's current one, `epoch_for` the
        lineage's epoch of an offset. ValueError for a spec Kafka does not have."""
        start, end = (links[0].start_offset, links[-1].end) if links else (0, 0)
        if spec == LATEST:
            return -1, last_stable_offset if read_committed else end, leader_epoch
        if spec == EARLIEST:
            return -1, start, epoch_for(start)
        if spec == EARLIEST_LOCAL:
            return -1, end, leader_epoch
        if spec == LATEST_TIERED:
            return (-1, end - 1, epoch_for(end - 1)) if end > start else _NOT_FOUND
        if spec == MAX_TIMESTAMP:
            top = self.max_timestamp(links)
            return (top[0], top[1], epoch_for(top[1])) if top is not None else _NOT_FOUND
        if spec < 0:
            raise ValueError(f"offset spec {spec} is not supported")
        found = self.offset_for_timestamp(spec, links)
        if found is None:
            return _NOT_FOUND
        return self.timestamp_at(found[0]), found[0], epoch_for(found[0])


def open_transactions(rsm, md: RemoteLogSegmentMetadata) -> list[int]:
    """First offsets of the transactions still open at the end of `md` (its producer
    snapshot)."""
    data = index_bytes(rsm, md, IndexType.PRODUCER_SNAPSHOT)
    entries = decode_snapshot(data, file=f"producer snapshot of {describe_segment(md)}"
                              ) if data else []
    return [e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0]
