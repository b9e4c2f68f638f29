"""Remote reads (Kafka's RemoteLogManager.read and RemoteLogReader).

For a fetch offset below the local log start: the epoch of the offset -> the RLMM's
COPY_SEGMENT_FINISHED segment holding it -> the start position from the segment's remote
offset index (RemoteIndexCache; byte 0 for the segment's base offset, with no index) ->
batch headers walked from there with the native scan (engine.remote.segment_access: every
batch ending before the offset is skipped by its header alone) -> the first batch with
last offset >= the fetch offset -> whole batches up to `max_bytes`, read with one bounded
range read. Kafka's rules for the first batch: when it is larger than `max_bytes` it is
returned whole with `min_one_message`, and nothing is returned without. Unlike Kafka (which
may end on a partial batch the client drops), only whole batches are returned, as a local
read does.

Every read, local or remote, is checked as a consumer with `check.crcs` would check it, plus
what the CRC does not cover: each batch's CRC, and offsets that continue from the fetch
offset without a gap or an overlap and stay within the segment (segment_access.check_batches).
The CRCs of a remote read are left to an RSM that declares it checked them before serving
the bytes (`verifies_batch_crcs`: the filesystem tier with `log.read.verification=full`).
Damage is a CorruptRecordError naming the segment, byte position and offset; a read that
finds no batch for an offset below the log end offset is an error, never an empty answer.

read_committed: the aborted transactions overlapping [fetch offset, next offset) come from
this segment's transaction index, then later remote segments' (skipping those whose
metadata says their index is empty, KIP-1058) until one search is complete, then the local
log's.

Byte ranges come through the RSM contract (engine.remote.storage): views of the store's
mapping when its ranges are zero-copy (the filesystem tier), else recycled buffers.

The functions of a remote read take `log_reader`, the RemoteLogReader (engine.rlm.fetch),
for the collaborators they use: its RLMM, RSM, RemoteIndexCache and NextPositions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from engine._native import records as _records
from engine.errors import CorruptRecordError, OffsetOutOfRangeError
from engine.log.transaction_index import AbortedTxn
from engine.remote.segment_access import (
    WALK_WINDOW,
    RemoteSegmentReader,
    WouldBlock,
    check_batches,
    describe_segment,
)

__all__ = ["RemoteFetchResult", "WouldBlock", "read_local", "read_remote",
           "remote_aborted_txns"]

#: bytes past the walk window that the first header probe may need
_HEADER_PROBE = 64
#: segments named ahead of the one read, for read-ahead across several small segments
_READ_FORWARD_LINKS = 3


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


def _out_of_range(st, offset: int, epoch) -> OffsetOutOfRangeError:
    unified = st.log
    return OffsetOutOfRangeError(
        f"fetch offset {offset} of partition {st.name} does not exist in the remote tier "
        f"(leader epoch {epoch}): no copied segment holds it", offset=offset,
        log_start_offset=unified.log_start_offset, log_end_offset=unified.log_end_offset)


def _segment_for(log_reader, st, offset: int):
    epoch = st.log.leader_epoch_cache.epoch_for_offset(offset)
    if epoch is None:
        return None, None
    return epoch, log_reader.rlmm.remote_log_segment_metadata(st.tip, epoch, offset)


def _read_segment(log_reader, md, offset: int, max_bytes: int, min_one_message: bool,
                  nonblocking: bool = False) -> tuple[memoryview | bytes, int]:
    """(whole batches, next offset) from `md`, which holds `offset`. `nonblocking`: raise
    WouldBlock instead of any storage I/O."""
    # the header walk's window and the records after it in one mapping, where views are
    reader = RemoteSegmentReader(log_reader.rsm, md, nonblocking, span=max_bytes + WALK_WINDOW)
    start = _start_position(log_reader, md, offset, nonblocking)
    # batch headers are walked in a window of at most 64 KiB from the index position (the
    # target is within index.interval.bytes of it); the answer is then one exact read,
    # or a slice of the window when the window holds it
    found = reader.find_batch(start, offset, min(max_bytes, WALK_WINDOW) + _HEADER_PROBE)
    if found is None:  # the metadata says the segment holds `offset`: its bytes end early
        raise CorruptRecordError(
            f"{describe_segment(md)}: no batch ends at or after offset {offset} before the "
            f".log ends at byte {reader.size}", position=reader.size, offset=offset)
    position, first_size, _ = found
    if first_size > max_bytes and not min_one_message:
        return b"", offset
    view = reader.read_exact(position, position + max(max_bytes, first_size))
    # an RSM that checked every batch CRC of these bytes before serving them spares a
    # second pass over them (the contract's verifies_batch_crcs)
    crc = not log_reader.rsm.verifies_batch_crcs(md)
    headers, valid = _records.scan(view, crc)
    check_batches(headers, partial(describe_segment, md), first_offset=offset, crc=crc,
                  min_offset=md.start_offset, max_offset=md.end_offset, position=position)
    if not len(headers):  # find_batch framed it whole: the bytes changed under the read
        raise CorruptRecordError(f"{describe_segment(md)}: no whole batch at byte {position} "
                                 "on the second read", position=position, offset=offset)
    next_offset = int(headers["last_offset"][-1]) + 1
    log_reader.next_positions.ended(md, next_offset, position + valid)
    return view[:valid], next_offset


def _start_position(log_reader, md, offset: int, nonblocking: bool) -> int:
    """Where to walk from for `offset` in `md`: byte 0 for the segment's base offset (its
    first batch: what the offset index answers for it), the end of an earlier read that
    stopped right before `offset`, else the offset index's position."""
    known = log_reader.next_positions.start(md, offset)
    if known is not None:
        return known
    if nonblocking:
        entry = log_reader.index_cache.cached_entry(md)
        if entry is None:
            raise WouldBlock
        return entry.lookup_offset(offset)
    return log_reader.index_cache.lookup_offset(md, offset)


