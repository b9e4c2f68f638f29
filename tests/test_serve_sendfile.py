"""Fetch responses with local records sent by sendfile (engine.records.file_region and
KafkaServer._send) on real loopback sockets: the bytes a client receives equal the response
encoded with the record views, loop.sendfile carries the file range, and a client that
disconnects mid-response leaves no descriptor, region or task behind."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

from engine.config import load_broker_config
from engine.log.log_manager import LogManager
from engine.protocol import codec
from engine.protocol.server import KafkaServer
from engine.records import CompressionType

TOPIC = "sendfile"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def manager(tmp_path):
    from engine.cli.produce_demo import produce_partition

    (tmp_path / "d").mkdir()
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'd'}\nlog.segment.bytes={64 << 20}\n")
    broker = load_broker_config(config)
    with LogManager(broker.log_dirs, broker_config=broker) as m:
        m.get_or_create_log(TOPIC, 0)
        produce_partition(m, TOPIC, 0, 20_000, CompressionType.NONE, seed=2)
        yield m


def _response(manager, max_bytes: int):
    """(response parts with a FileRegion, the same response with the view)."""
    unified = manager.get_log(TOPIC, 0)
    view, _, segment, position = unified.read_located(0, max_bytes)
    region = segment.file_region(position, view)
    assert region is not None and region.nbytes == view.nbytes > 1 << 20

    def body(records):
        return {"error_code": 0, "session_id": 0, "responses": [{"topic": TOPIC, "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 5,
             "last_stable_offset": 5, "log_start_offset": 0, "aborted_transactions": None,
             "preferred_read_replica": -1, "records": records}]}]}
    return codec.encode_response(1, 12, 7, body(region)), codec.encode_response(
        1, 12, 7, body(view)), region


async def _serve_once(parts, sendfile: bool, client):
    """Starts a loopback server that sends `parts` to its one connection; runs `client`
    (a blocking function of the port) in a thread; returns (what it returned, the send's
    exception or None, the number of loop.sendfile calls)."""
    loop = asyncio.get_running_loop()
    calls = []
    real = loop.sendfile

    async def counting(*args, **kwargs):
        calls.append(args[2:4])
        return await real(*args, **kwargs)

    loop.sendfile = counting
    done: asyncio.Future = loop.create_future()

    async def handle(reader, writer):
        writer.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        try:
            await KafkaServer._send(writer, parts, sendfile)
            writer.close()
            await writer.wait_closed()
            done.set_result(None)
        except (ConnectionError, OSError) as exc:
            writer.transport.abort()
            done.set_result(exc)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        got = await asyncio.to_thread(client, port)
        error = await asyncio.wait_for(done, 30)
    finally:
        server.close()
        await server.wait_closed()
        del loop.sendfile
    return got, error, calls


def _read_all(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        out = bytearray(head)
        want = 4 + struct.unpack(">i", head)[0]
        while len(out) < want:
            chunk = s.recv(1 << 20)
            assert chunk
            out += chunk
        return bytes(out)


@pytest.mark.parametrize("sendfile", [True, False])
def test_a_response_through_sendfile_equals_the_view_path(manager, sendfile):
    parts, view_parts, region = _response(manager, 4 << 20)
    want = b"".join(bytes(p) for p in view_parts)
    got, error, calls = asyncio.run(_serve_once(parts, sendfile, _read_all))
    assert error is None and got == want
    # the record bytes went by sendfile (one file range) only where asked
    assert calls == ([(region.position, region.nbytes)] if sendfile else [])
    assert region.closed


def test_the_buffers_of_a_response_go_out_in_one_writev(manager, monkeypatch):
    """On a plain socket a response's size, header, record views and the bytes between
    them are one writev (what the socket does not take then goes through the transport):
    the client receives the response whole, byte for byte."""
    _, view_parts, region = _response(manager, 4 << 20)
    region.close()
    writes = []
    real = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, buffers: writes.append(len(buffers))
                        or real(fd, buffers))
    want = b"".join(bytes(p) for p in view_parts)
    got, error, calls = asyncio.run(_serve_once(view_parts, True, _read_all))
    assert error is None and got == want and calls == []
    assert writes == [len(view_parts)] and len(view_parts) > 2


def test_a_client_leaving_mid_response_costs_nothing(manager):
    manager.get_log(TOPIC, 0).read_located(0, 1)  # the segment mapped (a descriptor too)
    baseline = _open_fds()
    parts, _, region = _response(manager, 8 << 20)
    assert _open_fds() == baseline + 1  # the region's own descriptor

    def leave_early(port: int) -> int:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        got = 0
        while got < 256 * 1024:  # the header and part of the file range: sendfile runs
            chunk = s.recv(64 * 1024)
            assert chunk, "closed by the server"
            got += len(chunk)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # a reset, mid-response
        return got

    async def run(response):
        result = await _serve_once(response, True, leave_early)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return result, others

    (got, error, calls), others = asyncio.run(run(parts))
    assert got > 0 and isinstance(error, (ConnectionError, OSError)), error
    assert calls == [(region.position, region.nbytes)]
    assert region.closed and others == []
    del parts, region
    assert _open_fds() == baseline


async def _send_outcome(parts, before_send) -> Exception | None:
    """What KafkaServer._send(parts, sendfile) ends with on a loopback connection, after
    `before_send(writer)` ran on the server's side: None, or the exception it raised."""
    outcome = asyncio.get_running_loop().create_future()

    async def handle(reader, writer):
        before_send(writer)
        try:
            await KafkaServer._send(writer, parts, True)
            outcome.set_result(None)
        except Exception as exc:  # noqa: BLE001 - the tests look at its type
            outcome.set_result(exc)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            return await asyncio.wait_for(outcome, 30)
    finally:
        server.close()
        await server.wait_closed()


def test_a_connection_closed_before_the_response_is_a_connection_error(manager):
    """The server's side closed before anything is sent: the send ends with a
    ConnectionError (what the connection loop takes as the client gone, not a failed
    request) and the region is closed."""
    parts, _, region = _response(manager, 2 << 20)
    error = asyncio.run(_send_outcome(parts, lambda writer: writer.transport.close()))
    assert isinstance(error, ConnectionError)
    assert region.closed


def test_a_connection_closing_as_sendfile_starts_is_a_connection_error(manager):
    """The peer goes between the send's look at the transport and loop.sendfile, which
    then refuses the closing transport with RuntimeError: that is the client gone (a
    ConnectionError, logged as such), not a failed request."""
    parts, _, region = _response(manager, 2 << 20)

    async def run():
        loop = asyncio.get_running_loop()
        real = loop.sendfile

        async def closing_first(transport, *args, **kwargs):
            transport.close()  # the peer's reset lands here
            return await real(transport, *args, **kwargs)

        loop.sendfile = closing_first
        try:
            return await _send_outcome(parts, lambda writer: None)
        finally:
            del loop.sendfile

    error = asyncio.run(run())
    assert isinstance(error, ConnectionError), repr(error)
    assert region.closed
