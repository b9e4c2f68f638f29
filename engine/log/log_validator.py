"""Checks of batches before they are appended (the part of Kafka's `LogValidator` this
engine applies): whole v2 batches with good CRCs for any append, and for a follower
append, offsets at or above the log end that increase from batch to batch.

Nothing is copied or rewritten: the leader's offsets and epoch are assigned in the scan
rows and written from them (LogSegment.append), never stamped into the caller's bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine.errors import CorruptRecordError, InvalidOffsetError, InvalidRecordError

__all__ = ["validate_batches", "validate_follower_offsets"]

_MIN_MAGIC = 2


def validate_batches(records, log_dir: Path) -> tuple[bytes | bytearray | memoryview,
                                                      np.ndarray]:
    """(the buffer, its batch headers) of an append to the log in `log_dir`.

    Raises:
        InvalidRecordError: empty, partial, or magic < 2 input.
        CorruptRecordError: a batch whose CRC does not match.
    """
    if type(records) is not bytes and type(records) is not bytearray:
        records = memoryview(records).cast("B")
    size = len(records)
    if not size:
        raise InvalidRecordError(f"empty append to log {log_dir}")
    headers, valid, bad = _records.scan_for_append(records)
    if valid != size:
        raise InvalidRecordError(
            f"records appended to log {log_dir} end with a partial batch: "
            f"{size - valid} of {size} bytes", position=valid)
    if bad >= 0:
        row = headers[bad]
        if row["magic"] < _MIN_MAGIC:
            raise InvalidRecordError(
                f"batch at byte {int(row['position'])} of an append to log {log_dir} has "
                f"magic v{int(row['magic'])}: only v2 record batches can be appended",
                position=int(row["position"]), offset=int(row["base_offset"]))
        raise CorruptRecordError(
            f"batch at byte {int(row['position'])} of an append to log {log_dir} has a "
            f"bad CRC (stored {int(row['crc']):#010x})", position=int(row["position"]),
            offset=int(row["base_offset"]))
    return records, headers


def validate_follower_offsets(headers: np.ndarray, log_end_offset: int,
                              log_dir: Path) -> None:
    """Raises InvalidOffsetError when replicated batches start below the log end offset or
    their offsets do not increase from batch to batch."""
    first = int(headers["base_offset"][0])
    if first < log_end_offset:
        raise InvalidOffsetError(
            f"follower append to log {log_dir} starts at offset {first}, below the "
            f"log end offset {log_end_offset}", offset=first)
    if len(headers) > 1:
        overlaps = np.flatnonzero(headers["base_offset"][1:] <= headers["last_offset"][:-1])
        if len(overlaps):
            i = int(overlaps[0]) + 1
            raise InvalidOffsetError(
                f"follower append to log {log_dir}: batch at byte "
                f"{int(headers['position'][i])} starts at offset "
                f"{int(headers['base_offset'][i])}, not above the previous batch's last "
                f"offset {int(headers['last_offset'][i - 1])}",
                position=int(headers["position"][i]), offset=int(headers["base_offset"][i]))
