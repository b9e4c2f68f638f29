"""Reads through the RemoteLogManager (Kafka's RemoteLogManager.read and RemoteLogReader):
remote reads as answers of the partition's read model, and local reads checked as remote
ones are.

A remote read is `RemoteLog.read` (engine.remote.remote_log) over the partition's segments
as Kafka's RLM finds them (the epoch of the offset in the leader-epoch cache, then the
RLMM's COPY_SEGMENT_FINISHED segment of that epoch holding it), its offset index from the
RemoteIndexCache: whole batches from the fetch offset, checked as a consumer with
`check.crcs` would check them (the CRCs left to an RSM that declares it checked them before
serving the bytes: the filesystem tier with `log.read.verification=full`). A read that finds
no batch for an offset below the log end offset is an error, never an empty answer.

read_committed: the aborted transactions overlapping [fetch offset, next offset) come from
the remote transaction indexes from this segment on (skipping those whose metadata says
their index is empty, KIP-1058) until one search is complete, then the local log's.

Local reads (`read_local`) get the same consumer checks, with the segment's verified prefix
sparing what an earlier read in this process checked.

The functions of a remote read take `log_reader`, the RemoteLogReader (engine.rlm.fetch),
for the collaborators they use: its RLMM, RSM, RemoteIndexCache and NextPositions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine._native import records as _records
from engine.errors import CorruptRecordError
from engine.log.transaction_index import AbortedTxn
from engine.remote.remote_log import CachedIndexes, LineageSegments, RemoteLog
from engine.remote.segment_access import WouldBlock, check_batches

__all__ = ["RemoteFetchResult", "WouldBlock", "read_local", "read_remote",
           "remote_aborted_txns"]



@dataclass
class RemoteFetchResult:
    """One partition's answer to a read.

    `records` holds whole batches (a view of the bytes read for a remote read, a zero-copy
    view of the segment for a local one); `next_offset` is the offset after the last batch
    returned (the fetch offset when none is); `aborted_transactions` is filled for read_committed;
    `throttle_time_ms` > 0 means the fetch quota refused the remote read (records empty);
    `error` is set (and records empty) for a partition of `read_many` that failed.
    """

    topic: str
    partition: int
    fetch_offset: int
    records: bytes | memoryview = b""
    next_offset: int = -1
    from_remote: bool = False
    aborted_transactions: list[AbortedTxn] = field(default_factory=list)
    throttle_time_ms: int = 0
    error: Exception | None = None
    #: for a local read with records: the segment they are bytes of, from `local_position`
    #: (a server may send them from the file: LogSegment.file_region)
    local_segment: object | None = None
    local_position: int = 0

    @property
    def size_in_bytes(self) -> int:
        return memoryview(self.records).nbytes


def remote_log(log_reader, st) -> RemoteLog:
    """The partition's read model, built once: its segments found as Kafka's RLM finds
    them (LineageSegments), its indexes from the RLM's RemoteIndexCache."""
    found = st.remote_log
    if found is None:
        found = st.remote_log = RemoteLog(
            log_reader.rsm, LineageSegments(log_reader.rlmm, st.tip, st.log, st.name),
            CachedIndexes(log_reader.index_cache), log_reader.next_positions)
    return found


def read_remote(log_reader, st, offset: int, max_bytes: int, min_one_message: bool,
                isolation: str, nonblocking: bool = False
                ) -> tuple[memoryview | bytes, int, list[AbortedTxn]]:
    """(records: a view of whole batches, next offset, aborted transactions) from the
    remote tier. Raises OffsetOutOfRangeError when no copied segment holds `offset`; with
    `nonblocking`, WouldBlock when the read needs storage I/O."""
    result = remote_log(log_reader, st).read(offset, max_bytes, min_one_message,
                                             nonblocking=nonblocking)
    aborted = []
    if isolation == "read_committed" and len(result.records):
        aborted = remote_aborted_txns(log_reader, st, result.link, offset,
                                      result.next_offset)
    return result.records, result.next_offset, aborted


