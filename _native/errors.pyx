# cython: language_level=3
"""Typed errors raised by the native kernels (re-exported by `engine.errors`).

They live here, below the rest of `engine`, so the compiled modules can raise them without
importing upward. Each is also a fitting builtin (ValueError, OSError), and each carries the
structured context a reader needs to find the damage: file, byte position and offset.

`error_for` / `raise_status` (cimported by the other modules) are the one place a native
status (`_native/include/status.h`) becomes one of these, so a status means the same error
in every module.
"""

from status cimport (
    ENG_ERR_ARGUMENT,
    ENG_ERR_CODEC,
    ENG_ERR_CORRUPT,
    ENG_ERR_INDEX_FULL,
    ENG_ERR_INVALID,
    ENG_ERR_INVALID_OFFSET,
    ENG_ERR_LIMIT,
    ENG_ERR_NOMEM,
    ENG_ERR_OS,
    ENG_ERR_UNAVAILABLE,
    eng_error,
)

import os

__all__ = [
    "KafkaEngineError", "CorruptRecordError", "InvalidRecordError",
    "RecordSizeLimitError", "UnsupportedCompressionTypeError",
    "CorruptIndexError", "InvalidOffsetError", "IndexFullError", "CorruptSnapshotError",
    "CorruptCheckpointError", "ImplementationUnavailableError",
]


class KafkaEngineError(Exception):
    """Base of every error the engine raises on purpose.

    `file`, `position` (byte position in the buffer or file) and `offset` (Kafka offset) are
    None when unknown. The message names whatever is known.
    """

    def __init__(self, message, *, file=None, position=None, offset=None):
        self.reason = message
        self.file = file
        self.position = position
        self.offset = offset
        super().__init__(message)

    def with_file(self, file):
        """Returns self after recording the file it concerns (used by the Python layer)."""
        if self.file is None:
            self.file = str(file)
        return self

    def with_context(self, prefix, *, position_base=None):
        """A copy of this error whose message starts with `prefix` (what was being read:
        a partition, a segment), for re-raising where that is known.

        The copy keeps the subclass and every field (a subclass's own ones, and errno,
        strerror and filename of an OSError) without calling the subclass's constructor,
        whose arguments differ from class to class. `position_base` is where the buffer
        the position was counted in starts in the file: it is added to `position`."""
        cls = type(self)
        error = cls.__new__(cls)
        error.__dict__.update(self.__dict__)
        error.reason = f"{prefix}: {self.reason}"
        error.args = (error.reason,)
        if position_base is not None and self.position is not None:
            error.position = position_base + self.position
        if isinstance(self, OSError):
            error.errno, error.strerror = self.errno, self.strerror
            error.filename, error.filename2 = self.filename, self.filename2
        return error

    def __str__(self):
        where = []
        if self.file is not None:
            where.append(f"file {self.file}")
        if self.position is not None:
            where.append(f"position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason


class CorruptRecordError(KafkaEngineError, ValueError):
    """A record batch or message is damaged: bad CRC, impossible size, truncated fields
    (Kafka's CorruptRecordException)."""


class InvalidRecordError(CorruptRecordError):
    """A batch whose CRC is fine but whose content breaks the format's rules: negative
    record count, record sizes that disagree, trailing bytes (Kafka's InvalidRecordException)."""


class RecordSizeLimitError(CorruptRecordError):
    """Decompressed data would exceed the configured limit (a decompression bomb, or a
    limit set too low for legitimate data)."""


class UnsupportedCompressionTypeError(CorruptRecordError):
    """A codec id outside 0-4, or a codec a given magic may not use (zstd below magic 2)."""


class CorruptIndexError(KafkaEngineError, ValueError):
    """An offset, time or transaction index fails its sanity checks (CorruptIndexException)."""


class InvalidOffsetError(KafkaEngineError, ValueError):
    """An index append that would break ordering (Kafka's InvalidOffsetException)."""


class IndexFullError(KafkaEngineError, ValueError):
    """An append to an index with no free slot (Kafka's IllegalArgumentException from
    `append` on a full index): the segment should have rolled first."""


class CorruptSnapshotError(KafkaEngineError, ValueError):
    """A producer-state snapshot with an unknown version, bad layout or CRC mismatch."""


class CorruptCheckpointError(KafkaEngineError, OSError):
    """A checkpoint text file whose version, count or lines are malformed (Kafka raises
    IOException here, hence OSError)."""


class ImplementationUnavailableError(KafkaEngineError, RuntimeError):
    """A named CRC-32C implementation exists but this CPU or build cannot run it."""


cdef dict _TYPED = {
    ENG_ERR_CORRUPT: CorruptRecordError,
    ENG_ERR_INVALID: InvalidRecordError,
    ENG_ERR_LIMIT: RecordSizeLimitError,
    ENG_ERR_CODEC: UnsupportedCompressionTypeError,
    ENG_ERR_INDEX_FULL: IndexFullError,
    ENG_ERR_INVALID_OFFSET: InvalidOffsetError,
    ENG_ERR_UNAVAILABLE: ImplementationUnavailableError,
}


cdef object error_for(int status, str message=None, object position=None,
                      object offset=None, object file=None, int errnum=0):
    """The exception for a native status other than ENG_OK. Statuses about the data carry
    `position`, `offset` and `file` (None when unknown); MemoryError, ValueError (a bad
    argument, `message`) and OSError (of `errnum`, as the C library reported it) are the
    builtins Python code would raise. An unknown status is data damage: CorruptRecordError."""
    if status == ENG_ERR_NOMEM:
        return MemoryError()  # as Python's own allocation failures: no message
    if status == ENG_ERR_ARGUMENT:
        return ValueError(message)
    if status == ENG_ERR_OS:
        return OSError(errnum, os.strerror(errnum))
    cls = _TYPED.get(status, CorruptRecordError)
    return cls(message, file=file, position=position, offset=offset)


cdef int raise_status(int status, str message=None, object position=None,
                      object offset=None, object file=None, int errnum=0) except -1:
    """Raises `error_for(...)`."""
    raise error_for(status, message, position, offset, file, errnum)


cdef int raise_eng_error(const eng_error *err) except -1:
    """Raises the error a kernel reported in `err` (-1 position or offset: unknown)."""
    raise error_for(err.code, err.message.decode("utf-8", "replace"),
                    err.position if err.position >= 0 else None,
                    err.offset if err.offset >= 0 else None)
