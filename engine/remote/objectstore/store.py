"""The object-store client of the object-store tier: obstore (Rust `object_store`) for S3 and
the S3-compatible stores through one code path, and for GCS and Azure Blob through the same
client (configured here, untested: the tests run against S3-compatible SeaweedFS only).
Signing, HTTP and connection pooling are obstore's; nothing here speaks HTTP.

What this layer adds on top of obstore, and why:

- **Streamed multipart uploads with bounded memory.** `ObjectStore.upload` takes a file path,
  a buffer or an iterator of buffers (the per-chunk transforms' output) and hands obstore an
  iterator of blocks (or, for a file with no rate limit to honour, the path itself, which
  obstore reads without passing the bytes through Python); obstore packs them into parts of
  `storage.s3.multipart.upload.part.size` and keeps `storage.upload.parts.in.flight` parts
  uploading at once. Peak memory is about
  (parts in flight + 2) x part size: the segment is never read whole. A source that ends
  within one part is sent as a single PUT instead (manifests, small indexes).
- **One shared upload rate limit.** `upload.rate.limit.bytes.per.second` is a token bucket
  shared by every upload of the store (the plugin's semantics): each block takes its bytes
  from the bucket before it is handed to obstore, so concurrent copies share the budget.
- **Bounded calls.** Every request has obstore's per-attempt timeout
  (`storage.s3.api.call.attempt.timeout`) and bounded retries with exponential backoff
  (`storage.api.call.max.retries`, within `storage.s3.api.call.timeout` overall); the
  calls made through the event loop are also cancelled at that overall bound.
- **Typed errors.** Failures become `RemoteResourceNotFoundError` (missing object) or
  `RemoteStorageError`, naming the operation and `<scheme>://<bucket>/<key>` as the error's
  file, with the errno of a socket error when there is one, and counted by kind in the
  metrics (throttling, server, configured_timeout, io, other). Secrets never appear: the
  message is the first line of obstore's error with any configured secret masked.
- **Event loops.** Async calls (`get_range_async`, for parallel ranged reads in reads.py)
  run on an event loop kept per calling thread (`run`: the caller's thread drives its own
  GETs, with no thread hand-off on the hot path) or on one background loop per store
  (`call(coro, timeout)` and `submit`: from any thread, cancelled when the bound passes).

- **Response buffers reused.** The first store built sets glibc's mmap and trim thresholds
  for the process (allocator.py), so each GET's buffer reuses freed heap memory instead of
  a fresh mapping the kernel must fault in and zero.

Configuration: `StoreConfig.from_configs` reads the plugin's names (without the
`rsm.config.` prefix; see `STORE_CONFIG_KEYS`) and raises `ConfigError` naming a bad key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Self

import obstore
import obstore.exceptions as obx

from engine.config import ConfigError
from engine.errors import (
    HIDDEN,
    KafkaEngineError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    redact_userinfo,
)
from engine.remote.objectstore.allocator import tune_for_object_reads
from engine.remote.objectstore.config_values import ConfigValues
from engine.remote.objectstore.loops import Calls, CallsClosed, StoreLoop, thread_loop
from engine.remote.objectstore.metrics import ObjectStoreMetrics

if TYPE_CHECKING:  # obstore's config dicts are TypedDicts of its stubs only
    from obstore.store import (
        AzureConfig,
        AzureStore,
        ClientConfig,
        GCSConfig,
        GCSStore,
        RetryConfig,
        S3Config,
        S3Store,
    )

__all__ = [
    "BACKEND_ALIASES",
    "STORE_CONFIG_KEYS",
    "ObjectInfo",
    "ObjectStore",
    "StoreConfig",
    "TokenBucket",
]

MiB = 1024 * 1024

# the plugin's backend class names (`storage.backend.class`) and the engine's short names
BACKEND_ALIASES = {
    "io.aiven.kafka.tieredstorage.storage.s3.S3Storage": "s3",
    "io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage": "gcs",
    "io.aiven.kafka.tieredstorage.storage.azure.AzureBlobStorage": "azure",
    "s3": "s3",
    "gcs": "gcs",
    "azure": "azure",
}

_SECRET_KEYS = frozenset({
    "storage.aws.access.key.id", "storage.aws.secret.access.key",
    "storage.gcs.credentials.json", "storage.azure.account.key", "storage.azure.sas.token",
})

STORE_CONFIG_KEYS = frozenset({
    "storage.backend.class",
    "storage.s3.bucket.name", "storage.s3.region", "storage.s3.endpoint.url",
    "storage.s3.path.style.access.enabled", "storage.aws.access.key.id",
    "storage.aws.secret.access.key", "storage.s3.multipart.upload.part.size",
    "storage.s3.api.call.timeout", "storage.s3.api.call.attempt.timeout",
    "storage.gcs.bucket.name", "storage.gcs.endpoint.url", "storage.gcs.credentials.path",
    "storage.gcs.credentials.json", "storage.gcs.credentials.default",
    "storage.azure.container.name", "storage.azure.account.name", "storage.azure.account.key",
    "storage.azure.sas.token", "storage.azure.endpoint.url",
    "storage.upload.parts.in.flight", "storage.api.call.max.retries",
    "upload.rate.limit.bytes.per.second",
})
"""Every key `StoreConfig.from_configs` reads (names under `rsm.config.`)."""


@dataclass(frozen=True)
class StoreConfig:
    """Where the tier's objects live and how the client behaves.

    `bucket` is the S3/GCS bucket or the Azure container. Secrets are kept out of `repr`.
    Defaults: parts of 25 MiB (the plugin's), 4 parts in flight, 3 retries, 30 s per attempt,
    120 s per call including retries, no upload rate limit."""

    backend: str = "s3"
    bucket: str = ""
    region: str | None = None
    endpoint_url: str | None = None
    path_style: bool | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    gcs_credentials_path: str | None = None
    gcs_credentials_json: str | None = field(default=None, repr=False)
    azure_account_name: str | None = None
    azure_account_key: str | None = field(default=None, repr=False)
    azure_sas_token: str | None = field(default=None, repr=False)
    part_size: int = 25 * MiB
    parts_in_flight: int = 4
    upload_rate_limit: int | None = None
    max_retries: int = 3
    attempt_timeout_ms: int = 30_000
    call_timeout_ms: int = 120_000

    @property
    def scheme(self) -> str:
        return {"s3": "s3", "gcs": "gs", "azure": "az"}[self.backend]

    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.access_key_id, self.secret_access_key,
                                 self.gcs_credentials_json, self.azure_account_key,
                                 self.azure_sas_token) if s)

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> StoreConfig:
        """Parse the store keys of an RSM config (keys without `rsm.config.`; other keys
        are ignored here, so the caller checks for unknown ones against STORE_CONFIG_KEYS
        plus its own). Raises ConfigError naming the first bad key (never its value when
        the key holds a secret)."""
        values = ConfigValues(configs)
        backend, bucket, endpoint = _location(values)
        key_id = values.get("storage.aws.access.key.id")
        secret = values.get("storage.aws.secret.access.key")
        if (key_id is None) != (secret is None):
            raise ConfigError("storage.aws.access.key.id", HIDDEN,
                              "storage.aws.access.key.id and storage.aws.secret.access.key "
                              "must be set together")
        if endpoint is not None:
            _check_credentials(backend, values)
        if backend == "s3" and values.get("storage.s3.region") is None and endpoint is None:
            raise ConfigError("storage.s3.region", None, "required without an endpoint url")
        attempt = values.integer("storage.s3.api.call.attempt.timeout", 30_000, 1, 3_600_000)
        return cls(
            backend=backend, bucket=bucket, region=values.get("storage.s3.region"),
            endpoint_url=endpoint,
            path_style=values.optional_boolean("storage.s3.path.style.access.enabled"),
            access_key_id=key_id, secret_access_key=secret,
            gcs_credentials_path=values.get("storage.gcs.credentials.path"),
            gcs_credentials_json=values.get("storage.gcs.credentials.json"),
            azure_account_name=values.get("storage.azure.account.name"),
            azure_account_key=values.get("storage.azure.account.key"),
            azure_sas_token=values.get("storage.azure.sas.token"),
            part_size=values.integer("storage.s3.multipart.upload.part.size", 25 * MiB,
                                     5 * MiB, 2**31 - 1),
            parts_in_flight=values.integer("storage.upload.parts.in.flight", 4, 1, 64),
            upload_rate_limit=values.optional_integer("upload.rate.limit.bytes.per.second",
                                                      1, 2**62),
            max_retries=values.integer("storage.api.call.max.retries", 3, 0, 20),
            attempt_timeout_ms=attempt,
            call_timeout_ms=values.integer("storage.s3.api.call.timeout",
                                           max(120_000, attempt), attempt, 24 * 3_600_000),
        )


def _location(values: ConfigValues) -> tuple[str, str, str | None]:
    """(backend, bucket or container, endpoint url or None) of the store."""
    backend_raw = values.get("storage.backend.class") or "s3"
    backend = BACKEND_ALIASES.get(backend_raw)
    if backend is None:
        raise ConfigError("storage.backend.class", backend_raw,
                          f"one of {', '.join(sorted(BACKEND_ALIASES))}")
    bucket_key = {"s3": "storage.s3.bucket.name", "gcs": "storage.gcs.bucket.name",
                  "azure": "storage.azure.container.name"}[backend]
    bucket = values.get(bucket_key)
    if bucket is None:
        raise ConfigError(bucket_key, None, f"required for the {backend} backend")
    if "@" in bucket:  # `s3://user:password@bucket`: shown without what precedes the `@`
        raise ConfigError(bucket_key, "***@" + bucket.rpartition("@")[2],
                          "credentials do not go in the bucket name (the store's key "
                          "settings hold them)")
    endpoint = values.get(f"storage.{backend}.endpoint.url")
    if endpoint is not None and not re.match(r"^https?://[^/\s]+", endpoint):
        raise ConfigError(f"storage.{backend}.endpoint.url", endpoint,
                          "expected an http:// or https:// URL")
    if endpoint is not None and "@" in endpoint.split("/")[2]:
        raise ConfigError(f"storage.{backend}.endpoint.url", endpoint,
                          "credentials do not go in the URL (the store's key settings hold "
                          "them)")
    return backend, bucket, endpoint


#: per backend, the keys of which one (or, with "+", all) must hold credentials when an
#: endpoint is configured (GCS keeps obstore's lookup: storage.gcs.credentials.default is
#: not read yet)
_CREDENTIAL_KEYS = {
    "s3": ("storage.aws.access.key.id+storage.aws.secret.access.key",),
    "azure": ("storage.azure.account.key", "storage.azure.sas.token"),
}


def _check_credentials(backend: str, values: ConfigValues) -> None:
    """A store at a configured endpoint (a local or private one) takes its credentials from
    the config: missing, obstore's client would look for them in the environment and at the
    cloud's instance-metadata address (169.254.169.254), each lookup waiting out its
    timeout, and the store would fail much later with a message naming none of the keys.
    ConfigError naming them instead."""
    if backend not in _CREDENTIAL_KEYS:
        return
    for keys in _CREDENTIAL_KEYS[backend]:
        if all(values.get(k) for k in keys.split("+")):
            return
    names = " or ".join(k.replace("+", " and ") for k in _CREDENTIAL_KEYS[backend])
    raise ConfigError(names, None, f"required with storage.{backend}.endpoint.url: the "
                      "store never looks for credentials elsewhere (environment, instance "
                      "metadata) for an endpoint it is given")


class TokenBucket:
    """A token bucket of `rate` bytes per second holding at most `burst` bytes (default one
    second's worth). `acquire(n)` takes n tokens, going into debt if need be, and sleeps
    until the debt is paid: a block larger than the burst still passes, at the right average
    rate, and the waits are bounded by n / rate. Thread-safe; shared by all uploads."""

    def __init__(self, rate: float, burst: float | None = None, clock=time.monotonic,
                 sleep=time.sleep):
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else rate)
        self._tokens = self.burst
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self, n: int) -> float:
        """Take n tokens; returns the seconds slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str | None = None


_STATUS_RE = re.compile(r"status code: (\d{3})|\b(\d{3}) (?:Service Unavailable|Slow Down|"
                        r"Internal Server Error|Too Many Requests|Bad Gateway)")
_ERRNO_RE = re.compile(r"Os \{\s*code: (\d+)")
# obstore's debug text always mentions `retry_timeout`; only these mean a call timed out
_TIMEOUT_RE = re.compile(r"timed out|kind: Timeout|TimedOut|deadline has elapsed",
                         re.IGNORECASE)


class ObjectStore:
    """The tier's bucket. Thread-safe: every method may be called from any thread.

    Sync calls: `upload`, `put_bytes`, `get`, `get_range`, `head`, `delete`, `list`.
    Async: `get_range_async`, awaited on any event loop (the caller's own through `run`, or
    the store's through `call` / `submit`). Keys are the full object keys inside the bucket
    (the key layout is the format's business)."""

    def __init__(self, config: StoreConfig, metrics: ObjectStoreMetrics | None = None):
        self.config = config
        self.metrics = metrics if metrics is not None else ObjectStoreMetrics()
        tune_for_object_reads()
        self._store = _build_store(config)
        self._rate = None if config.upload_rate_limit is None else TokenBucket(
            config.upload_rate_limit, max(config.upload_rate_limit, MiB))
        self._loop = StoreLoop(f"objectstore-{config.bucket}")
        self._calls = Calls()
        self._call_timeout_s = config.call_timeout_ms / 1000.0
        self._secrets = config.secrets()
        self._closed = False

    # -- naming and errors ---------------------------------------------------------------
    def url(self, key: str) -> str:
        return redact_userinfo(f"{self.config.scheme}://{self.config.bucket}/{key}")

    def _error(self, op: str, key: str, exc: BaseException) -> RemoteStorageError:
        """The typed error for a failed call (counted by kind)."""
        if isinstance(exc, RemoteStorageError):
            return exc
        text = str(exc) or type(exc).__name__
        for secret in self._secrets:
            if len(secret) >= 4:  # shorter ones would mask unrelated text
                text = text.replace(secret, "***")
        text = redact_userinfo(text)
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        if isinstance(exc, (obx.NotFoundError, FileNotFoundError)):
            return RemoteResourceNotFoundError(f"{op}: object not found", file=self.url(key))
        kind = _error_kind(exc, text)
        self.metrics.error(kind)
        err = RemoteStorageError(f"{op} failed ({kind.replace('_', ' ')}): {first[:500]}",
                                 file=self.url(key))
        err.kind = kind
        m = _ERRNO_RE.search(text)
        if m:
            err.errno = int(m.group(1))
            err.strerror = os.strerror(err.errno)
        return err

    # -- running async calls -------------------------------------------------------------
    def submit(self, coro) -> concurrent.futures.Future:
        """Schedule a coroutine on the store's event loop (for callers that wait on many)."""
        return self._loop.submit(coro)

    def run(self, coro):
        """Run a coroutine to completion from a synchronous caller, on an event loop of the
        calling thread's own (kept for the thread's life), so the GETs it starts and the
        caller's wake-up need no hand-off between threads; a caller already inside a
        running loop uses the store's loop instead. The coroutine bounds itself."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            loop = thread_loop()
            return loop.run_until_complete(coro)
        return self._submit(coro, op="call", key="").result()

    def _submit(self, coro, *, op: str, key: str) -> concurrent.futures.Future:
        try:
            return self._loop.submit(coro)
        except RuntimeError:  # the store closed
            raise RemoteStorageError(f"{op} on a closed store", file=self.url(key)) from None

    async def _obstore(self, call, *, op: str, key: str):
        """Awaits `call()`, an obstore async call, kept in the store's calls until obstore's
        runtime is done with it (see loops.py); on a closed store, or when closing cancels
        it, a RemoteStorageError."""
        return await self._await(self._start(call, op=op, key=key), op=op, key=key)

    def _start(self, call, *, op: str, key: str, keep: object = None) -> asyncio.Future:
        try:
            return self._calls.start(call, keep)
        except CallsClosed:
            raise RemoteStorageError(f"{op} on a closed store", file=self.url(key)) from None

    async def _await(self, fut: asyncio.Future, *, op: str, key: str):
        try:
            return await fut
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if fut.cancelled() and self._calls.closed and not (task and task.cancelling()):
                raise RemoteStorageError(f"{op} cancelled: the store closed",
                                         file=self.url(key)) from None
            raise

    def call(self, coro, *, op: str, key: str, timeout_s: float | None = None):
        """Run a coroutine on the loop and wait at most `timeout_s` (default: the overall
        call timeout); past it the call is cancelled and a RemoteStorageError raised."""
        bound = self._call_timeout_s if timeout_s is None else timeout_s
        fut = self._submit(coro, op=op, key=key)
        try:
            return fut.result(timeout=bound)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            self.metrics.error("configured_timeout")
            err = RemoteStorageError(f"{op} did not finish within {bound:.3f} s",
                                     file=self.url(key))
            err.kind = "configured_timeout"
            raise err from None
        except Exception as e:
            raise self._error(op, key, e) from e

    # -- reads ---------------------------------------------------------------------------
    async def get_range_async(self, key: str, start: int, end: int):
        """Bytes [start, end) of an object (a buffer; `memoryview()` it for zero copy).
        Raises the typed errors; a short answer is an error. Each attempt is bounded by the
        store's attempt timeout and retries; callers bound the whole (reads.py cancels it at
        the read's deadline, `get_range` at the call timeout)."""
        self.metrics.request("get_object_requests")
        try:
            data = await self._obstore(
                lambda: obstore.get_range_async(self._store, key, start=start, end=end),
                op=f"GET bytes [{start}, {end})", key=key)
        except Exception as e:
            raise self._error(f"GET bytes [{start}, {end})", key, e) from e
        if len(data) != end - start:
            self.metrics.error("io")
            raise RemoteStorageError(
                f"GET bytes [{start}, {end}) returned {len(data)} bytes", file=self.url(key),
                position=start + len(data))  # where the object's bytes ended
        self.metrics.fetched(len(data))
        return data

    def get_range(self, key: str, start: int, end: int, *, timeout_s: float | None = None):
        """Bytes [start, end) of an object; see get_range_async."""
        return self.call(self.get_range_async(key, start, end),
                         op=f"GET bytes [{start}, {end})", key=key, timeout_s=timeout_s)

    def get(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """A whole (small) object: manifests, indexes. With `max_bytes`, a larger object is
        refused before its body is read."""
        async def run():
            self.metrics.request("get_object_requests")
            result = await self._obstore(lambda: obstore.get_async(self._store, key),
                                         op="GET", key=key)
            size = result.meta["size"]
            if max_bytes is not None and size > max_bytes:
                raise RemoteStorageError(
                    f"object is {size} bytes, more than the {max_bytes} allowed",
                    file=self.url(key))
            data = await self._obstore(result.bytes_async, op="GET", key=key)
            if len(data) != size:
                self.metrics.error("io")
                raise RemoteStorageError(f"GET returned {len(data)} of {size} bytes",
                                         file=self.url(key))
            self.metrics.fetched(len(data))
            return bytes(data)
        return self.call(run(), op="GET", key=key)

    def head(self, key: str) -> ObjectInfo:
        async def run():
            meta = await self._obstore(lambda: obstore.head_async(self._store, key),
                                       op="HEAD", key=key)
            return ObjectInfo(meta["path"], meta["size"], meta.get("e_tag"))
        return self.call(run(), op="HEAD", key=key)

    # -- writes --------------------------------------------------------------------------
    def put_bytes(self, key: str, data, *, object_type: str | None = None) -> int:
        """One PUT of a small object (the manifest)."""
        return self.upload(key, data, object_type=object_type)

    def upload(self, key: str, source, *, object_type: str | None = None) -> int:
        """Upload `source` to `key`, overwriting; returns the bytes written.

        `source`: a path (str or os.PathLike) read in part-size blocks, a bytes-like object,
        or an iterable of bytes-like blocks (any sizes; e.g. transformed chunks). Each block
        passes the shared upload rate limit. A source that ends within one part is one PUT;
        a longer one is a multipart upload with `parts_in_flight` parts in parallel. Memory:
        about (parts_in_flight + 2) x part_size. On failure obstore aborts the multipart
        upload (its parts are dropped) and a RemoteStorageError naming the key is raised (or
        the source's own typed error); nothing is left visible under the key."""
        object_type = object_type or key.rpartition(".")[2]
        if self._closed:
            raise RemoteStorageError("upload on a closed store", file=self.url(key))
        if self._rate is None and isinstance(source, (str, os.PathLike)):
            return self._upload_file(key, Path(source), object_type)
        source_errors: list[BaseException] = []

        def guarded(it: Iterator) -> Iterator:
            # remembers a failure of the source itself (a read error, a transform's error),
            # which obstore would otherwise report as a failed upload
            try:
                yield from it
            except Exception as e:
                source_errors.append(e)
                raise

        try:
            total = self._put_blocks(key, guarded(_blocks(source, self.config.part_size)))
        except Exception as e:
            if not source_errors:
                raise self._error("PUT", key, e) from e
            cause = source_errors[0]
            if isinstance(cause, KafkaEngineError):
                raise cause from None
            name = str(source) if isinstance(source, (str, os.PathLike)) else None
            err = RemoteStorageError(
                f"upload to {self.url(key)} stopped: reading its source failed: {cause}",
                file=name)
            if isinstance(cause, OSError):
                err.errno, err.strerror = cause.errno, cause.strerror
            raise err from cause
        self.metrics.uploaded(object_type, total)
        return total

    def _put_blocks(self, key: str, blocks: Iterator) -> int:
        """One PUT of blocks that end within one part, else a multipart upload of
        `parts_in_flight` parts at once, every block through the rate limit; the bytes
        sent."""
        cfg = self.config
        head, more = _first_part(blocks, cfg.part_size)
        if not more:
            data = b"".join(head) if len(head) != 1 else head[0]
            self._throttle(len(data))
            self.metrics.request("put_object_requests")
            obstore.put(self._store, key, data, use_multipart=False)
            return len(data)
        total = 0

        def stream() -> Iterator:
            nonlocal total
            for block in _chain(head, blocks):
                n = len(block)
                self._throttle(n)
                total += n
                yield block

        self.metrics.request("create_multipart_upload_requests")
        try:
            obstore.put(self._store, key, stream(), use_multipart=True,
                        chunk_size=cfg.part_size, max_concurrency=cfg.parts_in_flight)
        except Exception:
            # obstore aborts the multipart upload it started
            self.metrics.request("abort_multipart_upload_requests")
            raise
        self.metrics.request("upload_part_requests", max(1, -(-total // cfg.part_size)))
        self.metrics.request("complete_multipart_upload_requests")
        return total

    def _upload_file(self, key: str, path: Path, object_type: str) -> int:
        """A file with no rate limit to honour: obstore reads it itself, in part-size
        blocks, without passing the bytes through Python (same parts, same bound)."""
        cfg = self.config
        try:
            size = path.stat().st_size
        except OSError as e:
            err = RemoteStorageError(
                f"upload to {self.url(key)} failed: cannot read its source: "
                f"[errno {e.errno}] {e.strerror}", file=str(path))
            err.errno, err.strerror = e.errno, e.strerror
            raise err from e
        try:
            if size <= cfg.part_size:
                self.metrics.request("put_object_requests")
            else:
                self.metrics.request("create_multipart_upload_requests")
            obstore.put(self._store, key, path, use_multipart=size > cfg.part_size,
                        chunk_size=cfg.part_size, max_concurrency=cfg.parts_in_flight)
        except Exception as e:
            if size > cfg.part_size:  # obstore aborts the multipart upload it started
                self.metrics.request("abort_multipart_upload_requests")
            if isinstance(e, OSError) and not _is_obstore(e):
                err = RemoteStorageError(
                    f"upload to {self.url(key)} failed reading its source: {e}",
                    file=str(path))
                err.errno, err.strerror = e.errno, e.strerror
                raise err from e
            raise self._error("PUT", key, e) from e
        if size > cfg.part_size:
            self.metrics.request("upload_part_requests", -(-size // cfg.part_size))
            self.metrics.request("complete_multipart_upload_requests")
        self.metrics.uploaded(object_type, size)
        return size

    def _throttle(self, n: int) -> None:
        if self._rate is not None:
            self._rate.acquire(n)

    def delete(self, keys: str | Iterable[str]) -> None:
        """Delete keys in one batched request per 1000 keys; keys that do not exist are not
        an error (deletes are idempotent)."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        for i in range(0, len(keys), 1000):
            batch = keys[i:i + 1000]

            async def run(batch=batch):
                self.metrics.request("delete_objects_requests")
                await self._obstore(lambda: obstore.delete_async(self._store, batch),
                                    op="DELETE", key=batch[0])
            try:
                self.call(run(), op="DELETE", key=batch[0])
            except RemoteResourceNotFoundError:
                continue

    def list(self, prefix: str, *, page_size: int = 1000,
             offset: str | None = None) -> Iterator[ObjectInfo]:
        """Objects under `prefix` (a folder: whole path segments), lazily, in batches of
        `page_size` (memory bounded by one listing page of the store: 1000 keys on S3); each
        batch is bounded by the call timeout. With `offset`, only keys after it (S3's
        StartAfter: the store lists from there, in key order)."""
        between_pages = [obstore.list(self._store, prefix=prefix, offset=offset,
                                      chunk_size=page_size)]

        async def next_page():
            # while a page is in flight only its call holds the stream: abandoned (a
            # timeout, a close), the stream and its pending request are dropped by the
            # obstore thread that releases the call, inside obstore's runtime as they must be
            self.metrics.request("list_objects_requests")
            stream = between_pages.pop()
            fut = self._start(stream.__anext__, op="LIST", key=prefix, keep=stream)
            del stream
            try:
                page = await self._await(fut, op="LIST", key=prefix)
            except StopAsyncIteration:
                return None
            between_pages.append(fut.keep)
            return page
        for _ in range(1 << 40):  # bounded by the listing's length
            page = self.call(next_page(), op="LIST", key=prefix)
            if page is None:
                return
            for meta in page:
                yield ObjectInfo(meta["path"], meta["size"], meta.get("e_tag"))

    def close(self) -> None:
        """Refuses new calls, cancels those in flight (their callers get a
        RemoteStorageError) and waits, bounded, until obstore's runtime is done with them
        before the loop closes: an answer that came after the close (or after the interpreter
        finalized) would print a traceback or panic."""
        self._closed = True
        self._calls.close()
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- helpers -------------------------------------------------------------------------------
def _build_store(cfg: StoreConfig) -> AzureStore | GCSStore | S3Store:
    from obstore.store import AzureStore, GCSStore, S3Store

    client: ClientConfig = {
        "timeout": timedelta(milliseconds=cfg.attempt_timeout_ms),
        "connect_timeout": timedelta(milliseconds=min(cfg.attempt_timeout_ms, 10_000))}
    if cfg.endpoint_url is not None and cfg.endpoint_url.startswith("http://"):
        client["allow_http"] = True
    retry: RetryConfig = {
        "max_retries": cfg.max_retries,
        "retry_timeout": timedelta(milliseconds=cfg.call_timeout_ms),
        "backoff": {"init_backoff": timedelta(milliseconds=100),
                    "max_backoff": timedelta(seconds=5), "base": 2}}
    if cfg.backend == "s3":
        s3: S3Config = {}
        if cfg.endpoint_url is not None:
            s3["endpoint"] = cfg.endpoint_url
        if cfg.access_key_id is not None:
            s3["access_key_id"] = cfg.access_key_id
            s3["secret_access_key"] = cfg.secret_access_key
        if cfg.path_style is not None:
            s3["virtual_hosted_style_request"] = not cfg.path_style
        return S3Store(cfg.bucket, region=cfg.region or "us-east-1", client_options=client,
                       retry_config=retry, config=s3)
    if cfg.backend == "gcs":
        gcs: GCSConfig = {}
        if cfg.gcs_credentials_path is not None:
            gcs["service_account"] = cfg.gcs_credentials_path
        if cfg.gcs_credentials_json is not None:
            gcs["service_account_key"] = cfg.gcs_credentials_json
        if cfg.endpoint_url is not None:
            gcs["base_url"] = cfg.endpoint_url
        return GCSStore(cfg.bucket, client_options=client, retry_config=retry, config=gcs)
    azure: AzureConfig = {}
    if cfg.azure_account_name is not None:
        azure["account_name"] = cfg.azure_account_name
    if cfg.azure_account_key is not None:
        azure["account_key"] = cfg.azure_account_key
    if cfg.azure_sas_token is not None:
        azure["sas_key"] = cfg.azure_sas_token
    if cfg.endpoint_url is not None:
        azure["endpoint"] = cfg.endpoint_url
    return AzureStore(cfg.bucket, client_options=client, retry_config=retry, config=azure)


def _is_obstore(e: BaseException) -> bool:
    return isinstance(e, obx.BaseError) or type(e).__module__.startswith("obstore")


def _error_kind(exc: BaseException, text: str) -> str:
    m = _STATUS_RE.search(text)
    status = int(m.group(1) or m.group(2)) if m else None
    if status in (429, 503) or "SlowDown" in text:
        return "throttling"
    if status is not None and status >= 500:
        return "server"
    if status is not None and status >= 400:  # the store answered: the request was refused
        return "other"
    low = text.lower()
    if isinstance(exc, TimeoutError) or _TIMEOUT_RE.search(text):
        return "configured_timeout"
    if (isinstance(exc, (ConnectionError, OSError)) and not _is_obstore(exc)) or any(
            s in low for s in ("error sending request", "connection", "decoding response body",
                               "body", "broken pipe", "os {")):
        return "io"
    return "other"


def _blocks(source, part_size: int) -> Iterator:
    """The source as an iterator of bytes-like blocks."""
    if isinstance(source, (str, os.PathLike)):
        return _file_blocks(Path(source), part_size)
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        blocks: list[bytes | memoryview] = [view[i:i + part_size]
                                            for i in range(0, len(view), part_size)]
        return iter(blocks or [b""])
    return iter(source)


def _file_blocks(path: Path, block: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        for _ in range(1 << 40):  # bounded by the file's length
            data = f.read(block)
            if not data:
                return
            yield data


def _first_part(blocks: Iterator, part_size: int) -> tuple[list, bool]:
    """Blocks up to one part; `more` says whether the source goes on past it."""
    head, size = [], 0
    for block in blocks:
        head.append(block)
        size += len(block)
        if size > part_size:
            return head, True
    return head, False


def _chain(head: list, rest: Iterator) -> Iterator:
    yield from head
    yield from rest