def remote_aborted_txns(log_reader, st, link, fetch_offset: int, upper_bound: int
                        ) -> list[AbortedTxn]:
    """Aborted transactions a read_committed fetch of [fetch_offset, upper_bound) reports:
    from `link`'s segment and later remote segments until a search completes, then from
    local ones."""
    out, complete = remote_log(log_reader, st).aborted_transactions(link, fetch_offset,
                                                                    upper_bound)
    if not complete:
        out.extend(st.log.collect_aborted_transactions(fetch_offset, upper_bound))
    return out


def read_local(unified, topic: str, partition: int, offset: int, max_bytes: int,
               min_one_message: bool, isolation: str) -> RemoteFetchResult:
    """A read from the local log, checked as a remote one is; read_committed stops at the
    last stable offset and lists the aborted transactions of what it returns."""
    view, next_offset, segment, position = unified.read_located(offset, max_bytes,
                                                                min_one_message)
    if view.nbytes:
        _check_local(unified, segment, position, view, offset)
    aborted = []
    if isolation == "read_committed" and view.nbytes:
        view, next_offset = _trim_to(view, unified.last_stable_offset, offset, next_offset)
        if view.nbytes:
            aborted = unified.collect_aborted_transactions(offset, next_offset)
    return RemoteFetchResult(topic, int(partition), offset, view, next_offset, False, aborted,
                             local_segment=segment if view.nbytes else None,
                             local_position=position)


def _check_local(unified, segment, position: int, view: memoryview, offset: int) -> None:
    """The consumer's checks of a local read of `view` (bytes from `position` of `segment`).
    Bytes of the segment's verified prefix were checked by an earlier read in this process
    (CRC, and offsets continuing from the segment's base offset): a read within it costs
    nothing, a read continuing it checks only the bytes past it, against its last batch,
    and extends it. Any other read is checked whole, with the batch before it (a damaged
    base offset of its first batch shows only there)."""
    # a compacted log has gaps between batches; any other one has none
    contiguous = "compact" not in unified.config["cleanup.policy"]
    where = f"log {unified.dir}"
    last_offset = unified.log_end_offset - 1
    end = position + view.nbytes
    verified_end, verified_last = segment.verified_prefix
    if end <= verified_end and contiguous:
        return
    if contiguous and position <= verified_end:
        headers, _ = _records.scan(view[verified_end - position:], True)
        check_batches(headers, where, first_offset=verified_last + 1,
                      min_offset=verified_last + 1, max_offset=last_offset,
                      position=verified_end)
        segment.extend_verified_prefix(verified_end, end, int(headers["last_offset"][-1]))
        return
    headers, _ = _records.scan(view, True)
    check_batches(headers, where, first_offset=offset, contiguous=contiguous,
                  max_offset=last_offset)
    if contiguous:
        _check_local_batch_before(unified, headers, where)


def _check_local_batch_before(unified, headers, where: str) -> None:
    """A damaged base offset of the first batch a read returns (the CRC does not cover it)
    shows only against the batch before it, which must end right below it: the remote
    reader checks the same through its header walk (RemoteSegmentReader.find_batch)."""
    base = int(headers["base_offset"][0])
    if base <= unified.local_log_start_offset or headers["magic"][0] < 2:
        return
    before, _ = unified.read(base - 1, 0, True)
    rows, _ = _records.scan(before, False)
    if not len(rows) or rows["magic"][0] < 2 or int(rows["last_offset"][0]) == base - 1:
        return
    if int(rows["base_offset"][0]) == base:  # offset base - 1 leads to the batch itself
        last = int(headers["last_offset"][0])
        raise CorruptRecordError(
            f"{where}: the batch claiming offsets {base}-{last} is also where offset "
            f"{base - 1} leads: its offsets do not continue the log (a damaged base "
            "offset: the batch CRC does not cover it)", offset=base)
    check_batches(np.concatenate((rows[:1], headers[:1])), where, crc=False)


def _trim_to(view: memoryview, limit: int, offset: int,
             next_offset: int) -> tuple[memoryview, int]:
    """The batches of `view` starting below `limit`, and the next offset after them."""
    if next_offset <= limit:
        return view, next_offset
    headers, _ = _records.scan(view, False)
    keep = headers[headers["base_offset"] < limit]
    if not len(keep):
        return view[:0], offset
    end = int(keep["position"][-1] + keep["size"][-1])
    return view[:end], int(keep["last_offset"][-1]) + 1
