"""The engine's side of the Apache Kafka broker plugin (`kafka-plugin/`).

A Kafka broker loads the plugin's Java `RemoteStorageManager`, which embeds CPython through
jep and calls the functions below with plain values (strings, numbers, byte arrays, direct
buffers): no Kafka object crosses into Python and no Python object is kept by Java, so any
broker thread may call any function (each thread has its own jep interpreter over the one
CPython; every blocking call of the engine releases the GIL).

Every decision stays here: which tier (`storage.backend.class`, the Aiven plugin's key,
selects the object store in the plugin's bucket format; `dirs` alone, the engine's filesystem
tier), layout, chunks, transforms, caches, read-ahead, retries. The Java side describes
Kafka's metadata objects in one line each (`_segment_metadata` reads it), pulls `.log`
ranges into its stream's direct buffer with `plugin_read_into`, maps the engine's errors to Kafka's
(RemoteResourceNotFoundError -> RemoteResourceNotFoundException, ConfigError at `configure`
-> ConfigException, every other -> RemoteStorageException: `_storage_call` raises only
those), and exposes `plugin_metrics` over JMX. Messages are the engine's own (object key,
chunk, errno); the engine never puts a secret in one.

Kafka names one segment a fetch and never the next: with read-ahead configured, the plugin
finds the next segment in the bucket (`objectstore.next_segment`) so the store's read-ahead
goes on into it, as it does for the engine's own RemoteLogManager.

Log records of the engine are queued (bounded) and drained by the Java side into the
broker's log, so no engine thread ever calls into the JVM.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from engine._native import records as _records
from engine.common import Uuid
from engine.config import ConfigError
from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.objectstore.next_segment import NextSegmentLookup
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager
from engine.remote.storage import IndexType, LogSegmentData, RemoteStorageManager

__all__ = [
    "plugin_close",
    "plugin_copy",
    "plugin_delete",
    "plugin_drain_log",
    "plugin_fetch_index",
    "plugin_map",
    "plugin_metrics",
    "plugin_open",
    "plugin_read_into",
    "plugin_unmap",
]


#: the key the Aiven plugin selects its storage backend with; present -> the object store
BACKEND_KEY = "storage.backend.class"
#: the filesystem tier's key
DIRS_KEY = "dirs"
_PREFIX = "rsm.config."
#: metadata objects parsed from the Java side's segment descriptions, by description
_METADATA_CACHE_SIZE = 4096
#: engine log records waiting for the Java side; older ones are dropped (and counted) beyond
_LOG_QUEUE_SIZE = 10_000

_plugins: dict[int, _Plugin] = {}
_handles = itertools.count(1)
#: views the Java streams copy from, by pin (a dict's item set and pop need no lock)
_pins: dict[int, _records.BufferView] = {}
_pin_ids = itertools.count(1)
_lock = threading.Lock()


class _Plugin:
    """One configured tier and what the Java side asks of it."""

    def __init__(self, rsm: RemoteStorageManager):
        self.rsm = rsm
        self.registry = CollectorRegistry(auto_describe=True)
        rsm.register_metrics(self.registry)
        self._metadata: collections.OrderedDict = collections.OrderedDict()
        self._metadata_lock = threading.Lock()
        # Kafka never names the segment it reads next: the bucket does
        self._next_segments = NextSegmentLookup(rsm) if (
            isinstance(rsm, ObjectStorageRemoteStorageManager) and rsm.reads_ahead) else None
        # the last (segment, next segment) said to the tier: Kafka's reader opens a stream
        # per fetch, a segment's fetches in a row, and each says the same
        self._forwarded: tuple | None = None

    def reads_forward(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A stream's first read: its reads go forward, and the store's read-ahead goes on
        into the next segment once the bucket has named it."""
        if self.rsm.reads_ahead:
            nxt = None if self._next_segments is None else self._next_segments.next_of(metadata)
            said = self._forwarded
            if said is not None and said[0] is metadata and said[1] is nxt:
                return
            self._forwarded = (metadata, nxt)
            _storage_call(self.rsm.read_forward, metadata, nxt)

    def close(self) -> None:
        if self._next_segments is not None:
            self._next_segments.close()
        self.rsm.close()

    def metadata(self, segment: str) -> RemoteLogSegmentMetadata:
        """The metadata the Java side described (`_segment_metadata`), parsed once. Every
        range of a stream asks: a hit takes no lock (a dict's get and move_to_end are atomic
        under the GIL; the lock orders inserts and evictions)."""
        found = self._metadata.get(segment)
        if found is not None:
            try:
                self._metadata.move_to_end(segment)
            except KeyError:  # evicted meanwhile: it stays valid for this call
                pass
            return found
        found = _segment_metadata(segment)
        with self._metadata_lock:
            self._metadata[segment] = found
            if len(self._metadata) > _METADATA_CACHE_SIZE:
                self._metadata.popitem(last=False)
        return found


