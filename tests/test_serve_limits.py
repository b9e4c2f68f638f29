"""What an unauthenticated, slow or hostile peer can make `serve` hold, measured on the real
process with raw sockets: a size prefix over `sasl.server.max.receive.size` before SASL
authentication closes the connection (200 such connections leave RSS bounded), a request
whose body stalls is closed after `connections.max.idle.ms`, `max.connections.per.ip`
refuses the excess from one address only."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from pathlib import Path

from serve_support import ServeProcess, build_small_broker, process_rss_kib, process_sockets

from engine.protocol import codec
from engine.protocol.sasl import credential, write_credentials

DEADLINE_S = 30


def _connect(port, source="127.0.0.1"):
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S,
                                    source_address=(source, 0))


def _exactly(sock, n) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the server")
        out += chunk
    return bytes(out)


def _call(sock, api_key, version, correlation, body):
    sock.sendall(codec.encode_request(api_key, version, correlation, "t", body))
    frame = _exactly(sock, struct.unpack(">i", _exactly(sock, 4))[0])
    return codec.decode_response(api_key, version, frame)[1]


def _closed_by_server(sock) -> bool:
    """True once the server closes `sock`; a server that keeps it open past DEADLINE_S
    fails the test (socket.timeout)."""
    sock.settimeout(DEADLINE_S)
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except ConnectionResetError:
        return True


def _wait_for(predicate, what):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(what)


@contextlib.contextmanager
def _serve(config, listeners=1):
    proc = ServeProcess(config, listeners=listeners)
    try:
        yield proc
    finally:
        code = proc.stop()
    assert code == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()


def _sasl_broker(base: Path, extra: str = "") -> str:
    creds = base / "credentials.json"
    write_credentials(creds, {"alice": {"PLAIN": credential("PLAIN", "alice-secret")}})
    config = build_small_broker(base / "b", f"sasl.enabled.mechanisms=PLAIN\n"
                                f"engine.sasl.credentials.file={creds}\n{extra}", records=100)
    Path(config).write_text(Path(config).read_text().replace(
        "listeners=PLAINTEXT://127.0.0.1:0", "listeners=SASL_PLAINTEXT://127.0.0.1:0"))
    return config


def test_large_requests_before_sasl_authentication_are_refused_on_their_size(tmp_path):
    """200 unauthenticated connections each claim a 50 MiB request (under
    socket.request.max.bytes) and send 1 MiB of it: each is closed on its size prefix, and
    serve's RSS does not grow by what they sent."""
    with _serve(_sasl_broker(tmp_path)) as proc:
        pid = proc.proc.pid
        warm = _connect(proc.port)
        assert _call(warm, 18, 3, 1, {})["error_code"] == 0
        base_rss, base_sockets = process_rss_kib(pid), process_sockets(pid) - 1
        warm.close()
        chunk = b"\x00" * (1 << 20)
        socks = []
        try:
            for _ in range(200):
                s = _connect(proc.port)
                socks.append(s)
                try:
                    s.sendall(struct.pack(">i", 50 << 20) + chunk)
                except OSError:
                    pass  # refused while sending: what the server should do
            grown = process_rss_kib(pid) - base_rss
            assert all(_closed_by_server(s) for s in socks)
        finally:
            for s in socks:
                s.close()
        assert grown < 64 * 1024, f"{grown} KiB held for 200 unauthenticated connections"
        _wait_for(lambda: process_sockets(pid) <= base_sockets, "sockets not released")
        # a SASL handshake (small) is still answered before authentication
        with _connect(proc.port) as s:
            assert _call(s, 17, 1, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            token = b"\x00alice\x00alice-secret"
            assert _call(s, 36, 2, 2, {"auth_bytes": token})["error_code"] == 0


def test_a_half_sent_request_is_closed_after_connections_max_idle_ms(tmp_path):
    config = build_small_broker(tmp_path, "connections.max.idle.ms=1000\n", records=100)
    with _serve(config) as proc:
        frame = codec.encode_request(18, 3, 1, "t", {})
        for sent in (2, 4, len(frame) - 1):  # inside the size prefix, after it, in the body
            with _connect(proc.port) as s:
                s.sendall(frame[:sent])
                assert _closed_by_server(s), sent
        with _connect(proc.port) as s:  # a whole request is answered
            assert _call(s, 18, 3, 1, {})["error_code"] == 0


def test_max_connections_per_ip(tmp_path):
    config = build_small_broker(tmp_path, "max.connections.per.ip=3\n", records=100)
    with _serve(config) as proc:
        held = [_connect(proc.port) for _ in range(3)]
        try:
            for i, s in enumerate(held):
                assert _call(s, 18, 3, i, {})["error_code"] == 0
            extra = _connect(proc.port)
            assert _closed_by_server(extra)
            extra.close()
            # another address is counted apart
            with _connect(proc.port, source="127.0.0.2") as other:
                assert _call(other, 18, 3, 9, {})["error_code"] == 0
            held.pop().close()

            def accepted():
                with _connect(proc.port) as s:
                    try:
                        return _call(s, 18, 3, 1, {})["error_code"] == 0
                    except ConnectionError:
                        return False

            _wait_for(accepted, "a freed slot was not reused")
        finally:
            for s in held:
                s.close()


def _process_peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def _big_tiered_broker(base: Path, extra: str) -> str:
    """24 MiB of 64 KiB records in 8 MiB segments, the first ones in the tier only (their
    reads are copies of the remote segment)."""
    import random

    from broker_support import SERVE, write_broker
    from serve_support import TOPIC, engine

    from engine.config import load_broker_config
    from engine.log.log_manager import LogManager
    from engine.records import RecordBatchBuilder

    config, _ = write_broker(base, {**SERVE, "log.segment.bytes": 8388608,
                                    "log.local.retention.bytes": 8388608}, extra=extra)
    rng = random.Random(3)
    with LogManager(load_broker_config(config).log_dirs,
                    broker_config=load_broker_config(config)) as manager:
        manager.get_or_create_log(TOPIC, 0)
        ts = int(time.time() * 1000) - 10_000
        for _ in range(24):
            builder = RecordBatchBuilder()
            for _ in range(16):
                builder.append(rng.randbytes(64 << 10), key=None, timestamp=ts)
            manager.append_as_leader(TOPIC, 0, builder.build(), 0)
    engine("run", "--config", config, "--until-idle")
    return config


def _fetch_frame(correlation: int, max_bytes: int) -> bytes:
    from serve_support import TOPIC

    return codec.encode_request(1, 11, correlation, "t", {
        "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
        "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": max_bytes}]}]})


