"""Typed errors, following Kafka's exception names; each is also a fitting builtin.

Every error the engine raises on purpose is a `KafkaEngineError` defined or re-exported here.
Those the native kernels raise are defined natively (engine._native.errors) so the compiled
modules need nothing above them; the ones only Python code raises are defined below. A caller
that re-raises with more context uses `KafkaEngineError.with_context`, which keeps the
subclass and its fields.
"""

from __future__ import annotations

import re
from os import PathLike
from typing import Any

from engine._native.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    ImplementationUnavailableError,
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


class LogSegmentOffsetOverflowError(InvalidOffsetError):
    """An offset does not fit an int32 relative to the segment's base offset (Kafka's
    LogSegmentOffsetOverflowException): the log must roll first."""


class ConfigError(KafkaEngineError, ValueError):
    """A config key has a value that cannot be parsed or breaks its rule (Kafka's
    ConfigException).

    Attributes `key`, `value` (as given) and `rule` (what was expected) carry the details;
    `file` names the properties file or store the value came from, when there is one.
    """

    def __init__(self, key: str | None, value: Any, rule: str, *,
                 file: str | PathLike[str] | None = None) -> None:
        self.key = key
        # a secret's value is never kept, shown or logged, and neither is a URL's password
        self.value = HIDDEN if key is not None and is_secret_key(key) and value is not None \
            else redact_userinfo(value)
        self.rule = redact_userinfo(rule)
        where = f"config {_shown(key)}" if key is not None else "config"
        super().__init__(f"invalid value {_shown(self.value)} for {where}: {self.rule}",
                         file=None if file is None else str(file))

    def in_file(self, file) -> ConfigError:
        """The same error, naming `file`."""
        return ConfigError(self.key, self.value, self.rule, file=file)


#: what errors show instead of a secret
HIDDEN = "[hidden]"
#: words of config keys whose values are secrets (a key or a URL's password, a token, a
#: credentials file's contents, a JAAS config with its passwords)
_SECRET_KEY_RE = re.compile(r"secret|passw|token|credential|jaas|(^|\.)sas(\.|$)"
                            r"|(access|account|private|api|auth)[._-]?key", re.IGNORECASE)
#: keys that name a file holding a secret: the path is no secret, and errors need it
_PATH_KEY_SUFFIXES = (".file", ".path", ".location")
#: the userinfo of a URL (`scheme://user:password@host`)
_USERINFO_RE = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#@\s]*@")


def is_secret_key(key: str) -> bool:
    """Whether the config key `key` (or a misspelling of one) holds a secret: its value is
    never shown in errors or logs."""
    return bool(_SECRET_KEY_RE.search(key)) and not key.endswith(_PATH_KEY_SUFFIXES)


def redact_userinfo(value: Any) -> Any:
    """`value` with the userinfo of every URL in it (credentials) replaced by `***`; a
    value that is not a string is returned as it is."""
    if not isinstance(value, str) or "@" not in value:
        return value
    return _USERINFO_RE.sub(r"\g<scheme>***@", value)


#: a value longer than this is shown abbreviated in errors (a whole file of digits is not
#: an error message)
_SHOWN_MAX = 80


def _shown(value: Any) -> str:
    text = repr(value)
    if len(text) <= _SHOWN_MAX:
        return text
    size = len(value) if isinstance(value, (str, bytes)) else len(text)
    return f"{text[:_SHOWN_MAX - 20]}... ({size} characters)"


class UnknownTopicOrPartitionError(KafkaEngineError, LookupError):
    """A topic or partition this engine holds nothing of: no local log, nothing in the
    remote tier (Kafka's UnknownTopicOrPartitionException). A LookupError, never a
    KeyError: a missing partition is bad input, not a missing mapping key, so a caller
    catching KeyError for its own dictionaries never takes it for one."""

    def __init__(self, message, *, topic=None, partition=None, file=None):
        super().__init__(message, file=file)
        self.topic = topic
        self.partition = partition

    @classmethod
    def no_log(cls, topic: str, partition: int, where: str = "") -> UnknownTopicOrPartitionError:
        """The error for a partition with no log here; `where` says where it was looked
        for (e.g. " in log dirs a, b")."""
        return cls(f"no log for partition {topic}-{partition}{where}", topic=topic,
                   partition=partition)


class InconsistentTopicIdError(KafkaEngineError, ValueError):
    """The partitions of a topic record different topic ids in their `partition.metadata`,
    or a partition is given an id other than its topic's (Kafka's
    InconsistentTopicIdException). `topic_ids` maps each partition name to its id."""

    def __init__(self, message, *, topic=None, topic_ids=None, file=None):
        super().__init__(message, file=file)
        self.topic = topic
        self.topic_ids = dict(topic_ids or {})


