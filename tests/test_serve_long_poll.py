"""Long-polling fetches cost `serve` nothing while they wait: the CPU time of the process
over 10 s with 100 consumers waiting at the end of a 20-partition topic (one Fetch each for
every partition, a long `max_wait_ms`, `min_bytes` not met) stays within a small multiple of
one waiting consumer's."""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

from broker_support import SERVE, write_broker
from serve_support import TOPIC, ServeProcess

from engine.protocol import codec

WINDOW_S = 10
PARTITIONS = 20


def _broker(base: Path) -> str:
    """TOPIC with PARTITIONS partitions of one batch each."""
    from engine.common import Uuid
    from engine.config import load_broker_config
    from engine.log.log_manager import LogManager
    from engine.records import RecordBatchBuilder

    config, _ = write_broker(base, {**SERVE, "remote.log.manager.task.interval.ms": 1000})
    broker = load_broker_config(config)
    topic_id = Uuid.random()
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p in range(PARTITIONS):
            manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
            builder = RecordBatchBuilder()
            builder.append(b"v%d" % p, key=None, timestamp=int(time.time() * 1000))
            manager.append_as_leader(TOPIC, p, builder.build(), 0)
    return str(config)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime: fields 14 and 15 of proc(5), the 12th and 13th after the name
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _list_latest(port: int) -> dict[int, int]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(codec.encode_request(2, 7, 1, "t", {"replica_id": -1, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": -1}
                                           for p in range(PARTITIONS)]}]}))
        head = s.recv(4, socket.MSG_WAITALL)
        frame = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    body = codec.decode_response(2, 7, frame)[1]
    return {p["partition_index"]: p["offset"] for p in body["topics"][0]["partitions"]}


def _waiting_fetcher(port: int, ends: dict[int, int], correlation: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(codec.encode_request(1, 11, correlation, "t", {
        "max_wait_ms": 60_000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
            for p, offset in ends.items()]}]}))
    return s


def _cpu_while_waiting(proc: ServeProcess, waiters: int, ends: dict[int, int]) -> float:
    socks = [_waiting_fetcher(proc.port, ends, i) for i in range(waiters)]
    try:
        time.sleep(1)  # every request read and waiting
        start = _cpu_seconds(proc.proc.pid)
        time.sleep(WINDOW_S)
        used = _cpu_seconds(proc.proc.pid) - start
        for s in socks:  # nobody was answered: all of them were still waiting
            s.setblocking(False)
            try:
                assert s.recv(1) == b"", "a long poll answered before its max_wait_ms"
            except BlockingIOError:
                pass
        return used
    finally:
        for s in socks:
            s.close()


def test_long_polling_consumers_wait_without_cost(tmp_path):
    proc = ServeProcess(_broker(tmp_path))
    try:
        ends = _list_latest(proc.port)
        assert ends == dict.fromkeys(range(PARTITIONS), 1)
        one = _cpu_while_waiting(proc, 1, ends)
        hundred = _cpu_while_waiting(proc, 100, ends)
        assert hundred < 2 * one + 0.2, (
            f"{hundred:.2f} CPU-s with 100 waiting fetches, {one:.2f} with one")
    finally:
        assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()