def test_clients_that_never_read_their_fetches_hold_at_most_fetch_max_bytes(tmp_path):
    """50 clients fetch a tiered 8 MiB segment asking 1 GiB and never read: each response
    holds at most fetch.max.bytes (1 MiB here), and the stalled connections are closed after
    connections.max.idle.ms."""
    config = _big_tiered_broker(tmp_path, "fetch.max.bytes=1048576\n"
                                "connections.max.idle.ms=4000\n")
    with _serve(config) as proc:
        pid = proc.proc.pid
        with _connect(proc.port) as warm:  # a whole response, read: within the bound
            warm.sendall(_fetch_frame(0, 1 << 30))
            frame = _exactly(warm, struct.unpack(">i", _exactly(warm, 4))[0])
            body = codec.decode_response(1, 11, frame)[1]
            part = body["responses"][0]["partitions"][0]
            assert part["error_code"] == 0
            assert 0 < memoryview(part["records"]).nbytes <= (1 << 20) + (64 << 10)
        base_rss, base_sockets = process_rss_kib(pid), process_sockets(pid)
        stalled = []
        try:
            for i in range(50):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(("127.0.0.1", proc.port))
                s.sendall(_fetch_frame(i, 1 << 30))
                stalled.append(s)
            _wait_for(lambda: process_sockets(pid) <= base_sockets,
                      "stalled connections not closed after connections.max.idle.ms")
        finally:
            for s in stalled:
                s.close()
        grown = _process_peak_rss_kib(pid) - base_rss
        assert grown < 160 * 1024, f"{grown} KiB held for 50 non-reading fetchers"
