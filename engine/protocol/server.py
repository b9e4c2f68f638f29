"""The network side of `serve`: Kafka's SocketServer on asyncio.

Each connection is served as Kafka serves it: one request at a time (the channel is muted
until its response is sent), so a client that does not read its responses stops being read
itself, and what one connection holds is bounded by one request and one response
(per-connection backpressure through the transport's drain). Record bytes of local segments
go out with sendfile on plain TCP listeners (the response's bytes before them first, then
the file range: engine.records.file_region), as their views on TLS ones; on plain ones the
buffers of a response (its header, record views and the bytes between them) go out in one
writev rather than a send each. The framing is
Kafka's: a 4-byte big-endian size, then the request; a size above
`socket.request.max.bytes` (or negative) closes the connection before anything is allocated
for it. On a SASL listener, until authentication succeeds, the bound is Kafka's
`sasl.server.max.receive.size` (the handshake and its tokens are small), so an
unauthenticated peer holds no more than that. Blocking work (reads of the log, ListOffsets,
the offsets store, password hashing) runs on a bounded pool of I/O threads
(`num.io.threads`), never on the event loop.

What Kafka does with what it cannot serve is kept: a request it cannot parse, an unknown API
key or an unsupported version closes the connection, except ApiVersions, which answers
UNSUPPORTED_VERSION in v0 with the versions this broker speaks so the client can pick one.
More than `max.connections` connections, or than `max.connections.per.ip` from one
address, are closed at accept (engine.protocol.quotas). `connections.max.idle.ms` bounds
every wait on the peer: a whole request (size prefix and body) must arrive within it, and a
response that makes no progress for that long (a client that does not read) closes the
connection.

Fetch long polling: when a pass returns fewer than `min_bytes`, the handler waits (on the
event loop, holding no thread, costing nothing while it waits) on an event until
`max_wait_ms` passes; whoever may have moved the data (the bucket listed again, the
housekeeping between waits) calls `data_changed()`, and each waiting Fetch reads again if
one of its partitions' visible end moved.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import struct
import time
from dataclasses import dataclass

from engine.config import ConfigError
from engine.errors import ListenerBindError
from engine.protocol import codec, sasl
from engine.protocol import errors as E
from engine.protocol.broker import ReadBroker
from engine.protocol.quotas import ConnectionQuotas
from engine.records.file_region import FileRegion

__all__ = ["KafkaServer", "Listener", "ListenerBindError", "parse_listeners"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
#: listeners whose sockets take sendfile (TLS ones write the record views instead)
_SENDFILE_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")
#: parts larger than this are flushed one by one (await drain), so a connection never holds
#: more than one such part in its transport buffer
_DRAIN_EVERY = 256 * 1024
#: a FileRegion is sent in pieces of this size, each a step that must end within
#: connections.max.idle.ms (a peer must take that much per idle period)
_SENDFILE_CHUNK = 8 << 20
API_VERSIONS_KEY, PRODUCE, FETCH, LIST_OFFSETS, METADATA, DESCRIBE_CONFIGS = 18, 0, 1, 2, 3, 32
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    protocol: str = "PLAINTEXT"

    def uri(self, port: int | None = None) -> str:
        return f"{self.name}://{self.host}:{self.port if port is None else port}"


#: security protocols served
SERVED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listeners(values, key: str = "listeners", file=None,
                    protocol_map=("PLAINTEXT:PLAINTEXT", "SSL:SSL")) -> list[Listener]:
    """`NAME://host:port` entries (host empty: every interface), each listener's security
    protocol from `listener.security.protocol.map` (Kafka's rule: the name itself when the
    map does not list it). PLAINTEXT and SSL listeners are served."""
    protocols = {}
    for entry in protocol_map or ():
        name, sep, proto = entry.partition(":")
        if not sep:
            raise ConfigError("listener.security.protocol.map", entry, "expected NAME:PROTOCOL",
                              file=file)
        protocols[name.strip().upper()] = proto.strip().upper()
    out = []
    for value in values or ():
        name, sep, rest = value.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit() or int(port) > 65535:
            raise ConfigError(key, value, "expected NAME://host:port", file=file)
        name = name.upper()
        protocol = protocols.get(name, name)
        if protocol not in SERVED_PROTOCOLS:
            raise ConfigError(key, value, f"security protocol {protocol} is not served "
                              f"({' or '.join(SERVED_PROTOCOLS)})", file=file)
        out.append(Listener(name, host.strip("[]"), int(port), protocol))
    if not out:
        raise ConfigError(key, values, "names no listener", file=file)
    if len({lst.name for lst in out}) != len(out):
        raise ConfigError(key, values, "names a listener twice", file=file)
    return out


def _close_regions(parts) -> None:
    for part in parts:
        if isinstance(part, FileRegion):
            part.close()


def _write_gathered(writer: asyncio.StreamWriter, parts: list) -> list:
    """Writes the buffers that lead `parts` (up to its first FileRegion) to the plain
    socket under `writer` in one writev, when its transport holds nothing unsent (else
    they would overtake it); returns what is left to write: the unsent tail of the buffer
    the write stopped in, then the parts after it. Through the transport, a response's
    header, each record view and the bytes between them are a send each."""
    transport = writer.transport
    n = 0
    while n < len(parts) and not isinstance(parts[n], FileRegion):
        n += 1
    if n < 2 or transport.get_write_buffer_size() or transport.is_closing():
        return parts
    views = [memoryview(part).cast("B") for part in parts[:n]]
    try:
        sent = os.writev(transport.get_extra_info("socket").fileno(), views)
    except OSError:  # full (EAGAIN) or failed: the transport's write does what it does
        return parts
    for i, view in enumerate(views):
        if sent < view.nbytes:
            return [view[sent:], *parts[i + 1:]]
        sent -= view.nbytes
    return parts[n:]


class _Closed(Exception):
    """The connection is to be closed (a request Kafka would not answer)."""


class _Progress:
    """The idle bound of one response's sends: each wait (a drain, a sendfile piece) must
    end within `idle_s` of its start, or the peer, which took none of the response
    meanwhile, is dropped. One timer for the whole response, moved at each wait (a task and
    a timer a wait, as asyncio.wait_for makes, cost more than a Fetch's own sends)."""

    def __init__(self, idle_s: float | None) -> None:
        self.idle_s = idle_s
        self._timeout = asyncio.timeout(None)

    async def __aenter__(self) -> _Progress:
        await self._timeout.__aenter__()
        return self

    async def __aexit__(self, kind, exc, tb) -> None:
        try:
            await self._timeout.__aexit__(kind, exc, tb)
        except TimeoutError:
            raise _Closed("the response made no progress for connections.max.idle.ms"
                          ) from None

    async def step(self, waiting) -> None:
        """Awaits `waiting` (an awaitable) within the bound."""
        if self.idle_s is not None:
            self._timeout.reschedule(asyncio.get_running_loop().time() + self.idle_s)
        try:
            await waiting
        finally:
            if not self._timeout.expired():  # an expired one ends the response
                self._timeout.reschedule(None)

    async def drain(self, writer: asyncio.StreamWriter) -> None:
        """writer.drain() within the bound; nothing to wait for when the transport holds no
        unsent bytes (a closing transport is left to the next read to find)."""
        if writer.transport.get_write_buffer_size() or writer.transport.is_closing():
            await self.step(writer.drain())


async def _sendfile(progress: _Progress, loop, writer: asyncio.StreamWriter, file, pos: int,
                    count: int) -> None:
    """One sendfile chunk. The peer may close between the caller's look at the transport
    and the send: loop.sendfile then refuses a closing transport with RuntimeError, which
    is the peer going away, not a failed request."""
    try:
        await progress.step(loop.sendfile(writer.transport, file, pos, count))
    except RuntimeError:
        if not writer.transport.is_closing():
            raise
        raise ConnectionResetError("the connection closed mid-response") from None


class KafkaServer:
    """Serves `broker` (a ReadBroker) and, when given, a group coordinator on the
    listeners; SASL listeners authenticate against `credentials` (sasl.Credentials), and
    with an `authorizer` (acl.Authorizer) every topic and group access is checked.
    `start()` binds; `close()` stops accepting, closes every connection and the I/O
    threads. Thread-safety: everything runs on one event loop; only the handlers'
    blocking parts go to the I/O pool."""

    def __init__(self, broker: ReadBroker, config, *, coordinator=None, authorizer=None,
                 credentials=None) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.max_request_bytes = config["socket.request.max.bytes"]
        self.idle_s = config["connections.max.idle.ms"] / 1000.0
        self.max_auth_bytes = config["sasl.server.max.receive.size"]
        self.fetch_max_bytes = config["fetch.max.bytes"]
        self.quotas = ConnectionQuotas(config["max.connections"],
                                       config["max.connections.per.ip"])
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=config["num.io.threads"], thread_name_prefix="serve-io")
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()
        #: set (and replaced) by data_changed(): what long-polling Fetches wait on
        self._new_data = asyncio.Event()
        self.refused_connections = 0
        #: listener name -> the endpoint Metadata and FindCoordinator give its clients
        self.endpoints: dict = {}
        self.authorizer = authorizer
        self.credentials = credentials
        self.mechanisms = [m for m in config["sasl.enabled.mechanisms"]
                           if m in sasl.MECHANISMS]
        #: the API keys answered (ApiVersions lists these only)
        self.api_keys = frozenset({API_VERSIONS_KEY, PRODUCE, FETCH, LIST_OFFSETS, METADATA,
                                   SASL_HANDSHAKE, SASL_AUTHENTICATE}
                                  | ({DESCRIBE_CONFIGS} if broker.describes_configs
                                     else set())
                                  | (coordinator.api_keys if coordinator else frozenset()))

    async def start(self, listeners: list[Listener],
                    ssl_context=None) -> list[tuple[Listener, int]]:
        """Binds every listener (SSL ones with `ssl_context`); returns (listener, bound
        port)."""
        bound = []
        for lst in listeners:
            try:
                server = await asyncio.start_server(
                    functools.partial(self._serve_connection, lst), lst.host or None,
                    lst.port, reuse_address=True, backlog=1024,
                    ssl=ssl_context if lst.protocol in ("SSL", "SASL_SSL") else None)
            except OSError as exc:
                raise ListenerBindError(
                    f"cannot listen on {lst.uri()}: [Errno {exc.errno}] "
                    f"{os.strerror(exc.errno) if exc.errno else exc}",
                    errno_=exc.errno) from None
            self._servers.append(server)
            bound.append((lst, server.sockets[0].getsockname()[1]))
        return bound

    async def close(self) -> None:
        """Stops accepting, ends every connection's task (a long poll in progress
        included) and waits for them, then stops the I/O threads."""
        for server in self._servers:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self.pool.shutdown(wait=True, cancel_futures=True)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def data_changed(self) -> None:
        """Wakes the long-polling Fetches to look at their partitions' ends again. Called on
        the event loop after anything that may have moved them."""
        event, self._new_data = self._new_data, asyncio.Event()
        event.set()

    async def run_blocking(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    # -- connections -----------------------------------------------------------------------

    def _session(self, listener: Listener, peer) -> dict:
        sasl = listener.protocol.startswith("SASL_")
        session = {"peer": peer, "client_id": None, "listener": listener.name,
                   "sendfile": listener.protocol in _SENDFILE_PROTOCOLS,
                   "authenticated": not sasl, "sasl_listener": sasl, "sasl": None,
                   "principal": "User:ANONYMOUS", "close": False}
        session["allowed"] = functools.partial(self.allowed, session)
        return session

    async def _serve_connection(self, listener: Listener, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) else None
        refused = self.quotas.acquire(ip)
        if refused:
            self.refused_connections += 1
            log.info("Refusing connection from %s: %s", peer, refused)
            writer.transport.abort()
            return
        self._connections.add(writer)
        self._tasks.add(asyncio.current_task())
        writer.transport.set_write_buffer_limits(high=_DRAIN_EVERY)
        session = self._session(listener, peer)
        try:
            while not writer.is_closing():  # one request, then its answer, at a time
                frame = await self._read_request(reader, session)
                if frame is None:
                    return
                parts = await self._respond(frame, session)
                if parts is None:
                    continue
                await self._send(writer, parts, session["sendfile"], self.idle_s)
                if session["close"]:
                    log.info("Closing %s: %s", peer, session["close"])
                    return
        except _Closed as exc:
            log.info("Closing %s: %s", peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError):
            log.debug("%s went away", peer)  # possibly mid-response: nothing to clean up
        except Exception:  # a bug answering one request costs that connection only
            log.exception("Closing %s (client %s): the request failed", peer,
                          session["client_id"])
        except asyncio.CancelledError:
            log.debug("Closing %s: the server is stopping", peer)  # close() awaits us
        finally:
            self.quotas.release(ip)
            self._connections.discard(writer)
            self._tasks.discard(asyncio.current_task())
            writer.transport.abort()

    async def _read_request(self, reader: asyncio.StreamReader, session: dict):
        """The next request's bytes, or None when the connection is idle: the whole request
        (size prefix and body) must arrive within `connections.max.idle.ms`. A size outside
        the bound (`sasl.server.max.receive.size` before SASL authentication, else
        `socket.request.max.bytes`) closes the connection before its body is read."""
        if session["authenticated"]:
            limit, key = self.max_request_bytes, "socket.request.max.bytes"
        else:
            limit, key = self.max_auth_bytes, "sasl.server.max.receive.size"
        try:
            async with asyncio.timeout(self.idle_s):
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if size < 0 or size > limit:
                    raise _Closed(f"request size {size} is outside [0, {key}={limit}]")
                return await reader.readexactly(size)
        except TimeoutError:
            log.debug("Closing %s: no whole request within connections.max.idle.ms",
                      session["peer"])
            return None

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, parts: list, sendfile: bool,
                    idle_s: float | None = None) -> None:
        """Writes a response: on a plain socket (`sendfile`) the buffers before its first
        FileRegion in one writev when nothing is queued (`_write_gathered`), then buffers
        through the transport (a drain after each large one), FileRegions with sendfile
        once the bytes before them are out (`sendfile`, in _SENDFILE_CHUNK pieces), else
        as their views. Each of these waits must end within
        `idle_s` (a peer that takes none of the response meanwhile closes the connection).
        Every FileRegion is closed, however the send ends."""
        loop = asyncio.get_running_loop()
        try:
            async with _Progress(idle_s) as progress:
                for part in _write_gathered(writer, parts) if sendfile else parts:
                    if isinstance(part, FileRegion):
                        if sendfile:
                            await progress.drain(writer)
                            for pos in range(part.position, part.position + part.nbytes,
                                             _SENDFILE_CHUNK):
                                if writer.transport.is_closing():  # loop.sendfile refuses it
                                    raise ConnectionResetError("the connection closed "
                                                               "mid-response")
                                count = min(_SENDFILE_CHUNK,
                                            part.position + part.nbytes - pos)
                                await _sendfile(progress, loop, writer, part.file, pos, count)
                            continue
                        part = part.view
                    writer.write(part)
                    if memoryview(part).nbytes >= _DRAIN_EVERY:
                        await progress.drain(writer)
                await progress.drain(writer)
        finally:
            _close_regions(parts)

    async def _respond(self, frame: bytes, session: dict):
        try:
            req = codec.decode_request(frame)
        except codec.UnsupportedVersionError as exc:
            if exc.api_key == API_VERSIONS_KEY:
                return codec.encode_response(
                    API_VERSIONS_KEY, 0, exc.correlation_id,
                    ReadBroker.api_versions(self.api_keys, E.UNSUPPORTED_VERSION))
            raise _Closed(str(exc)) from None
        except codec.InvalidRequestError as exc:
            raise _Closed(f"malformed request: {exc} (first bytes {bytes(frame[:48]).hex()})"
                          ) from None
        session["client_id"] = req.client_id
        body = await self._handle(req, session)
        if body is None:
            return None
        return codec.encode_response(req.api_key, req.api_version, req.correlation_id, body)

    def allowed(self, session: dict, operation: str, resource_type: str, name: str) -> bool:
        """Whether the connection's principal may do `operation` on the resource."""
        return self.authorizer is None or self.authorizer.allowed(
            session["principal"], operation, resource_type, name)

    async def _sasl(self, key: int, v: int, body: dict, session: dict) -> dict:
        """SaslHandshake v1 and SaslAuthenticate: a failed step answers
        SASL_AUTHENTICATION_FAILED and closes the connection after the answer. Steps run on
        the I/O threads (PLAIN hashes the password with PBKDF2)."""
        if key == SASL_HANDSHAKE:
            if not session["sasl_listener"] or session["authenticated"]:
                return {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": self.mechanisms}
            if body["mechanism"] not in self.mechanisms:
                return {"error_code": E.UNSUPPORTED_SASL_MECHANISM,
                        "mechanisms": self.mechanisms}
            session["sasl"] = sasl.new_server(body["mechanism"], self.credentials)
            return {"error_code": E.NONE, "mechanisms": self.mechanisms}
        server = session["sasl"]
        if server is None or session["authenticated"]:
            session["close"] = "SaslAuthenticate out of order"
            return {"error_code": E.ILLEGAL_SASL_STATE, "error_message": None,
                    "auth_bytes": b""}
        try:
            reply = await self.run_blocking(server.step, bytes(body["auth_bytes"]))
        except sasl.SaslAuthenticationError as exc:
            session["close"] = f"SASL authentication failed ({server.mechanism})"
            return {"error_code": E.SASL_AUTHENTICATION_FAILED, "error_message": str(exc),
                    "auth_bytes": b""}
        if server.principal is not None:
            session["authenticated"] = True
            session["principal"] = f"User:{server.principal}"
        return {"error_code": E.NONE, "error_message": None, "auth_bytes": reply or b"",
                "session_lifetime_ms": 0}

    async def _handle(self, req: codec.Request, session: dict):
        key, v, body = req.api_key, req.api_version, req.body
        if key == API_VERSIONS_KEY:
            return ReadBroker.api_versions(self.api_keys)
        if key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return await self._sasl(key, v, body, session)
        if not session["authenticated"]:
            raise _Closed(f"API key {key} before SASL authentication")
        if key == METADATA:
            return self.broker.metadata(body, v, self.endpoints[session["listener"]],
                                        session["allowed"])
        if key == LIST_OFFSETS:
            return await self.run_blocking(self.broker.list_offsets, body, v,
                                           session["allowed"])
        if key == FETCH:
            return await self._fetch(body, v, session["allowed"], session["sendfile"])
        if key == PRODUCE:
            return ReadBroker.produce(body)
        if key == DESCRIBE_CONFIGS and key in self.api_keys:
            return self.broker.describe_configs(body, v, session["allowed"])
        if self.coordinator is not None and key in self.coordinator.api_keys:
            return await self.coordinator.handle(req, session, self)
        raise _Closed(f"API key {key} is not served")

    async def _fetch(self, body: dict, version: int, allowed, file_regions: bool) -> dict:
        error = ReadBroker.fetch_session_error(body)
        if error:
            return {"error_code": error, "session_id": 0, "responses": []}
        broker = self.broker
        read_committed = body["isolation_level"] == 1
        # what a response holds is the broker's bound (fetch.max.bytes), whatever the
        # request asks, for the response and for each partition
        max_bytes = min(max(0, body["max_bytes"]), self.fetch_max_bytes)
        for t in body["topics"]:
            for p in t["partitions"]:
                p["partition_max_bytes"] = min(p["partition_max_bytes"],
                                               self.fetch_max_bytes)
        targets = broker.fetch_targets(body, version, allowed)
        deadline = time.monotonic() + max(0, body["max_wait_ms"]) / 1000.0
        min_bytes = body["min_bytes"]
        responses, total = await self.run_blocking(broker.fetch_once, targets, max_bytes,
                                                   read_committed, version, file_regions)
        # long poll: read again each time a partition's visible end moves, until min_bytes
        # or the deadline (every pass waits, so the loop is bounded by max_wait_ms)
        while (total < min_bytes and time.monotonic() < deadline
               and not any(p["error_code"] for t in responses for p in t["partitions"])):
            await self._wait_for_data(targets, read_committed, deadline)
            _close_regions(p["records"] for t in responses for p in t["partitions"])
            responses, total = await self.run_blocking(broker.fetch_once, targets, max_bytes,
                                                       read_committed, version, file_regions)
        return {"error_code": E.NONE, "session_id": 0, "responses": responses}

    async def _wait_for_data(self, targets, read_committed: bool, deadline: float) -> None:
        """Returns once a target's visible end moved (looked at on each data_changed()) or
        at `deadline` (time.monotonic())."""
        ends = self.broker.end_offsets(targets, read_committed)
        while (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(self._new_data.wait(), left)
            except TimeoutError:
                return
            if self.broker.end_offsets(targets, read_committed) != ends:
                return
