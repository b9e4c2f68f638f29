"""A loopback HTTP/1.1 proxy for tests that sits between an object-store client and the real
S3 server (tests/s3_server.py) and injects faults request by request: delays, dropped
connections, 500/503 (SlowDown) answers and response bodies cut short. It also records
every request (method, path, Range header), so a test can count the GETs a read made.

The proxy forwards requests unchanged (the Host header included, so SigV4 signatures made
for the proxy's address still verify at the server) over one upstream connection per client
connection. Faults are matched in the order added; each has a number of requests it applies
to (`times`, None = every matching request).
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Self

__all__ = ["Fault", "FaultProxy", "Request"]

_MAX_HEADER_BYTES = 64 * 1024
_IO_TIMEOUT_S = 60.0


@dataclass
class Fault:
    """One fault rule.

    kind: "delay" (hold the request `delay_s` before forwarding it), "drop" (close the
    connection without answering), "status" (answer `status` with an S3 error body without
    forwarding: 503 gives S3's SlowDown, 500 InternalError), "cut" (forward, then send the
    headers and only `cut_after` bytes of the body and close).
    method / path_contains: which requests match (None = any).
    times: how many matching requests it applies to (None = all)."""

    kind: str
    method: str | None = None
    path_contains: str | None = None
    times: int | None = 1
    delay_s: float = 0.0
    status: int = 503
    cut_after: int = 0
    applied: int = field(default=0, init=False)

    def __post_init__(self):
        if self.kind not in ("delay", "drop", "status", "cut"):
            raise ValueError(f"unknown fault kind {self.kind!r}")

    def matches(self, method: str, path: str) -> bool:
        return ((self.method is None or self.method == method)
                and (self.path_contains is None or self.path_contains in path)
                and (self.times is None or self.applied < self.times))


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    fault: str | None


class _Closed(Exception):
    """The peer closed the connection between requests."""


def _read_head(f) -> tuple[bytes, list[tuple[str, str]], bytes]:
    """(start line, headers, raw head bytes) of one HTTP message."""
    raw = bytearray()
    line = f.readline(_MAX_HEADER_BYTES)
    if not line:
        raise _Closed()
    raw += line
    start = line.rstrip(b"\r\n")
    headers = []
    while True:
        line = f.readline(_MAX_HEADER_BYTES)
        if not line:
            raise ConnectionError("connection closed inside an HTTP head")
        raw += line
        if len(raw) > _MAX_HEADER_BYTES:
            raise ConnectionError("HTTP head too large")
        if line in (b"\r\n", b"\n"):
            return start, headers, bytes(raw)
        name, _, value = line.decode("latin-1").partition(":")
        headers.append((name.strip().lower(), value.strip()))


def _header(headers, name):
    for k, v in headers:
        if k == name:
            return v
    return None


def _read_body(f, headers, *, no_body: bool = False) -> bytes | None:
    """The raw body bytes as sent (chunked framing kept); None when it runs to EOF."""
    if no_body:
        return b""
    if (_header(headers, "transfer-encoding") or "").lower() == "chunked":
        out = bytearray()
        for _ in range(1 << 24):  # bounded: a chunk per iteration
            size_line = f.readline(_MAX_HEADER_BYTES)
            if not size_line:
                raise ConnectionError("connection closed inside a chunked body")
            out += size_line
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:
                    trailer = f.readline(_MAX_HEADER_BYTES)
                    out += trailer
                    if trailer in (b"\r\n", b"\n", b""):
                        return bytes(out)
            data = f.read(size + 2)
            if len(data) != size + 2:
                raise ConnectionError("connection closed inside a chunk")
            out += data
        raise ConnectionError("too many chunks")
    length = _header(headers, "content-length")
    if length is not None:
        n = int(length)
        data = f.read(n)
        if len(data) != n:
            raise ConnectionError("connection closed inside a body")
        return data
    return None


class FaultProxy:
    """`FaultProxy(upstream_port).start()`; `endpoint` is the URL to give the client."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self._faults: list[Fault] = []
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self.port: int | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- control -------------------------------------------------------------------------
    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        """Remove every fault and forget the recorded requests."""
        with self._lock:
            self._faults.clear()
            self._requests.clear()

    def requests(self, method: str | None = None, path_contains: str | None = None
                 ) -> list[Request]:
        with self._lock:
            return [r for r in self._requests
                    if (method is None or r.method == method)
                    and (path_contains is None or path_contains in r.path)]

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.applied += 1
                    return fault
        return None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        t = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _close(c)
        for t in list(self._threads):
            t.join(timeout=10)
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(client,), daemon=True,
                                 name="fault-proxy-conn")
            with self._lock:
                self._threads = [x for x in self._threads if x.is_alive()]
                self._threads.append(t)
            t.start()

    # -- one client connection -----------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        upstream = None
        with self._lock:
            self._conns.add(client)
        try:
            client.settimeout(_IO_TIMEOUT_S)
            cf = client.makefile("rb")
            upstream = socket.create_connection(self.upstream, timeout=_IO_TIMEOUT_S)
            with self._lock:
                self._conns.add(upstream)
            uf = upstream.makefile("rb")
            while not self._stopping.is_set():
                if not self._one_exchange(client, cf, upstream, uf):
                    return
        except (_Closed, OSError, ValueError):
            return
        finally:
            for s in (client, upstream):
                if s is not None:
                    _close(s)
                    with self._lock:
                        self._conns.discard(s)

    def _one_exchange(self, client, cf, upstream, uf) -> bool:
        """Relay one request and its answer; False when the connection must end."""
        start, headers, raw_head = _read_head(cf)
        body = _read_body(cf, headers)
        if body is None:
            body = b""
        method, _, rest = start.decode("latin-1").partition(" ")
        path = rest.rpartition(" ")[0]
        fault = self._take_fault(method, path)
        with self._lock:
            self._requests.append(Request(method, path, _header(headers, "range"),
                                          None if fault is None else fault.kind))
        if fault is not None and fault.kind == "drop":
            return False
        if fault is not None and fault.kind == "status":
            code, reason = ("SlowDown", "Please reduce your request rate.") \
                if fault.status == 503 else ("InternalError", "We encountered an error.")
            xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                   f"<Message>{reason}</Message><Resource>{path}</Resource></Error>").encode()
            client.sendall(f"HTTP/1.1 {fault.status} {code}\r\nContent-Type: application/xml"
                           f"\r\nContent-Length: {len(xml)}\r\n\r\n".encode() + xml)
            return True
        if fault is not None and fault.kind == "delay" and self._stopping.wait(fault.delay_s):
            return False
        upstream.sendall(raw_head + body)
        rstart, rheaders, rraw = _read_head(uf)
        status = int(rstart.split(b" ")[1])
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        rbody = _read_body(uf, rheaders, no_body=no_body)
        to_close = rbody is None
        if rbody is None:
            rbody = uf.read()
        if fault is not None and fault.kind == "cut":
            client.sendall(rraw + rbody[:fault.cut_after])
            return False
        client.sendall(rraw + rbody)
        return not to_close


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