def _segment_metadata(segment: str) -> RemoteLogSegmentMetadata:
    """Kafka's RemoteLogSegmentMetadata as the Java side words it, space-separated: topic
    id, topic, partition, segment id, start offset, end offset, max timestamp, broker id,
    event timestamp, size, state id, whether the transaction index is empty, the leader
    epochs (`epoch:start offset`, comma-separated) and the custom metadata in hex (`-` for
    none)."""
    try:
        (topic_id, topic, partition, segment_id, start, end, max_ts, broker_id, event_ts, size,
         state, txn_empty, epochs, custom) = str(segment).split(" ")
        tip = TopicIdPartition(Uuid.from_string(topic_id), topic, int(partition))
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, Uuid.from_string(segment_id)), int(start), int(end),
            int(max_ts), int(broker_id), int(event_ts), int(size),
            {int(e): int(o) for e, o in (pair.split(":") for pair in epochs.split(","))},
            None if custom == "-" else bytes.fromhex(custom), RemoteLogSegmentState(int(state)),
            txn_empty == "true")
    except ValueError as exc:
        raise RemoteStorageError(f"segment metadata {segment!r} does not parse: {exc}") from exc


def _java_bytes(array) -> bytes:
    """A Java byte[] (signed bytes, no buffer protocol through jep) as bytes: only a small
    one crosses this way (the leader-epoch checkpoint)."""
    return bytes(v & 0xFF for v in array)


def _plugin(handle: int) -> _Plugin:
    plugin = _plugins.get(int(handle))
    if plugin is None:
        raise RemoteStorageError(f"the remote storage manager (handle {handle}) is closed")
    return plugin


def _storage_call(fn, *args):
    """`fn(*args)`, raising exactly RemoteResourceNotFoundError for a missing resource (the
    name the Java side maps to Kafka's not-found) and RemoteStorageError for every other
    failure, each with the whole message of the error it replaces (jep passes an
    exception's first argument on, not its `str`, which adds the file and position)."""
    try:
        return fn(*args)
    except RemoteResourceNotFoundError as exc:
        raise RemoteResourceNotFoundError(str(exc)) from exc
    except RemoteStorageError as exc:
        kind = "" if type(exc) is RemoteStorageError else f"{type(exc).__name__}: "
        raise RemoteStorageError(f"{kind}{exc}") from exc
    except Exception as exc:
        raise RemoteStorageError(f"{type(exc).__name__}: {exc}") from exc


