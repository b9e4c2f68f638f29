"""Control records: transaction markers and KRaft control types (Kafka's ControlRecordType).

Key layout (4 bytes): version int16 (>= 0), type int16.
End-transaction marker value (6 bytes): version int16, coordinatorEpoch int32; higher
versions are read as version 0 (their extra bytes ignored), as Kafka does.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from engine.errors import InvalidRecordError

__all__ = ["ControlRecordType", "ControlRecord", "parse_control_record",
           "control_record_key", "end_txn_marker_value"]

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def from_id(cls, type_id: int) -> ControlRecordType:
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True)
class ControlRecord:
    """A parsed control record. `coordinator_epoch` is set for ABORT/COMMIT markers."""
    type: ControlRecordType
    version: int
    type_id: int
    coordinator_epoch: int | None = None
    value: bytes | None = None


def parse_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Parses a control record's key (and, for transaction markers, its value).

    Raises InvalidRecordError for a key shorter than 4 bytes, a negative key version, or a
    transaction marker whose value is missing or shorter than 6 bytes.
    """
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(f"Control record key of {0 if key is None else len(key)} "
                                 "bytes is shorter than 4")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"Invalid control record key version {version}")
    ctype = ControlRecordType.from_id(type_id)
    if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        if value is None or len(value) < _MARKER.size:
            raise InvalidRecordError("End transaction marker value is shorter than 6 bytes")
        marker_version, coordinator_epoch = _MARKER.unpack_from(value)
        if marker_version < 0:
            raise InvalidRecordError(f"Invalid end transaction marker version {marker_version}")
        return ControlRecord(ctype, version, type_id, coordinator_epoch, value)
    return ControlRecord(ctype, version, type_id, None, value)


def control_record_key(ctype: ControlRecordType | int, version: int = 0) -> bytes:
    return _KEY.pack(version, int(ctype))


def end_txn_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    return _MARKER.pack(version, coordinator_epoch)