class LogDirLockedError(KafkaEngineError, OSError):
    """Another process holds the log dir (e.g. a running `python -m engine run`)."""


class IllegalStateTransitionError(KafkaEngineError, ValueError):
    """A remote-log metadata event asks for a state change Kafka does not allow (the
    IllegalStateException of RemoteLogSegmentState.isValidTransition's callers)."""


class KafkaStorageError(KafkaEngineError, OSError):
    """A log directory failed (Kafka's KafkaStorageException): the partitions in it are
    offline. `log_dir` names the directory; `partition` is the (topic, partition) asked
    for, when there is one."""

    def __init__(self, message, *, log_dir=None, partition=None, file=None):
        super().__init__(message, file=file)
        self.log_dir = None if log_dir is None else str(log_dir)
        self.partition = partition


class InvalidTopicError(KafkaEngineError, ValueError):
    """A topic name Kafka refuses (InvalidTopicException): empty, "." or "..", longer than
    249 characters, or with a character outside [a-zA-Z0-9._-]."""


class InvalidRequestError(KafkaEngineError, ValueError):
    """A malformed protocol message (Kafka's InvalidRequestException): truncated, a length
    or count that lies, a bad varint, bytes left over. `position` is the byte offset in the
    frame."""


class UnsupportedVersionError(KafkaEngineError, ValueError):
    """An API key or version `serve` does not speak (Kafka's UnsupportedVersionException).
    `api_key`, `api_version` and `correlation_id` come from the header, which is all that
    could be read."""

    def __init__(self, message, *, api_key, api_version, correlation_id):
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class SaslAuthenticationError(KafkaEngineError):
    """The client failed to authenticate (Kafka's SaslAuthenticationException)."""


class ListenerBindError(KafkaEngineError, OSError):
    """A listener's address cannot be bound (in use, not local, no permission)."""

    def __init__(self, message, *, errno_=None):
        super().__init__(message)
        self.errno = errno_


class CorruptOffsetsStoreError(KafkaEngineError, ValueError):
    """The committed-offsets file of `serve`'s group coordinator is damaged before its
    tail."""


class RemoteStorageError(KafkaEngineError, OSError):
    """A remote storage operation failed (Kafka's RemoteStorageException). Retriable by
    the caller: copies are retried by the next task run, reads fail for that partition."""

    #: what failed, as the object store counts its errors ("io", "configured_timeout",
    #: "server", "throttling", "other"); None where no store call was the cause
    kind: str | None = None

    #: the kinds that mean the store did not answer usably (down, unreachable, overloaded),
    #: rather than answered that a request was wrong
    UNAVAILABLE_KINDS = frozenset({"io", "configured_timeout", "server", "throttling"})


class RemoteResourceNotFoundError(RemoteStorageError, FileNotFoundError):
    """A remote resource does not exist (Kafka's RemoteResourceNotFoundException), e.g. an
    optional transaction index that was never copied."""


class RemoteLogAuxStateError(RemoteStorageError):
    """A follower's state could not be built from the remote tier now (Kafka's
    RemoteStorageException from buildRemoteLogAuxState, counted by
    BuildRemoteLogAuxStateErrorsPerSec): the partition's remote log metadata is not ready,
    no copied segment holds the offset below the leader's local log start in the leader's
    epoch (its metadata has not reached this engine yet, or the tier moved on), the RSM
    failed, or the log is not tiered. The
    follower's log is left as it was; the caller retries, as Kafka's fetcher does on its
    next round. `partition` is (topic, partition); `offset` the offset looked up."""

    def __init__(self, message, *, partition=None, offset=None, file=None):
        super().__init__(message, file=file, offset=offset)
        self.partition = partition


class CorruptRemoteObjectError(RemoteStorageError, ValueError):
    """An object of the object-store tier is damaged or not in the format it should be: a
    segment manifest that does not parse or whose sizes do not add up, a chunk whose GCM tag,
    zstd frame or size is wrong, custom metadata that does not decode. `object_key` (also
    `file`) names the object; `chunk` is the chunk id when one chunk is at fault. Raised
    instead of returning bytes a check found wrong. A flip no transform can see (plain
    chunks; the plugin's zstd frames carry no checksum) is left to the batch CRCs, which
    every consumer-facing read and the scrubber check."""

    def __init__(self, message, *, object_key=None, chunk=None, position=None):
        super().__init__(message, file=object_key, position=position)
        self.object_key = object_key
        self.chunk = chunk


