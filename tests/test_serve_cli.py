"""`python -m engine serve` as a command: bad listeners, a port in use, a broker without
tiering and a locked log dir are one `error:` line (nothing opened for a bad config), and
SIGTERM stops it cleanly."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from serve_support import ROOT, ServeProcess, build_small_broker


def _serve(config, timeout=120):
    return subprocess.run([sys.executable, "-m", "engine", "serve", "--config", config],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _one_error_line(proc):
    lines = [line for line in proc.stderr.splitlines() if "WARNING" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_bad_listeners_and_no_tiering_are_config_errors(tmp_path):
    config = build_small_broker(tmp_path, records=10)
    text = Path(config).read_text()
    for bad, expect in (("X://127.0.0.1:9093", "security protocol X is not served"),
                        ("SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms"),
                        ("SSL://127.0.0.1:0", "ssl.keystore.type"),
                        ("PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0", "listener twice"),
                        ("127.0.0.1:9092", "expected NAME://host:port"),
                        ("PLAINTEXT://h:99999", "expected NAME://host:port")):
        with open(config, "w") as f:
            f.write(text.replace("listeners=PLAINTEXT://127.0.0.1:0", f"listeners={bad}"))
        proc = _serve(config)
        assert proc.returncode == 2
        line = _one_error_line(proc)
        assert expect in line and config in line, line
    with open(config, "w") as f:
        f.write(text.replace("remote.log.storage.system.enable=true",
                             "remote.log.storage.system.enable=false")
                .replace("remote.storage.enable=true\n", ""))
    proc = _serve(config)
    assert proc.returncode == 2 and "tiered storage must be enabled" in _one_error_line(proc)


def test_a_port_in_use_and_a_locked_log_dir(tmp_path):
    config = build_small_broker(tmp_path, records=10)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        text = Path(config).read_text()
        with open(config, "w") as f:
            f.write(text.replace("127.0.0.1:0", f"127.0.0.1:{port}"))
        proc = _serve(config)
        assert proc.returncode == 1
        line = _one_error_line(proc)
        assert f"cannot listen on PLAINTEXT://127.0.0.1:{port}" in line and "Errno 98" in line
    with open(config, "w") as f:
        f.write(text)
    first = ServeProcess(config)
    try:
        proc = _serve(config)
        assert proc.returncode == 2 and "in use by another process" in _one_error_line(proc)
    finally:
        assert first.stop() == 0
    assert "serve: stopped cleanly" in first.output()


def test_sigterm_during_a_long_poll_stops_cleanly(tmp_path):
    """A Fetch waiting on max_wait_ms when SIGTERM comes: serve ends the wait, closes the
    connection and stops cleanly, with no error logged."""
    from engine.protocol import codec

    config = build_small_broker(tmp_path, records=10)
    proc = ServeProcess(config)
    with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as s:
        s.sendall(codec.encode_request(2, 7, 1, "t", {"replica_id": -1, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}))
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        frame = b""
        while len(frame) < struct.unpack(">i", head)[0]:
            frame += s.recv(65536)
        end = codec.decode_response(2, 7, frame)[1]["topics"][0]["partitions"][0]["offset"]
        assert end > 0
        s.sendall(codec.encode_request(1, 12, 2, "t", {
            "max_wait_ms": 60_000, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1,
            "topics": [{"topic": "orders", "partitions": [
                {"partition": 0, "fetch_offset": end, "partition_max_bytes": 1 << 20}]}]}))
        started = time.monotonic()
        assert proc.stop(timeout=30) == 0
        assert time.monotonic() - started < 20  # the 60 s wait was cut short
    out = proc.output()
    assert "Traceback" not in out and "ERROR" not in out, out
    assert "serve: stopped cleanly" in out


def test_sigterm_with_a_peer_that_stopped_reading_stops_cleanly(tmp_path):
    """A client that asked for more than the socket buffers hold and stopped reading: on
    SIGTERM serve drops its unsent bytes (it cannot flush them to a peer that does not
    read) and stops within its bound instead of waiting on that connection for ever."""
    from engine.protocol import codec

    config = build_small_broker(tmp_path, records=20_000)  # about 4 MB, eight times asked
    proc = ServeProcess(config)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", proc.port))
        fetch = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 8 << 20, "session_epoch": -1,
                 "topics": [{"topic": "orders", "partitions": [
                     {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 8 << 20}]}]}
        for correlation in range(1, 9):  # pipelined, none read
            s.sendall(codec.encode_request(1, 12, correlation, "t", fetch))
        time.sleep(2)  # the answers fill the socket buffers, the rest waits in serve
        started = time.monotonic()
        assert proc.stop(timeout=60) == 0
        assert time.monotonic() - started < 30
    out = proc.output()
    assert "Traceback" not in out, out
    assert "serve: stopped cleanly" in out
