"""Building v2 record batches: what the local log appends and the tests produce."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from engine._native import records as _records
from engine.records.control import ControlRecordType, control_record_key, end_txn_marker_value
from engine.records.types import CompressionType, TimestampType

__all__ = ["RecordBatchBuilder", "build_control_batch", "build_end_txn_marker"]

Header = tuple[str | bytes, bytes | None]


class RecordBatchBuilder:
    """Accumulates records for one v2 batch, then `build()`s its bytes (CRC included).

    Offsets are assigned from `base_offset` in append order unless given; timestamps are
    milliseconds (now when omitted). Not thread-safe.
    """

    def __init__(self, *, base_offset: int = 0,
                 compression_type: CompressionType | int = CompressionType.NONE,
                 compression_level: int = -1,
                 timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 is_transactional: bool = False, is_control: bool = False,
                 partition_leader_epoch: int = -1, log_append_time: int | None = None,
                 delete_horizon_ms: int | None = None):
        if int(timestamp_type) == TimestampType.LOG_APPEND_TIME and log_append_time is None:
            log_append_time = int(time.time() * 1000)
        self.base_offset = base_offset
        self.compression_type = CompressionType(compression_type)
        self._options: dict[str, Any] = dict(
            compression=int(compression_type), level=compression_level,
            timestamp_type=int(timestamp_type), producer_id=producer_id,
            producer_epoch=producer_epoch, base_sequence=base_sequence,
            is_transactional=is_transactional, is_control=is_control,
            partition_leader_epoch=partition_leader_epoch,
            log_append_time=-1 if log_append_time is None else log_append_time,
            delete_horizon_ms=-1 if delete_horizon_ms is None else delete_horizon_ms)
        self._records: list[tuple] = []
        self._next_delta = 0

    def append(self, value: bytes | None, key: bytes | None = None,
               headers: Sequence[Header] = (), timestamp: int | None = None,
               offset: int | None = None) -> int:
        """Adds a record and returns its offset. An explicit `offset` must not go back."""
        delta = self._next_delta if offset is None else offset - self.base_offset
        if delta < self._next_delta:
            raise ValueError(f"offset {offset} is below the next offset "
                             f"{self.base_offset + self._next_delta}")
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        self._records.append((delta, timestamp, key, value, tuple(headers)))
        self._next_delta = delta + 1
        return self.base_offset + delta

    def extend(self, values: Iterable[bytes | None]) -> None:
        for value in values:
            self.append(value)

    def __len__(self) -> int:
        return len(self._records)

    def build(self) -> bytes:
        return _records.build_v2_batch(self._records, base_offset=self.base_offset,
                                       **self._options)


def build_control_batch(ctype: ControlRecordType | int, value: bytes | None, *,
                        base_offset: int, producer_id: int = -1, producer_epoch: int = -1,
                        timestamp: int | None = None, partition_leader_epoch: int = -1,
                        is_transactional: bool = False) -> bytes:
    """A control batch of one record (key = version 0 + type; value as given)."""
    builder = RecordBatchBuilder(base_offset=base_offset, producer_id=producer_id,
                                 producer_epoch=producer_epoch, is_control=True,
                                 is_transactional=is_transactional,
                                 partition_leader_epoch=partition_leader_epoch)
    builder.append(value, key=control_record_key(ctype), timestamp=timestamp)
    return builder.build()


def build_end_txn_marker(commit: bool, *, base_offset: int, producer_id: int,
                         producer_epoch: int, coordinator_epoch: int = 0,
                         timestamp: int | None = None, partition_leader_epoch: int = -1) -> bytes:
    """A COMMIT or ABORT marker batch, as a transaction coordinator writes it: control and
    transactional, base sequence -1, uncompressed, CreateTime, one record."""
    return build_control_batch(
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        end_txn_marker_value(coordinator_epoch), base_offset=base_offset,
        producer_id=producer_id, producer_epoch=producer_epoch, timestamp=timestamp,
        partition_leader_epoch=partition_leader_epoch, is_transactional=True)
