"""Typed errors, following Kafka's exception names; each is also a fitting builtin.

Most are defined natively (engine._native.errors) and re-exported here; the few that only
Python code raises are defined below.
"""

from engine._native.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    IndexFullError,
    InvalidOffsetError,
    InvalidRecordError,
    KafkaEngineError,
    RecordSizeLimitError,
    UnsupportedCompressionTypeError,
)


class OffsetOutOfRangeError(KafkaEngineError, ValueError):
    """A fetch or lookup offset outside the log's valid range (Kafka's
    OffsetOutOfRangeException). `log_start_offset` and `log_end_offset` give the range
    [log_start_offset, log_end_offset] a fetch may ask for; `offset` is the one asked."""

    def __init__(self, message, *, file=None, position=None, offset=None,
                 log_start_offset=None, log_end_offset=None):
        super().__init__(message, file=file, position=position, offset=offset)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


__all__ = [
    "KafkaEngineError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordSizeLimitError",
    "UnsupportedCompressionTypeError",
    "CorruptIndexError",
    "InvalidOffsetError",
    "IndexFullError",
    "CorruptSnapshotError",
    "CorruptCheckpointError",
    "OffsetOutOfRangeError",
]