def plugin_open(settings: Sequence) -> int:
    """Builds and configures a tier from the `rsm.config.*` settings (prefix stripped, as
    alternating keys and values; `broker.id` among them). Returns its handle."""
    flat = [str(v) for v in settings]
    configs = dict(zip(flat[0::2], flat[1::2]))
    _install_log_queue()
    cls: type[RemoteStorageManager]
    if BACKEND_KEY in configs:
        cls = ObjectStorageRemoteStorageManager
    elif DIRS_KEY in configs:
        cls = FileSystemRemoteStorageManager
    else:
        raise ConfigError(_PREFIX + BACKEND_KEY, None,
                          f"must be set (the object store in the Aiven plugin's format), "
                          f"or {_PREFIX}{DIRS_KEY} (the engine's filesystem tier)")
    rsm = cls()
    try:
        rsm.configure(configs)
    except ConfigError as exc:
        rsm.close()
        key = exc.key if exc.key is None or exc.key.startswith(_PREFIX) else _PREFIX + exc.key
        raise ConfigError(key, exc.value, exc.rule, file=exc.file) from exc
    except BaseException:
        rsm.close()
        raise
    plugin = _Plugin(rsm)
    with _lock:
        handle = next(_handles)
        _plugins[handle] = plugin
    return handle


def plugin_copy(handle: int, segment: str, log_segment: str, offset_index: str,
                time_index: str, transaction_index: str | None, producer_snapshot: str,
                leader_epoch_index) -> bytes | None:
    """copyLogSegmentData: uploads the segment's files (paths in the broker's log dir);
    returns the custom metadata bytes, or None."""
    from pathlib import Path

    plugin = _plugin(handle)
    metadata = plugin.metadata(segment)
    data = LogSegmentData(
        Path(log_segment), Path(offset_index), Path(time_index),
        None if transaction_index is None else Path(transaction_index),
        Path(producer_snapshot), _java_bytes(leader_epoch_index))
    return _storage_call(plugin.rsm.copy_log_segment_data, metadata, data)


def plugin_read_into(handle: int, segment: str, position: int, buffer, length: int,
                     first: bool = False) -> int:
    """Fills the first `length` bytes of `buffer` (the Java stream's direct buffer, seen as
    a numpy array) with `.log` bytes from `position`; returns `length`. The `first` read of
    a stream also says that its reads go forward (the store's read-ahead follows them)."""
    plugin = _plugin(handle)
    metadata = plugin.metadata(segment)
    if first:
        plugin.reads_forward(metadata)
    view = memoryview(buffer).cast("B")[:int(length)]
    try:
        return _storage_call(plugin.rsm.read_range_into, metadata, int(position), view)
    finally:
        view.release()


def plugin_map(handle: int, segment: str, position: int, length: int, first: bool,
               release: int, release_closed: int = 0) -> tuple[int, int, int]:
    """Maps up to `length` `.log` bytes from `position` for the Java stream to copy straight
    into its caller's array: returns (address, n, pin), a read-only view of the n bytes at
    the address (`map_prefix`: the chunk cache's or the mapped file's own memory where the
    store has it, so the caller's copy is the only one; n stops where the view would have
    to join chunks, and the stream maps again from there). The view stays pinned, and its
    address valid, until `plugin_unmap(pin)` or a later `plugin_map` names the pin in
    `release` (the stream's previous view) or `release_closed` (a closed stream's); 0 names
    none. The `first` read of a stream also says that its reads go forward."""
    if release:
        _pins.pop(release, None)
    if release_closed:
        _pins.pop(release_closed, None)
    plugin = _plugin(handle)
    metadata = plugin.metadata(segment)
    if first:
        plugin.reads_forward(metadata)
    start = int(position)
    view = _storage_call(plugin.rsm.map_prefix, metadata, start, start + int(length))
    held = _records.BufferView(view)  # holds the memory until the pin goes
    if not 0 < len(held) <= length:  # the Java side copies that many bytes from the address
        raise RemoteStorageError(f"{metadata.remote_log_segment_id}: {len(held)} bytes "
                                 f"mapped at {start}, 1 to {length} asked")
    pin = next(_pin_ids)
    _pins[pin] = held
    return held.address, len(held), pin


def plugin_unmap(pin: int) -> None:
    """Releases the view `plugin_map` pinned as `pin` (none: no error)."""
    _pins.pop(pin, None)


