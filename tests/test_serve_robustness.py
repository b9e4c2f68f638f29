"""`serve` under hostile or careless clients: 1,000 idle connections held with bounded
memory, `max.connections` refusing the excess, idle connections closed after
`connections.max.idle.ms`, a request larger than `socket.request.max.bytes` refused on its
size prefix, a client that stops reading never delaying another, and clients that disconnect
mid-response costing nothing (the process's sockets are released)."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from serve_support import (
    TOPIC,
    ServeProcess,
    build_small_broker,
    process_rss_kib,
    process_sockets,
)

from engine.protocol import codec

DEADLINE_S = 30


def _connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)


def _receive(sock) -> bytes:
    def exactly(n):
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return bytes(out)

    return exactly(struct.unpack(">i", exactly(4))[0])


def _api_versions(sock, correlation=1) -> dict:
    sock.sendall(codec.encode_request(18, 3, correlation, "t", {}))
    corr, body = codec.decode_response(18, 3, _receive(sock))
    assert corr == correlation
    return body


def _fetch_frame(correlation, max_bytes=50 << 20) -> bytes:
    return codec.encode_request(1, 11, correlation, "t", {
        "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
        "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": max_bytes}]}]})


def _closed_by_server(sock) -> bool:
    sock.settimeout(DEADLINE_S)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _wait_for(predicate, what):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(what)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = build_small_broker(tmp_path_factory.mktemp("robust"))
    proc = ServeProcess(config)
    yield proc
    assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()


def test_a_thousand_idle_connections_with_bounded_memory(server):
    pid = server.proc.pid
    warm = _connect(server.port)  # imports and first allocations done before measuring
    _api_versions(warm)
    base_rss, base_sockets = process_rss_kib(pid), process_sockets(pid) - 1  # without `warm`
    warm.close()
    socks = []
    try:
        for i in range(1000):
            s = _connect(server.port)
            socks.append(s)
            if i % 100 == 0:
                assert _api_versions(s)["error_code"] == 0
        _wait_for(lambda: process_sockets(pid) >= base_sockets + 1000, "connections not accepted")
        grown = process_rss_kib(pid) - base_rss
        assert grown < 64 * 1024, f"{grown} KiB for 1,000 idle connections"
        # another client is served at once
        fresh = _connect(server.port)
        started = time.monotonic()
        assert _api_versions(fresh)["error_code"] == 0
        assert time.monotonic() - started < 5
        socks.append(fresh)
    finally:
        for s in socks:
            s.close()
    _wait_for(lambda: process_sockets(pid) <= base_sockets + 1, "sockets not released")


def test_clients_disconnecting_mid_response_cost_nothing(server):
    pid = server.proc.pid
    warm = _connect(server.port)  # the segments read below are opened (and stay open) first
    warm.sendall(_fetch_frame(0))
    _receive(warm)
    base_sockets = process_sockets(pid) - 1  # without the warm connection
    warm.close()
    for i in range(30):
        s = _connect(server.port)
        s.sendall(_fetch_frame(i))
        if i % 2:
            s.recv(100)  # part of the response, then a reset
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    _wait_for(lambda: process_sockets(pid) <= base_sockets, "sockets not released")
    s = _connect(server.port)
    try:
        s.sendall(_fetch_frame(99))
        _, body = codec.decode_response(1, 11, _receive(s))
        part = body["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and memoryview(part["records"]).nbytes > 10_000
    finally:
        s.close()


def test_a_client_that_stops_reading_does_not_delay_others(server):
    stalled = _connect(server.port)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        for i in range(100):  # responses it never reads: far more than its socket holds
            stalled.sendall(_fetch_frame(i, max_bytes=1 << 20))
        other = _connect(server.port)
        try:
            started = time.monotonic()
            for i in range(20):
                other.sendall(_fetch_frame(i, max_bytes=1 << 20))
                _, body = codec.decode_response(1, 11, _receive(other))
                assert body["responses"][0]["partitions"][0]["error_code"] == 0
            assert time.monotonic() - started < 20
        finally:
            other.close()
        # and the stalled connection holds about one response, not a hundred
        assert process_rss_kib(server.proc.pid) < 1024 * 1024
    finally:
        stalled.close()


def test_max_connections_and_idle_timeout(tmp_path):
    config = build_small_broker(tmp_path, "max.connections=5\nconnections.max.idle.ms=1000\n",
                                records=100)
    proc = ServeProcess(config)
    try:
        held = [_connect(proc.port) for _ in range(5)]
        for s in held:
            assert _api_versions(s)["error_code"] == 0
        extra = _connect(proc.port)
        assert _closed_by_server(extra)
        held.pop().close()

        def accepted():
            s = _connect(proc.port)
            try:
                return _api_versions(s)["error_code"] == 0
            except ConnectionError:
                return False
            finally:
                s.close()

        _wait_for(accepted, "a freed slot was not reused")
        # the held connections go idle: closed after connections.max.idle.ms
        started = time.monotonic()
        assert all(_closed_by_server(s) for s in held)
        assert time.monotonic() - started < 10
        for s in held:
            s.close()
    finally:
        proc.stop()
    assert "Traceback" not in proc.output(), proc.output()


def test_a_request_over_socket_request_max_bytes_is_refused_on_its_size_prefix(tmp_path):
    """The connection closes as soon as the 4-byte size arrives: a server that allocated
    or waited for the body would keep the connection open (no body is ever sent)."""
    config = build_small_broker(tmp_path, "socket.request.max.bytes=1024\n", records=100)
    proc = ServeProcess(config)
    try:
        for size in (1025, 0x7FFFFFFF, -1):
            sock = _connect(proc.port)
            try:
                sock.sendall(struct.pack(">i", size))
                started = time.monotonic()
                assert _closed_by_server(sock), size
                assert time.monotonic() - started < 10
            finally:
                sock.close()
        # a request within the limit is answered, on a connection after the refused ones
        sock = _connect(proc.port)
        try:
            frame = codec.encode_request(18, 3, 1, "t", {})
            assert len(frame) - 4 <= 1024
            assert _api_versions(sock)["error_code"] == 0
        finally:
            sock.close()
        assert process_rss_kib(proc.proc.pid) < 1024 * 1024  # nothing near 2 GiB was taken
    finally:
        proc.stop()
    assert "Traceback" not in proc.output(), proc.output()