def read_remote(log_reader, st, offset: int, max_bytes: int, min_one_message: bool,
                isolation: str, nonblocking: bool = False
                ) -> tuple[memoryview | bytes, int, list[AbortedTxn]]:
    """(records: a view of whole batches, next offset, aborted transactions) from the
    remote tier. Raises
    OffsetOutOfRangeError when no copied segment holds `offset`; with `nonblocking`,
    WouldBlock when the read needs storage I/O."""
    epoch, md = _segment_for(log_reader, st, offset)
    if md is None:
        raise _out_of_range(st, offset, epoch)
    if log_reader.rsm.reads_ahead:  # a consumer reads on: read-ahead may cross into next segments
        _name_next_segments(log_reader, st, md)
    data, next_offset = _read_segment(log_reader, md, offset, max_bytes, min_one_message,
                                      nonblocking)
    aborted = []
    if isolation == "read_committed" and len(data):
        aborted = remote_aborted_txns(log_reader, st, md, offset, next_offset)
    return data, next_offset, aborted


def _name_next_segments(log_reader, st, md) -> None:
    """Tells the RSM the lineage after `md`, one `read_forward` a link, up to
    _READ_FORWARD_LINKS segments ahead: a read-ahead window larger than a segment keeps
    going past the next one instead of stalling at its end."""
    for _ in range(_READ_FORWARD_LINKS):
        nxt = _segment_for(log_reader, st, md.end_offset + 1)[1]
        log_reader.rsm.read_forward(md, nxt)
        if nxt is None:
            return
        md = nxt


def remote_aborted_txns(log_reader, st, md, fetch_offset: int,
                        upper_bound: int) -> list[AbortedTxn]:
    """Aborted transactions a read_committed fetch of [fetch_offset, upper_bound) reports:
    from `md` and later remote segments until a search completes, then from local ones."""
    out: list[AbortedTxn] = []
    while md is not None:
        if not md.txn_idx_empty:
            entry = log_reader.index_cache.get_index_entry(md)
            result = entry.txn_index.collect_aborted_txns(fetch_offset, upper_bound)
            out.extend(result.aborted_transactions)
            if result.is_complete:
                return out
        _, md = _segment_for(log_reader, st, md.end_offset + 1)
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