class RemoteEncryptionKeyError(RemoteStorageError):
    """A segment's data key cannot be unwrapped: its key pair id is not in the configured
    key ring (`encryption.key.pairs`), or that pair's private key is not the one it was
    wrapped with. `key_id` names the key pair; `object_key` the manifest; `unknown_key` is
    True when the reader has no such key pair at all (its configuration, not the segment)."""

    def __init__(self, message, *, key_id=None, object_key=None, unknown_key=False):
        super().__init__(message, file=object_key)
        self.key_id = key_id
        self.object_key = object_key
        self.unknown_key = unknown_key


class LocalS3ServerError(KafkaEngineError, RuntimeError):
    """The demo's local S3 server (SeaweedFS) is not installed or did not come up (the
    message says which)."""


class RemoteLogReaderRejectedError(KafkaEngineError, RuntimeError):
    """A remote read was refused because the remote-log-reader queue is full
    (`remote.log.reader.max.pending.tasks`; Kafka's RejectedExecutionException). Returned as
    the error of that partition; the client retries."""


class RemoteFetchTimeoutError(KafkaEngineError, TimeoutError):
    """A remote read did not finish within `remote.fetch.max.wait.ms` (Kafka's expired
    DelayedRemoteFetch). The read may still be running on a reader thread."""


class CustomMetadataSizeLimitExceededError(KafkaEngineError, ValueError):
    """The RSM returned custom metadata larger than
    `remote.log.metadata.custom.metadata.max.bytes` (KIP-917): the copy is undone and the
    partition's copy task cancelled until its leadership changes."""


class CorruptRemoteLogMetadataError(KafkaEngineError, ValueError):
    """A remote-log metadata file (the embedded RemoteLogMetadataManager's log or snapshot,
    or a segment of Kafka's `__remote_log_metadata` topic) is damaged somewhere other than
    its torn tail, or was written by a newer format. `file` and `position` name the bad
    entry (`offset` the record, in Kafka's topic), `partition` the partition it belongs to
    (a TopicIdPartition, when known); that partition is offline, the others are not."""

    def __init__(self, message, *, file=None, position=None, partition=None, offset=None):
        super().__init__(message, file=file, position=position, offset=offset)
        self.partition = partition

    def __str__(self):
        text = super().__str__()
        return text if self.partition is None else f"partition {self.partition}: {text}"


class RemoteLogMetadataGapError(RemoteStorageError):
    """The log start offset lies below the local log start offset, but the partition's
    remote log metadata knows of no copied segment reaching the local start: the offsets
    between them are in neither tier as far as the metadata says (its directory lost or
    replaced by an older copy). The partition is neither tiered nor expired, its log start
    offset is never moved, and reads of those offsets fail with this error, until the
    metadata is restored (or the loss is accepted with DeleteRecords up to the local log
    start offset). `offset` is the first offset without data, `partition` the partition."""

    def __init__(self, message, *, offset=None, partition=None, file=None):
        super().__init__(message, offset=offset, file=file)
        self.partition = partition


class RemoteDataLossError(KafkaEngineError, LookupError):
    """Offsets a read asked for are in no segment of the remote tier (Spark's failOnDataLoss):
    `partition` names the partition, `missing` the (first, last) offset ranges absent."""

    def __init__(self, message, *, partition=None, missing=(), offset=None):
        super().__init__(message, offset=offset)
        self.partition = partition
        self.missing = tuple(missing)


__all__ = [
    "HIDDEN",
    "ConfigError",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptOffsetsStoreError",
    "CorruptRecordError",
    "CorruptRemoteLogMetadataError",
    "CorruptRemoteObjectError",
    "CorruptSnapshotError",
    "CustomMetadataSizeLimitExceededError",
    "IllegalStateTransitionError",
    "ImplementationUnavailableError",
    "InconsistentTopicIdError",
    "IndexFullError",
    "InvalidOffsetError",
    "InvalidRecordError",
    "InvalidRequestError",
    "InvalidTopicError",
    "KafkaEngineError",
    "KafkaStorageError",
    "ListenerBindError",
    "LocalS3ServerError",
    "LogDirLockedError",
    "LogSegmentOffsetOverflowError",
    "OffsetOutOfRangeError",
    "RecordSizeLimitError",
    "RemoteDataLossError",
    "RemoteEncryptionKeyError",
    "RemoteFetchTimeoutError",
    "RemoteLogAuxStateError",
    "RemoteLogMetadataGapError",
    "RemoteLogReaderRejectedError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "SaslAuthenticationError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionTypeError",
    "UnsupportedVersionError",
    "is_secret_key",
    "redact_userinfo",
]