def plugin_fetch_index(handle: int, segment: str, index_type: str) -> bytes:
    """fetchIndex: one whole index file (`index_type` is Kafka's IndexType name)."""
    plugin = _plugin(handle)
    return _storage_call(plugin.rsm.fetch_index_bytes, plugin.metadata(segment),
                         IndexType[str(index_type)])


def plugin_delete(handle: int, segment: str) -> None:
    """deleteLogSegmentData: every object of the segment (nothing there is no error)."""
    plugin = _plugin(handle)
    _storage_call(plugin.rsm.delete_log_segment_data, plugin.metadata(segment))


#: engine metric -> (JMX domain, type) under the Aiven plugin's names; cache metrics take
#: their type from their `cache` label (`chunk-cache` -> `chunk-cache-metrics`)
_RSM_DOMAIN = ("aiven.kafka.server.tieredstorage", "remote-storage-manager-metrics")
_S3_DOMAIN = ("aiven.kafka.server.tieredstorage.s3", "s3-client-metrics")
_CACHE_DOMAIN = "aiven.kafka.server.tieredstorage.cache"


def plugin_metrics(handle: int) -> list:
    """The tier's metrics for JMX, as [object name, attribute, value] triples: the Aiven
    plugin's object names and attribute names (`object-upload-total`, ...), each counter
    also summed over its `object_type` label on the manager's own bean."""
    plugin = _plugin(handle)
    values: dict[tuple[str, str], float] = {}
    for family in plugin.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            attribute = sample.name.replace("_", "-")
            labels = dict(sample.labels)
            cache = labels.pop("cache", None)
            object_type = labels.pop("object_type", None)
            if cache is not None:
                names = [f"{_CACHE_DOMAIN}:type={cache}-metrics"]
            elif sample.name.startswith(("object_", "segment_")):
                base = f"{_RSM_DOMAIN[0]}:type={_RSM_DOMAIN[1]}"
                names = [base] if object_type is None else \
                    [base, f"{base},object-type={object_type}"]
            else:
                names = [f"{_S3_DOMAIN[0]}:type={_S3_DOMAIN[1]}"]
            for name in names:
                values[(name, attribute)] = values.get((name, attribute), 0.0) + sample.value
    return [[name, attribute, value] for (name, attribute), value in sorted(values.items())]


def plugin_close(handle: int) -> None:
    """close: releases the tier. Idempotent."""
    with _lock:
        plugin = _plugins.pop(int(handle), None)
    if plugin is not None:
        plugin.close()


# -- the engine's log records, for the broker's log ---------------------------------------

class _LogQueue(logging.Handler):
    """Keeps the engine's records until the Java side drains them (bounded: the oldest go,
    counted, when nobody drains)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: collections.deque = collections.deque(maxlen=_LOG_QUEUE_SIZE)
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if len(self.records) == self.records.maxlen:
                self.dropped += 1
            self.records.append((record.levelno, record.name, record.getMessage()))
        except (TypeError, ValueError):  # a bad format string or arguments: logging's rule
            self.handleError(record)


_log_queue: _LogQueue | None = None


def _install_log_queue() -> None:
    global _log_queue
    with _lock:
        if _log_queue is None:
            _log_queue = _LogQueue()
            engine_log = logging.getLogger("engine")
            engine_log.addHandler(_log_queue)
            if engine_log.level == logging.NOTSET:
                engine_log.setLevel(logging.INFO)
            engine_log.propagate = False


def plugin_drain_log() -> list:
    """The queued records as [level number, logger name, message], oldest first; a record
    saying how many were dropped comes first when some were."""
    queue = _log_queue
    if queue is None:
        return []
    out = []
    if queue.dropped:
        dropped, queue.dropped = queue.dropped, 0
        out.append([logging.WARNING, __name__,
                    f"{dropped} log records of the engine were dropped (queue full)"])
    # what is queued now, not what engine threads add meanwhile: a drain always ends
    for _ in range(len(queue.records)):
        try:
            level, name, message = queue.records.popleft()
        except IndexError:  # another thread drained it
            break
        out.append([level, name, message])
    return out
